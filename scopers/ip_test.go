package scopers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
)

// fakeResolver answers from a map, counts calls per host, and can block
// lookups until release is closed. It never touches the network.
type fakeResolver struct {
	mu       sync.Mutex
	addrs    map[string][]netip.Addr
	errs     map[string]error
	calls    map[string]int
	networks []string
	release  chan struct{} // non-nil: lookups wait for it to be closed
	ctxErr   []error       // ctx.Err() of each finished lookup
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{
		addrs: map[string][]netip.Addr{},
		errs:  map[string]error{},
		calls: map[string]int{},
	}
}

func (f *fakeResolver) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	f.addrs[host] = as
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	f.calls[host]++
	f.networks = append(f.networks, network)
	release := f.release
	f.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxErr = append(f.ctxErr, ctx.Err())
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err, ok := f.errs[host]; ok {
		return nil, err
	}
	if as, ok := f.addrs[host]; ok {
		return append([]netip.Addr(nil), as...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f *fakeResolver) callCount(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[host]
}

func (f *fakeResolver) totalCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

// fakeClock is a settable time source.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestIP(r Resolver, ttl time.Duration, max int) (*IP, *fakeClock) {
	s := NewIP(r, ttl, max)
	clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetClock(clk.now)
	return s, clk
}

func reqFor(host string) *http.Request {
	return &http.Request{Method: "GET", URL: &url.URL{Scheme: "https", Host: host, Path: "/"}}
}

func singleScopeKey(t *testing.T, sc throttle.Scoper, req *http.Request) string {
	t.Helper()
	s, err := sc(req)
	if err != nil {
		t.Fatalf("scope %v: %v", req.URL, err)
	}
	if len(s) != 1 {
		t.Fatalf("scope %v: %d scopes %v, want 1", req.URL, len(s), s)
	}
	return s[0].Key
}

// waitWaiters waits until n callers wait for the lookup of host.
func waitWaiters(t *testing.T, s *IP, host string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		c := s.inflight[host]
		w := 0
		if c != nil {
			w = c.waiters
		}
		s.mu.Unlock()
		if w >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters for %q, want %d", w, host, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNetResolverIsResolver(t *testing.T) {
	var r Resolver = net.DefaultResolver
	_ = r
	var _ Resolver = &net.Resolver{PreferGo: true}
}

func TestIPDefaults(t *testing.T) {
	s := NewIP(nil, 0, -1)
	if s.r != net.DefaultResolver || s.ttl != 5*time.Minute || s.maxEntries != 100000 {
		t.Errorf("defaults: r=%v ttl=%v max=%d", s.r, s.ttl, s.maxEntries)
	}
	// IP literals never reach the (real) resolver.
	if k := singleScopeKey(t, s.Scope, reqFor("192.0.2.1:8080")); k != "192.0.2.1" {
		t.Errorf("got %q", k)
	}
	// The zero value works too.
	var z IP
	if k := singleScopeKey(t, z.Scope, reqFor("[2001:DB8::1]")); k != "2001:db8::1" {
		t.Errorf("zero value: got %q", k)
	}
}

func TestIPSharedAddress(t *testing.T) {
	f := newFakeResolver()
	// Unsorted, with duplicates, IPv6 and an IPv4-mapped address: the lowest
	// (IPv4 before IPv6) unmapped address is chosen whatever the order.
	f.set("a.example", "2001:db8::7", "192.0.2.9", "192.0.2.7")
	f.set("b.example", "192.0.2.7", "2001:db8::7")
	f.set("c.example", "2001:db8::7", "::ffff:192.0.2.7")
	f.set("v6.example", "2001:db8::9", "2001:db8::8")
	s, _ := newTestIP(f, time.Minute, 10)

	for _, h := range []string{"a.example", "B.Example.:443", "c.example"} {
		if k := singleScopeKey(t, s.Scope, reqFor(h)); k != "192.0.2.7" {
			t.Errorf("%s: scope %q, want 192.0.2.7", h, k)
		}
	}
	if k := singleScopeKey(t, s.Scope, reqFor("v6.example")); k != "2001:db8::8" {
		t.Errorf("v6.example: scope %q", k)
	}
	f.mu.Lock()
	for _, n := range f.networks {
		if n != "ip" {
			t.Errorf("network %q, want ip", n)
		}
	}
	f.mu.Unlock()
}

func TestIPLiteralsNotResolved(t *testing.T) {
	f := newFakeResolver()
	s, _ := newTestIP(f, time.Minute, 10)
	for host, want := range map[string]string{
		"192.0.2.1":              "192.0.2.1",
		"192.0.2.1:8080":         "192.0.2.1",
		"[2001:db8::1]:8080":     "2001:db8::1",
		"[2001:DB8:0:0::1]":      "2001:db8::1",
		"2001:db8::1":            "2001:db8::1",
		"[::ffff:192.0.2.1]:443": "192.0.2.1",
		"[fe80::1%eth0]:80":      "fe80::1%eth0", // url.Parse decodes %25
	} {
		if k := singleScopeKey(t, s.Scope, reqFor(host)); k != want {
			t.Errorf("%s: scope %q, want %q", host, k, want)
		}
	}
	if n := f.totalCalls(); n != 0 {
		t.Errorf("resolver called %d times for IP literals", n)
	}
}

func TestIPCacheTTL(t *testing.T) {
	f := newFakeResolver()
	f.set("example.com", "192.0.2.1")
	s, clk := newTestIP(f, time.Minute, 10)
	req := httptest.NewRequest("GET", "http://example.com/x", nil)

	if k := singleScopeKey(t, s.Scope, req); k != "192.0.2.1" {
		t.Fatalf("got %q", k)
	}
	clk.advance(time.Minute - time.Nanosecond)
	if k := singleScopeKey(t, s.Scope, req); k != "192.0.2.1" || f.callCount("example.com") != 1 {
		t.Fatalf("within TTL: %q, %d calls", k, f.callCount("example.com"))
	}
	// The address changes; the cache still answers until the TTL is up.
	f.set("example.com", "192.0.2.2")
	if k := singleScopeKey(t, s.Scope, req); k != "192.0.2.1" {
		t.Fatalf("cached: got %q", k)
	}
	clk.advance(time.Nanosecond)
	if k := singleScopeKey(t, s.Scope, req); k != "192.0.2.2" || f.callCount("example.com") != 2 {
		t.Fatalf("after TTL: %q, %d calls", k, f.callCount("example.com"))
	}
	if k := singleScopeKey(t, s.Scope, req); k != "192.0.2.2" || f.callCount("example.com") != 2 {
		t.Fatalf("re-cached: %q, %d calls", k, f.callCount("example.com"))
	}
}

func TestIPConcurrentLookupShared(t *testing.T) {
	f := newFakeResolver()
	f.set("example.com", "192.0.2.1")
	f.release = make(chan struct{})
	s, _ := newTestIP(f, time.Minute, 10)

	const n = 20
	var wg sync.WaitGroup
	keys := make([]string, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc, err := s.Scope(reqFor("example.com"))
			errs[i] = err
			if err == nil {
				keys[i] = sc[0].Key
			}
		}()
	}
	waitWaiters(t, s, "example.com", n)
	close(f.release)
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil || keys[i] != "192.0.2.1" {
			t.Errorf("caller %d: %q, %v", i, keys[i], errs[i])
		}
	}
	if c := f.callCount("example.com"); c != 1 {
		t.Errorf("%d resolver calls, want 1", c)
	}
}

func TestIPWaiterCancelled(t *testing.T) {
	f := newFakeResolver()
	f.set("example.com", "192.0.2.1")
	f.release = make(chan struct{})
	s, _ := newTestIP(f, time.Minute, 10)

	// The first caller starts the lookup, then gives up.
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := s.Scope(reqFor("example.com").WithContext(ctx))
		first <- err
	}()
	waitWaiters(t, s, "example.com", 1)
	second := make(chan string, 1)
	go func() {
		sc, err := s.Scope(reqFor("example.com"))
		if err != nil {
			second <- "error: " + err.Error()
			return
		}
		second <- sc[0].Key
	}()
	waitWaiters(t, s, "example.com", 2)

	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller: err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled caller still waiting")
	}
	close(f.release)
	if k := <-second; k != "192.0.2.1" {
		t.Errorf("other caller got %q", k)
	}
	f.mu.Lock()
	if len(f.ctxErr) != 1 || f.ctxErr[0] != nil {
		t.Errorf("lookup context errors %v, want one lookup, not cancelled", f.ctxErr)
	}
	f.mu.Unlock()
	// The answer was cached for later requests.
	if k := singleScopeKey(t, s.Scope, reqFor("example.com")); k != "192.0.2.1" || f.callCount("example.com") != 1 {
		t.Errorf("after: %q, %d calls", k, f.callCount("example.com"))
	}
}

func TestIPContextDoneBeforeLookup(t *testing.T) {
	f := newFakeResolver()
	f.set("example.com", "192.0.2.1")
	s, _ := newTestIP(f, time.Minute, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Scope(reqFor("example.com").WithContext(ctx)); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if n := f.totalCalls(); n != 0 {
		t.Errorf("%d lookups for a cancelled request", n)
	}
	// A cached answer is still given to a cancelled request.
	singleScopeKey(t, s.Scope, reqFor("example.com"))
	if k := singleScopeKey(t, s.Scope, reqFor("example.com").WithContext(ctx)); k != "192.0.2.1" {
		t.Errorf("got %q", k)
	}
}

func TestIPErrorsNotCached(t *testing.T) {
	f := newFakeResolver()
	boom := errors.New("boom")
	f.errs["bad.example"] = boom
	f.set("empty.example")
	s, _ := newTestIP(f, time.Minute, 10)

	for i := 1; i <= 2; i++ {
		_, err := s.Scope(reqFor("bad.example"))
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), `throttle: resolve "bad.example": boom`) {
			t.Errorf("err = %v", err)
		}
		if c := f.callCount("bad.example"); c != i {
			t.Errorf("attempt %d: %d calls (errors must not be cached)", i, c)
		}
	}
	_, err := s.Scope(reqFor("missing.example"))
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("missing host: err = %v, want a *net.DNSError", err)
	}
	if _, err := s.Scope(reqFor("empty.example")); err == nil || !strings.Contains(err.Error(), "no addresses") {
		t.Errorf("no addresses: err = %v", err)
	}
	// Recovery: once the host resolves, it is cached.
	f.mu.Lock()
	delete(f.errs, "bad.example")
	f.mu.Unlock()
	f.set("bad.example", "192.0.2.3")
	if k := singleScopeKey(t, s.Scope, reqFor("bad.example")); k != "192.0.2.3" {
		t.Errorf("got %q", k)
	}
	s.mu.Lock()
	if len(s.cache) != 1 || s.order.Len() != 1 {
		t.Errorf("cache has %d entries, list %d; want only bad.example", len(s.cache), s.order.Len())
	}
	s.mu.Unlock()
}

func TestIPEviction(t *testing.T) {
	f := newFakeResolver()
	for _, h := range []string{"h1.example", "h2.example", "h3.example", "h4.example", "h5.example"} {
		f.set(h, "192.0.2.1")
	}
	s, clk := newTestIP(f, time.Minute, 3)
	look := func(h string) { t.Helper(); singleScopeKey(t, s.Scope, reqFor(h)) }
	cached := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.cache) != s.order.Len() {
			t.Fatalf("map %d != list %d", len(s.cache), s.order.Len())
		}
		return len(s.cache)
	}

	// Full of live entries: the least recently resolved one goes.
	look("h1.example")
	look("h2.example")
	look("h3.example")
	look("h4.example")
	if n := cached(); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
	look("h2.example") // still cached
	if f.callCount("h2.example") != 1 {
		t.Errorf("h2 evicted")
	}
	look("h1.example") // evicted: looked up again, now evicts h2
	if f.callCount("h1.example") != 2 {
		t.Errorf("h1 not evicted: %d calls", f.callCount("h1.example"))
	}
	look("h2.example")
	if f.callCount("h2.example") != 2 {
		t.Errorf("h2 not evicted: %d calls", f.callCount("h2.example"))
	}
	// Cached now, oldest first: h4, h1, h2 at t0.

	// Expired entries go first, and all of them.
	clk.advance(30 * time.Second)
	look("h3.example") // evicts h4 (oldest, live): h1, h2 at t0, h3 at t0+30s
	clk.advance(31 * time.Second)
	look("h5.example") // h1, h2 expired: both dropped, h3 kept
	if n := cached(); n != 2 {
		t.Errorf("%d entries, want 2 (h3, h5)", n)
	}
	calls := f.callCount("h3.example")
	look("h3.example")
	if f.callCount("h3.example") != calls {
		t.Errorf("live h3 was evicted")
	}
}

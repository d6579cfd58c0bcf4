package scopers

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
)

// A Resolver looks up the IP addresses of a host, as (*net.Resolver).LookupNetIP
// does; *net.Resolver (and so net.DefaultResolver) satisfies it. network is
// "ip" for IP's lookups.
//
// An IP calls its Resolver from several goroutines at once (one lookup per
// host not cached), so an implementation must be safe for concurrent use.
// A nil Resolver (the interface's zero value) given to NewIP means
// net.DefaultResolver.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// Defaults for NewIP.
const (
	defaultIPTTL        = 5 * time.Minute // how long a resolved address is kept
	defaultIPMaxEntries = 100000          // how many hosts are kept
)

// ipLookupTimeout bounds one shared lookup, which runs detached from the
// cancellation of the requests that wait for it.
const ipLookupTimeout = 10 * time.Second

// errNoAddresses is the error of a lookup that succeeds with no address.
var errNoAddresses = errors.New("no addresses")

// An IP is a scoper that throttles requests by the IP address their host
// resolves to, like Scrapy's CONCURRENT_REQUESTS_PER_IP: hosts served from
// one address share one scope. Use its Scope method as the throttle.Scoper:
//
//	ips := scopers.NewIP(nil, 0, 0)
//	cfg.Scoper = ips.Scope
//
// or combine it, e.g. throttle.AddScopes(throttle.HostScope, ips.Scope).
//
// Resolved addresses are cached per host for the TTL (default 5 minutes);
// failed lookups are not cached, so the next request for the host looks it
// up again. Concurrent requests for a host that is not cached share one
// lookup. The cache holds at most maxEntries hosts (default 100000): when it
// is full, expired entries are dropped
// first and then, if it is still full, the least recently resolved one.
//
// An IP is safe for concurrent use. The zero value is usable and behaves
// like NewIP(nil, 0, 0), but NewIP is preferred. An IP must not be copied
// after first use.
type IP struct {
	r          Resolver
	ttl        time.Duration
	maxEntries int

	mu       sync.Mutex
	now      func() time.Time         // nil means time.Now
	cache    map[string]*list.Element // host -> element of order holding *ipEntry
	order    list.List                // cache entries, least recently resolved first
	inflight map[string]*ipCall       // host -> lookup under way
}

// ipEntry is one cached resolution.
type ipEntry struct {
	host    string
	addr    netip.Addr
	expires time.Time
}

// ipCall is a lookup under way; addr and err are set before done is closed.
type ipCall struct {
	done    chan struct{}
	addr    netip.Addr
	err     error
	waiters int // callers that have waited for it, under IP.mu (for tests)
}

// NewIP returns an IP scoper that resolves hosts with r and caches each
// host's address for ttl, keeping at most maxEntries hosts. r nil means
// net.DefaultResolver, ttl <= 0 means 5 minutes and
// maxEntries <= 0 means 100000.
func NewIP(r Resolver, ttl time.Duration, maxEntries int) *IP {
	if r == nil {
		r = net.DefaultResolver
	}
	if ttl <= 0 {
		ttl = defaultIPTTL
	}
	if maxEntries <= 0 {
		maxEntries = defaultIPMaxEntries
	}
	return &IP{r: r, ttl: ttl, maxEntries: maxEntries}
}

// SetClock sets the time source the cache's expiry uses; nil means time.Now
// (the default). It is meant for tests, to expire entries without sleeping.
func (s *IP) SetClock(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

// Scope is a throttle.Scoper giving one scope: the IP address of the
// request's host (RequestHost), in netip.Addr.String form with
// IPv4-mapped IPv6 addresses unmapped ("192.0.2.1", "2001:db8::1").
//
// A host that is an IP literal is its own address and is not resolved.
// Otherwise the host is looked up (network "ip") unless cached, and the
// lowest of its addresses in netip.Addr order (IPv4 before IPv6) is used, so
// the choice does not depend on the resolver's order. The lookup runs
// detached from req.Context's cancellation, bounded by a 10 s timeout, and
// is shared by all requests waiting for the same host; a request whose
// context ends while it waits gets the context's error, and the lookup
// goes on for the others (and the cache).
//
// It returns RequestHost's error for a nil request or one without a
// usable host, and for a failed lookup an error wrapping the resolver's:
// `throttle: resolve "host": ...`.
func (s *IP) Scope(req *http.Request) ([]throttle.Scope, error) {
	h, err := RequestHost(req)
	if err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return []throttle.Scope{{Key: a.Unmap().String()}}, nil
	}
	a, err := s.lookup(req.Context(), h)
	if err != nil {
		return nil, err
	}
	return []throttle.Scope{{Key: a.String()}}, nil
}

// lookup returns host's address from the cache or from a (shared) lookup.
func (s *IP) lookup(ctx context.Context, host string) (netip.Addr, error) {
	s.mu.Lock()
	if s.cache == nil {
		s.cache = make(map[string]*list.Element)
		s.inflight = make(map[string]*ipCall)
	}
	if el, ok := s.cache[host]; ok {
		e := el.Value.(*ipEntry)
		if s.clock().Before(e.expires) {
			s.mu.Unlock()
			return e.addr, nil
		}
		s.order.Remove(el)
		delete(s.cache, host)
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return netip.Addr{}, err
	}
	c, ok := s.inflight[host]
	if !ok {
		c = &ipCall{done: make(chan struct{})}
		s.inflight[host] = c
		go s.resolve(context.WithoutCancel(ctx), host, c)
	}
	c.waiters++
	s.mu.Unlock()

	select {
	case <-c.done:
		return c.addr, c.err
	case <-ctx.Done():
		select {
		case <-c.done: // finished too: prefer the answer
			return c.addr, c.err
		default:
			return netip.Addr{}, ctx.Err()
		}
	}
}

// resolve runs the shared lookup of host for c, caches a success, and
// releases c's waiters.
func (s *IP) resolve(ctx context.Context, host string, c *ipCall) {
	ctx, cancel := context.WithTimeout(ctx, ipLookupTimeout)
	defer cancel()
	r := s.r
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	var best netip.Addr
	if err == nil {
		for _, a := range addrs {
			a = a.Unmap()
			if a.IsValid() && (!best.IsValid() || a.Compare(best) < 0) {
				best = a
			}
		}
		if !best.IsValid() {
			err = errNoAddresses
		}
	}
	if err != nil {
		c.err = fmt.Errorf("throttle: resolve %q: %w", host, err)
	} else {
		c.addr = best
	}

	s.mu.Lock()
	delete(s.inflight, host)
	if c.err == nil {
		s.store(host, best)
	}
	s.mu.Unlock()
	close(c.done)
}

// store caches host's addr, evicting to stay within maxEntries. s.mu is held.
func (s *IP) store(host string, addr netip.Addr) {
	now := s.clock()
	ttl := s.ttl
	if ttl <= 0 {
		ttl = defaultIPTTL
	}
	e := &ipEntry{host: host, addr: addr, expires: now.Add(ttl)}
	if el, ok := s.cache[host]; ok {
		el.Value = e
		s.order.MoveToBack(el)
		return
	}
	limit := s.maxEntries
	if limit <= 0 {
		limit = defaultIPMaxEntries
	}
	if len(s.cache) >= limit {
		// Entries are in resolution order and share one TTL, so the expired
		// ones are at the front.
		for el := s.order.Front(); el != nil && len(s.cache) > 0; el = s.order.Front() {
			if old := el.Value.(*ipEntry); now.Before(old.expires) {
				break
			}
			s.evict(el)
		}
		for len(s.cache) >= limit {
			s.evict(s.order.Front()) // the least recently resolved
		}
	}
	s.cache[host] = s.order.PushBack(e)
}

// evict removes el from the cache. s.mu is held.
func (s *IP) evict(el *list.Element) {
	s.order.Remove(el)
	delete(s.cache, el.Value.(*ipEntry).host)
}

// clock returns the current time. s.mu is held.
func (s *IP) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

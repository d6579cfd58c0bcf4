package throttle

// Hostile servers (issue 9, item 3): each test ends in a figure it logs.
//
// The servers are real httptest.Servers (net/http's server, HTTP/1.1 on
// the wire, parsed by a real http.Transport) reached over in-memory pipes
// (net.Pipe) instead of TCP sockets, so that they run inside a synctest
// bubble in fake time: a goroutine waiting on a real socket is not durably
// blocked, so synctest could not advance its clock past a server that
// stalls, and a 300 s gate or a 10 s FetchTimeout would take real time.
// net.Pipe is also unbuffered, so the bytes a server managed to write are
// exactly the bytes the client read: no kernel buffer hides how much a
// fetch took in. Nothing leaves the process.
//
// The link farm (a million distinct hosts, memory bounded by MaxScopes) is
// TestMemoryLinkFarm in memory_test.go.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeServer is an httptest.Server whose connections are net.Pipes, with
// an http.Transport that dials it for every host. read counts the bytes
// the client side read off the wire, written those the server side wrote.
type pipeServer struct {
	*httptest.Server
	tr      *http.Transport
	conns   chan net.Conn
	done    chan struct{}
	close   sync.Once
	read    atomic.Int64
	written atomic.Int64
}

// newPipeServer starts h; stop it with Close before the bubble ends.
func newPipeServer(h http.Handler) *pipeServer {
	ps := &pipeServer{conns: make(chan net.Conn), done: make(chan struct{})}
	ps.Server = &httptest.Server{Listener: (*pipeListener)(ps), Config: &http.Server{Handler: h}}
	ps.tr = &http.Transport{DialContext: ps.dial}
	ps.Start()
	return ps
}

func (ps *pipeServer) Close() {
	ps.tr.CloseIdleConnections()
	ps.Server.Close()
}

func (ps *pipeServer) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	srv, cli := net.Pipe()
	select {
	case ps.conns <- &countingConn{Conn: srv, n: &ps.written, writes: true}:
		return &countingConn{Conn: cli, n: &ps.read}, nil
	case <-ps.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pipeListener is the pipeServer seen as a net.Listener.
type pipeListener pipeServer

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// countingConn counts the bytes read from (or, with writes, written to) a
// connection.
type countingConn struct {
	net.Conn
	n      *atomic.Int64
	writes bool
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.writes {
		c.n.Add(int64(n))
	}
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.writes {
		c.n.Add(int64(n))
	}
	return n, err
}

// getBody GETs url with client and reads and closes the body.
func getBody(t *testing.T, client *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestHostileRetryAfter: absurd and malformed server-given waits, sent on
// a 429 (or on a 200 that reports its quota spent) by a real server
// through the Transport. A valid wait gates the scope for at most
// Backoff.MaxDelay (300 s), however far it points; an invalid one is
// ignored, leaving the 429's one backoff step (1 s doubled: 2 s ±10 %).
// Either way the next request is admitted within the cap.
func TestHostileRetryAfter(t *testing.T) {
	const maxDelay = 300 * time.Second
	cases := []struct {
		name   string
		header []string // name, value, ...
		status int      // 0: 429
		gated  bool     // a valid wait: gated at the cap
		broken bool     // net/http rejects the response itself
	}{
		{name: "10 years", header: []string{"Retry-After", "315360000"}, gated: true},
		{name: "40 digits", header: []string{"Retry-After", strings.Repeat("9", 40)}, gated: true},
		{name: "year 9999", header: []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}, gated: true},
		{name: "negative", header: []string{"Retry-After", "-5"}},
		{name: "1e400", header: []string{"Retry-After", "1e400"}},
		{name: "fraction", header: []string{"Retry-After", "1.5"}},
		{name: "hex", header: []string{"Retry-After", "0x7fffffffffffffff"}},
		{name: "NaN", header: []string{"Retry-After", "NaN"}},
		{name: "garbage", header: []string{"Retry-After", "soon, maybe \xff\xfe ☃ ;q=1"}},
		{name: "DEL byte", header: []string{"Retry-After", "30\x7f"}, broken: true},
		{name: "empty", header: []string{"Retry-After", ""}},
		{name: "year 0", header: []string{"Retry-After", "Sat, 01 Jan 0000 00:00:00 GMT"}},
		{name: "RateLimit t 15 digits", header: []string{"RateLimit", `"d";r=0;t=999999999999999`}, gated: true},
		{name: "RateLimit t 16 digits", header: []string{"RateLimit", `"d";r=0;t=9999999999999999`}},
		{name: "X-RateLimit-Reset 20 digits, 200", header: []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strings.Repeat("9", 20)}, status: 200, gated: true},
		{name: "X-RateLimit-Reset 1e400, 200", header: []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1e400"}, status: 200},
	}
	synctest.Test(t, func(t *testing.T) {
		srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/moved" {
				w.Header().Set("Retry-After", "315360000")
				http.Redirect(w, r, "/there", http.StatusFound)
				return
			}
			if r.URL.Path != "/hostile" {
				io.WriteString(w, "ok")
				return
			}
			c := cases[atoiHost(r.Host)]
			for i := 0; i+1 < len(c.header); i += 2 {
				w.Header()[c.header[i]] = []string{c.header[i+1]}
			}
			st := c.status
			if st == 0 {
				st = http.StatusTooManyRequests
			}
			w.WriteHeader(st)
		}))
		defer srv.Close()
		cfg := plainConfig()
		require.Equal(t, maxDelay, cfg.Default.Backoff.MaxDelay, "the default cap")
		m := newManager(t, cfg)
		client := &http.Client{Transport: m.Transport(srv.tr)}
		for i, c := range cases {
			host := fmt.Sprintf("c%d.test", i)
			if c.broken {
				_, err := client.Get("http://" + host + "/hostile")
				require.Error(t, err, c.name)
				t.Logf("%-34s %q: the transport refuses the response: %v", c.name, c.header[1], err)
			} else {
				resp := getBody(t, client, "http://"+host+"/hostile")
				require.Equal(t, c.header[len(c.header)-1], resp.Header.Get(c.header[len(c.header)-2]), "%s: sent as is", c.name)
			}

			p, adm, err := m.TryAcquire(get(t, "http://"+host+"/"))
			require.NoError(t, err)
			require.Nil(t, p, "%s: not admitted at once", c.name)
			gate := time.Until(adm.At)
			t0 := time.Now()
			getBody(t, client, "http://"+host+"/next")
			waited := time.Since(t0)
			t.Logf("%-34s %q: %-11v next request admitted after %v (cap %v)", c.name, trimmed(c.header[len(c.header)-1]), adm.Reason, waited, maxDelay)
			assert.LessOrEqual(t, waited, maxDelay, c.name)
			assert.Equal(t, waited, gate, "%s: admitted when TryAcquire said", c.name)
			if c.gated {
				assert.Equal(t, ReasonGate, adm.Reason, c.name)
				assert.Equal(t, maxDelay, waited, "%s: capped at Backoff.MaxDelay", c.name)
			} else {
				assert.NotEqual(t, ReasonGate, adm.Reason, "%s: ignored", c.name)
				assert.LessOrEqual(t, waited, 2200*time.Millisecond, "%s: at most one backoff step", c.name)
			}
		}

		// A 3xx's Retry-After delays the hop to its Location, capped at
		// Backoff.RedirectMaxDelay (60 s).
		t0 := time.Now()
		getBody(t, client, "http://redirect.test/moved")
		hop := time.Since(t0)
		t.Logf("302 with Retry-After 10 years: next hop after %v (cap %v)", hop, cfg.Default.Backoff.RedirectMaxDelay)
		assert.Equal(t, cfg.Default.Backoff.RedirectMaxDelay, hop)
	})
}

// atoiHost returns the number in a host "c<n>.test".
func atoiHost(host string) int {
	var n int
	fmt.Sscanf(host, "c%d.test", &n)
	return n
}

// trimmed shortens long values for the log.
func trimmed(s string) string {
	if len(s) > 32 {
		return s[:29] + "..."
	}
	return s
}

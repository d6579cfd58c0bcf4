package throttle

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/crawlerkit/throttle/internal/scopekey"
)

// maxScopesPerRequest caps how many scopes one request may have (32). A
// Scoper or WithScopes that gives more makes Acquire fail with
// ErrTooManyScopes.
const maxScopesPerRequest = scopekey.MaxPerRequest

// A Scope is one key a request is throttled by, with the request's cost in
// it. The zero Scope is invalid: its empty Key makes Acquire fail with
// ErrEmptyScopeKey. A plain value: copy it freely, but don't change it
// while another goroutine reads it.
type Scope struct {
	// Key names the scope: a host, a registrable domain, "api", ...
	// It must not be empty.
	Key string
	// Cost is the request's quota units in this scope. Zero counts as 1: a
	// request always costs something when admitted; report a different
	// actual cost (zero included) in the Feedback at Release.
	Cost int64
}

// A Scoper maps a request to the scopes it is throttled by. It must return at
// least one scope, or an error; Acquire returns that error wrapped. A Scoper
// may be called concurrently, so it must be safe for concurrent use.
// Config.Scoper nil means HostScope; calling a nil Scoper panics.
type Scoper func(req *http.Request) ([]Scope, error)

// HostScope is the default Scoper: one scope, the request URL's host
// normalised: lower-cased, IDNA to ASCII, no trailing dot, no port, IPv6
// without brackets ("Bücher.example:8080" and "xn--bcher-kva.example."
// both give "xn--bcher-kva.example"; scopers.NormalizeHost gives the same
// key from a host). It returns ErrNilRequest for a nil request, ErrNoHost
// for a URL without a host and an error wrapping ErrInvalidHost for a
// host that is not a usable host name.
func HostScope(req *http.Request) ([]Scope, error) {
	h, err := requestHost(req)
	if err != nil {
		return nil, err
	}
	return []Scope{{Key: h}}, nil
}

// HostPortScope is a Scoper of one scope per host and port: the host as
// HostScope gives it, a colon, and the URL's port, or its scheme's
// default when it has none (80 for http and ws, 443 for https and wss; an
// other scheme without a port gives the host alone). "https://a.example/"
// and "https://a.example:443/" share "a.example:443"; "http://127.0.0.1:8081/"
// and "http://127.0.0.1:8082/" are "127.0.0.1:8081" and "127.0.0.1:8082",
// IPv6 hosts in brackets ("[::1]:8080").
//
// Use it where the ports of one host are different sites: local test
// servers, services behind one name on several ports. HostScope, the
// default, drops the port: every port of a host shares its scope, as a
// site's rate limit and robots.txt Crawl-delay usually count them together.
func HostPortScope(req *http.Request) ([]Scope, error) {
	h, err := requestHost(req)
	if err != nil {
		return nil, err
	}
	port := req.URL.Port()
	if port == "" {
		switch strings.ToLower(req.URL.Scheme) {
		case "http", "ws":
			port = "80"
		case "https", "wss":
			port = "443"
		default:
			return []Scope{{Key: h}}, nil
		}
	} else {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, ErrInvalidHost
		}
		port = strconv.Itoa(n) // "08" and "8" are one port
	}
	return []Scope{{Key: net.JoinHostPort(h, port)}}, nil
}

// requestHost returns the scope key of req's URL's host, as HostScope
// gives it.
func requestHost(req *http.Request) (string, error) {
	if req == nil {
		return "", ErrNilRequest
	}
	if req.URL == nil {
		return "", ErrNoHost
	}
	if h := req.URL.Host; scopekey.Plain(h) { // Normalize's first test, sparing two calls
		return h, nil
	}
	return normalizeHost(req.URL.Host)
}

// normalizeHost turns a URL's host into a scope key (scopekey.Normalize),
// or returns ErrNoHost or an error wrapping ErrInvalidHost.
func normalizeHost(hostport string) (string, error) {
	h, f := scopekey.Normalize(hostport)
	switch f {
	case scopekey.NoHost:
		return "", ErrNoHost
	case scopekey.Invalid:
		return "", fmt.Errorf("%w: %.64q", ErrInvalidHost, hostport)
	}
	return h, nil
}

// ctxKey is the key of the manager's values in a context, a *ctxValues:
// the scopes (WithScopes, WithScopeKeys) and WithoutAdjust's mark, under
// one key, so that newPermit looks a context up once, not once for each.
type ctxKey struct{}

// ctxValues is what a context holds for the manager. Each function that
// attaches a part copies the rest from the parent's (withValues), so a
// context has all that its ancestors attached, the innermost of each part.
type ctxValues struct {
	scopes    []Scope
	hasScopes bool // scopes replace the Scoper's; false hides a parent's (robotsFetch.start)
	noAdjust  bool // WithoutAdjust
}

// valuesOf returns the manager's values in ctx; nil: none.
func valuesOf(ctx context.Context) *ctxValues {
	v, _ := ctx.Value(ctxKey{}).(*ctxValues)
	return v
}

// withValues returns a context derived from ctx whose values are ctx's
// as set changes them.
func withValues(ctx context.Context, set func(v *ctxValues)) context.Context {
	var v ctxValues
	if pv := valuesOf(ctx); pv != nil {
		v = *pv
	}
	set(&v)
	return context.WithValue(ctx, ctxKey{}, &v)
}

// WithScopeKeys returns a context whose requests are throttled by exactly
// the given scope keys (cost 1 each) instead of what the Scoper says:
// WithScopes with Scopes of those keys. The scopes persist across the
// redirect hops of a request made with this context. To add a key to
// every request's scopes instead, set Config.Scoper to AddScopeKey.
func WithScopeKeys(ctx context.Context, keys ...string) context.Context {
	s := make([]Scope, len(keys))
	for i, k := range keys {
		s[i] = Scope{Key: k}
	}
	return withValues(ctx, func(v *ctxValues) { v.scopes, v.hasScopes = s, true })
}

// WithScopes returns a context whose requests are throttled by exactly the
// given scopes, each with its cost, instead of what the Scoper says. The
// scopes persist across the redirect hops of a request made with this
// context. Names that end in Keys take keys, those that end in Scopes take
// Scopes: WithScopeKeys(ctx, "api") is WithScopes(ctx, Scope{Key: "api"}).
func WithScopes(ctx context.Context, scopes ...Scope) context.Context {
	s := append([]Scope(nil), scopes...)
	return withValues(ctx, func(v *ctxValues) { v.scopes, v.hasScopes = s, true })
}

// ScopesFromContext returns the scopes attached by WithScopes or
// WithScopeKeys, and whether there were any.
func ScopesFromContext(ctx context.Context) ([]Scope, bool) {
	if ctx == nil {
		return nil, false
	}
	if v := valuesOf(ctx); v != nil && v.hasScopes {
		return v.scopes, true
	}
	return nil, false
}

package throttle

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// MaxScopesPerRequest caps how many scopes one request may have. A Scoper or
// WithScopes that gives more makes Acquire fail with ErrTooManyScopes.
const MaxScopesPerRequest = 32

// maxHostLen bounds a host name. DNS names are at most 253 octets; anything
// longer cannot be fetched, so it is refused rather than kept as a scope key.
const maxHostLen = 253

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
// may be called concurrently. Config.Scoper nil means HostScope.
type Scoper func(req *http.Request) ([]Scope, error)

// HostScope is the default Scoper: one scope, the request URL's host as
// NormalizeHost gives it.
func HostScope(req *http.Request) ([]Scope, error) {
	h, err := RequestHost(req)
	if err != nil {
		return nil, err
	}
	return []Scope{{Key: h}}, nil
}

// HostPortScope is a Scoper of one scope per host and port: the host as
// NormalizeHost gives it, a colon, and the URL's port, or its scheme's
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
	h, err := RequestHost(req)
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

// RequestHost returns the normalised host of req's URL (see NormalizeHost).
func RequestHost(req *http.Request) (string, error) {
	if req == nil {
		return "", ErrNilRequest
	}
	if req.URL == nil {
		return "", ErrNoHost
	}
	return NormalizeHost(req.URL.Host)
}

// hostProfile maps and converts like idna.Lookup, but lets through the
// underscores and other characters that real host names carry and that a
// crawler still has to fetch (StrictDomainName off).
var hostProfile = idna.New(idna.MapForLookup(), idna.StrictDomainName(false))

// NormalizeHost turns a URL's host (with or without port, IPv6 in brackets or
// not) into a scope key: lower-cased, IDNA to ASCII, no trailing dot, no
// port, IPv6 without brackets. "Bücher.example:8080" and
// "xn--bcher-kva.example." both give "xn--bcher-kva.example". It returns
// ErrNoHost for an empty host and ErrInvalidHost for one that is not a
// usable host name.
func NormalizeHost(hostport string) (string, error) {
	if plainHost(hostport) {
		// The common case: one pass, no allocation. A plain host holds no
		// ':' or '[', so there is no port or bracket to strip.
		return hostport, nil
	}
	h := stripPort(hostport)
	if h == "" {
		return "", ErrNoHost
	}
	if plainHost(h) {
		return h, nil
	}
	if strings.IndexByte(h, ':') >= 0 { // IPv6 literal, possibly with a zone
		// netip takes a zone of any length: without the length check a
		// URL could make a scope key of any size (found by
		// FuzzNormalizeHost; a real address with its zone is far shorter).
		if len(h) > maxHostLen {
			return "", fmt.Errorf("%w: %.64q", ErrInvalidHost, hostport)
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || strings.HasSuffix(h, ".") { // "::1%eth0." has a zone "eth0."
			return "", fmt.Errorf("%w: %.64q", ErrInvalidHost, hostport)
		}
		return strings.ToLower(ip.String()), nil
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 4*maxHostLen {
		return "", fmt.Errorf("%w: %.64q", ErrInvalidHost, hostport)
	}
	a, err := hostProfile.ToASCII(h)
	if err != nil {
		// A label IDNA refuses (e.g. a stray symbol) still names one host;
		// keep a stable, lower-cased key instead of refusing to crawl it.
		a = strings.ToLower(h)
		if b, err := hostProfile.ToASCII(a); err == nil {
			a = b // IDNA takes the lower-cased form: use what it gives
		}
	}
	a = strings.TrimSuffix(a, ".")
	// IDNA maps fullwidth "．：［］" to ASCII; a result still ending in '.'
	// ("a...") or holding ':', '[' or ']' would not read back as itself.
	if a == "" || len(a) > maxHostLen || a[len(a)-1] == '.' || strings.ContainsAny(a, ":[]") {
		return "", fmt.Errorf("%w: %.64q", ErrInvalidHost, hostport)
	}
	return a, nil
}

// stripPort removes a port and IPv6 brackets, like url.URL.Hostname.
func stripPort(hostport string) string {
	if strings.HasPrefix(hostport, "[") {
		if i := strings.LastIndexByte(hostport, ']'); i > 0 {
			return hostport[1:i]
		}
		return hostport[1:]
	}
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && strings.IndexByte(hostport, ':') == i {
		return hostport[:i]
	}
	return hostport
}

// plainHost reports whether h is already a normalised ASCII host name.
func plainHost(h string) bool {
	if len(h) == 0 || len(h) > maxHostLen || h[len(h)-1] == '.' || h[0] == '.' {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !hostByte[h[i]] {
			return false
		}
	}
	return true
}

// hostByte marks the bytes of a normalised ASCII host name: a table lookup
// a byte where the five range tests cost several times that (plainHost
// runs on every request).
var hostByte = func() (t [256]bool) {
	for c := range t {
		t[c] = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_'
	}
	return t
}()

type scopesKey struct{}

// noScopes, stored under scopesKey, hides the scopes of a parent context.
type noScopes struct{}

// WithScopes returns a context whose requests are throttled by exactly the
// given scope keys (cost 1 each) instead of what the Scoper says. The scopes
// persist across the redirect hops of a request made with this context.
func WithScopes(ctx context.Context, keys ...string) context.Context {
	s := make([]Scope, len(keys))
	for i, k := range keys {
		s[i] = Scope{Key: k}
	}
	return context.WithValue(ctx, scopesKey{}, s)
}

// WithScopeCosts is WithScopes with a cost per scope.
func WithScopeCosts(ctx context.Context, scopes ...Scope) context.Context {
	return context.WithValue(ctx, scopesKey{}, append([]Scope(nil), scopes...))
}

// ScopesFromContext returns the scopes attached by WithScopes or
// WithScopeCosts, and whether there were any.
func ScopesFromContext(ctx context.Context) ([]Scope, bool) {
	if ctx == nil {
		return nil, false
	}
	s, ok := ctx.Value(scopesKey{}).([]Scope)
	return s, ok
}

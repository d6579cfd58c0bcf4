// Package scopekey turns hosts into scope keys for package throttle and
// package scopers, which must agree on them: a scope named by one is the
// scope the other names for the same host. Each of them wraps these
// functions to return its own errors (throttle.ErrNoHost,
// throttle.ErrInvalidHost). It also holds the cap on scopes per request,
// which scopers.DomainLevels keeps to.
package scopekey

import (
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// MaxPerRequest caps how many scopes one request may have: throttle's
// Acquire refuses more with ErrTooManyScopes.
const MaxPerRequest = 32

// MaxHostLen bounds a host name. DNS names are at most 253 octets; anything
// longer cannot be fetched, so it is refused rather than kept as a scope key.
const MaxHostLen = 253

// A Fault says why Normalize refused a host.
type Fault uint8

// The faults of Normalize.
const (
	OK      Fault = iota // the host is a scope key
	NoHost               // the host is empty (throttle.ErrNoHost)
	Invalid              // the host is not a usable host name (throttle.ErrInvalidHost)
)

// hostProfile maps and converts like idna.Lookup, but lets through the
// underscores and other characters that real host names carry and that a
// crawler still has to fetch (StrictDomainName off).
var hostProfile = idna.New(idna.MapForLookup(), idna.StrictDomainName(false))

// Normalize turns a URL's host (with or without port, IPv6 in brackets or
// not) into a scope key: lower-cased, IDNA to ASCII, no trailing dot, no
// port, IPv6 without brackets. "Bücher.example:8080" and
// "xn--bcher-kva.example." both give "xn--bcher-kva.example". It returns
// "" and NoHost for an empty host, "" and Invalid for one that is not a
// usable host name.
func Normalize(hostport string) (string, Fault) {
	if plainHost(hostport) {
		// The common case: one pass, no allocation. A plain host holds no
		// ':' or '[', so there is no port or bracket to strip.
		return hostport, OK
	}
	h := stripPort(hostport)
	if h == "" {
		return "", NoHost
	}
	if plainHost(h) {
		return h, OK
	}
	if strings.IndexByte(h, ':') >= 0 { // IPv6 literal, possibly with a zone
		// netip takes a zone of any length: without the length check a
		// URL could make a scope key of any size (found by
		// FuzzNormalizeHost; a real address with its zone is far shorter).
		if len(h) > MaxHostLen {
			return "", Invalid
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || strings.HasSuffix(h, ".") { // "::1%eth0." has a zone "eth0."
			return "", Invalid
		}
		return strings.ToLower(ip.String()), OK
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 4*MaxHostLen {
		return "", Invalid
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
	if a == "" || len(a) > MaxHostLen || a[len(a)-1] == '.' || strings.ContainsAny(a, ":[]") {
		return "", Invalid
	}
	return a, OK
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

// Plain reports whether host is already a scope key as Normalize gives
// it, a normalised ASCII host name with no port: Normalize(host) is then
// host itself.
func Plain(host string) bool { return plainHost(host) }

// plainHost reports whether h is already a normalised ASCII host name.
func plainHost(h string) bool {
	if len(h) == 0 || len(h) > MaxHostLen || h[len(h)-1] == '.' || h[0] == '.' {
		return false
	}
	// Four bytes a step, their marks and-ed with no branch between them.
	// (Indices into a resliced h are constant: no bounds checks.)
	ok := uint8(1)
	for ; len(h) >= 4; h = h[4:] {
		ok &= hostByte[h[0]] & hostByte[h[1]] & hostByte[h[2]] & hostByte[h[3]]
	}
	for i := range len(h) {
		ok &= hostByte[h[i]]
	}
	return ok != 0
}

// hostByte is 1 for the bytes of a normalised ASCII host name, else 0: a
// table lookup a byte where the five range tests cost several times that
// (plainHost runs on every request).
var hostByte = func() (t [256]uint8) {
	for c := range t {
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' {
			t[c] = 1
		}
	}
	return t
}()

// RegistrableDomain returns the registrable domain ("eTLD+1") of host, as
// publicsuffix.EffectiveTLDPlusOne gives it: "a.b.example.co.uk" gives
// "example.co.uk".
//
// host must already be normalised as Normalize gives it (lower-case
// ASCII, no port, no trailing dot); RegistrableDomain does not normalise it
// again, so "Example.COM" or "example.com." are returned unchanged.
//
// The public suffix list includes private suffixes, so a site under a
// hosting provider's suffix is its own registrable domain:
// "foo.blogspot.com" and "a.foo.blogspot.com" both give "foo.blogspot.com",
// "user.github.io" gives "user.github.io".
//
// When there is no registrable domain, host is returned unchanged: for an IP
// literal (IPv4 or IPv6, with or without zone), "localhost", a single-label
// host, a bare public suffix ("com", "co.uk", "blogspot.com", "github.io"),
// and any host that EffectiveTLDPlusOne refuses (empty labels, leading or
// trailing dot, the empty string). It never panics.
func RegistrableDomain(host string) string {
	if host == "" || strings.IndexByte(host, '.') < 0 {
		return host // empty, "localhost", or another single label
	}
	if strings.IndexByte(host, ':') >= 0 {
		return host // IPv6 literal (or junk that no domain can contain)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host // IPv4 literal: "192.168.0.1" is not a domain under "0.1"
	}
	d, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil || d == "" {
		return host
	}
	return d
}

package scopers

import (
	"fmt"
	"net/http"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/scopekey"
)

// NormalizeHost turns a URL's host (with or without port, IPv6 in brackets
// or not) into the scope key throttle.HostScope gives for it: lower-cased,
// IDNA to ASCII, no trailing dot, no port, IPv6 without brackets.
// "Bücher.example:8080" and "xn--bcher-kva.example." both give
// "xn--bcher-kva.example". A Scoper of your own that names hosts should
// use it, so that its scopes are the ones HostScope and the robots.txt
// delay name. It returns throttle.ErrNoHost for an empty host and an error
// wrapping throttle.ErrInvalidHost for one that is not a usable host name.
func NormalizeHost(hostport string) (string, error) {
	h, f := scopekey.Normalize(hostport)
	switch f {
	case scopekey.NoHost:
		return "", throttle.ErrNoHost
	case scopekey.Invalid:
		return "", fmt.Errorf("%w: %.64q", throttle.ErrInvalidHost, hostport)
	}
	return h, nil
}

// RequestHost returns the normalised host of req's URL (see NormalizeHost):
// the key of the one scope throttle.HostScope gives, with its errors
// (throttle.ErrNilRequest for a nil request, throttle.ErrNoHost for a
// request without URL).
func RequestHost(req *http.Request) (string, error) {
	if req == nil {
		return "", throttle.ErrNilRequest
	}
	if req.URL == nil {
		return "", throttle.ErrNoHost
	}
	return NormalizeHost(req.URL.Host)
}

// RegistrableDomain returns the registrable domain ("eTLD+1") of host, as
// publicsuffix.EffectiveTLDPlusOne gives it: "a.b.example.co.uk" gives
// "example.co.uk". It is the key throttle.RegistrableDomainScope gives.
//
// host must already be normalised as NormalizeHost gives it (lower-case
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
func RegistrableDomain(host string) string { return scopekey.RegistrableDomain(host) }

package throttle

import (
	"net/http"
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// RegistrableDomain returns the registrable domain ("eTLD+1") of host, as
// publicsuffix.EffectiveTLDPlusOne gives it: "a.b.example.co.uk" gives
// "example.co.uk".
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

// RegistrableDomainScope is a Scoper that throttles every request by the
// registrable domain of its host: one scope, RegistrableDomain of
// RequestHost, so "www.example.co.uk" and "static.example.co.uk" share the
// scope "example.co.uk". IP literals, "localhost" and bare public suffixes
// are their own scope. It returns RequestHost's error for a nil request or
// one without a usable host.
func RegistrableDomainScope(req *http.Request) ([]Scope, error) {
	h, err := RequestHost(req)
	if err != nil {
		return nil, err
	}
	return []Scope{{Key: RegistrableDomain(h)}}, nil
}

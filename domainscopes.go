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

// DomainHierarchy returns the registrable domain of host (see
// RegistrableDomain) followed by every subdomain level under it down to host
// itself, broadest first, without duplicates:
//
//	"a.b.example.co.uk"  -> ["example.co.uk", "b.example.co.uk", "a.b.example.co.uk"]
//	"example.co.uk"      -> ["example.co.uk"]
//	"a.foo.blogspot.com" -> ["foo.blogspot.com", "a.foo.blogspot.com"]
//
// A host with no registrable domain (IP literal, "localhost", a bare public
// suffix, ...) gives just [host]; the empty string gives [""].
//
// The result has at most MaxScopesPerRequest (32) entries: for a host with
// more levels than that, the registrable domain and the deepest
// MaxScopesPerRequest-1 levels (host included) are kept and the levels in
// between are dropped. host must be normalised as for RegistrableDomain.
func DomainHierarchy(host string) []string {
	rd := RegistrableDomain(host)
	if rd == host || len(host) <= len(rd)+1 || !strings.HasSuffix(host, rd) || host[len(host)-len(rd)-1] != '.' {
		return []string{host}
	}
	// Label boundaries of the part before rd: each '.' in host[:len(host)-len(rd)]
	// starts one level, and host itself is the deepest one.
	prefix := host[:len(host)-len(rd)-1] // "a.b" for "a.b.example.co.uk"
	levels := strings.Count(prefix, ".") + 1
	n := levels + 1
	if n > MaxScopesPerRequest {
		n = MaxScopesPerRequest
	}
	out := make([]string, n)
	out[0] = rd
	// Fill from the deepest level upwards: out[n-1] = host, out[n-2] = host
	// without its first label, ... until out[1].
	i := 0
	for k := n - 1; k >= 1; k-- {
		out[k] = host[i:]
		j := strings.IndexByte(host[i:], '.')
		if j < 0 {
			break // cannot happen: every level above rd has a '.'
		}
		i += j + 1
	}
	return out
}

// DomainHierarchyScopes is a Scoper that throttles every request by each
// level of its host's domain hierarchy as DomainHierarchy gives it: a
// request to "a.b.example.co.uk" is in the scopes "example.co.uk",
// "b.example.co.uk" and "a.b.example.co.uk" (Cost 0, which counts as 1), so a limit on
// "example.co.uk" covers all its subdomains while each subdomain can have
// its own. It gives at most MaxScopesPerRequest (32) scopes, and returns
// RequestHost's error for a nil request or one without a usable host.
func DomainHierarchyScopes(req *http.Request) ([]Scope, error) {
	h, err := RequestHost(req)
	if err != nil {
		return nil, err
	}
	levels := DomainHierarchy(h)
	s := make([]Scope, len(levels))
	for i, l := range levels {
		s[i] = Scope{Key: l}
	}
	return s, nil
}

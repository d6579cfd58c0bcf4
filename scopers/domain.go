package scopers

import (
	"net/http"
	"strings"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/scopekey"
)

// DomainLevels returns the registrable domain of host (see
// RegistrableDomain) followed by every subdomain level under it down to
// host itself, broadest first, without duplicates:
//
//	"a.b.example.co.uk"  -> ["example.co.uk", "b.example.co.uk", "a.b.example.co.uk"]
//	"example.co.uk"      -> ["example.co.uk"]
//	"a.foo.blogspot.com" -> ["foo.blogspot.com", "a.foo.blogspot.com"]
//
// A host with no registrable domain (IP literal, "localhost", a bare public
// suffix, ...) gives just [host]; the empty string gives [""].
//
// The result has at most 32 entries, the most scopes a request may have:
// for a host with more levels than that, the registrable domain and the
// deepest 31 levels (host included) are kept and the levels in between
// are dropped. host must be normalised as for RegistrableDomain.
func DomainLevels(host string) []string {
	rd := RegistrableDomain(host)
	if rd == host || len(host) <= len(rd)+1 || !strings.HasSuffix(host, rd) || host[len(host)-len(rd)-1] != '.' {
		return []string{host}
	}
	// Label boundaries of the part before rd: each '.' in host[:len(host)-len(rd)]
	// starts one level, and host itself is the deepest one.
	prefix := host[:len(host)-len(rd)-1] // "a.b" for "a.b.example.co.uk"
	levels := strings.Count(prefix, ".") + 1
	n := levels + 1
	if n > scopekey.MaxPerRequest {
		n = scopekey.MaxPerRequest
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

// DomainHierarchy is a throttle.Scoper that throttles every request by each
// level of its host's domain hierarchy as DomainLevels gives it: a request
// to "a.b.example.co.uk" is in the scopes "example.co.uk",
// "b.example.co.uk" and "a.b.example.co.uk" (Cost 0, which counts as 1),
// so a limit on "example.co.uk" covers all its subdomains while each
// subdomain can have its own. It gives at most 32 scopes, and returns
// RequestHost's error for a nil request or one without a usable host.
func DomainHierarchy(req *http.Request) ([]throttle.Scope, error) {
	h, err := RequestHost(req)
	if err != nil {
		return nil, err
	}
	levels := DomainLevels(h)
	s := make([]throttle.Scope, len(levels))
	for i, l := range levels {
		s[i] = throttle.Scope{Key: l}
	}
	return s, nil
}

package throttle

import (
	"net/http"

	"github.com/crawlerkit/throttle/internal/scopekey"
)

// RegistrableDomainScope is a Scoper that throttles every request by the
// registrable domain ("eTLD+1", from the public suffix list, its private
// suffixes included) of its host as HostScope gives it, so
// "www.example.co.uk" and "static.example.co.uk" share the scope
// "example.co.uk", and "a.foo.blogspot.com" is in "foo.blogspot.com". IP
// literals, "localhost" and bare public suffixes are their own scope
// (scopers.RegistrableDomain gives the key from a host). It returns
// HostScope's error for a nil request or one without a usable host.
func RegistrableDomainScope(req *http.Request) ([]Scope, error) {
	h, err := requestHost(req)
	if err != nil {
		return nil, err
	}
	return []Scope{{Key: scopekey.RegistrableDomain(h)}}, nil
}

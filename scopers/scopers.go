// Package scopers holds throttle.Scoper functions beyond the root
// package's defaults (throttle.HostScope, throttle.RegistrableDomainScope):
//
//   - DomainHierarchy throttles by every level of the host's domain, so a
//     limit on a registrable domain covers its subdomains;
//   - IP throttles by the address the host resolves to;
//   - PathPrefix and QueryParamHost give extra scopes to add with
//     throttle.AddScopes: an API endpoint, or the target site of a
//     scraping API's request.
//
// Set one as throttle.Config.Scoper:
//
//	cfg.Scoper = throttle.AddScopes(throttle.HostScope, scopers.PathPrefix("/search"))
//
// For a Scoper of your own, NormalizeHost, RequestHost and
// RegistrableDomain give the keys throttle.HostScope and
// throttle.RegistrableDomainScope give, so that scopes named by host meet.
//
// The package uses throttle's public API, and the host normalisation
// throttle's default Scopers use (so the two agree on every key).
package scopers

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/crawlerkit/throttle"
)

// QueryParamHost returns an extra-scope function for throttle.AddScopes
// that throttles requests to a scraping API by the host of the target URL
// they carry in the query parameter param. With
//
//	throttle.AddScopes(throttle.HostScope, scopers.QueryParamHost("url"))
//
// a request to https://api.scraper.example/v1/?url=https%3A%2F%2Fbooks.toscrape.com%2F
// is in the scopes "api.scraper.example" and "books.toscrape.com", so it
// shares the target's limit with direct requests to books.toscrape.com.
//
// The parameter's first value is parsed with url.Parse and must be an
// absolute URL with a host ("https://host/..." or "//host/..."); the host is
// normalised by NormalizeHost. If the parameter is absent, the
// function returns no scopes and no error (so on its own it is not a valid
// Config.Scoper). If it is present but empty, not a URL, or has no host (a
// scheme-less "books.toscrape.com/" included), the error wraps
// throttle.ErrNoHost or throttle.ErrInvalidHost. A nil request gives
// throttle.ErrNilRequest, a request without URL throttle.ErrNoHost.
func QueryParamHost(param string) throttle.Scoper {
	return func(req *http.Request) ([]throttle.Scope, error) {
		if req == nil {
			return nil, throttle.ErrNilRequest
		}
		if req.URL == nil {
			return nil, throttle.ErrNoHost
		}
		vs, ok := req.URL.Query()[param]
		if !ok || len(vs) == 0 {
			return nil, nil
		}
		v := vs[0]
		if v == "" {
			return nil, fmt.Errorf("throttle: query parameter %q: %w", param, throttle.ErrNoHost)
		}
		u, err := url.Parse(v)
		if err != nil {
			return nil, fmt.Errorf("throttle: query parameter %q: %w: %w", param, throttle.ErrInvalidHost, err)
		}
		h, err := NormalizeHost(u.Host)
		if err != nil {
			return nil, fmt.Errorf("throttle: query parameter %q: %w", param, err)
		}
		return []throttle.Scope{{Key: h}}, nil
	}
}

// PathPrefix returns an extra-scope function for throttle.AddScopes that
// gives endpoint-specific scopes: when the request URL's path (url.URL.Path,
// the decoded path, "/" if empty) starts with one of prefixes on a
// path-segment boundary, the one scope is the normalised host followed by
// the longest matching prefix, e.g. "api.example.com/search". With
//
//	throttle.AddScopes(throttle.HostScope, scopers.PathPrefix("/search", "/download"))
//
// requests to /search, /search/x and /search?q=go share the scope
// "host/search" besides "host"; /searchx and /other get only "host".
//
// Each prefix is used with its leading and trailing "/"s trimmed and one
// leading "/" added ("search/" is "/search"); "" and "/" match every path
// (scope "host/"). Matching is case-sensitive and the path is not cleaned.
// When no prefix matches, the function returns no scopes and no error (so
// on its own it is not a valid Config.Scoper). It returns RequestHost's
// error for a nil request or one without a usable host.
func PathPrefix(prefixes ...string) throttle.Scoper {
	ps := make([]string, 0, len(prefixes))
	seen := make(map[string]bool, len(prefixes))
	for _, p := range prefixes {
		p = "/" + strings.Trim(p, "/")
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	// Longest first, so the first match is the longest one.
	sort.SliceStable(ps, func(i, j int) bool { return len(ps[i]) > len(ps[j]) })
	return func(req *http.Request) ([]throttle.Scope, error) {
		h, err := RequestHost(req)
		if err != nil {
			return nil, err
		}
		path := req.URL.Path
		if path == "" {
			path = "/"
		}
		for _, p := range ps {
			if pathHasPrefix(path, p) {
				return []throttle.Scope{{Key: h + p}}, nil
			}
		}
		return nil, nil
	}
}

// pathHasPrefix reports whether path is prefix or starts with prefix followed
// by "/". prefix "/" matches every path.
func pathHasPrefix(path, prefix string) bool {
	if prefix == "/" {
		return true
	}
	return strings.HasPrefix(path, prefix) && (len(path) == len(prefix) || path[len(prefix)] == '/')
}

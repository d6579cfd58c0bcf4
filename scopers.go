package throttle

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// AddScopes returns a Scoper that throttles a request by base's scopes plus
// extra's, like Scrapy's add_scope: for example AddScopes(HostScope,
// QueryParamHostScope("url")) or AddScopes(HostScope, PathPrefixScope("/search")).
//
// base nil means HostScope; extra nil adds nothing. For each request base is
// called first, then extra (only if base succeeded); an error from either is
// returned as is, and a nil request gives ErrNilRequest without calling
// either. Scopes with the same Key are merged: the first occurrence is kept
// with its Cost, later ones are dropped, so base's cost wins over extra's.
// The result is a new slice (neither function's slice is modified or kept).
// It returns ErrTooManyScopes if more than MaxScopesPerRequest (32) distinct
// scopes remain, and ErrNoScope if there are none at all.
func AddScopes(base Scoper, extra func(req *http.Request) ([]Scope, error)) Scoper {
	if base == nil {
		base = HostScope
	}
	return func(req *http.Request) ([]Scope, error) {
		if req == nil {
			return nil, ErrNilRequest
		}
		b, err := base(req)
		if err != nil {
			return nil, err
		}
		var e []Scope
		if extra != nil {
			if e, err = extra(req); err != nil {
				return nil, err
			}
		}
		out := make([]Scope, 0, min(len(b)+len(e), MaxScopesPerRequest))
		if out, err = mergeScopes(out, b); err != nil {
			return nil, err
		}
		if out, err = mergeScopes(out, e); err != nil {
			return nil, err
		}
		if len(out) == 0 {
			return nil, ErrNoScope
		}
		return out, nil
	}
}

// mergeScopes appends to out the scopes of add whose Key is not in out yet.
// out never grows beyond MaxScopesPerRequest, so the linear search is cheap.
func mergeScopes(out, add []Scope) ([]Scope, error) {
next:
	for _, s := range add {
		for _, o := range out {
			if o.Key == s.Key {
				continue next
			}
		}
		if len(out) == MaxScopesPerRequest {
			return nil, ErrTooManyScopes
		}
		out = append(out, s)
	}
	return out, nil
}

// WithScope returns a Scoper that adds the fixed scope key (Cost 0, which
// counts as 1) to base's scopes for every request, e.g. WithScope(HostScope,
// "api") to cap all requests together as well as per host. base nil means
// HostScope. It is AddScopes with a constant extra scope, so a key equal to
// one of base's scopes is not duplicated. An empty key makes every call fail
// with ErrEmptyScopeKey.
func WithScope(base Scoper, key string) Scoper {
	return AddScopes(base, func(*http.Request) ([]Scope, error) {
		if key == "" {
			return nil, ErrEmptyScopeKey
		}
		return []Scope{{Key: key}}, nil
	})
}

// QueryParamHostScope returns an extra-scope function for AddScopes that
// throttles requests to a scraping API by the host of the target URL they
// carry in the query parameter param. With
//
//	AddScopes(HostScope, QueryParamHostScope("url"))
//
// a request to https://api.scraper.example/v1/?url=https%3A%2F%2Fbooks.toscrape.com%2F
// is in the scopes "api.scraper.example" and "books.toscrape.com", so it
// shares the target's limit with direct requests to books.toscrape.com.
//
// The parameter's first value is parsed with url.Parse and must be an
// absolute URL with a host ("https://host/..." or "//host/..."); the host is
// normalised by NormalizeHost. If the parameter is absent, the function
// returns no scopes and no error. If it is present but empty, not a URL, or
// has no host (a scheme-less "books.toscrape.com/" included), the error
// wraps ErrNoHost or ErrInvalidHost. A nil request gives ErrNilRequest, a
// request without URL ErrNoHost.
func QueryParamHostScope(param string) func(req *http.Request) ([]Scope, error) {
	return func(req *http.Request) ([]Scope, error) {
		if req == nil {
			return nil, ErrNilRequest
		}
		if req.URL == nil {
			return nil, ErrNoHost
		}
		vs, ok := req.URL.Query()[param]
		if !ok || len(vs) == 0 {
			return nil, nil
		}
		v := vs[0]
		if v == "" {
			return nil, fmt.Errorf("throttle: query parameter %q: %w", param, ErrNoHost)
		}
		u, err := url.Parse(v)
		if err != nil {
			return nil, fmt.Errorf("throttle: query parameter %q: %w: %w", param, ErrInvalidHost, err)
		}
		h, err := NormalizeHost(u.Host)
		if err != nil {
			return nil, fmt.Errorf("throttle: query parameter %q: %w", param, err)
		}
		return []Scope{{Key: h}}, nil
	}
}

// PathPrefixScope returns an extra-scope function for AddScopes that gives
// endpoint-specific scopes: when the request URL's path (url.URL.Path, the
// decoded path, "/" if empty) starts with one of prefixes on a path-segment
// boundary, the one scope is the normalised host followed by the longest
// matching prefix, e.g. "api.example.com/search". With
//
//	AddScopes(HostScope, PathPrefixScope("/search", "/download"))
//
// requests to /search, /search/x and /search?q=go share the scope
// "host/search" besides "host"; /searchx and /other get only "host".
//
// Each prefix is used with its leading and trailing "/"s trimmed and one
// leading "/" added ("search/" is "/search"); "" and "/" match every path
// (scope "host/"). Matching is case-sensitive and the path is not cleaned. When no
// prefix matches, the function returns no scopes and no error (so on its own
// it is not a valid Scoper). It returns RequestHost's error for a nil request
// or one without a usable host.
func PathPrefixScope(prefixes ...string) func(req *http.Request) ([]Scope, error) {
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
	return func(req *http.Request) ([]Scope, error) {
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
				return []Scope{{Key: h + p}}, nil
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

package throttle

import "net/http"

// AddScopes returns a Scoper that throttles a request by base's scopes plus
// extra's, like Scrapy's add_scope: for example AddScopes(HostScope,
// scopers.QueryParamHost("url")) or AddScopes(HostScope,
// scopers.PathPrefix("/search")), from package
// github.com/crawlerkit/throttle/scopers.
//
// base nil means HostScope; extra nil adds nothing. For each request base is
// called first, then extra (only if base succeeded); an error from either is
// returned as is, and a nil request gives ErrNilRequest without calling
// either. Scopes with the same Key are merged: the first occurrence is kept
// with its Cost, later ones are dropped, so base's cost wins over extra's.
// The result is a new slice (neither function's slice is modified or kept).
// It returns ErrTooManyScopes if more than 32 distinct scopes remain (a
// request has at most 32), and ErrNoScope if there are none at all.
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
		out := make([]Scope, 0, min(len(b)+len(e), maxScopesPerRequest))
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
// out never grows beyond maxScopesPerRequest, so the linear search is cheap.
func mergeScopes(out, add []Scope) ([]Scope, error) {
next:
	for _, s := range add {
		for _, o := range out {
			if o.Key == s.Key {
				continue next
			}
		}
		if len(out) == maxScopesPerRequest {
			return nil, ErrTooManyScopes
		}
		out = append(out, s)
	}
	return out, nil
}

// AddScopeKey returns a Scoper that adds the fixed scope key (Cost 0, which
// counts as 1) to base's scopes for every request, e.g.
// AddScopeKey(HostScope, "api") to cap all requests together as well as
// per host. base nil means HostScope. It is AddScopes with a constant extra
// scope, so a key equal to one of base's scopes is not duplicated. An empty
// key makes every call fail with ErrEmptyScopeKey. (WithScopes, by
// contrast, returns a context: it replaces the Scoper for one context's
// requests.)
func AddScopeKey(base Scoper, key string) Scoper {
	return AddScopes(base, func(*http.Request) ([]Scope, error) {
		if key == "" {
			return nil, ErrEmptyScopeKey
		}
		return []Scope{{Key: key}}, nil
	})
}

package throttle

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
)

func keys(s []Scope) []string {
	if s == nil {
		return nil
	}
	k := make([]string, len(s))
	for i, x := range s {
		k[i] = x.Key
	}
	return k
}

func fixed(scopes ...Scope) func(*http.Request) ([]Scope, error) {
	return func(*http.Request) ([]Scope, error) { return scopes, nil }
}

func failing(err error) func(*http.Request) ([]Scope, error) {
	return func(*http.Request) ([]Scope, error) { return nil, err }
}

func TestAddScopes(t *testing.T) {
	req := httptest.NewRequest("GET", "https://WWW.Example.com:8443/a", nil)
	boom := errors.New("boom")

	got, err := AddScopes(nil, fixed(Scope{Key: "api", Cost: 3}))(req)
	if err != nil || !reflect.DeepEqual(got, []Scope{{Key: "www.example.com"}, {Key: "api", Cost: 3}}) {
		t.Errorf("nil base: %v, %v", got, err)
	}

	// Duplicates by key are merged, the first one (and its cost) kept.
	base := Scoper(fixed(Scope{Key: "a", Cost: 1}, Scope{Key: "b", Cost: 2}, Scope{Key: "a", Cost: 9}))
	got, err = AddScopes(base, fixed(Scope{Key: "b", Cost: 5}, Scope{Key: "c", Cost: 4}, Scope{Key: "c"}))(req)
	if err != nil || !reflect.DeepEqual(got, []Scope{{Key: "a", Cost: 1}, {Key: "b", Cost: 2}, {Key: "c", Cost: 4}}) {
		t.Errorf("merge: %v, %v", got, err)
	}

	// The base's slice is not modified.
	shared := []Scope{{Key: "x"}}
	sharedBase := Scoper(fixed(shared[:1:1]...))
	_, _ = AddScopes(sharedBase, fixed(Scope{Key: "y"}))(req)
	if got, _ := AddScopes(sharedBase, nil)(req); !reflect.DeepEqual(keys(got), []string{"x"}) || len(shared) != 1 {
		t.Errorf("nil extra: %v", got)
	}

	// Errors from either side are returned as is; extra is not called after a base error.
	called := false
	_, err = AddScopes(Scoper(failing(boom)), func(*http.Request) ([]Scope, error) { called = true; return nil, nil })(req)
	if err != boom || called {
		t.Errorf("base error: %v, extra called %v", err, called)
	}
	if _, err = AddScopes(HostScope, failing(boom))(req); err != boom {
		t.Errorf("extra error: %v", err)
	}

	// No scope at all.
	if _, err = AddScopes(Scoper(fixed()), fixed())(req); !errors.Is(err, ErrNoScope) {
		t.Errorf("no scopes: %v", err)
	}

	// The cap counts distinct keys.
	many := make([]Scope, maxScopesPerRequest-1)
	for i := range many {
		many[i] = Scope{Key: "k" + strconv.Itoa(i)}
	}
	got, err = AddScopes(HostScope, fixed(append(many, many...)...))(req)
	if err != nil || len(got) != maxScopesPerRequest {
		t.Errorf("at the cap: %d scopes, %v", len(got), err)
	}
	if _, err = AddScopes(HostScope, fixed(append(many, Scope{Key: "one-more"})...))(req); !errors.Is(err, ErrTooManyScopes) {
		t.Errorf("over the cap: %v", err)
	}
}

func TestAddScopeKey(t *testing.T) {
	req := httptest.NewRequest("GET", "http://example.com/", nil)
	got, err := AddScopeKey(nil, "api")(req)
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com", "api"}) {
		t.Errorf("got %v, %v", got, err)
	}
	got, err = AddScopeKey(AddScopeKey(RegistrableDomainScope, "api"), "global")(httptest.NewRequest("GET", "http://www.example.com/", nil))
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com", "api", "global"}) {
		t.Errorf("nested: %v, %v", got, err)
	}
	got, err = AddScopeKey(nil, "example.com")(req)
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com"}) {
		t.Errorf("duplicate key: %v, %v", got, err)
	}
	if _, err = AddScopeKey(nil, "")(req); !errors.Is(err, ErrEmptyScopeKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err = AddScopeKey(nil, "api")(nil); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
}

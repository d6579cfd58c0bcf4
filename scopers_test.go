package throttle

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
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
	many := make([]Scope, MaxScopesPerRequest-1)
	for i := range many {
		many[i] = Scope{Key: "k" + strconv.Itoa(i)}
	}
	got, err = AddScopes(HostScope, fixed(append(many, many...)...))(req)
	if err != nil || len(got) != MaxScopesPerRequest {
		t.Errorf("at the cap: %d scopes, %v", len(got), err)
	}
	if _, err = AddScopes(HostScope, fixed(append(many, Scope{Key: "one-more"})...))(req); !errors.Is(err, ErrTooManyScopes) {
		t.Errorf("over the cap: %v", err)
	}

	// Nil and hostless requests give errors, not panics.
	sc := AddScopes(nil, QueryParamHostScope("url"))
	if _, err = sc(nil); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err = sc(&http.Request{}); !errors.Is(err, ErrNoHost) {
		t.Errorf("no URL: %v", err)
	}
	if _, err = sc(&http.Request{URL: &url.URL{Path: "/x"}}); !errors.Is(err, ErrNoHost) {
		t.Errorf("no host: %v", err)
	}
}

func TestWithScope(t *testing.T) {
	req := httptest.NewRequest("GET", "http://example.com/", nil)
	got, err := WithScope(nil, "api")(req)
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com", "api"}) {
		t.Errorf("got %v, %v", got, err)
	}
	got, err = WithScope(WithScope(RegistrableDomainScope, "api"), "global")(httptest.NewRequest("GET", "http://www.example.com/", nil))
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com", "api", "global"}) {
		t.Errorf("nested: %v, %v", got, err)
	}
	got, err = WithScope(nil, "example.com")(req)
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com"}) {
		t.Errorf("duplicate key: %v, %v", got, err)
	}
	if _, err = WithScope(nil, "")(req); !errors.Is(err, ErrEmptyScopeKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err = WithScope(nil, "api")(nil); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
}

func TestQueryParamHostScope(t *testing.T) {
	q := QueryParamHostScope("url")
	sc := AddScopes(HostScope, q)
	const api = "https://api.scraper.example/v1/"
	tests := []struct {
		target  string
		want    []string // AddScopes(HostScope, q) keys; nil if error
		wantErr error
	}{
		{api + "?url=https%3A%2F%2Fbooks.toscrape.com%2F", []string{"api.scraper.example", "books.toscrape.com"}, nil},
		{api + "?api_key=x&url=https%3A%2F%2FBOOKS.toscrape.com.%3A8443%2Fa%3Fb%3Dc&render=1", []string{"api.scraper.example", "books.toscrape.com"}, nil},
		{api + "?url=" + url.QueryEscape("http://Bücher.example/x"), []string{"api.scraper.example", "xn--bcher-kva.example"}, nil},
		{api + "?url=" + url.QueryEscape("http://[2001:DB8::1]:8080/"), []string{"api.scraper.example", "2001:db8::1"}, nil},
		{api + "?url=" + url.QueryEscape("//user:pw@example.org/"), []string{"api.scraper.example", "example.org"}, nil},
		{api + "?url=" + url.QueryEscape("https://api.scraper.example/"), []string{"api.scraper.example"}, nil},
		{api + "?url=a&url=b", nil, ErrNoHost}, // first value used
		{api + "?url=https%3A%2F%2Fa.example&url=https%3A%2F%2Fb.example", []string{"api.scraper.example", "a.example"}, nil},
		// Absent: just the host.
		{api, []string{"api.scraper.example"}, nil},
		{api + "?target=https%3A%2F%2Fbooks.toscrape.com", []string{"api.scraper.example"}, nil},
		// Present but unusable.
		{api + "?url=", nil, ErrNoHost},
		{api + "?url", nil, ErrNoHost},
		{api + "?url=books.toscrape.com%2F", nil, ErrNoHost},
		{api + "?url=https%3A%2F%2F", nil, ErrNoHost},
		{api + "?url=https%3A%2F%2F%3A80%2F", nil, ErrNoHost},
		{api + "?url=mailto%3Aa%40b.example", nil, ErrNoHost},
		{api + "?url=https%3A%2F%2F%5B%3A%3A1", nil, ErrInvalidHost},         // https://[::1
		{api + "?url=%25zz%3A%2F%2Fexample.com", nil, ErrInvalidHost},        // %zz://example.com
		{api + "?url=https%3A%2F%2F..%2F", nil, ErrInvalidHost},              // https://../
		{api + "?url=https%3A%2F%2Fexample.com%3Ax%2F", nil, ErrInvalidHost}, // bad port
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", tt.target, nil)
		got, err := sc(req)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: err = %v, want %v", tt.target, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), `query parameter "url"`) {
				t.Errorf("%s: err %q does not name the parameter", tt.target, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(keys(got), tt.want) {
			t.Errorf("%s: got %v, %v; want %v", tt.target, keys(got), err, tt.want)
		}
	}

	// On its own: no scope and no error when absent.
	got, err := q(httptest.NewRequest("GET", api, nil))
	if got != nil || err != nil {
		t.Errorf("absent: %v, %v", got, err)
	}
	if _, err := q(nil); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := q(&http.Request{}); !errors.Is(err, ErrNoHost) {
		t.Errorf("nil URL: %v", err)
	}
}

func TestPathPrefixScope(t *testing.T) {
	p := PathPrefixScope("/search", "download/", "/search/advanced", "/search")
	sc := AddScopes(HostScope, p)
	tests := []struct {
		target string
		want   []string
	}{
		{"https://API.Example.com/search", []string{"api.example.com", "api.example.com/search"}},
		{"https://api.example.com/search/", []string{"api.example.com", "api.example.com/search"}},
		{"https://api.example.com/search/x", []string{"api.example.com", "api.example.com/search"}},
		{"https://api.example.com/search?q=go", []string{"api.example.com", "api.example.com/search"}},
		{"https://api.example.com/search/advanced?q=go", []string{"api.example.com", "api.example.com/search/advanced"}},
		{"https://api.example.com/search/advancedx", []string{"api.example.com", "api.example.com/search"}},
		{"https://api.example.com/download/file.zip", []string{"api.example.com", "api.example.com/download"}},
		{"https://api.example.com:8443/download", []string{"api.example.com", "api.example.com/download"}},
		{"https://api.example.com/searchx", []string{"api.example.com"}},
		{"https://api.example.com/Search", []string{"api.example.com"}},
		{"https://api.example.com/", []string{"api.example.com"}},
		{"https://api.example.com", []string{"api.example.com"}},
		{"https://api.example.com/x/search", []string{"api.example.com"}},
		{"https://[2001:db8::1]:8080/search", []string{"2001:db8::1", "2001:db8::1/search"}},
	}
	for _, tt := range tests {
		got, err := sc(httptest.NewRequest("GET", tt.target, nil))
		if err != nil || !reflect.DeepEqual(keys(got), tt.want) {
			t.Errorf("%s: got %v, %v; want %v", tt.target, keys(got), err, tt.want)
		}
	}

	// Root prefix matches everything; no prefixes match nothing.
	got, err := PathPrefixScope("/")(&http.Request{URL: &url.URL{Host: "example.com"}})
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com/"}) {
		t.Errorf("root: %v, %v", got, err)
	}
	got, err = PathPrefixScope()(httptest.NewRequest("GET", "http://example.com/search", nil))
	if got != nil || err != nil {
		t.Errorf("no prefixes: %v, %v", got, err)
	}
	if _, err := p(nil); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := p(&http.Request{URL: &url.URL{Path: "/search"}}); !errors.Is(err, ErrNoHost) {
		t.Errorf("no host: %v", err)
	}
}

// TestAwkwardHosts runs every scoper over the same awkward hosts.
func TestAwkwardHosts(t *testing.T) {
	f := newFakeResolver()
	ips := NewIPScoper(f, time.Minute, 100)
	tests := []struct {
		host      string // URL host as the request carries it
		norm      string // HostScope
		regDomain string // RegistrableDomainScope
		hierarchy []string
		ip        string // IPScoper.Scope; f resolves names to 198.51.100.x
	}{
		{"Bücher.example", "xn--bcher-kva.example", "xn--bcher-kva.example", nil, ""},
		{"xn--bcher-kva.example.", "xn--bcher-kva.example", "xn--bcher-kva.example", nil, ""},
		{"WWW.Bücher.Example:8080", "www.xn--bcher-kva.example", "xn--bcher-kva.example",
			[]string{"xn--bcher-kva.example", "www.xn--bcher-kva.example"}, ""},
		{"WWW.EXAMPLE.COM", "www.example.com", "example.com", []string{"example.com", "www.example.com"}, ""},
		{"www.example.com.", "www.example.com", "example.com", []string{"example.com", "www.example.com"}, ""},
		{"www.example.com:8443", "www.example.com", "example.com", []string{"example.com", "www.example.com"}, ""},
		{"[2001:db8::1]:8080", "2001:db8::1", "2001:db8::1", nil, "2001:db8::1"},
		{"[2001:DB8::1]", "2001:db8::1", "2001:db8::1", nil, "2001:db8::1"},
		{"[::ffff:192.0.2.1]", "::ffff:192.0.2.1", "::ffff:192.0.2.1", nil, "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1", "192.0.2.1", nil, "192.0.2.1"},
		{"192.0.2.1:8080", "192.0.2.1", "192.0.2.1", nil, "192.0.2.1"},
		{"localhost", "localhost", "localhost", nil, ""},
		{"localhost:3000", "localhost", "localhost", nil, ""},
		{"co.uk", "co.uk", "co.uk", nil, ""},
		{"com", "com", "com", nil, ""},
		{"foo.blogspot.com", "foo.blogspot.com", "foo.blogspot.com", nil, ""},
		{"a.foo.blogspot.com", "a.foo.blogspot.com", "foo.blogspot.com",
			[]string{"foo.blogspot.com", "a.foo.blogspot.com"}, ""},
		{"blogspot.com", "blogspot.com", "blogspot.com", nil, ""},
		{"a.b.example.co.uk", "a.b.example.co.uk", "example.co.uk",
			[]string{"example.co.uk", "b.example.co.uk", "a.b.example.co.uk"}, ""},
		{"Crawlerkit.GitHub.io", "crawlerkit.github.io", "crawlerkit.github.io", nil, ""},
		{"docs.crawlerkit.github.io", "docs.crawlerkit.github.io", "crawlerkit.github.io",
			[]string{"crawlerkit.github.io", "docs.crawlerkit.github.io"}, ""},
		{"github.io", "github.io", "github.io", nil, ""},
	}
	ipOf := map[string]string{} // normalised name -> its fake address
	for _, tt := range tests {
		if tt.hierarchy == nil {
			tt.hierarchy = []string{tt.norm}
		}
		if tt.ip == "" {
			// Each name gets its own address; literals are never looked up.
			if ipOf[tt.norm] == "" {
				ipOf[tt.norm] = netip.AddrFrom4([4]byte{198, 51, 100, byte(len(ipOf) + 1)}).String()
				f.set(tt.norm, ipOf[tt.norm])
			}
			tt.ip = ipOf[tt.norm]
		}
		req := &http.Request{Method: "GET", URL: &url.URL{Scheme: "https", Host: tt.host, Path: "/search/x", RawQuery: "url=" + url.QueryEscape("https://"+tt.host+"/")}}
		check := func(name string, sc Scoper, want []string) {
			t.Helper()
			got, err := sc(req)
			if err != nil || !reflect.DeepEqual(keys(got), want) {
				t.Errorf("%s(%q) = %v, %v; want %v", name, tt.host, keys(got), err, want)
			}
		}
		check("HostScope", HostScope, []string{tt.norm})
		check("RegistrableDomainScope", RegistrableDomainScope, []string{tt.regDomain})
		check("DomainHierarchyScopes", DomainHierarchyScopes, tt.hierarchy)
		check("QueryParamHostScope", AddScopes(HostScope, QueryParamHostScope("url")), []string{tt.norm})
		check("WithScope", WithScope(RegistrableDomainScope, "api"), []string{tt.regDomain, "api"})
		check("PathPrefixScope", AddScopes(nil, PathPrefixScope("/search")), []string{tt.norm, tt.norm + "/search"})
		check("IPScoper", ips.Scope, []string{tt.ip})
		if tt.ip == tt.norm { // an IP literal is its own address: merged
			check("IPScoper+host", AddScopes(HostScope, ips.Scope), []string{tt.norm})
		} else {
			check("IPScoper+host", AddScopes(HostScope, ips.Scope), []string{tt.norm, tt.ip})
		}
	}
	for _, lit := range []string{"2001:db8::1", "::ffff:192.0.2.1", "192.0.2.1"} {
		if n := f.callCount(lit); n != 0 {
			t.Errorf("IP literal %s resolved %d times", lit, n)
		}
	}

	// Requests without a usable host: every scoper errors, none panics.
	scopers := map[string]Scoper{
		"HostScope":              HostScope,
		"RegistrableDomainScope": RegistrableDomainScope,
		"DomainHierarchyScopes":  DomainHierarchyScopes,
		"QueryParamHostScope":    AddScopes(nil, QueryParamHostScope("url")),
		"WithScope":              WithScope(nil, "api"),
		"PathPrefixScope":        AddScopes(nil, PathPrefixScope("/")),
		"PathPrefixScope alone":  Scoper(PathPrefixScope("/")),
		"IPScoper":               ips.Scope,
		"IPScoper zero":          new(IPScoper).Scope,
	}
	bad := []struct {
		name string
		req  *http.Request
		want error
	}{
		{"nil request", nil, ErrNilRequest},
		{"nil URL", &http.Request{}, ErrNoHost},
		{"empty host", &http.Request{URL: &url.URL{Path: "/x"}}, ErrNoHost},
		{"port only", &http.Request{URL: &url.URL{Host: ":80"}}, ErrNoHost},
		{"empty brackets", &http.Request{URL: &url.URL{Host: "[]:80"}}, ErrNoHost},
		{"dot", &http.Request{URL: &url.URL{Host: "."}}, ErrInvalidHost},
		{"dots", &http.Request{URL: &url.URL{Host: "..:80"}}, ErrInvalidHost},
		{"too long", &http.Request{URL: &url.URL{Host: strings.Repeat("a.", 200) + "com"}}, ErrInvalidHost},
	}
	for name, sc := range scopers {
		for _, b := range bad {
			got, err := sc(b.req)
			if !errors.Is(err, b.want) || got != nil {
				t.Errorf("%s, %s: %v, %v; want %v", name, b.name, got, err, b.want)
			}
		}
	}
	if n := f.totalCalls(); n != len(ipOf) {
		t.Errorf("%d lookups, want %d: one per distinct name", n, len(ipOf))
	}
}

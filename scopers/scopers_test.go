package scopers

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
)

func keys(s []throttle.Scope) []string {
	if s == nil {
		return nil
	}
	k := make([]string, len(s))
	for i, x := range s {
		k[i] = x.Key
	}
	return k
}

// TestAddScopesQueryParamHost: through throttle.AddScopes, nil and hostless
// requests give errors, not panics.
func TestAddScopesQueryParamHost(t *testing.T) {
	var err error
	sc := throttle.AddScopes(nil, QueryParamHost("url"))
	if _, err = sc(nil); !errors.Is(err, throttle.ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err = sc(&http.Request{}); !errors.Is(err, throttle.ErrNoHost) {
		t.Errorf("no URL: %v", err)
	}
	if _, err = sc(&http.Request{URL: &url.URL{Path: "/x"}}); !errors.Is(err, throttle.ErrNoHost) {
		t.Errorf("no host: %v", err)
	}
}

func TestQueryParamHost(t *testing.T) {
	q := QueryParamHost("url")
	sc := throttle.AddScopes(throttle.HostScope, q)
	const api = "https://api.scraper.example/v1/"
	tests := []struct {
		target  string
		want    []string // throttle.AddScopes(throttle.HostScope, q) keys; nil if error
		wantErr error
	}{
		{api + "?url=https%3A%2F%2Fbooks.toscrape.com%2F", []string{"api.scraper.example", "books.toscrape.com"}, nil},
		{api + "?api_key=x&url=https%3A%2F%2FBOOKS.toscrape.com.%3A8443%2Fa%3Fb%3Dc&render=1", []string{"api.scraper.example", "books.toscrape.com"}, nil},
		{api + "?url=" + url.QueryEscape("http://Bücher.example/x"), []string{"api.scraper.example", "xn--bcher-kva.example"}, nil},
		{api + "?url=" + url.QueryEscape("http://[2001:DB8::1]:8080/"), []string{"api.scraper.example", "2001:db8::1"}, nil},
		{api + "?url=" + url.QueryEscape("//user:pw@example.org/"), []string{"api.scraper.example", "example.org"}, nil},
		{api + "?url=" + url.QueryEscape("https://api.scraper.example/"), []string{"api.scraper.example"}, nil},
		{api + "?url=a&url=b", nil, throttle.ErrNoHost}, // first value used
		{api + "?url=https%3A%2F%2Fa.example&url=https%3A%2F%2Fb.example", []string{"api.scraper.example", "a.example"}, nil},
		// Absent: just the host.
		{api, []string{"api.scraper.example"}, nil},
		{api + "?target=https%3A%2F%2Fbooks.toscrape.com", []string{"api.scraper.example"}, nil},
		// Present but unusable.
		{api + "?url=", nil, throttle.ErrNoHost},
		{api + "?url", nil, throttle.ErrNoHost},
		{api + "?url=books.toscrape.com%2F", nil, throttle.ErrNoHost},
		{api + "?url=https%3A%2F%2F", nil, throttle.ErrNoHost},
		{api + "?url=https%3A%2F%2F%3A80%2F", nil, throttle.ErrNoHost},
		{api + "?url=mailto%3Aa%40b.example", nil, throttle.ErrNoHost},
		{api + "?url=https%3A%2F%2F%5B%3A%3A1", nil, throttle.ErrInvalidHost},         // https://[::1
		{api + "?url=%25zz%3A%2F%2Fexample.com", nil, throttle.ErrInvalidHost},        // %zz://example.com
		{api + "?url=https%3A%2F%2F..%2F", nil, throttle.ErrInvalidHost},              // https://../
		{api + "?url=https%3A%2F%2Fexample.com%3Ax%2F", nil, throttle.ErrInvalidHost}, // bad port
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
	if _, err := q(nil); !errors.Is(err, throttle.ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := q(&http.Request{}); !errors.Is(err, throttle.ErrNoHost) {
		t.Errorf("nil URL: %v", err)
	}
}

func TestPathPrefix(t *testing.T) {
	p := PathPrefix("/search", "download/", "/search/advanced", "/search")
	sc := throttle.AddScopes(throttle.HostScope, p)
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
	got, err := PathPrefix("/")(&http.Request{URL: &url.URL{Host: "example.com"}})
	if err != nil || !reflect.DeepEqual(keys(got), []string{"example.com/"}) {
		t.Errorf("root: %v, %v", got, err)
	}
	got, err = PathPrefix()(httptest.NewRequest("GET", "http://example.com/search", nil))
	if got != nil || err != nil {
		t.Errorf("no prefixes: %v, %v", got, err)
	}
	if _, err := p(nil); !errors.Is(err, throttle.ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := p(&http.Request{URL: &url.URL{Path: "/search"}}); !errors.Is(err, throttle.ErrNoHost) {
		t.Errorf("no host: %v", err)
	}
}

// TestAwkwardHosts runs every scoper, throttle's and this package's, over
// the same awkward hosts.
func TestAwkwardHosts(t *testing.T) {
	f := newFakeResolver()
	ips := NewIP(f, time.Minute, 100)
	tests := []struct {
		host      string // URL host as the request carries it
		norm      string // throttle.HostScope
		regDomain string // throttle.RegistrableDomainScope
		hierarchy []string
		ip        string // IP.Scope; f resolves names to 198.51.100.x
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
		check := func(name string, sc throttle.Scoper, want []string) {
			t.Helper()
			got, err := sc(req)
			if err != nil || !reflect.DeepEqual(keys(got), want) {
				t.Errorf("%s(%q) = %v, %v; want %v", name, tt.host, keys(got), err, want)
			}
		}
		check("HostScope", throttle.HostScope, []string{tt.norm})
		check("RegistrableDomainScope", throttle.RegistrableDomainScope, []string{tt.regDomain})
		check("DomainHierarchy", DomainHierarchy, tt.hierarchy)
		check("QueryParamHost", throttle.AddScopes(throttle.HostScope, QueryParamHost("url")), []string{tt.norm})
		check("AddScopeKey", throttle.AddScopeKey(throttle.RegistrableDomainScope, "api"), []string{tt.regDomain, "api"})
		check("PathPrefix", throttle.AddScopes(nil, PathPrefix("/search")), []string{tt.norm, tt.norm + "/search"})
		check("IP", ips.Scope, []string{tt.ip})
		if tt.ip == tt.norm { // an IP literal is its own address: merged
			check("IP+host", throttle.AddScopes(throttle.HostScope, ips.Scope), []string{tt.norm})
		} else {
			check("IP+host", throttle.AddScopes(throttle.HostScope, ips.Scope), []string{tt.norm, tt.ip})
		}
	}
	for _, lit := range []string{"2001:db8::1", "::ffff:192.0.2.1", "192.0.2.1"} {
		if n := f.callCount(lit); n != 0 {
			t.Errorf("IP literal %s resolved %d times", lit, n)
		}
	}

	// Requests without a usable host: every scoper errors, none panics.
	scopers := map[string]throttle.Scoper{
		"HostScope":              throttle.HostScope,
		"RegistrableDomainScope": throttle.RegistrableDomainScope,
		"DomainHierarchy":        DomainHierarchy,
		"QueryParamHost":         throttle.AddScopes(nil, QueryParamHost("url")),
		"AddScopeKey":            throttle.AddScopeKey(nil, "api"),
		"PathPrefix":             throttle.AddScopes(nil, PathPrefix("/")),
		"PathPrefix alone":       throttle.Scoper(PathPrefix("/")),
		"IP":                     ips.Scope,
		"IP zero":                new(IP).Scope,
	}
	bad := []struct {
		name string
		req  *http.Request
		want error
	}{
		{"nil request", nil, throttle.ErrNilRequest},
		{"nil URL", &http.Request{}, throttle.ErrNoHost},
		{"empty host", &http.Request{URL: &url.URL{Path: "/x"}}, throttle.ErrNoHost},
		{"port only", &http.Request{URL: &url.URL{Host: ":80"}}, throttle.ErrNoHost},
		{"empty brackets", &http.Request{URL: &url.URL{Host: "[]:80"}}, throttle.ErrNoHost},
		{"dot", &http.Request{URL: &url.URL{Host: "."}}, throttle.ErrInvalidHost},
		{"dots", &http.Request{URL: &url.URL{Host: "..:80"}}, throttle.ErrInvalidHost},
		{"too long", &http.Request{URL: &url.URL{Host: strings.Repeat("a.", 200) + "com"}}, throttle.ErrInvalidHost},
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

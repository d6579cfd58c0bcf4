package scopers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/scopers"
)

// printScopes prints the scope keys scoper gives a GET of u.
func printScopes(scoper throttle.Scoper, u string) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		panic(err)
	}
	scopes, err := scoper(req)
	if err != nil {
		panic(err)
	}
	var keys []string
	for _, s := range scopes {
		keys = append(keys, s.Key)
	}
	fmt.Println(keys)
}

// A limit on the registrable domain covers every subdomain, while each
// subdomain keeps its own.
func ExampleDomainHierarchy() {
	cfg := throttle.DefaultConfig()
	cfg.Scoper = scopers.DomainHierarchy
	toscrape := cfg.Default
	toscrape.Concurrency = 4 // all of toscrape.com together
	cfg.Scopes = map[string]throttle.ScopeConfig{"toscrape.com": toscrape}
	if _, err := throttle.New(cfg); err != nil {
		panic(err)
	}

	printScopes(scopers.DomainHierarchy, "https://books.toscrape.com/catalogue/")
	printScopes(scopers.DomainHierarchy, "https://a.b.example.co.uk/")
	// Output:
	// [toscrape.com books.toscrape.com]
	// [example.co.uk b.example.co.uk a.b.example.co.uk]
}

func ExampleDomainLevels() {
	fmt.Println(scopers.DomainLevels("a.foo.blogspot.com"))
	fmt.Println(scopers.DomainLevels("192.0.2.1"))
	// Output:
	// [foo.blogspot.com a.foo.blogspot.com]
	// [192.0.2.1]
}

// An API's endpoints each get a scope of their own beside the host's.
func ExamplePathPrefix() {
	scoper := throttle.AddScopes(throttle.HostScope, scopers.PathPrefix("/search", "/download"))
	printScopes(scoper, "https://api.example.com/search?q=go")
	printScopes(scoper, "https://api.example.com/download/file.zip")
	printScopes(scoper, "https://api.example.com/other")
	// Output:
	// [api.example.com api.example.com/search]
	// [api.example.com api.example.com/download]
	// [api.example.com]
}

// A request to a scraping API shares the limit of the site it fetches.
func ExampleQueryParamHost() {
	scoper := throttle.AddScopes(throttle.HostScope, scopers.QueryParamHost("url"))
	printScopes(scoper, "https://api.scraper.example/v1/?url=https%3A%2F%2Fbooks.toscrape.com%2F")
	printScopes(scoper, "https://books.toscrape.com/")
	// Output:
	// [api.scraper.example books.toscrape.com]
	// [books.toscrape.com]
}

// staticResolver answers from a map, without the network.
type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r[host], nil
}

// Hosts served from one address share its scope.
func ExampleIP() {
	r := staticResolver{
		"a.example": {netip.MustParseAddr("192.0.2.7")},
		"b.example": {netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("192.0.2.7")},
	}
	ips := scopers.NewIP(r, 0, 0) // net.DefaultResolver with r nil
	printScopes(ips.Scope, "https://a.example/")
	printScopes(ips.Scope, "https://b.example/")
	printScopes(throttle.AddScopes(throttle.HostScope, ips.Scope), "https://b.example/")
	// Output:
	// [192.0.2.7]
	// [192.0.2.7]
	// [b.example 192.0.2.7]
}

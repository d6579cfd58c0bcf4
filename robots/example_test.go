package robots_test

import (
	"fmt"
	"strings"

	"github.com/crawlerkit/throttle/robots"
)

func Example() {
	r, err := robots.Parse(strings.NewReader(`User-agent: *
Disallow: /private/
Allow: /private/press/
Crawl-delay: 2

User-agent: MyBot
Disallow: /drafts/
Request-rate: 3/1m
`))
	if err != nil {
		panic(err) // only a failing reader makes Parse fail
	}
	for _, path := range []string{"/private/x", "/private/press/today", "/drafts/1"} {
		fmt.Printf("OtherBot %s: %v\n", path, r.Allowed("OtherBot/2.0", path))
	}
	fmt.Println("MyBot /private/x:", r.Allowed("MyBot/1.0 (+https://example.com/bot)", "/private/x"))
	d, _ := r.Delay("OtherBot/2.0")
	fmt.Println("OtherBot delay:", d)
	d, _ = r.Delay("MyBot/1.0")
	fmt.Println("MyBot delay:", d)
	// Output:
	// OtherBot /private/x: false
	// OtherBot /private/press/today: true
	// OtherBot /drafts/1: true
	// MyBot /private/x: true
	// OtherBot delay: 2s
	// MyBot delay: 20s
}

func ExampleRobots_Allowed() {
	r := robots.ParseBytes([]byte("User-agent: *\nDisallow: /*.pdf$\nDisallow: /search\nAllow: /search/about\n"))
	for _, path := range []string{"/paper.pdf", "/paper.pdf?dl=1", "/search?q=x", "/search/about", "/%7Ehome"} {
		fmt.Println(path, r.Allowed("AnyBot", path))
	}

	var none *robots.Robots // no robots.txt: everything is allowed
	fmt.Println("nil:", none.Allowed("AnyBot", "/search"))
	// Output:
	// /paper.pdf false
	// /paper.pdf?dl=1 true
	// /search?q=x false
	// /search/about true
	// /%7Ehome true
	// nil: true
}

func ExampleProductToken() {
	fmt.Println(robots.ProductToken("Mozilla/5.0 (compatible; MyBot/2.1)"))
	fmt.Println(robots.ProductToken("MyBot/2.1 (+https://example.com/bot)"))
	// Output:
	// Mozilla
	// MyBot
}

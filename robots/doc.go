// Package robots parses robots.txt files and answers what they ask of a
// crawler: which URL paths a user agent may fetch, and how long it should
// wait between requests.
//
// It implements the Robots Exclusion Protocol of RFC 9309: user-agent
// groups (merged when several name the same agent, the "*" group used only
// when none does), Allow and Disallow rules with '*' wildcards and a
// trailing '$' anchor, the longest match winning and Allow winning a tie,
// percent-encoding normalised on both sides, and "/robots.txt" always
// allowed. It also reads two extensions RFC 9309 leaves out, per group:
// Crawl-delay (seconds between requests) and Request-rate ("n/m": n
// requests per m seconds, minutes or hours). A few common misspellings of
// the keys ("useragent", "dissallow", "crawl delay" ...) are accepted;
// lines it does not understand (Sitemap, Host, garbage) are skipped, never
// the whole file.
//
// Parsing is bounded for hostile servers: only the first MaxSize bytes
// (500 KiB, the smallest limit RFC 9309 allows) are read, a line cut by
// that limit is dropped, at most 100,000 rules are kept, paths are matched
// on their first 8 KiB, and matching never backtracks. Delays are clamped
// to 1e6 seconds.
//
// A nil *Robots, like the zero Robots, allows everything and asks for no
// delay: that is what a missing robots.txt (a 4xx answer) means. A parsed
// Robots is never modified, so one value may be shared by any number of
// goroutines.
//
//	r, err := robots.Parse(resp.Body)
//	if err != nil { ... }
//	if r.Allowed("MyBot/1.0", "/private/page") { ... }
//	if d, ok := r.Delay("MyBot/1.0"); ok { ... }
//
// Fetching and caching robots.txt per origin is left to the caller; package
// throttle does it for the requests it paces (ThrottlingManager.RobotsFor).
package robots

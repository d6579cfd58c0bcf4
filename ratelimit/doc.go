// Package ratelimit parses the response headers by which an HTTP server says
// how fast a client may send: when it may send again, how much of its quota
// is left, and what rate the server allows.
//
// Parse reads them all from an http.Header and sums them up as a Wait. Each
// field also has its own parser:
//
//   - Retry-After (RFC 9110 section 10.2.3): ParseRetryAfter, a number of
//     seconds or an HTTP date;
//   - RateLimit and RateLimit-Policy, the structured fields (RFC 9651) of
//     the IETF draft draft-ietf-httpapi-ratelimit-headers, e.g.
//     `RateLimit: "default";r=50;t=30` and
//     `RateLimit-Policy: "default";q=100;w=60`: ParseRateLimit, giving
//     Items, and ParseRateLimitPolicy, giving PolicyItems;
//   - RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, from older
//     drafts: ParseRateLimitReset for the reset, in seconds;
//   - the X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
//     conventions (also spelled X-Rate-Limit-*), which no specification
//     defines: ParseXRateLimitReset tells delta seconds, epoch seconds and
//     epoch milliseconds apart by their size.
//
// The parsers expect hostile input. No wait they return is negative or
// longer than MaxWait (30 days), however many digits a value has or how far
// a date lies. A structured field of more than 64 items, or an item of more
// than 64 parameters, is malformed and rejected after looking at a bounded
// prefix; Parse ignores any header value longer than 4 KiB and reads only
// the first value of each header; an HTTP date longer than 64 bytes is
// rejected unread. Parsing is linear in the length of the value.
// Retry-After and the -Reset, -Remaining and -Limit headers allocate
// nothing; a RateLimit or RateLimit-Policy field allocates its list of
// items, and copies an item's name only when it has escapes. A malformed
// value is ignored whole, and Parse still counts the other headers.
//
// Every function of the package is safe for concurrent use.
package ratelimit

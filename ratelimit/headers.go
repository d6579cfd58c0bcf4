package ratelimit

import (
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxWait bounds every wait the parsers of this package return: they never
// return more, never a negative wait, and never overflow, whatever the input.
// It is 30 days. Callers usually cap server-given waits further (the throttle
// package's scopes with their Backoff.MaxDelay).
const MaxWait = 30 * 24 * time.Hour

const (
	// maxWaitSeconds is MaxWait in whole seconds.
	maxWaitSeconds = int64(MaxWait / time.Second)
	// maxHeaderValueLen is the longest header value Parse reads.
	maxHeaderValueLen = 4 << 10
	// maxSFItems and maxSFParams cap the work on one RateLimit or
	// RateLimit-Policy field; a field with more is malformed.
	maxSFItems  = 64
	maxSFParams = 64
	// maxHTTPDateLen is longer than any of the three HTTP date formats.
	maxHTTPDateLen = 64
)

// ParseRetryAfter parses a Retry-After field value (RFC 9110 section 10.2.3)
// against now and returns the wait it gives.
//
// The value is either delay-seconds (RFC 9110) or an HTTP date. Delay-seconds are ASCII
// digits only: no sign, no decimals, no exponent; whitespace (SP, HTAB)
// around the value is allowed. Numbers too large for MaxWait, however
// many digits, give MaxWait. An HTTP date may be in any of the three
// formats http.ParseTime accepts (IMF-fixdate, RFC 850, asctime); a date in
// the past gives (0, true) and a date more than MaxWait after now gives
// MaxWait. Anything else gives (0, false).
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = trimOWS(v)
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) {
		// None of the three date formats starts with a digit.
		return parseDeltaSeconds(v)
	}
	if len(v) > maxHTTPDateLen {
		return 0, false
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampWait(t.Sub(now)), true
}

// Item is one item of the IETF RateLimit field
// (draft-ietf-httpapi-ratelimit-headers; current drafts send e.g.
// `RateLimit: "default";r=50;t=30`), as ParseRateLimit returns it.
//
// The zero Item is an unnamed policy with 0 remaining and no reset. An Item
// is a plain value with no methods, safe to read from several goroutines.
type Item struct {
	// Policy is the policy name: the item's sf-string or token, unescaped.
	Policy string
	// Remaining is the item's r parameter: the quota units left.
	Remaining int64
	// Reset is the item's t parameter: the seconds until the quota resets,
	// at most MaxWait. It is 0 when HasReset is false.
	Reset time.Duration
	// HasReset reports whether the item had a t parameter.
	HasReset bool
}

// ParseRateLimit parses a RateLimit field value: a comma-separated list
// (RFC 9651 structured-field List) of items, each a policy name, either a
// quoted sf-string like "default" or a bare token like default, followed by
// ;key=value parameters. The r parameter (remaining quota) is required and
// must be a non-negative integer; the t parameter (seconds until reset) is
// optional and must be a non-negative integer; t beyond MaxWait gives
// MaxWait. Other parameters are ignored, though their syntax must be
// valid. When a parameter is repeated, the last one counts.
//
// A malformed field is ignored whole and gives (nil, false): any item
// malformed (missing r; r or t negative, decimal or not an integer; an
// integer of more than 15 digits; bad quoting; a trailing ';'), an empty
// item, a trailing comma, an empty field, or a name that is neither a string
// nor a token. To bound the work, at most 64 items and 64 parameters per item
// are looked at: a field with more is malformed. Parsing is linear in the
// length of the value.
func ParseRateLimit(v string) ([]Item, bool) {
	entries, ok := parseSFIntList(v, "r", "t")
	if !ok {
		return nil, false
	}
	items := make([]Item, len(entries))
	for i, e := range entries {
		items[i] = Item{Policy: e.name, Remaining: e.req, HasReset: e.hasOpt}
		if e.hasOpt {
			items[i].Reset = secondsWait(e.opt)
		}
	}
	return items, true
}

// PolicyItem is one item of the IETF RateLimit-Policy field, e.g.
// `RateLimit-Policy: "default";q=100;w=60`, as ParseRateLimitPolicy
// returns it.
//
// The zero PolicyItem is an unnamed policy with a quota of 0 and no window.
// A PolicyItem is a plain value with no methods, safe to read from several
// goroutines.
type PolicyItem struct {
	// Policy is the policy name: the item's sf-string or token, unescaped.
	Policy string
	// Quota is the item's q parameter: the quota units per window.
	Quota int64
	// Window is the item's w parameter: the window's length in seconds. A
	// window is not a wait and is not capped at MaxWait; one too long
	// for a time.Duration (about 292 years) saturates at the largest
	// Duration. It is 0 when HasWindow is false.
	Window time.Duration
	// HasWindow reports whether the item had a w parameter.
	HasWindow bool
}

// ParseRateLimitPolicy parses a RateLimit-Policy field value with the same
// rules as ParseRateLimit: a list of named items whose q parameter (quota) is
// required and must be a non-negative integer and whose w parameter (window,
// seconds) is optional and must be a non-negative integer. Other parameters
// are ignored. A malformed field, or one with more than 64 items or 64
// parameters in an item, is ignored whole: (nil, false).
func ParseRateLimitPolicy(v string) ([]PolicyItem, bool) {
	entries, ok := parseSFIntList(v, "q", "w")
	if !ok {
		return nil, false
	}
	items := make([]PolicyItem, len(entries))
	for i, e := range entries {
		items[i] = PolicyItem{Policy: e.name, Quota: e.req, HasWindow: e.hasOpt}
		if e.hasOpt {
			if e.opt > math.MaxInt64/int64(time.Second) {
				items[i].Window = time.Duration(math.MaxInt64)
			} else {
				items[i].Window = time.Duration(e.opt) * time.Second
			}
		}
	}
	return items, true
}

// ParseRateLimitReset parses a RateLimit-Reset field value (older drafts of
// draft-ietf-httpapi-ratelimit-headers) as delta seconds: ASCII digits only,
// surrounding whitespace allowed. Values beyond MaxWait give
// MaxWait. Anything else gives (0, false).
func ParseRateLimitReset(v string) (time.Duration, bool) {
	v = trimOWS(v)
	if v == "" {
		return 0, false
	}
	return parseDeltaSeconds(v)
}

// ParseXRateLimitReset parses an X-RateLimit-Reset field value against now.
// Servers send it as delta seconds, as epoch seconds or as epoch
// milliseconds; the value's size tells them apart:
//
//   - below 1e9 (about 2001-09-09 as epoch seconds): delta seconds;
//   - from 1e9 to below 1e12: Unix epoch seconds;
//   - 1e12 or more: Unix epoch milliseconds.
//
// The value is ASCII digits with an optional fraction ("1.5" is 1.5 s from
// now, "1700000000.250" is an epoch in seconds); surrounding whitespace is
// allowed, signs and exponents are not. An epoch in the past gives (0, true);
// waits beyond MaxWait give MaxWait. Anything else gives
// (0, false).
func ParseXRateLimitReset(v string, now time.Time) (time.Duration, bool) {
	n, frac, ok := parseUnsignedDecimal(trimOWS(v))
	if !ok {
		return 0, false
	}
	switch {
	case n < 1e9:
		return clampWait(time.Duration(n)*time.Second + time.Duration(frac)), true
	case n < 1e12:
		return clampWait(time.Unix(int64(n), frac).Sub(now)), true
	default:
		// frac is the fraction of a millisecond in units of 1e-9 ms.
		t := time.Unix(int64(n/1000), int64(n%1000)*int64(time.Millisecond)+frac/1000)
		return clampWait(t.Sub(now)), true
	}
}

// Wait is what a response's headers say about when the client may
// send again: what Parse returns.
//
// A wait is reported whenever a header gives one, whatever the remaining
// count: a reset time with a remaining count above 0 still sets Duration
// and Present, and Exhausted stays false. The caller decides when to honour
// Duration: on a backoff signal (such as a 429), or proactively when
// Exhausted.
//
// The zero Wait means no wait and no stated rate, but its Remaining of 0
// reads as a count of 0: Parse sets Remaining to -1 when no header gives a
// count, and so should a Wait built by hand to mean "nothing known". A Wait
// is a plain value with no methods: copies are independent, and it is safe
// to read from several goroutines.
type Wait struct {
	// Duration is the largest wait given by any recognised header, from
	// now, at most MaxWait. When Exhausted, it is the largest wait of the
	// quotas reported spent (and of Retry-After) only.
	Duration time.Duration
	// Present reports whether any recognised header gave a wait (a wait of
	// 0 included).
	Present bool
	// Exhausted reports that a header says the quota is spent: remaining 0
	// (RateLimit r=0, RateLimit-Remaining: 0, X-RateLimit-Remaining: 0).
	Exhausted bool
	// Remaining is the smallest remaining count any header reported, or -1
	// when none did.
	Remaining int64
	// Rate is the request rate the server states it allows, in requests
	// per second, 0 when it states none: the smallest quota / window of
	// RateLimit-Policy's items (q;w), else of a limit header over the
	// time to its reset rounded up to a whole second (X-RateLimit-Limit
	// with X-RateLimit-Reset, RateLimit-Limit with RateLimit-Reset).
	// The time to a reset is at most the window, so the second form is
	// high late in a window: take the lowest seen.
	Rate float64
	// Policy reports that Rate is the server's own statement of a quota
	// and its window (RateLimit-Policy). Otherwise Rate is an estimate
	// from a limit and its reset, which servers mean in different ways:
	// the end of a fixed window (GitHub), or the time until a token
	// bucket is full again (a GCRA's reset), which makes the estimate
	// low.
	Policy bool
}

// Header names read by Parse: the canonical form, as net/http
// stores it, and the customary spelling for maps built by hand.
var (
	hdrRetryAfter          = headerName{"Retry-After", "Retry-After"}
	hdrRateLimit           = headerName{"Ratelimit", "RateLimit"}
	hdrRateLimitReset      = headerName{"Ratelimit-Reset", "RateLimit-Reset"}
	hdrRateLimitRemaining  = headerName{"Ratelimit-Remaining", "RateLimit-Remaining"}
	hdrXRateLimitReset     = headerName{"X-Ratelimit-Reset", "X-RateLimit-Reset"}
	hdrXRateLimitRemaining = headerName{"X-Ratelimit-Remaining", "X-RateLimit-Remaining"}
	hdrXRateLimitReset2    = headerName{"X-Rate-Limit-Reset", "X-Rate-Limit-Reset"}
	hdrXRateLimitRemain2   = headerName{"X-Rate-Limit-Remaining", "X-Rate-Limit-Remaining"}
	hdrRateLimitPolicy     = headerName{"Ratelimit-Policy", "RateLimit-Policy"}
	hdrRateLimitLimit      = headerName{"Ratelimit-Limit", "RateLimit-Limit"}
	hdrXRateLimitLimit     = headerName{"X-Ratelimit-Limit", "X-RateLimit-Limit"}
	hdrXRateLimitLimit2    = headerName{"X-Rate-Limit-Limit", "X-Rate-Limit-Limit"}
)

// Parse reads every recognised header of h against now:
//
//   - Retry-After (ParseRetryAfter);
//   - RateLimit (ParseRateLimit): the t of each item is a wait, and the
//     item with the smallest r gives Remaining;
//   - RateLimit-Policy gives no wait; with the limit headers it gives Rate;
//   - RateLimit-Reset (ParseRateLimitReset) and RateLimit-Remaining, from
//     older drafts;
//   - X-RateLimit-Reset (ParseXRateLimitReset) and X-RateLimit-Remaining,
//     also spelled X-Rate-Limit-Reset and X-Rate-Limit-Remaining.
//
// The largest wait given wins, except that when a quota is reported spent
// only the resets of spent quotas (and Retry-After) count: with
// `RateLimit: "burst";r=0;t=10, "daily";r=4000;t=80000` the wait is 10 s,
// not the daily reset. The smallest remaining count wins. A
// remaining count is a non-negative integer (surrounding whitespace
// allowed). A malformed header is ignored and the others still count. Only
// the first value of each header is read, and a value longer than 4 KiB is
// ignored. Headers are looked up by their canonical key, as net/http stores
// them, then by their customary spelling (e.g. "RateLimit") for hand-built
// maps. A nil h gives a zero Wait with Remaining -1.
//
// See Wait for when Duration is set and when the caller should use it.
// Parse is safe for concurrent use: it only reads h.
func Parse(h http.Header, now time.Time) Wait {
	if len(h) == 0 {
		// Small enough to inline: a response without headers costs
		// its caller no call.
		return Wait{Remaining: -1}
	}
	return parse(h, now)
}

// parse is Parse for a non-empty h.
func parse(h http.Header, now time.Time) Wait {
	w := Wait{Remaining: -1}
	// spent is the largest wait of the quotas reported spent, with
	// Retry-After, which always counts.
	var spent time.Duration
	addWait := func(d time.Duration, ok, exhausted bool) {
		if !ok {
			return
		}
		w.Present = true
		w.Duration = max(w.Duration, d)
		if exhausted {
			spent = max(spent, d)
		}
	}
	addRemaining := func(n int64) bool {
		if w.Remaining < 0 || n < w.Remaining {
			w.Remaining = n
		}
		if n == 0 {
			w.Exhausted = true
		}
		return n == 0
	}

	if v, ok := headerValue(h, hdrRetryAfter); ok {
		d, ok := ParseRetryAfter(v, now)
		addWait(d, ok, true)
	}
	if v, ok := headerValue(h, hdrRateLimit); ok {
		if items, ok := ParseRateLimit(v); ok {
			for _, it := range items {
				addWait(it.Reset, it.HasReset, addRemaining(it.Remaining))
			}
		}
	}
	// The older pairs: a remaining count and the reset of that same quota.
	pairs := []struct {
		reset, remaining headerName
		parse            func(string) (time.Duration, bool)
	}{
		{hdrRateLimitReset, hdrRateLimitRemaining, ParseRateLimitReset},
		{hdrXRateLimitReset, hdrXRateLimitRemaining, func(v string) (time.Duration, bool) { return ParseXRateLimitReset(v, now) }},
		{hdrXRateLimitReset2, hdrXRateLimitRemain2, func(v string) (time.Duration, bool) { return ParseXRateLimitReset(v, now) }},
	}
	for _, p := range pairs {
		exhausted := false
		if v, ok := headerValue(h, p.remaining); ok {
			if n, ok := parseCount(v); ok {
				exhausted = addRemaining(n)
			}
		}
		if v, ok := headerValue(h, p.reset); ok {
			d, ok := p.parse(v)
			addWait(d, ok, exhausted)
		}
	}
	if w.Exhausted {
		// Wait for the spent quota, not for the longest one: a spent
		// burst quota must not gate the scope until a daily reset.
		w.Duration = spent
	}
	w.Rate, w.Policy = statedRate(h, now)
	return w
}

// statedRate is Wait.Rate and Wait.Policy.
func statedRate(h http.Header, now time.Time) (float64, bool) {
	rate := 0.0
	lower := func(q int64, w time.Duration) {
		if q > 0 && w > 0 {
			if r := float64(q) / w.Seconds(); rate == 0 || r < rate {
				rate = r
			}
		}
	}
	if v, ok := headerValue(h, hdrRateLimitPolicy); ok {
		if items, ok := ParseRateLimitPolicy(v); ok {
			for _, it := range items {
				lower(it.Quota, it.Window)
			}
		}
	}
	if rate > 0 {
		return rate, true
	}
	for _, p := range []struct {
		limit, reset headerName
		parse        func(string) (time.Duration, bool)
	}{
		{hdrRateLimitLimit, hdrRateLimitReset, ParseRateLimitReset},
		{hdrXRateLimitLimit, hdrXRateLimitReset, func(v string) (time.Duration, bool) { return ParseXRateLimitReset(v, now) }},
		{hdrXRateLimitLimit2, hdrXRateLimitReset2, func(v string) (time.Duration, bool) { return ParseXRateLimitReset(v, now) }},
	} {
		lv, ok1 := headerValue(h, p.limit)
		rv, ok2 := headerValue(h, p.reset)
		if !ok1 || !ok2 {
			continue
		}
		q, ok1 := parseCount(lv)
		d, ok2 := p.parse(rv)
		if ok1 && ok2 {
			lower(q, max(time.Second, (d+time.Second-1).Truncate(time.Second))) // resets are whole seconds
		}
	}
	return rate, false
}

// headerName is a header's canonical key and its customary spelling.
type headerName struct{ canonical, alt string }

// headerValue returns the first value of the header, unless it is longer
// than maxHeaderValueLen.
func headerValue(h http.Header, name headerName) (string, bool) {
	vs := h[name.canonical]
	if len(vs) == 0 && name.alt != name.canonical {
		vs = h[name.alt]
	}
	if len(vs) == 0 || len(vs[0]) > maxHeaderValueLen {
		return "", false
	}
	return vs[0], true
}

// clampWait bounds d to [0, MaxWait].
func clampWait(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d > MaxWait {
		return MaxWait
	}
	return d
}

// secondsWait converts a non-negative count of seconds to a wait, at most
// MaxWait.
func secondsWait(n int64) time.Duration {
	if n > maxWaitSeconds {
		return MaxWait
	}
	return clampWait(time.Duration(n) * time.Second)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// trimOWS removes the optional whitespace (SP, HTAB) around v.
func trimOWS(v string) string { return strings.Trim(v, " \t") }

// parseDigits parses a non-empty string of ASCII digits. Values above limit
// give limit+1; ok is false for anything but digits. limit must be at most
// (math.MaxInt64-9)/10 so that the accumulation cannot overflow.
func parseDigits(s string, limit int64) (n int64, ok bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isDigit(c) {
			return 0, false
		}
		if n <= limit {
			n = n*10 + int64(c-'0')
		}
	}
	if n > limit {
		n = limit + 1
	}
	return n, true
}

// parseDeltaSeconds parses trimmed delta-seconds, clamped to MaxWait.
func parseDeltaSeconds(s string) (time.Duration, bool) {
	n, ok := parseDigits(s, maxWaitSeconds)
	if !ok {
		return 0, false
	}
	return secondsWait(n), true
}

// parseCount parses a remaining count: a non-negative integer, surrounding
// whitespace allowed, saturating at (math.MaxInt64-9)/10+1.
func parseCount(v string) (int64, bool) {
	const limit = (math.MaxInt64 - 9) / 10
	return parseDigits(trimOWS(v), limit)
}

// parseUnsignedDecimal parses digits with an optional fraction: "123",
// "123.456". The integer part saturates just above 1e17 (far beyond any
// epoch in milliseconds MaxWait allows); frac is the fraction in
// units of 1e-9 (only the first nine fractional digits count).
func parseUnsignedDecimal(s string) (n uint64, frac int64, ok bool) {
	intPart, fracPart, hasDot := strings.Cut(s, ".")
	if hasDot && fracPart == "" {
		return 0, 0, false
	}
	const limit = 1e17
	in, ok := parseDigits(intPart, limit)
	if !ok {
		return 0, 0, false
	}
	for i := 0; i < len(fracPart); i++ {
		c := fracPart[i]
		if !isDigit(c) {
			return 0, 0, false
		}
		if i < 9 {
			frac = frac*10 + int64(c-'0')
		}
	}
	for i := len(fracPart); i < 9 && hasDot; i++ {
		frac *= 10
	}
	return uint64(in), frac, true
}

// sfEntry is one item of a RateLimit-style list: its name, its required
// integer parameter and its optional one.
type sfEntry struct {
	name   string
	req    int64
	opt    int64
	hasOpt bool
}

// parseSFIntList parses v as an RFC 9651 List whose items are a String or
// Token name with parameters, of which reqKey must be and optKey may be a
// non-negative Integer. Any other parameter must be valid and is ignored.
// More than maxSFItems items, or maxSFParams parameters on an item, fail.
func parseSFIntList(v, reqKey, optKey string) ([]sfEntry, bool) {
	p := sfParser{s: trimOWS(v)}
	entries, ok := p.intList(reqKey, optKey)
	if !ok {
		return nil, false
	}
	return entries, true
}

// intList does the work of parseSFIntList; on return p.i tells how far it
// looked.
func (p *sfParser) intList(reqKey, optKey string) ([]sfEntry, bool) {
	if p.s == "" {
		return nil, false
	}
	var entries []sfEntry
	for {
		if len(entries) == maxSFItems {
			return nil, false
		}
		e, ok := p.entry(reqKey, optKey)
		if !ok {
			return nil, false
		}
		entries = append(entries, e)
		p.skipOWS()
		if p.eof() {
			return entries, true
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
		p.skipOWS()
		if p.eof() { // trailing comma
			return nil, false
		}
	}
}

// sfParser is a cursor over a structured field value (RFC 9651).
type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// entry parses one list member: a name and its parameters.
func (p *sfParser) entry(reqKey, optKey string) (sfEntry, bool) {
	var e sfEntry
	if p.eof() {
		return e, false
	}
	var ok bool
	switch c := p.s[p.i]; {
	case c == '"':
		e.name, ok = p.str()
	case isAlpha(c) || c == '*':
		e.name, ok = p.token(), true
	}
	if !ok {
		return e, false
	}
	hasReq := false
	for n := 0; !p.eof() && p.s[p.i] == ';'; n++ {
		if n == maxSFParams {
			return e, false
		}
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return e, false
		}
		isInt, val := false, int64(0)
		if !p.eof() && p.s[p.i] == '=' {
			p.i++
			if isInt, val, ok = p.bareItem(); !ok {
				return e, false
			}
		} // else the value is Boolean true.
		switch key {
		case reqKey, optKey:
			if !isInt || val < 0 {
				return e, false
			}
			if key == reqKey {
				e.req, hasReq = val, true
			} else {
				e.opt, e.hasOpt = val, true
			}
		}
	}
	return e, hasReq
}

// key parses a parameter key: ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" /
// "-" / "." / "*" ).
func (p *sfParser) key() (string, bool) {
	start := p.i
	if p.eof() || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", false
	}
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

// bareItem parses and validates a parameter value; isInt reports an Integer,
// whose value is n.
func (p *sfParser) bareItem() (isInt bool, n int64, ok bool) {
	if p.eof() {
		return false, 0, false
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		_, ok = p.str()
		return false, 0, ok
	case isAlpha(c) || c == '*':
		p.token()
		return false, 0, true
	case c == ':':
		return false, 0, p.byteSeq()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return false, 0, true
		}
		return false, 0, false
	case c == '@':
		p.i++
		if p.eof() || !(p.s[p.i] == '-' || isDigit(p.s[p.i])) {
			return false, 0, false
		}
		isInt, _, ok = p.number()
		return false, 0, ok && isInt
	case c == '%':
		return false, 0, p.displayString()
	}
	return false, 0, false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fractional digits).
func (p *sfParser) number() (isInt bool, n int64, ok bool) {
	neg := false
	if p.s[p.i] == '-' {
		neg = true
		p.i++
	}
	if p.eof() || !isDigit(p.s[p.i]) {
		return false, 0, false
	}
	start, dot := p.i, -1
scan:
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case isDigit(c):
			if dot < 0 {
				n = n*10 + int64(c-'0')
			}
		case c == '.' && dot < 0:
			if p.i-start > 12 {
				return false, 0, false
			}
			dot = p.i
		default:
			break scan
		}
		p.i++
		if dot < 0 && p.i-start > 15 || dot >= 0 && p.i-start > 16 {
			return false, 0, false
		}
	}
	if dot >= 0 {
		if fd := p.i - dot - 1; fd < 1 || fd > 3 {
			return false, 0, false
		}
		return false, 0, true
	}
	if neg {
		n = -n
	}
	return true, n, true
}

// str parses an sf-string and returns it unescaped.
func (p *sfParser) str() (string, bool) {
	p.i++ // opening DQUOTE
	start := p.i
	var b []byte // the unescaped string, once an escape is seen
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || (p.s[p.i+1] != '"' && p.s[p.i+1] != '\\') {
				return "", false
			}
			if b == nil {
				b = append(make([]byte, 0, len(p.s)-start), p.s[start:p.i]...)
			}
			b = append(b, p.s[p.i+1])
			p.i += 2
			continue
		case c == '"':
			p.i++
			if b != nil {
				return string(b), true
			}
			return p.s[start : p.i-1], true
		case c < 0x20 || c > 0x7e:
			return "", false
		}
		if b != nil {
			b = append(b, c)
		}
		p.i++
	}
	return "", false // unterminated
}

// token parses a Token; the first character has been checked.
func (p *sfParser) token() string {
	start := p.i
	p.i++
	for !p.eof() && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return p.s[start:p.i]
}

// byteSeq validates a Byte Sequence: ":" base64 ":".
func (p *sfParser) byteSeq() bool {
	p.i++ // opening colon
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == ':':
			return true
		case isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=':
		default:
			return false
		}
	}
	return false
}

// displayString validates a Display String: %"..." with lowercase %xx
// escapes decoding to valid UTF-8.
func (p *sfParser) displayString() bool {
	p.i++ // '%'
	if p.eof() || p.s[p.i] != '"' {
		return false
	}
	p.i++
	var b []byte
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '%':
			if p.i+2 >= len(p.s) {
				return false
			}
			hi, ok1 := lowerHex(p.s[p.i+1])
			lo, ok2 := lowerHex(p.s[p.i+2])
			if !ok1 || !ok2 {
				return false
			}
			b = append(b, hi<<4|lo)
			p.i += 3
			continue
		case c == '"':
			p.i++
			return utf8.Valid(b)
		case c < 0x20 || c > 0x7e:
			return false
		}
		b = append(b, c)
		p.i++
	}
	return false
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isAlpha(c byte) bool   { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }

// isTChar reports a tchar (RFC 9110 section 5.6.2).
func isTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

package robots

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// MaxSize is how much of a robots.txt is read: 500 KiB (RFC 9309 says
// parsers must read at least 500 KiB). Parse reads no more than this and
// ParseBytes looks at no more than this; what lies beyond is ignored.
const MaxSize = 500 << 10

const (
	// maxRules caps the number of allow/disallow rules kept from one file.
	maxRules = 100_000
	// maxPathLen caps the length of the normalised URL path that is matched
	// against rules; longer paths are truncated.
	maxPathLen = 8 << 10
	// maxDelaySeconds clamps Crawl-delay and Request-rate intervals so that
	// they can never overflow time.Duration. Callers are expected to apply a
	// much lower cap of their own.
	maxDelaySeconds = 1e6
)

// Robots is a parsed robots.txt: its user-agent groups with their Allow and
// Disallow rules, Crawl-delay and Request-rate. Make one with Parse or
// ParseBytes.
//
// The zero value and a nil *Robots are valid: they allow everything and
// have no delays, as a site without a robots.txt does. A Robots is never
// modified after parsing, so it is safe for concurrent use by any number
// of goroutines.
type Robots struct {
	groups  []group
	byAgent map[string][]int // lower-cased product token -> group indices
	star    []int            // indices of the groups listing "*"
}

// HeapSize estimates the bytes of heap r keeps alive: each rule and its
// pattern, each group, each user-agent name. A cache of parsed files can
// bound its memory by the sum. It is 0 for a nil *Robots.
func (r *Robots) HeapSize() int64 {
	if r == nil {
		return 0
	}
	n := int64(64)
	for i := range r.groups {
		n += 64 + int64(len(r.groups[i].rules))*int64(unsafe.Sizeof(rule{}))
		for j := range r.groups[i].rules {
			n += int64(len(r.groups[i].rules[j].pattern))
		}
	}
	for k, v := range r.byAgent {
		n += 48 + int64(len(k)) + 8*int64(len(v))
	}
	return n + 8*int64(len(r.star))
}

// group is one user-agent group: the rules and delays that follow a run of
// user-agent lines.
type group struct {
	rules []rule // sorted by descending specificity, Allow before Disallow

	crawlDelay     time.Duration
	hasCrawlDelay  bool
	requestRate    time.Duration
	hasRequestRate bool
}

// rule is one Allow or Disallow line.
type rule struct {
	pattern  string // normalised pattern without a trailing '$'
	anchored bool   // pattern ended with '$'
	length   int    // specificity: octets of the normalised pattern incl. '$'
	allow    bool
}

// Parse reads at most MaxSize bytes from r and parses them as ParseBytes
// does. It never reads more than that, so an endless or very large body is
// fine. It returns an error only when reading fails (a read error other
// than io.EOF); malformed lines are skipped individually, never the whole
// file. On error the returned *Robots is nil (which allows everything).
func Parse(r io.Reader) (*Robots, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxSize))
	if err != nil {
		return nil, fmt.Errorf("robots: reading robots.txt: %w", err)
	}
	return ParseBytes(b), nil
}

// ParseBytes parses b; only the first MaxSize bytes are considered. When
// the input fills the whole MaxSize window, its last line is dropped unless
// it is terminated, because it may have been cut in the middle. It never
// fails: malformed lines are skipped individually, and an empty b gives a
// Robots that allows everything.
func ParseBytes(b []byte) *Robots {
	if len(b) >= MaxSize {
		b = b[:MaxSize]
		if i := bytes.LastIndexAny(b, "\r\n"); i >= 0 {
			b = b[:i+1]
		} else {
			b = nil
		}
	}
	b = bytes.TrimPrefix(b, []byte("\xEF\xBB\xBF"))

	p := parser{r: &Robots{}, cur: -1}
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		var line []byte
		if i < 0 {
			line, b = b, nil
		} else {
			line = b[:i]
			if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
			b = b[i+1:]
		}
		p.line(line)
	}
	p.finish()
	return p.r
}

// parser holds the state of one ParseBytes call.
type parser struct {
	r        *Robots
	cur      int  // index of the current group, -1 before any user-agent line
	inAgents bool // the previous significant line was a user-agent line
	nrules   int
}

type lineKey int

const (
	keyUnknown lineKey = iota
	keyUserAgent
	keyAllow
	keyDisallow
	keyCrawlDelay
	keyRequestRate
)

// robotsKeys maps lower-cased keys to their meaning. A few frequent misspellings
// are accepted as well.
var robotsKeys = map[string]lineKey{
	"user-agent":   keyUserAgent,
	"useragent":    keyUserAgent,
	"user agent":   keyUserAgent,
	"allow":        keyAllow,
	"disallow":     keyDisallow,
	"dissallow":    keyDisallow,
	"dissalow":     keyDisallow,
	"disalow":      keyDisallow,
	"crawl-delay":  keyCrawlDelay,
	"crawldelay":   keyCrawlDelay,
	"crawl delay":  keyCrawlDelay,
	"request-rate": keyRequestRate,
	"requestrate":  keyRequestRate,
	"request rate": keyRequestRate,
}

// maxKeyLen is the length of the longest key in robotsKeys.
const maxKeyLen = len("request-rate")

func (p *parser) line(line []byte) {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	k, v, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return
	}
	k = bytes.TrimSpace(k)
	if len(k) == 0 || len(k) > maxKeyLen {
		return
	}
	key := robotsKeys[asciiLower(string(k))]
	if key == keyUnknown {
		return // sitemap, host, ... and garbage: ignored, no effect on groups
	}
	val := string(bytes.TrimSpace(v))

	if key == keyUserAgent {
		if !p.inAgents {
			p.r.groups = append(p.r.groups, group{})
			p.cur = len(p.r.groups) - 1
			p.inAgents = true
		}
		p.addAgent(val)
		return
	}

	p.inAgents = false
	if p.cur < 0 {
		return // rules before the first user-agent line are ignored
	}
	g := &p.r.groups[p.cur]
	switch key {
	case keyAllow, keyDisallow:
		if val == "" || p.nrules >= maxRules {
			return // an empty value matches nothing
		}
		g.rules = append(g.rules, newRule(val, key == keyAllow))
		p.nrules++
	case keyCrawlDelay:
		if d, ok := parseCrawlDelay(val); ok && (!g.hasCrawlDelay || d > g.crawlDelay) {
			g.crawlDelay, g.hasCrawlDelay = d, true
		}
	case keyRequestRate:
		if d, ok := parseRequestRate(val); ok && (!g.hasRequestRate || d > g.requestRate) {
			g.requestRate, g.hasRequestRate = d, true
		}
	}
}

func (p *parser) addAgent(val string) {
	tok := asciiLower(ProductToken(val))
	if tok == "" {
		return
	}
	if tok == "*" {
		p.r.star = appendIndex(p.r.star, p.cur)
		return
	}
	if p.r.byAgent == nil {
		p.r.byAgent = make(map[string][]int)
	}
	p.r.byAgent[tok] = appendIndex(p.r.byAgent[tok], p.cur)
}

// appendIndex appends i unless it is already the last element, so that a
// group naming the same agent twice is not consulted twice.
func appendIndex(s []int, i int) []int {
	if len(s) > 0 && s[len(s)-1] == i {
		return s
	}
	return append(s, i)
}

func (p *parser) finish() {
	for i := range p.r.groups {
		slices.SortStableFunc(p.r.groups[i].rules, func(a, b rule) int {
			if a.length != b.length {
				return b.length - a.length
			}
			if a.allow != b.allow {
				if a.allow {
					return -1
				}
				return 1
			}
			return 0
		})
	}
}

func newRule(val string, allow bool) rule {
	if val[0] != '/' && val[0] != '*' {
		// Paths always start with '/'; be lenient with "Disallow: foo".
		val = "/" + val
	}
	pat := normalizePattern(val)
	r := rule{length: len(pat), allow: allow}
	if strings.HasSuffix(pat, "$") {
		pat = pat[:len(pat)-1]
		r.anchored = true
	}
	r.pattern = pat
	return r
}

// normalizePattern percent-normalises a rule value (see normalizeEscapes)
// and collapses runs of '*', which are equivalent to a single '*'.
func normalizePattern(s string) string {
	s = normalizeEscapes(s)
	if !strings.Contains(s, "**") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '*' && i > 0 && s[i-1] == '*' {
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// normalizeEscapes brings s into a canonical percent-encoded form so that
// equivalent paths compare equal byte-wise:
//   - %XX of an unreserved character (ALPHA, DIGIT, '-', '.', '_', '~') is
//     decoded; any other valid %XX is kept with upper-case hex digits;
//   - a '%' not followed by two hex digits is encoded as %25;
//   - bytes outside printable ASCII (controls, space, DEL and all non-ASCII
//     bytes) are encoded as %XX with upper-case hex digits.
func normalizeEscapes(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || c <= ' ' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+len(s)/2)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
				v := unhex(s[i+1])<<4 | unhex(s[i+2])
				if isUnreserved(v) {
					b = append(b, v)
				} else {
					b = append(b, '%', hexDigits[v>>4], hexDigits[v&15])
				}
				i += 2
			} else {
				b = append(b, "%25"...)
			}
		case c <= ' ' || c >= 0x7f:
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// asciiLower lower-cases ASCII letters only.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// ProductToken returns the product token of a User-Agent header value: the
// part before the first '/' or whitespace, e.g. "MyBot/2.1 (+https://x)" ->
// "MyBot". Leading whitespace is skipped. It is empty for empty input.
func ProductToken(userAgent string) string {
	s := strings.TrimLeft(userAgent, " \t\r\n\v\f")
	if i := strings.IndexAny(s, "/ \t\r\n\v\f"); i >= 0 {
		s = s[:i]
	}
	return s
}

// matching returns the indices of the groups that apply to agent: the groups
// naming its product token, else the "*" groups.
func (r *Robots) matching(agent string) []int {
	if r == nil {
		return nil
	}
	if tok := asciiLower(ProductToken(agent)); tok != "" && tok != "*" {
		if idx := r.byAgent[tok]; len(idx) > 0 {
			return idx
		}
	}
	return r.star
}

// CrawlDelay returns the Crawl-delay of the group that applies to agent
// (agent may be a full User-Agent string or a product token; it is reduced
// with ProductToken). When several groups apply, the largest value wins.
// Values are clamped to 1e6 seconds. ok=false when none is given or the
// value is invalid. The "*" group is not consulted when a group names agent.
func (r *Robots) CrawlDelay(agent string) (time.Duration, bool) {
	var d time.Duration
	var ok bool
	for _, i := range r.matching(agent) {
		if g := &r.groups[i]; g.hasCrawlDelay && (!ok || g.crawlDelay > d) {
			d, ok = g.crawlDelay, true
		}
	}
	return d, ok
}

// RequestRate returns the interval between requests implied by a
// Request-rate line ("n/m" with optional unit s, m or h after m, e.g. "1/5",
// "1/5s", "3/1m", "100/1h": one request per m/n seconds, m in the unit) of
// the group that applies to agent. A trailing time window such as
// "1/10s 0600-0845" is ignored. When several groups apply, the largest
// interval wins; values are clamped to 1e6 seconds. ok=false when none is
// given or it is invalid.
func (r *Robots) RequestRate(agent string) (time.Duration, bool) {
	var d time.Duration
	var ok bool
	for _, i := range r.matching(agent) {
		if g := &r.groups[i]; g.hasRequestRate && (!ok || g.requestRate > d) {
			d, ok = g.requestRate, true
		}
	}
	return d, ok
}

// Delay returns the larger of CrawlDelay and RequestRate for agent, ok=false
// if neither is valid.
func (r *Robots) Delay(agent string) (time.Duration, bool) {
	cd, ok1 := r.CrawlDelay(agent)
	rr, ok2 := r.RequestRate(agent)
	switch {
	case ok1 && ok2:
		return max(cd, rr), true
	case ok1:
		return cd, true
	case ok2:
		return rr, true
	}
	return 0, false
}

// Allowed reports whether agent may fetch the URL path (path plus optional
// query, e.g. "/a/b?x=1"; a fragment is ignored). Per RFC 9309 the longest
// matching rule wins and Allow wins a tie; '*' matches any sequence and a
// trailing '$' anchors the end. Percent-encoding is normalised on both sides
// (%XX of unreserved characters decoded, hex digits upper-cased, raw
// non-ASCII bytes encoded as %XX), so "/%7Efoo" and "/~foo" match.
// "/robots.txt" is always allowed and an empty Disallow value matches
// nothing. Paths are matched on their first 8 KiB after normalisation.
func (r *Robots) Allowed(agent, path string) bool {
	idx := r.matching(agent)
	if len(idx) == 0 {
		return true
	}
	path = normalizePath(path)
	if p, _, _ := strings.Cut(path, "?"); p == "/robots.txt" {
		return true
	}

	bestLen, bestAllow := -1, true
	for _, i := range idx {
		for _, ru := range r.groups[i].rules {
			if ru.length < bestLen || ru.length == bestLen && (bestAllow || !ru.allow) {
				break // rules are sorted: nothing better follows in this group
			}
			if ru.matches(path) {
				bestLen, bestAllow = ru.length, ru.allow
				break
			}
		}
	}
	return bestAllow
}

// normalizePath prepares a URL path for matching: it drops a fragment,
// makes sure the path starts with '/', normalises percent-encoding and
// truncates the result to maxPathLen bytes.
func normalizePath(path string) string {
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	if len(path) > 3*maxPathLen+2 {
		// Every input byte or %XX triplet yields at least one output byte,
		// so this prefix still normalises to at least maxPathLen bytes.
		path = path[:3*maxPathLen+2]
	}
	path = normalizeEscapes(path)
	if len(path) > maxPathLen {
		path = path[:maxPathLen]
	}
	return path
}

// matches reports whether the rule matches the normalised path s. Without
// an anchor a pattern only has to match a prefix of s. '*' segments are
// located greedily from the left with strings.Index, which is correct for
// patterns whose only metacharacter is '*' and runs in time linear-ish in
// len(s)+len(pattern), with no backtracking.
func (ru *rule) matches(s string) bool {
	pat := ru.pattern
	i := strings.IndexByte(pat, '*')
	if i < 0 {
		if ru.anchored {
			return s == pat
		}
		return strings.HasPrefix(s, pat)
	}
	if !strings.HasPrefix(s, pat[:i]) {
		return false
	}
	s, pat = s[i:], pat[i+1:]
	for {
		j := strings.IndexByte(pat, '*')
		if j < 0 {
			break
		}
		seg := pat[:j]
		pat = pat[j+1:]
		k := strings.Index(s, seg)
		if k < 0 {
			return false
		}
		s = s[k+len(seg):]
	}
	if ru.anchored {
		return strings.HasSuffix(s, pat)
	}
	return strings.Contains(s, pat)
}

// parseCrawlDelay parses a Crawl-delay value: non-negative decimal seconds.
func parseCrawlDelay(v string) (time.Duration, bool) {
	sec, ok := parseDecimal(v)
	if !ok {
		return 0, false
	}
	return secondsToDuration(sec), true
}

// parseRequestRate parses a Request-rate value "n/m[unit]" (unit s, m or h,
// default s), optionally followed by a time window, into the interval
// m*unit/n.
func parseRequestRate(v string) (time.Duration, bool) {
	fields := strings.Fields(v)
	if len(fields) > 1 && isTimeWindow(fields[len(fields)-1]) {
		fields = fields[:len(fields)-1]
	}
	v = strings.Join(fields, "")
	ns, ms, ok := strings.Cut(v, "/")
	if !ok {
		return 0, false
	}
	unit := 1.0
	if ms != "" {
		switch ms[len(ms)-1] {
		case 's', 'S':
			ms = ms[:len(ms)-1]
		case 'm', 'M':
			unit, ms = 60, ms[:len(ms)-1]
		case 'h', 'H':
			unit, ms = 3600, ms[:len(ms)-1]
		}
	}
	n, ok1 := parseDecimal(ns)
	m, ok2 := parseDecimal(ms)
	if !ok1 || !ok2 || n <= 0 || m <= 0 {
		return 0, false
	}
	sec := m * unit / n
	if math.IsNaN(sec) {
		return 0, false // Inf/Inf
	}
	return secondsToDuration(sec), true
}

// isTimeWindow reports whether s looks like "HHMM-HHMM".
func isTimeWindow(s string) bool {
	a, b, ok := strings.Cut(s, "-")
	return ok && isDigits(a) && isDigits(b)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseDecimal parses a plain non-negative decimal number ("10", "0.5",
// ".5", "2."). Signs, exponents, hex, "Inf" and "NaN" are rejected. Numbers
// too large for float64 yield +Inf.
func parseDecimal(s string) (float64, bool) {
	ip, fp, _ := strings.Cut(s, ".")
	if ip == "" && fp == "" || ip != "" && !isDigits(ip) || fp != "" && !isDigits(fp) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if math.IsNaN(f) || f < 0 {
		return 0, false
	}
	return f, true
}

// secondsToDuration converts non-negative seconds to a Duration, clamping to
// maxDelaySeconds.
func secondsToDuration(sec float64) time.Duration {
	sec = min(sec, maxDelaySeconds)
	return time.Duration(math.Round(sec * float64(time.Second)))
}

package ratelimit

import (
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rlNow is the injected clock of these tests: 2023-11-14 22:13:20 UTC.
var rlNow = time.Unix(1_700_000_000, 0).UTC()

func TestParseRetryAfter(t *testing.T) {
	// now is 30 s before the date used in all three formats.
	dateNow := time.Date(1994, time.November, 6, 8, 49, 7, 0, time.UTC)
	tests := []struct {
		name string
		v    string
		now  time.Time
		want time.Duration
		ok   bool
	}{
		{"seconds", "120", rlNow, 120 * time.Second, true},
		{"surrounding whitespace", " 120 ", rlNow, 120 * time.Second, true},
		{"tabs", "\t7\t", rlNow, 7 * time.Second, true},
		{"zero", "0", rlNow, 0, true},
		{"leading zeros", "007", rlNow, 7 * time.Second, true},
		{"exactly max", strconv.FormatInt(maxWaitSeconds, 10), rlNow, MaxWait, true},
		{"just over max", strconv.FormatInt(maxWaitSeconds+1, 10), rlNow, MaxWait, true},
		{"huge clamps", "99999999999999999999", rlNow, MaxWait, true},
		{"very huge clamps", strings.Repeat("9", 1000), rlNow, MaxWait, true},
		{"negative", "-5", rlNow, 0, false},
		{"decimal", "1.5", rlNow, 0, false},
		{"plus sign", "+5", rlNow, 0, false},
		{"exponent", "1e400", rlNow, 0, false},
		{"inner space", "1 2", rlNow, 0, false},
		{"unit", "5s", rlNow, 0, false},
		{"empty", "", rlNow, 0, false},
		{"blank", "   ", rlNow, 0, false},
		{"non-ASCII digit", "１２", rlNow, 0, false},
		{"garbage", "soon", rlNow, 0, false},
		{"IMF-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", dateNow, 30 * time.Second, true},
		{"RFC 850", "Sunday, 06-Nov-94 08:49:37 GMT", dateNow, 30 * time.Second, true},
		{"asctime", "Sun Nov  6 08:49:37 1994", dateNow, 30 * time.Second, true},
		{"date with whitespace", "  Sun, 06 Nov 1994 08:49:37 GMT ", dateNow, 30 * time.Second, true},
		{"date equal to now", "Sun, 06 Nov 1994 08:49:07 GMT", dateNow, 0, true},
		{"past date", "Sun, 06 Nov 1994 08:49:37 GMT", rlNow, 0, true},
		{"year 9999 clamps", "Fri, 31 Dec 9999 23:59:59 GMT", rlNow, MaxWait, true},
		{"bad date", "Sun, 32 Nov 1994 08:49:37 GMT", dateNow, 0, false},
		{"ISO date", "1994-11-06T08:49:37Z", dateNow, 0, false},
		{"long garbage", "Sun, " + strings.Repeat("x", 10000), dateNow, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.v, tt.now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q) = (%v, %v), want (%v, %v)", tt.v, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseRateLimitReset(t *testing.T) {
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{" 30 ", 30 * time.Second, true},
		{"0", 0, true},
		{"99999999999999999999", MaxWait, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"+1", 0, false},
		{"", 0, false},
		{"abc", 0, false},
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRateLimitReset(tt.v)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRateLimitReset(%q) = (%v, %v), want (%v, %v)", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

// paramList returns a RateLimit item with r=1 and then n-1 more parameters.
func paramList(n int) string {
	var b strings.Builder
	b.WriteString(`"default";r=1`)
	for i := 1; i < n; i++ {
		b.WriteString(";p")
		b.WriteString(strconv.Itoa(i))
		b.WriteString("=1")
	}
	return b.String()
}

// itemList returns a RateLimit field of n items.
func itemList(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = `"p` + strconv.Itoa(i) + `";r=` + strconv.Itoa(i)
	}
	return strings.Join(items, ", ")
}

func TestParseRateLimit(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want []Item // nil means malformed
	}{
		{"quoted name", `"default";r=50;t=30`, []Item{{"default", 50, 30 * time.Second, true}}},
		{"token name", `default;r=50;t=30`, []Item{{"default", 50, 30 * time.Second, true}}},
		{"token with colon and slash", `a:b/c*d;r=1`, []Item{{"a:b/c*d", 1, 0, false}}},
		{"missing t", `"default";r=50`, []Item{{"default", 50, 0, false}}},
		{"r=0", `"default";r=0;t=5`, []Item{{"default", 0, 5 * time.Second, true}}},
		{"t=0", `"default";r=3;t=0`, []Item{{"default", 3, 0, true}}},
		{"t before r", `"default";t=9;r=3`, []Item{{"default", 3, 9 * time.Second, true}}},
		{"multiple items", `"a";r=5;t=10, "b";r=0;t=60,c;r=7`, []Item{
			{"a", 5, 10 * time.Second, true}, {"b", 0, 60 * time.Second, true}, {"c", 7, 0, false}}},
		{"whitespace", " \t\"a\";r=1 ,\t\"b\";  r=2 ", []Item{{"a", 1, 0, false}, {"b", 2, 0, false}}},
		{"escapes", `"de\"f\\";r=1`, []Item{{`de"f\`, 1, 0, false}}},
		{"empty name", `"";r=1`, []Item{{"", 1, 0, false}}},
		{"duplicate parameter: last wins", `"a";r=1;t=2;r=3;t=4`, []Item{{"a", 3, 4 * time.Second, true}}},
		{"unknown parameters ignored", `"a";r=1;t=2;pk=:cHJvamVjdDEyMw==:;qu="requests";x;y=?1;z=@1700000000;d=%"caf%c3%a9";e=-1.5;f=tok;*g=1`,
			[]Item{{"a", 1, 2 * time.Second, true}}},
		{"15-digit r", `"a";r=999999999999999`, []Item{{"a", 999999999999999, 0, false}}},
		{"huge t clamps", `"a";r=1;t=999999999999999`, []Item{{"a", 1, MaxWait, true}}},
		{"64 items", itemList(64), func() []Item {
			items := make([]Item, 64)
			for i := range items {
				items[i] = Item{Policy: "p" + strconv.Itoa(i), Remaining: int64(i)}
			}
			return items
		}()},
		{"64 parameters", paramList(64), []Item{{"default", 1, 0, false}}},

		{"r=-1", `"a";r=-1`, nil},
		{"t=-1", `"a";r=1;t=-1`, nil},
		{"r=abc", `"a";r=abc`, nil},
		{"r decimal", `"a";r=1.5`, nil},
		{"t decimal", `"a";r=1;t=1.0`, nil},
		{"r string", `"a";r="1"`, nil},
		{"r boolean", `"a";r`, nil},
		{"r 16 digits", `"a";r=1234567890123456`, nil},
		{"missing r", `"a";t=5`, nil},
		{"one item missing r", `"a";r=1, "b";t=5`, nil},
		{"no parameters", `"a"`, nil},
		{"unterminated quote", `"a;r=1`, nil},
		{"bad escape", `"a\q";r=1`, nil},
		{"non-ASCII in string", "\"caf\u00e9\";r=1", nil},
		{"control in string", "\"a\x01\";r=1", nil},
		{"trailing semicolon", `"a";r=1;`, nil},
		{"trailing comma", `"a";r=1,`, nil},
		{"leading comma", `,"a";r=1`, nil},
		{"empty item", `"a";r=1,,"b";r=2`, nil},
		{"blank item", `"a";r=1, ,"b";r=2`, nil},
		{"empty field", ``, nil},
		{"blank field", `   `, nil},
		{"space before semicolon", `"a" ;r=1`, nil},
		{"space around equals", `"a";r = 1`, nil},
		{"uppercase key", `"a";R=1`, nil},
		{"integer name", `1;r=1`, nil},
		{"inner list name", `("a");r=1`, nil},
		{"missing separator", `"a";r=1 "b";r=2`, nil},
		{"empty value", `"a";r=1;x=`, nil},
		{"bad byte sequence", `"a";r=1;x=:ab c:`, nil},
		{"unterminated byte sequence", `"a";r=1;x=:abc`, nil},
		{"uppercase display hex", `"a";r=1;x=%"%C3%A9"`, nil},
		{"invalid UTF-8 display string", `"a";r=1;x=%"%ff"`, nil},
		{"bad boolean", `"a";r=1;x=?2`, nil},
		{"decimal date", `"a";r=1;x=@1.5`, nil},
		{"decimal with 4 fraction digits", `"a";r=1;x=1.2345`, nil},
		{"decimal with 13 integer digits", `"a";r=1;x=1234567890123.1`, nil},
		{"dictionary form of old drafts", `limit=100, remaining=50, reset=50`, nil},
		{"65 items", itemList(65), nil},
		{"65 parameters", paramList(65), nil},
		{"10000 parameters", paramList(10000), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRateLimit(tt.v)
			if ok != (tt.want != nil) || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseRateLimit(%.80q) = (%v, %v), want %v", tt.v, got, ok, tt.want)
			}
		})
	}
}

func TestParseRateLimitPolicy(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want []PolicyItem // nil means malformed
	}{
		{"quoted name", `"default";q=100;w=60`, []PolicyItem{{"default", 100, time.Minute, true}}},
		{"token name", `default;q=100;w=60`, []PolicyItem{{"default", 100, time.Minute, true}}},
		{"missing w", `"default";q=100`, []PolicyItem{{"default", 100, 0, false}}},
		{"q=0", `"default";q=0;w=1`, []PolicyItem{{"default", 0, time.Second, true}}},
		{"multiple items", `"burst";q=10;w=1, "daily";q=5000;w=86400;qu="requests"`, []PolicyItem{
			{"burst", 10, time.Second, true}, {"daily", 5000, 24 * time.Hour, true}}},
		{"31-day window not capped", `"monthly";q=1;w=2678400`, []PolicyItem{{"monthly", 1, 31 * 24 * time.Hour, true}}},
		{"huge window saturates", `"a";q=1;w=999999999999999`, []PolicyItem{{"a", 1, time.Duration(math.MaxInt64), true}}},
		{"r is not q", `"a";r=1`, nil},
		{"missing q", `"a";w=60`, nil},
		{"q=-1", `"a";q=-1`, nil},
		{"q decimal", `"a";q=1.5`, nil},
		{"w decimal", `"a";q=1;w=1.5`, nil},
		{"unterminated quote", `"a;q=1`, nil},
		{"trailing semicolon", `"a";q=1;`, nil},
		{"empty item", `"a";q=1,,"b";q=1`, nil},
		{"65 items", strings.Repeat(`a;q=1,`, 64) + `a;q=1`, nil},
		{"10000 parameters", `a;q=1` + strings.Repeat(";x=1", 9999), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRateLimitPolicy(tt.v)
			if ok != (tt.want != nil) || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseRateLimitPolicy(%.80q) = (%v, %v), want %v", tt.v, got, ok, tt.want)
			}
		})
	}
}

// TestParseRateLimitBoundedWork checks that huge fields are rejected after
// looking at a bounded prefix, so the work does not grow with their size.
func TestParseRateLimitBoundedWork(t *testing.T) {
	huge := []string{
		paramList(10_000),
		paramList(1_000_000),
		itemList(100_000),
		strings.Repeat(`a;r=1,`, 1_000_000) + `a;r=1`,
		`a;r=1` + strings.Repeat(";x", 1_000_000),
	}
	for _, v := range huge {
		for _, keys := range [][2]string{{"r", "t"}, {"q", "w"}} {
			p := sfParser{s: v}
			if entries, ok := p.intList(keys[0], keys[1]); ok || entries != nil {
				t.Fatalf("intList(%.40q..., %q) = (%d entries, %v), want failure", v, keys, len(entries), ok)
			}
			// 65 items of up to 16 bytes, or 65 parameters of up to 8 bytes.
			if p.i > 2000 {
				t.Errorf("intList(%.40q..., %q) looked at %d of %d bytes", v, keys, p.i, len(v))
			}
		}
		// The exported parsers are intList behind trimOWS, with at most
		// 64 entries to copy: the bytes intList looked at bound their work.
		items, ok := ParseRateLimit(v)
		pols, pok := ParseRateLimitPolicy(v)
		if ok || items != nil || pok || pols != nil {
			t.Errorf("huge field %.40q... accepted", v)
		}
	}
	// A long but valid name is parsed in linear time.
	name := strings.Repeat(`\"`, 1<<20)
	items, ok := ParseRateLimit(`"` + name + `";r=1`)
	if !ok || len(items) != 1 || items[0].Policy != strings.Repeat(`"`, 1<<20) {
		t.Errorf("long escaped name: ok=%v len=%d", ok, len(items))
	}
}

func TestParseXRateLimitReset(t *testing.T) {
	tests := []struct {
		name string
		v    string
		want time.Duration
		ok   bool
	}{
		{"delta", "30", 30 * time.Second, true},
		{"delta whitespace", " 30\t", 30 * time.Second, true},
		{"delta zero", "0", 0, true},
		{"delta decimal", "1.5", 1500 * time.Millisecond, true},
		{"delta fine decimal", "0.000000001", time.Nanosecond, true},
		{"delta decimal beyond ns", "0.0000000019", time.Nanosecond, true},
		{"largest delta clamps", "999999999", MaxWait, true},
		{"largest delta with fraction clamps", "999999999.999", MaxWait, true},
		{"epoch seconds", "1700000060", time.Minute, true},
		{"epoch seconds decimal", "1700000000.250", 250 * time.Millisecond, true},
		{"epoch seconds now", "1700000000", 0, true},
		{"past epoch seconds", "1699999999", 0, true},
		{"1e9 is epoch seconds (2001)", "1000000000", 0, true},
		{"far epoch seconds clamp", "999999999999", MaxWait, true},
		{"epoch ms", "1700000060000", time.Minute, true},
		{"epoch ms partial second", "1700000000500", 500 * time.Millisecond, true},
		{"epoch ms decimal", "1700000000000.5", 500 * time.Microsecond, true},
		{"1e12 is epoch ms (2001)", "1000000000000", 0, true},
		{"past epoch ms", "1699999999999", 0, true},
		{"huge clamps", "99999999999999999999999999", MaxWait, true},
		{"huge decimal clamps", "99999999999999999999999999.5", MaxWait, true},
		{"negative", "-5", 0, false},
		{"negative epoch", "-1700000000", 0, false},
		{"plus", "+5", 0, false},
		{"exponent", "1e3", 0, false},
		{"trailing dot", "1.", 0, false},
		{"leading dot", ".5", 0, false},
		{"two dots", "1.2.3", 0, false},
		{"empty", "", 0, false},
		{"garbage", "soon", 0, false},
		{"date", "Sun, 06 Nov 1994 08:49:37 GMT", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseXRateLimitReset(tt.v, rlNow)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseXRateLimitReset(%q) = (%v, %v), want (%v, %v)", tt.v, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want Wait
	}{
		{"nil header", nil, Wait{Remaining: -1}},
		{"empty header", http.Header{}, Wait{Remaining: -1}},
		{"unrelated headers", http.Header{"Content-Type": {"text/html"}}, Wait{Remaining: -1}},
		{"429: Retry-After 30 and X-RateLimit-Reset 60", http.Header{
			"Retry-After":       {"30"},
			"X-Ratelimit-Reset": {"60"},
		}, Wait{Duration: time.Minute, Present: true, Remaining: -1}},
		{"larger Retry-After wins", http.Header{
			"Retry-After":       {"90"},
			"X-Ratelimit-Reset": {"60"},
		}, Wait{Duration: 90 * time.Second, Present: true, Remaining: -1}},
		{"200: remaining 0 and reset 10", http.Header{
			"X-Ratelimit-Remaining": {"0"},
			"X-Ratelimit-Reset":     {"10"},
		}, Wait{Duration: 10 * time.Second, Present: true, Exhausted: true, Remaining: 0}},
		{"200: remaining 5 and reset 10", http.Header{
			"X-Ratelimit-Remaining": {"5"},
			"X-Ratelimit-Reset":     {"10"},
		}, Wait{Duration: 10 * time.Second, Present: true, Remaining: 5}},
		{"remaining without reset", http.Header{
			"X-Ratelimit-Remaining": {"0"},
		}, Wait{Exhausted: true, Remaining: 0}},
		{"epoch reset", http.Header{
			"X-Ratelimit-Reset": {"1700000045"},
		}, Wait{Duration: 45 * time.Second, Present: true, Remaining: -1}},
		{"malformed RateLimit, valid Retry-After", http.Header{
			"Ratelimit":   {`"default";r=-1;t=600`},
			"Retry-After": {"30"},
		}, Wait{Duration: 30 * time.Second, Present: true, Remaining: -1}},
		{"malformed Retry-After, valid X-RateLimit-Reset", http.Header{
			"Retry-After":       {"1.5"},
			"X-Ratelimit-Reset": {"20"},
		}, Wait{Duration: 20 * time.Second, Present: true, Remaining: -1}},
		{"Retry-After 0", http.Header{"Retry-After": {"0"}}, Wait{Present: true, Remaining: -1}},
		{"Retry-After date", http.Header{"Retry-After": {"Tue, 14 Nov 2023 22:15:20 GMT"}},
			Wait{Duration: 2 * time.Minute, Present: true, Remaining: -1}},
		{"RateLimit items", http.Header{"Ratelimit": {`"a";r=5;t=10, "b";r=2;t=60, "c";r=9`}},
			Wait{Duration: time.Minute, Present: true, Remaining: 2}},
		{"RateLimit exhausted", http.Header{"Ratelimit": {`"default";r=0;t=30`}},
			Wait{Duration: 30 * time.Second, Present: true, Exhausted: true, Remaining: 0}},
		{"RateLimit without t", http.Header{"Ratelimit": {`"default";r=0`}},
			Wait{Exhausted: true, Remaining: 0}},
		{"RateLimit-Policy gives no wait, a rate", http.Header{"Ratelimit-Policy": {`"default";q=100;w=60`}},
			Wait{Remaining: -1, Rate: 100.0 / 60, Policy: true}},
		{"the lowest policy rate", http.Header{"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`}},
			Wait{Remaining: -1, Rate: 1000.0 / 86400, Policy: true}},
		{"policy beats a limit over its reset", http.Header{"Ratelimit-Policy": {`"default";q=100;w=60`},
			"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Reset": {"1"}},
			Wait{Duration: time.Second, Present: true, Remaining: -1, Rate: 100.0 / 60, Policy: true}},
		{"httprate: a limit over its reset, whole seconds", http.Header{"X-Ratelimit-Limit": {"10"},
			"X-Ratelimit-Remaining": {"9"}, "X-Ratelimit-Reset": {"1"}},
			Wait{Duration: time.Second, Present: true, Remaining: 9, Rate: 10}},
		{"a limit without a reset states no rate", http.Header{"X-Ratelimit-Limit": {"10"}},
			Wait{Remaining: -1}},
		{"older drafts", http.Header{
			"Ratelimit-Limit":     {"100"},
			"Ratelimit-Remaining": {"0"},
			"Ratelimit-Reset":     {"15"},
		}, Wait{Duration: 15 * time.Second, Present: true, Exhausted: true, Remaining: 0, Rate: 100.0 / 15}},
		{"X-Rate-Limit spelling", http.Header{
			"X-Rate-Limit-Remaining": {"3"},
			"X-Rate-Limit-Reset":     {"12"},
		}, Wait{Duration: 12 * time.Second, Present: true, Remaining: 3}},
		{"smallest remaining wins", http.Header{
			"Ratelimit":             {`"a";r=7`},
			"Ratelimit-Remaining":   {"4"},
			"X-Ratelimit-Remaining": {"9"},
		}, Wait{Remaining: 4}},
		{"malformed remaining ignored", http.Header{
			"X-Ratelimit-Remaining": {"-1"},
			"Ratelimit-Remaining":   {"zero"},
		}, Wait{Remaining: -1}},
		{"hand-built keys", http.Header{
			"RateLimit":         {`"default";r=1;t=5`},
			"X-RateLimit-Reset": {"8"},
		}, Wait{Duration: 8 * time.Second, Present: true, Remaining: 1}},
		{"only the first value", http.Header{"Retry-After": {"10", "100"}},
			Wait{Duration: 10 * time.Second, Present: true, Remaining: -1}},
		{"huge waits clamp", http.Header{
			"Retry-After":       {"99999999999999999999"},
			"X-Ratelimit-Reset": {"99999999999999999999"},
		}, Wait{Duration: MaxWait, Present: true, Remaining: -1}},
		{"value over 4 KiB ignored", http.Header{
			"Retry-After":       {strings.Repeat(" ", 4096) + "50"},
			"X-Ratelimit-Reset": {strings.Repeat(" ", 4094) + "40"},
		}, Wait{Duration: 40 * time.Second, Present: true, Remaining: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Parse(tt.h, rlNow); got != tt.want {
				t.Errorf("Parse() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// checkWait fails t unless d is a valid result of a wait parser.
func checkWait(t *testing.T, what string, d time.Duration, ok bool) {
	t.Helper()
	if d < 0 || d > MaxWait {
		t.Fatalf("%s: wait %v out of [0, %v]", what, d, MaxWait)
	}
	if !ok && d != 0 {
		t.Fatalf("%s: (%v, false), want 0 with false", what, d)
	}
}

// allDigits reports whether s is a non-empty string of ASCII digits.
func allDigits(s string) bool {
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

func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{
		"120", " 120 ", "0", "-5", "1.5", "+5", "99999999999999999999", "1e400", "",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Fri, 31 Dec 9999 23:59:59 GMT", "Sunday, 06-Nov-94 08:49:37 GMT+5", "garbage",
	} {
		f.Add(v, int64(784111777))
		f.Add(v, int64(1_700_000_000))
	}
	f.Add("Sun, 06 Nov 1994 08:49:37 GMT", int64(math.MinInt64))
	f.Add("Fri, 31 Dec 9999 23:59:59 GMT", int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, v string, nowSec int64) {
		if len(v) > 64<<10 {
			t.Skip() // bounded work per input; the caps are gone past below
		}
		d, ok := ParseRetryAfter(v, time.Unix(nowSec, 0))
		checkWait(t, "ParseRetryAfter", d, ok)
		s := strings.Trim(v, " \t")
		// Past the caps: however many digits, MaxWait; a date no
		// longer than the longest date format.
		if allDigits(s) {
			if d, ok := ParseRetryAfter(s+strings.Repeat("9", 40), time.Unix(nowSec, 0)); !ok || d != MaxWait {
				t.Fatalf("ParseRetryAfter(%q + 40 nines) = %v, %v; want %v", s, d, ok, MaxWait)
			}
		} else if ok {
			if len(s) > maxHTTPDateLen {
				t.Fatalf("ParseRetryAfter(%q) accepted a date of %d bytes", v, len(s))
			}
			mid := len(s) / 2
			if _, ok := ParseRetryAfter(s[:mid]+strings.Repeat(s[mid:mid+1], maxHTTPDateLen)+s[mid:], time.Unix(nowSec, 0)); ok {
				t.Fatalf("ParseRetryAfter(%q stretched past %d bytes) accepted", s, maxHTTPDateLen)
			}
		}
		if allDigits(s) {
			if !ok {
				t.Fatalf("ParseRetryAfter(%q) rejected delta-seconds", v)
			}
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n <= maxWaitSeconds && d != time.Duration(n)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %ds", v, d, n)
			}
		} else if ok {
			if _, err := http.ParseTime(s); err != nil {
				t.Fatalf("ParseRetryAfter(%q) accepted a value that is neither digits nor a date", v)
			}
		}
	})
}

// formatRateLimit serializes items as a RateLimit field value.
func formatRateLimit(items []Item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		p := strconv.Quote(it.Policy) + ";r=" + strconv.FormatInt(it.Remaining, 10)
		if it.HasReset {
			p += ";t=" + strconv.FormatInt(int64(it.Reset/time.Second), 10)
		}
		parts[i] = p
	}
	return strings.Join(parts, ", ")
}

func FuzzParseRateLimit(f *testing.F) {
	for _, v := range []string{
		`"default";r=50;t=30`, `default;r=50;t=30`, `"a";r=5;t=10, "b";r=0;t=60,c;r=7`,
		`"default";r=50`, `"a";r=-1`, `"a";r=abc`, `"a";t=5`, `"a;r=1`, `"a";r=1;`, `"a";r=1,`,
		`"de\"f\\";r=1`, `"a";r=1;t=999999999999999`, `"a";r=1.5`,
		`"a";r=1;t=2;pk=:cHJvamVjdDEyMw==:;qu="requests";x;y=?1;z=@1700000000;d=%"caf%c3%a9";e=-1.5`,
		`"default";q=100;w=60`, `"burst";q=10;w=1, "daily";q=5000;w=86400`, `"a";q=1;w=999999999999999`,
		`limit=100, remaining=50, reset=50`, paramList(70), itemList(70), "",
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 64<<10 {
			t.Skip() // bounded work per input; the caps are gone past below
		}
		items, ok := ParseRateLimit(v)
		if ok != (items != nil) || ok && (len(items) == 0 || len(items) > maxSFItems) {
			t.Fatalf("ParseRateLimit(%q) = (%d items, %v)", v, len(items), ok)
		}
		if ok {
			// Past the caps: more than maxSFItems items, or more than
			// maxSFParams parameters on the last one, make the field
			// malformed.
			if _, ok := ParseRateLimit(strings.Repeat(v+", ", maxSFItems) + v); ok {
				t.Fatalf("ParseRateLimit(%q repeated %d times) accepted", v, maxSFItems+1)
			}
			var params strings.Builder
			for i := range maxSFParams + 1 {
				fmt.Fprintf(&params, ";zz%d=1", i)
			}
			if _, ok := ParseRateLimit(v + params.String()); ok {
				t.Fatalf("ParseRateLimit(%q + %d parameters) accepted", v, maxSFParams+1)
			}
		}
		for _, it := range items {
			checkWait(t, "ParseRateLimit t", it.Reset, it.HasReset)
			if it.Remaining < 0 || it.Reset%time.Second != 0 {
				t.Fatalf("ParseRateLimit(%q): bad item %+v", v, it)
			}
		}
		if ok {
			// The items survive a round trip through their serialization.
			again, ok2 := ParseRateLimit(formatRateLimit(items))
			if !ok2 || !reflect.DeepEqual(again, items) {
				t.Fatalf("ParseRateLimit(%q) = %+v, but its serialization gives (%+v, %v)", v, items, again, ok2)
			}
		}

		direct, dok := ParseRateLimitPolicy(v)
		if dok != (direct != nil) || dok && (len(direct) == 0 || len(direct) > maxSFItems) {
			t.Fatalf("ParseRateLimitPolicy(%q) = (%d items, %v)", v, len(direct), dok)
		}
		for _, p := range direct {
			if p.Quota < 0 || p.Window < 0 || !p.HasWindow && p.Window != 0 {
				t.Fatalf("ParseRateLimitPolicy(%q): bad item %+v", v, p)
			}
		}
		// RateLimit and RateLimit-Policy differ only in their keys: swapping
		// the letters r<->q and t<->w keeps every part of a field valid or
		// invalid as it was, so both parsers must agree.
		swapped := strings.Map(swapLetters, v)
		pols, pok := ParseRateLimitPolicy(swapped)
		if pok != ok {
			t.Fatalf("ParseRateLimit(%q) ok=%v but ParseRateLimitPolicy(%q) ok=%v", v, ok, swapped, pok)
		}
		for i, p := range pols {
			it := items[i]
			want := it.Reset
			if p.Window <= MaxWait && want != p.Window || p.Window > MaxWait && want != MaxWait {
				t.Fatalf("ParseRateLimit(%q) item %+v, ParseRateLimitPolicy(%q) item %+v", v, it, swapped, p)
			}
			if p.Policy != strings.Map(swapLetters, it.Policy) || p.Quota != it.Remaining || p.HasWindow != it.HasReset {
				t.Fatalf("ParseRateLimit(%q) item %+v, ParseRateLimitPolicy(%q) item %+v", v, it, swapped, p)
			}
		}
	})
}

// swapLetters swaps r with q and t with w.
func swapLetters(r rune) rune {
	switch r {
	case 'r':
		return 'q'
	case 'q':
		return 'r'
	case 't':
		return 'w'
	case 'w':
		return 't'
	}
	return r
}

func FuzzParseXRateLimitReset(f *testing.F) {
	for _, v := range []string{
		"30", " 30 ", "1.5", "0", "999999999", "1700000060", "1700000000.250", "1699999999",
		"1700000060000", "1700000000000.5", "1000000000", "1000000000000", "-5", "1e3", "1.", ".5",
		"99999999999999999999999999", "",
	} {
		f.Add(v, int64(1_700_000_000), int64(0))
	}
	f.Add("1700000000", int64(math.MaxInt64), int64(math.MinInt64))
	f.Add("99999999999999999", int64(math.MinInt64), int64(999999999))
	f.Fuzz(func(t *testing.T, v string, nowSec, nowNsec int64) {
		if len(v) > 64<<10 {
			t.Skip() // bounded work per input; the caps are gone past below
		}
		d, ok := ParseXRateLimitReset(v, time.Unix(nowSec, nowNsec))
		checkWait(t, "ParseXRateLimitReset", d, ok)
		s := strings.Trim(v, " \t")
		if allDigits(s) {
			// However many digits: an epoch in milliseconds, far ahead.
			if d, ok := ParseXRateLimitReset(s+strings.Repeat("9", 40), time.Unix(nowSec, nowNsec)); !ok || d != MaxWait {
				t.Fatalf("ParseXRateLimitReset(%q + 40 nines) = %v, %v; want %v", s, d, ok, MaxWait)
			}
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && allDigits(s) {
			if !ok {
				t.Fatalf("ParseXRateLimitReset(%q) rejected digits", v)
			}
			if n < 1e9 && d != min(time.Duration(n)*time.Second, MaxWait) {
				t.Fatalf("ParseXRateLimitReset(%q) = %v, want %ds", v, d, n)
			}
		}
		if ok && strings.ContainsAny(s, "-+eE ") {
			t.Fatalf("ParseXRateLimitReset(%q) accepted a sign, exponent or inner space", v)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add("30", "", "", "", "60", "", "", int64(1_700_000_000))
	f.Add("", "", "", "", "10", "0", "", int64(1_700_000_000))
	f.Add("", "", "", "", "10", "5", "", int64(1_700_000_000))
	f.Add("30", `"default";r=-1;t=600`, "", "", "", "", "", int64(1_700_000_000))
	f.Add("Sun, 06 Nov 1994 08:49:37 GMT", `"a";r=5;t=10, "b";r=0;t=60`, "15", "0", "1700000060", "3", `"default";q=100;w=60`, int64(784111777))
	f.Add("99999999999999999999", `"a";r=1;t=999999999999999`, "99999999999999999999", "99999999999999999999", "99999999999999999999", "99999999999999999999", "", int64(math.MinInt64))
	f.Add(strings.Repeat(" ", 4096)+"5", "", "", "", strings.Repeat("9", 5000), "", "", int64(0))
	f.Fuzz(func(t *testing.T, retryAfter, rateLimit, rlReset, rlRemaining, xReset, xRemaining, policy string, nowSec int64) {
		if len(retryAfter)+len(rateLimit)+len(rlReset)+len(rlRemaining)+len(xReset)+len(xRemaining)+len(policy) > 64<<10 {
			t.Skip() // bounded work per input; the caps are gone past below
		}
		now := time.Unix(nowSec, 0)
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("RateLimit", rateLimit)
		h.Set("RateLimit-Policy", policy)
		h.Set("RateLimit-Reset", rlReset)
		h.Set("RateLimit-Remaining", rlRemaining)
		h.Set("X-RateLimit-Reset", xReset)
		h.Set("X-RateLimit-Remaining", xRemaining)
		h["X-Rate-Limit-Reset"] = []string{rlReset}
		h["X-Rate-Limit-Remaining"] = []string{xRemaining, rlRemaining}

		sw := Parse(h, now)
		checkWait(t, "Parse", sw.Duration, sw.Present)

		// Past the cap: a value longer than maxHeaderValueLen (here, with
		// whitespace the parsers would trim) counts as absent.
		for _, k := range []string{"Retry-After", "Ratelimit", "Ratelimit-Policy", "Ratelimit-Reset", "X-Ratelimit-Reset", "X-Ratelimit-Remaining"} {
			long, without := h.Clone(), h.Clone()
			long.Set(k, h.Get(k)+strings.Repeat(" ", maxHeaderValueLen))
			without.Del(k)
			if a, b := Parse(long, now), Parse(without, now); a != b {
				t.Fatalf("Parse with an over-long %s = %+v, without it %+v", k, a, b)
			}
		}
		if sw.Remaining < -1 || sw.Exhausted != (sw.Remaining == 0) {
			t.Fatalf("Parse: inconsistent %+v", sw)
		}

		var want time.Duration
		present := false
		add := func(v string, d time.Duration, ok bool) {
			if ok && len(v) <= maxHeaderValueLen {
				present = true
				want = max(want, d)
			}
		}
		d, ok := ParseRetryAfter(retryAfter, now)
		add(retryAfter, d, ok)
		if items, ok := ParseRateLimit(rateLimit); ok {
			for _, it := range items {
				add(rateLimit, it.Reset, it.HasReset)
			}
		}
		d, ok = ParseRateLimitReset(rlReset)
		add(rlReset, d, ok)
		d, ok = ParseXRateLimitReset(xReset, now)
		add(xReset, d, ok)
		d, ok = ParseXRateLimitReset(rlReset, now) // X-Rate-Limit-Reset
		add(rlReset, d, ok)
		// The largest wait of the individual parsers wins, unless a quota
		// is spent: then only spent quotas count, which is never more.
		if sw.Present != present || (!sw.Exhausted && sw.Duration != want) || sw.Duration > want {
			t.Fatalf("Parse = %+v, want Wait %v Present %v", sw, want, present)
		}
	})
}

func TestParseExhaustedUsesSpentQuota(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		h      http.Header
		wait   time.Duration
		exhaus bool
	}{
		{"burst spent, daily not", http.Header{"Ratelimit": {`"burst";r=0;t=10, "daily";r=4000;t=80000`}}, 10 * time.Second, true},
		{"nothing spent: largest", http.Header{"Ratelimit": {`"burst";r=3;t=10, "daily";r=4000;t=80000`}}, 80000 * time.Second, false},
		{"legacy pair spent, X pair not", http.Header{
			"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"5"},
			"X-Ratelimit-Remaining": {"7"}, "X-Ratelimit-Reset": {"500"},
		}, 5 * time.Second, true},
		{"retry-after always counts", http.Header{"Retry-After": {"30"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"5"}}, 30 * time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sw := Parse(c.h, now)
			if sw.Duration != c.wait || sw.Exhausted != c.exhaus || !sw.Present {
				t.Fatalf("got %+v, want wait %v exhausted %v", sw, c.wait, c.exhaus)
			}
		})
	}
}

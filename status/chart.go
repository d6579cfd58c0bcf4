package status

// This file holds what the page draws and how it shows scope keys: the
// inline SVG charts of the busiest scopes' answers, and keys made safe to
// read (bounded, with odd bytes spelled out).

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crawlerkit/throttle"
)

// maxKeyShown is the most bytes of a scope key (or a queue's name) the
// page shows; a longer key is cut, and says how long it was. A key comes
// from a crawled URL: without a bound, a page of n rows of a megabyte
// each would be too.
const maxKeyShown = 256

// displayKey is key as the page shows it: as it is when it is printable
// UTF-8 of at most maxKeyShown bytes; otherwise quoted with Go's escapes
// (strconv.QuoteToGraphic: control characters, invalid bytes and
// invisible or direction-changing characters spelled out) and, when
// longer, cut with its length. The template escapes the result for HTML.
func displayKey(key string) string {
	cut := ""
	if len(key) > maxKeyShown {
		n := maxKeyShown
		for n > 0 && !utf8.RuneStart(key[n]) {
			n--
		}
		cut = "… (" + strconv.Itoa(len(key)) + " bytes)"
		key = key[:n]
	}
	if !plainKey(key) {
		key = strconv.QuoteToGraphic(key)
	}
	return key + cut
}

// plainKey reports whether key is valid UTF-8 of graphic characters
// (spaces included) only.
func plainKey(key string) bool {
	for _, r := range key {
		if r == utf8.RuneError || !strconv.IsGraphic(r) {
			return false // RuneError: an invalid byte, or U+FFFD itself, which reads the same
		}
	}
	return true
}

// displayKeys is a group's scope keys as the page shows them.
func displayKeys(keys []string) string {
	if len(keys) == 1 {
		return displayKey(keys[0])
	}
	shown := make([]string, len(keys))
	for i, k := range keys {
		shown[i] = displayKey(k)
	}
	return strings.Join(shown, " + ")
}

// The chart's plot area, in SVG units: the x axis holds the SeriesLen
// buckets, the y axis the rate, from 0 at the bottom to YMax at the top.
const (
	chartLeft   = 44
	chartTop    = 8
	chartWidth  = 300
	chartHeight = 80
)

// statusChart is one busy scope's chart as the template draws it.
type statusChart struct {
	Key     string // shown (displayKey)
	Label   string // the SVG's text alternative
	YMax    string // the top of the y axis: "5/s"
	OK      string // the 2xx line's points: "x,y x,y ..."
	Signals string // the backoff signals' line's points
	NoData  int    // the width of the part before the scope was charted
	Summary string // totals over the 15 minutes, and the recent rate
}

// charts makes the page's charts of series at now.
func charts(series []throttle.ScopeSeries, now time.Time) []statusChart {
	out := make([]statusChart, 0, len(series))
	for i := range series {
		out = append(out, chart(&series[i], now))
	}
	return out
}

// chart draws one series: the rate per second of each bucket from the
// one the scope was charted in; the last bucket, still filling, only
// once it is half full (its rate over its time so far).
func chart(s *throttle.ScopeSeries, now time.Time) statusChart {
	last := time.Duration(throttle.SeriesLen-1) * throttle.SeriesStep
	elapsed := now.Sub(s.Start.Add(last))
	first := 0
	if s.Since.After(s.Start) {
		first = int((s.Since.Sub(s.Start) + throttle.SeriesStep - 1) / throttle.SeriesStep)
	}
	end := throttle.SeriesLen
	if elapsed < throttle.SeriesStep/2 {
		end-- // the last bucket has too little time to say a rate
	}
	rate := func(i int, n uint32) float64 {
		d := throttle.SeriesStep
		if i == throttle.SeriesLen-1 {
			d = max(elapsed, time.Second)
		}
		return float64(n) / d.Seconds()
	}
	var top float64
	var ok, sig uint64
	for i := first; i < throttle.SeriesLen; i++ {
		b := s.Buckets[i]
		ok, sig = ok+uint64(b.OK), sig+uint64(b.Signals)
		if i < end {
			top = max(top, rate(i, b.OK), rate(i, b.Signals))
		}
	}
	ymax := niceCeil(top)
	x := func(i int) float64 { return chartLeft + float64(i)*chartWidth/(throttle.SeriesLen-1) }
	points := func(n func(b throttle.SeriesBucket) uint32) string {
		var b strings.Builder
		for i := first; i < end; i++ {
			if i > first {
				b.WriteByte(' ')
			}
			y := chartTop + chartHeight*(1-rate(i, n(s.Buckets[i]))/ymax)
			b.WriteString(strconv.FormatFloat(x(i), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
		}
		return b.String()
	}
	key := displayKey(s.Key)
	return statusChart{
		Key:     key,
		Label:   "2xx responses and backoff signals per second over the last 15 minutes: " + key,
		YMax:    strconv.FormatFloat(ymax, 'g', 3, 64) + "/s",
		OK:      points(func(b throttle.SeriesBucket) uint32 { return b.OK }),
		Signals: points(func(b throttle.SeriesBucket) uint32 { return b.Signals }),
		NoData:  int(x(first) - chartLeft),
		Summary: strconv.FormatUint(ok, 10) + " 2xx, " + strconv.FormatUint(sig, 10) + " signals; lately " +
			strconv.FormatFloat(finite(s.Recent), 'g', 3, 64) + " answers/s",
	}
}

// niceCeil is the least of 1, 2 and 5 times a power of ten that is at
// least v, and at least 0.1: the top of a chart's y axis.
func niceCeil(v float64) float64 {
	if !(v > 0.1) || math.IsInf(v, 0) {
		return 0.1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range [...]float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// finite is f, or 0 when f is NaN or infinite: JSON has no such numbers,
// and encoding/json fails the whole document on one.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

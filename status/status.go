// Package status serves a throttle.ThrottlingManager's state to
// operators: Handler is an http.Handler with a plain HTML page for people
// and JSON for programs, built from one StatsInto snapshot per request.
//
// Mount it where only operators can reach it, since scope keys tell what
// the crawler visits:
//
//	mux.Handle("/debug/throttle", status.Handler(m))
//
// The package uses only throttle's public API.
package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/crawlerkit/throttle"
)

// Limits of the status page's tables (the n query parameter) and of its
// reload interval (the refresh query parameter).
const (
	statusDefaultRows    = 50   // rows per table when n is not given
	statusMaxRows        = 1000 // larger values of n are lowered to this
	statusDefaultRefresh = 5    // seconds between reloads when refresh is not given
	statusMaxRefresh     = 3600 // larger values of refresh are lowered to this
)

// Handler returns an http.Handler that shows m's state: a plain HTML page
// for people and JSON for programs. The handler is safe for concurrent
// use. Scope keys tell what the crawler visits: mount it where only
// operators can reach it.
//
// It answers GET only; every other method, HEAD included, gets 405 Method
// Not Allowed with "Allow: GET". A request with ?format=json gets JSON,
// ?format=html gets HTML; without format, the Accept header decides: the
// first of application/json and text/html it lists (q=0 excluded) wins,
// and HTML is the default. Any other format, an n that is not a positive
// integer, or a refresh that is not a non-negative integer, gets 400.
//
// Handler calls m.RecordSeries: the charts below start when the handler
// is made, so make it when the manager is.
//
// Both formats show the totals (in flight, waiting, scopes in backoff,
// requests, responses by status class, backoff signals, robots.txt
// fetches), what the robots.txt cache holds and so why its count is what
// it is (off, nothing fetched yet, fetched with a Client of one's own,
// failed fetches, no delay asked), the busiest scopes' 2xx responses and
// backoff signals per 10 seconds over the last 15 minutes
// (throttle.Stats.Series: at most throttle.SeriesScopes, and at most n),
// the backlog of each ReadyQueue given with WithQueue, with its n groups
// holding the most requests, and three tables of at most n scopes (?n=,
// default 50; larger values than 1000 count as 1000):
//
//   - waiting: only the scopes with callers waiting in Acquire, the most
//     waiting first, then the most permits in flight, then the most
//     requests, then by key; empty when no caller waits;
//   - backoff: the scopes in backoff (a raised delay, a lowered
//     concurrency, an outage probe or a server-given gate pending), the
//     highest backoff delay first, then the most signals, then by key;
//   - busiest: every scope, the most permits in flight first, then the
//     most requests, then by key, so that the active scopes show even
//     when no caller waits.
//
// The HTML page draws each busy scope's series as an inline SVG chart
// (two lines: 2xx and signals per second). It reloads itself every
// ?refresh= seconds (default 5, at most 3600; 0 turns it off) with a meta
// refresh, no JavaScript; the JSON answer ignores refresh. Under the
// tables, a legend explains each column in plain words.
//
// The JSON document is one object with these stable fields:
//
//	at                    snapshot time, RFC 3339 (UTC)
//	in_flight, waiting    permits held, callers waiting, all scopes
//	global_concurrency    throttle.Config.GlobalConcurrency
//	scopes                how many scopes the manager holds
//	n                     the row limit applied to the lists
//	in_backoff            how many scopes are in backoff
//	totals                counts, as below, since New
//	robots                the robots.txt cache: enabled, client (fetched
//	                      with Config.Robots.Client), enforce, origins
//	                      (cached), fetching, rules, no_rules (a 4xx),
//	                      failed, delays (hosts with a robots.txt delay),
//	                      note (why the count is what it is, in words)
//	series                the busiest scopes, busiest first: key,
//	                      key_bytes, start (of the first step), since
//	                      (charted from), step_s (10), recent_per_s
//	                      (answers per second lately), 2xx and signals
//	                      (90 counts each, one per step, oldest first;
//	                      the last step holds at)
//	queues                one per WithQueue: name, len (requests), groups,
//	                      ready, waiting, parked, global_full, poppers,
//	                      next_at (omitted when none), top (the groups
//	                      holding the most: keys, requests, state,
//	                      ready_at)
//	top_waiting           only the scopes with callers waiting
//	top_backoff           the scopes in backoff
//	top_busy              the busiest scopes, waiting or not
//	the three lists' scopes, each with the same fields:
//	  key, key_bytes, in_flight, waiting, concurrency, delay_ms, why,
//	  ready_at (omitted when unknown), backoff_delay_ms,
//	  backoff_concurrency, backoff_bad_ms, backoff_safe_ms, outage,
//	  autothrottle_delay_ms, rampup_rate_per_s, rate_per_s (the pace's
//	  rate: starts per second its rules allow, null when unbounded),
//	  binding (the rule that binds the pace, as why), gate (omitted when
//	  none), last_latency_ms, counts
//	counts: requests, signals, responses: 1xx 2xx 3xx 4xx 5xx errors,
//	  robots_txt (the manager's robots.txt fetches, counted apart from
//	  the requests, their responses and signals: throttle.Counts.Robots)
//
// A key longer than 1024 bytes is cut (on a character's boundary) and
// key_bytes gives its length; key_bytes is omitted for the others. The
// JSON is UTF-8: encoding/json replaces the bytes of a key that are not
// with U+FFFD, and escapes <, > and &.
//
// Durations are milliseconds as JSON numbers (fractions for sub-ms
// values) in fields named *_ms, zero meaning none (no backoff,
// AutoThrottle off, no latency yet); times are RFC 3339 strings in UTC;
// why is a throttle.Reason in words (Reason.String: "none",
// "concurrency", "slot delay", ...). The lists are capped like the HTML
// tables, so the answer stays small with a million scopes; call m.Stats
// in-process for all of them.
//
// The HTML page uses no JavaScript and loads nothing else (one inline
// style sheet; its Content-Security-Policy forbids the rest), and escapes
// everything it shows: scope keys come from the crawled URLs. A key is
// shown as it is when it is printable UTF-8; otherwise quoted, with its
// control characters, invalid bytes and invisible or direction-changing
// characters spelled out (strconv.QuoteToGraphic); beyond 256 bytes it
// is cut and says its length. So the page stays bounded: n rows a table
// (n groups a queue), at most throttle.SeriesScopes charts, 256 bytes a
// key.
//
// Each request takes one snapshot with m.StatsInto into pooled memory and
// selects the top n of each table without sorting the rest: it costs one
// pass over the scopes, which locks each scope briefly, as m.Stats does,
// and one pass over the snapshot per table; and one pass under each
// queue's lock over its groups (throttle.ReadyQueue.StatsInto).
func Handler(m *throttle.ThrottlingManager, opts ...Option) http.Handler {
	h := &statusHandler{m: m}
	for _, o := range opts {
		o(h)
	}
	m.RecordSeries()
	return h
}

// An Option adds to what Handler shows.
type Option func(*statusHandler)

// WithQueue shows q's backlog under name (throttle.ReadyQueue.Stats):
// the requests it holds, its groups ready, waiting and parked, the Pop
// callers waiting, and the groups that hold the most. A queue's requests
// are not callers waiting in Acquire: without WithQueue the page cannot
// see them.
func WithQueue(name string, q *throttle.ReadyQueue) Option {
	return func(h *statusHandler) {
		h.queues = append(h.queues, namedQueue{name: name, q: q})
	}
}

// statusHandler serves Handler's page.
type statusHandler struct {
	m      *throttle.ThrottlingManager
	queues []namedQueue
	pool   sync.Pool // *statusScratch
}

// namedQueue is a ReadyQueue given with WithQueue.
type namedQueue struct {
	name string
	q    *throttle.ReadyQueue
}

// statusScratch is one request's memory, reused across requests.
type statusScratch struct {
	st        throttle.Stats
	byWait    []int // indices into st.Scopes
	byBackoff []int
	byBusy    []int
	rowsWait  []statusRow
	rowsBack  []statusRow
	rowsBusy  []statusRow
	jsonWait  []scopeJSON
	jsonBack  []scopeJSON
	jsonBusy  []scopeJSON
	queues    []throttle.QueueStats // one per WithQueue, in order
	buf       bytes.Buffer
}

// ServeHTTP serves the status page or its JSON.
func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	asJSON, ok := statusWantsJSON(q.Get("format"), r.Header.Values("Accept"))
	if !ok {
		http.Error(w, "format must be json or html", http.StatusBadRequest)
		return
	}
	n, ok := statusRows(q.Get("n"))
	if !ok {
		http.Error(w, "n must be a positive integer", http.StatusBadRequest)
		return
	}
	refresh, ok := statusRefresh(q.Get("refresh"))
	if !ok {
		http.Error(w, "refresh must be a non-negative integer (seconds, 0: off)", http.StatusBadRequest)
		return
	}

	sc, _ := h.pool.Get().(*statusScratch)
	if sc == nil {
		sc = new(statusScratch)
	}
	defer h.pool.Put(sc)
	h.m.StatsInto(&sc.st)
	sc.queues = slices.Grow(sc.queues[:0], len(h.queues))[:len(h.queues)]
	for i, nq := range h.queues {
		nq.q.StatsInto(&sc.queues[i], n)
	}
	sc.selectTop(n)
	sc.buf.Reset()
	var err error
	ctype := "text/html; charset=utf-8"
	if asJSON {
		ctype = "application/json; charset=utf-8"
		err = sc.writeJSON(n, h.queues)
	} else {
		err = sc.writeHTML(n, refresh, h.queues)
	}
	if err != nil {
		http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", ctype)
	hd.Set("Content-Length", strconv.Itoa(sc.buf.Len()))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Add("Vary", "Accept")
	if !asJSON {
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	}
	w.WriteHeader(http.StatusOK)
	w.Write(sc.buf.Bytes())
}

// statusWantsJSON reports whether the request asks for JSON; ok is false
// for an unknown format.
func statusWantsJSON(format string, accept []string) (asJSON, ok bool) {
	switch format {
	case "json":
		return true, true
	case "html":
		return false, true
	case "":
	default:
		return false, false
	}
	for _, h := range accept {
		for part := range strings.SplitSeq(h, ",") {
			mt, params, _ := strings.Cut(part, ";")
			if acceptRefused(params) {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(mt)) {
			case "application/json":
				return true, true
			case "text/html":
				return false, true
			}
		}
	}
	return false, true
}

// acceptRefused reports whether an Accept entry's parameters say q=0.
func acceptRefused(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q == 0
		}
	}
	return false
}

// statusRows parses the n parameter.
func statusRows(s string) (int, bool) {
	if s == "" {
		return statusDefaultRows, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, false
	}
	return min(n, statusMaxRows), true
}

// statusRefresh parses the refresh parameter: the seconds between reloads
// of the HTML page, 0 for none.
func statusRefresh(s string) (int, bool) {
	if s == "" {
		return statusDefaultRefresh, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return min(n, statusMaxRefresh), true
}

// selectTop fills byWait, byBackoff and byBusy with the top n scopes of
// each table, best first.
func (sc *statusScratch) selectTop(n int) {
	ss, at := sc.st.Scopes, sc.st.At
	sc.byWait = statusTopN(sc.byWait[:0], n, len(ss), func(i int) bool {
		return ss[i].Waiting > 0
	}, func(a, b int) bool {
		x, y := &ss[a], &ss[b]
		switch {
		case x.Waiting != y.Waiting:
			return x.Waiting > y.Waiting
		case x.InFlight != y.InFlight:
			return x.InFlight > y.InFlight
		case x.Counts.Requests != y.Counts.Requests:
			return x.Counts.Requests > y.Counts.Requests
		}
		return x.Key < y.Key
	})
	sc.byBackoff = statusTopN(sc.byBackoff[:0], n, len(ss), func(i int) bool {
		return ss[i].InBackoff(at)
	}, func(a, b int) bool {
		x, y := &ss[a], &ss[b]
		switch {
		case x.BackoffDelay != y.BackoffDelay:
			return x.BackoffDelay > y.BackoffDelay
		case x.Counts.Signals != y.Counts.Signals:
			return x.Counts.Signals > y.Counts.Signals
		}
		return x.Key < y.Key
	})
	sc.byBusy = statusTopN(sc.byBusy[:0], n, len(ss), nil, func(a, b int) bool {
		x, y := &ss[a], &ss[b]
		switch {
		case x.InFlight != y.InFlight:
			return x.InFlight > y.InFlight
		case x.Counts.Requests != y.Counts.Requests:
			return x.Counts.Requests > y.Counts.Requests
		}
		return x.Key < y.Key
	})
}

// statusTopN appends to h the best n of 0..count-1 that keep accepts (nil:
// all), best first by better, a strict total order. It keeps a heap of
// the n best so far with the worst at its root, so it costs
// O(count log n) and sorts only the n it keeps.
func statusTopN(h []int, n, count int, keep func(int) bool, better func(a, b int) bool) []int {
	down := func(j int) {
		for {
			w := j
			for _, c := range [2]int{2*j + 1, 2*j + 2} {
				if c < len(h) && better(h[w], h[c]) {
					w = c
				}
			}
			if w == j {
				return
			}
			h[j], h[w] = h[w], h[j]
			j = w
		}
	}
	for i := range count {
		if keep != nil && !keep(i) {
			continue
		}
		if len(h) < n {
			h = append(h, i)
			for j := len(h) - 1; j > 0; {
				p := (j - 1) / 2
				if !better(h[p], h[j]) {
					break
				}
				h[j], h[p] = h[p], h[j]
				j = p
			}
			continue
		}
		if better(i, h[0]) {
			h[0] = i
			down(0)
		}
	}
	slices.SortFunc(h, func(a, b int) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	return h
}

// The HTML page.

// statusRow is one scope as the HTML tables show it.
type statusRow struct {
	Key                          string
	InFlight, Concurrency        int
	Waiting                      int
	Delay, Why, Ready            string
	Pace                         string
	Backoff, Auto, Latency       string
	Requests, R2, R4, R5, Errors uint64
	Signals                      uint64
}

// statusPage is what the HTML template gets.
type statusPage struct {
	At                           string
	N                            int
	Refresh                      int // seconds between reloads; 0: none
	DefaultRefresh               int
	InFlight, Waiting, Global    int
	InBackoff                    int
	Scopes                       int
	Totals                       throttle.Counts
	Robots                       string // why the robots.txt count is what it is
	Charts                       []statusChart
	Queues                       []statusQueue
	Queued                       int // requests in the queues shown
	ByWaiting, ByBackoff, ByBusy []statusRow
}

// statusQueue is one ReadyQueue as the page shows it.
type statusQueue struct {
	Name                                   string
	Len, Groups                            int
	Ready, Waiting, Parked, Robots, Popper int
	GlobalFull                             bool
	Next                                   string // when the next waiting group is asked: "in 2.5s", "–"
	Top                                    []statusGroup
}

// statusGroup is one group of a ReadyQueue's top.
type statusGroup struct {
	Keys     string
	Requests int
	State    string
	Ready    string
}

func (sc *statusScratch) writeHTML(n, refresh int, queues []namedQueue) error {
	st := &sc.st
	sc.rowsWait = sc.rows(sc.rowsWait[:0], sc.byWait)
	sc.rowsBack = sc.rows(sc.rowsBack[:0], sc.byBackoff)
	sc.rowsBusy = sc.rows(sc.rowsBusy[:0], sc.byBusy)
	p := statusPage{
		At: st.At.UTC().Format(time.RFC3339), N: n,
		Refresh: refresh, DefaultRefresh: statusDefaultRefresh,
		InFlight: st.InFlight, Waiting: st.Waiting, Global: st.GlobalConcurrency, InBackoff: st.InBackoff,
		Scopes: len(st.Scopes), Totals: st.Totals, Robots: robotsNote(&st.Robots, st.Totals.Robots),
		Charts:    charts(st.Series[:min(n, len(st.Series))], st.At),
		ByWaiting: sc.rowsWait, ByBackoff: sc.rowsBack, ByBusy: sc.rowsBusy,
	}
	for i := range sc.queues {
		qs := &sc.queues[i]
		q := statusQueue{Name: displayKey(queues[i].name), Len: qs.Len, Groups: qs.Groups,
			Ready: qs.Ready, Waiting: qs.Waiting, Parked: qs.Parked, Robots: qs.Robots, Popper: qs.Poppers,
			GlobalFull: qs.GlobalFull, Next: statusIn(qs.NextAt, qs.At)}
		for _, g := range qs.Top {
			q.Top = append(q.Top, statusGroup{Keys: displayKeys(g.Keys), Requests: g.Requests, State: g.State,
				Ready: statusIn(g.ReadyAt, qs.At)})
		}
		p.Queues = append(p.Queues, q)
		p.Queued += qs.Len
	}
	return statusTemplate().Execute(&sc.buf, &p)
}

// statusIn says when t comes after now: "in 2.5s", "now", "–" for zero.
func statusIn(t, now time.Time) string {
	switch {
	case t.IsZero():
		return "–"
	case !t.After(now):
		return "now"
	}
	return "in " + statusDuration(t.Sub(now))
}

// robotsNote says, in words, what the manager fetched of robots.txt and
// so why its count (fetched) is what it is, zero above all.
func robotsNote(r *throttle.RobotsStats, fetched uint64) string {
	if !r.Enabled {
		return "off (Config.Robots.Enabled is false): no robots.txt is fetched, so none is counted."
	}
	var b strings.Builder
	switch {
	case r.Origins == 0:
		b.WriteString("on, but no robots.txt fetched yet: an origin's robots.txt is fetched at its first request (see throttle.RobotsConfig).")
	case fetched == 0 && r.Client:
		b.WriteString("fetched with Config.Robots.Client, which counts here only if its Transport is this manager's: none counted.")
	case fetched == 0 && r.Fetching == r.Origins:
		b.WriteString("the first fetches are under way.")
	default:
		b.WriteString("on.")
	}
	if r.Origins > 0 {
		fmt.Fprintf(&b, " %d origins cached: %d with rules, %d with none (a 4xx: everything allowed), %d failed (a 5xx, a network error or a timeout: tried again later), %d being fetched.",
			r.Origins, r.Rules, r.NoRules, r.Failed, r.Fetching)
		switch r.Delays {
		case 0:
			b.WriteString(" None asks for a delay (no Crawl-delay or Request-rate for the user agent).")
		case 1:
			b.WriteString(" 1 host has a robots.txt delay (Crawl-delay or Request-rate).")
		default:
			fmt.Fprintf(&b, " %d hosts have a robots.txt delay (Crawl-delay or Request-rate).", r.Delays)
		}
	}
	if r.Enforce {
		b.WriteString(" Enforced: disallowed URLs are refused.")
	}
	return b.String()
}

func (sc *statusScratch) rows(dst []statusRow, idx []int) []statusRow {
	at := sc.st.At
	for _, i := range idx {
		s := &sc.st.Scopes[i]
		r := statusRow{
			Key: displayKey(s.Key), InFlight: s.InFlight, Concurrency: s.Concurrency, Waiting: s.Waiting,
			Delay: statusDuration(s.Delay), Why: s.Reason.String(), Ready: "–",
			Backoff: "–", Auto: "off", Latency: "–",
			Requests: s.Counts.Requests, R2: s.Counts.Responses[2], R4: s.Counts.Responses[4],
			R5: s.Counts.Responses[5], Errors: s.Counts.Responses[0], Signals: s.Counts.Signals,
		}
		if s.Reason == throttle.ReasonNone {
			r.Why, r.Ready = "ready", "now"
		} else {
			r.Ready = statusIn(s.ReadyAt, at)
		}
		// "1s, concurrency 2, outage, gate 30s", "–" for none.
		backoff := make([]string, 0, 4)
		if s.BackoffDelay > 0 {
			backoff = append(backoff, statusDuration(s.BackoffDelay))
		}
		if s.BackoffConcurrency > 0 {
			backoff = append(backoff, "concurrency "+strconv.Itoa(s.BackoffConcurrency))
		}
		if s.Outage {
			backoff = append(backoff, "outage")
		}
		if s.Gate.After(at) {
			backoff = append(backoff, "gate "+statusDuration(s.Gate.Sub(at)))
		}
		if len(backoff) > 0 {
			r.Backoff = strings.Join(backoff, ", ")
		}
		if s.AutoThrottleDelay > 0 {
			r.Auto = statusDuration(s.AutoThrottleDelay)
		}
		r.Pace = statusPace(&s.Pace)
		if s.LastLatency > 0 {
			r.Latency = statusDuration(s.LastLatency)
		}
		dst = append(dst, r)
	}
	return dst
}

// statusPace says a scope's pace for people, its rate and the rule that
// binds it: "4.85/s (rampup)". An unbounded rate shows no rule (Binding
// then names the delay's source, whose delay is 0) unless the global cap
// holds it; a scope without a pace (a custom ScopeManager) shows "–".
func statusPace(p *throttle.Pace) string {
	switch {
	case p.Binding == throttle.ReasonNone:
		return "–"
	case math.IsInf(p.Rate, 1) && p.Binding != throttle.ReasonGlobal:
		return "unbounded"
	}
	rate := "unbounded"
	if !math.IsInf(p.Rate, 1) {
		rate = strconv.FormatFloat(p.Rate, 'g', 3, 64) + "/s"
	}
	return rate + " (" + p.Binding.String() + ")"
}

// statusDuration rounds d for people: 12.3s, 1.25s, 340ms, 12.5µs.
func statusDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		d = d.Round(100 * time.Millisecond)
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

var statusTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("status").Parse(statusHTML))
})

const statusHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">
{{end -}}
<title>throttle status</title>
<style>
body { font: 13px/1.4 system-ui, sans-serif; margin: 1em; color: #111; background: #fff; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .3em; }
p { margin: .2em 0; color: #444; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 2px 4px; text-align: right; }
td { white-space: nowrap; }
th { background: #eee; font-weight: 600; vertical-align: bottom; }
th.key { text-align: left; }
td.key { text-align: left; font-family: ui-monospace, monospace; white-space: normal; word-break: break-all; min-width: 15em; }
td.why { text-align: left; }
tr:nth-child(even) td { background: #f7f7f7; }
.none { color: #666; font-style: italic; }
dl.legend { margin: .3em 0; max-width: 70em; }
dl.legend dt { font-weight: 600; margin-top: .4em; }
dl.legend dd { margin: 0 0 0 1.5em; color: #444; }
div.charts { display: flex; flex-wrap: wrap; gap: .3em 1.2em; }
figure.chart { margin: 0; }
figure.chart figcaption { max-width: 352px; font-size: .92em; color: #444; overflow-wrap: anywhere; }
figure.chart figcaption .key { font-family: ui-monospace, monospace; color: #111; }
svg .plot { fill: #fafafa; stroke: #ccc; }
svg .nodata { fill: #eee; }
svg .grid { stroke: #e4e4e4; }
svg .ax { font: 10px system-ui, sans-serif; fill: #555; }
svg .ok { fill: none; stroke: #1a7f37; stroke-width: 1.5; stroke-linejoin: round; }
svg .sig { fill: none; stroke: #cf222e; stroke-width: 1.5; stroke-linejoin: round; }
.swatch { display: inline-block; width: 1.4em; height: 0; border-top: 2px solid; vertical-align: middle; }
td.qkey { text-align: left; font-family: ui-monospace, monospace; white-space: normal; word-break: break-all; min-width: 15em; }
</style>
</head>
<body>
<h1>throttle status</h1>
<p>Snapshot at {{.At}}, {{.Scopes}} scopes. <a href="?format=json&amp;n={{.N}}">JSON</a>
{{- if .Refresh}} · Reloads every {{.Refresh}}s (<a href="?n={{.N}}&amp;refresh=0">stop</a>)
{{- else}} · Not reloading (<a href="?n={{.N}}&amp;refresh={{.DefaultRefresh}}">reload every {{.DefaultRefresh}}s</a>){{end}}</p>

<h2>Totals</h2>
<table>
<tr><th>in flight</th><th>global concurrency</th><th>waiting</th><th>scopes in backoff</th><th>requests</th><th>1xx</th><th>2xx</th><th>3xx</th><th>4xx</th><th>5xx</th><th>errors</th><th>signals</th><th>robots.txt</th></tr>
<tr><td>{{.InFlight}}</td><td>{{.Global}}</td><td>{{.Waiting}}</td><td>{{.InBackoff}}</td><td>{{.Totals.Requests}}</td>
{{- with .Totals.Responses}}<td>{{index . 1}}</td><td>{{index . 2}}</td><td>{{index . 3}}</td><td>{{index . 4}}</td><td>{{index . 5}}</td><td>{{index . 0}}</td>{{end -}}
<td>{{.Totals.Signals}}</td><td>{{.Totals.Robots}}</td></tr>
</table>
<p id="robots">robots.txt: {{.Robots}}</p>

<h2 id="series">Busiest scopes over the last 15 minutes</h2>
{{if .Charts}}<p><span class="swatch" style="color:#1a7f37"></span> 2xx responses per second · <span class="swatch" style="color:#cf222e"></span> backoff signals per second (429, 503, timeouts …), in steps of 10s; grey: before the scope was among the busiest.</p>
<div class="charts">{{range .Charts}}{{template "chart" .}}{{end}}</div>
{{else}}<p class="none">No answers in the last 15 minutes.</p>{{end}}

<h2 id="waiting">Scopes with callers waiting in Acquire (top {{.N}})</h2>
{{if .ByWaiting}}{{template "rows" .ByWaiting}}{{else}}<p class="none">No caller is waiting in Acquire{{if .Queued}}; {{.Queued}} requests wait in ReadyQueues (below){{end}}.</p>{{end}}

<h2 id="queues">ReadyQueues</h2>
{{range .Queues}}<h3>{{.Name}}: {{.Len}} requests in {{.Groups}} groups</h3>
<p>{{.Ready}} groups ready, {{.Waiting}} waiting for a time (next {{.Next}}), {{.Parked}} parked until a release, {{.Robots}} waiting for robots.txt; {{.Popper}} callers blocked in Pop{{if .GlobalFull}}; GlobalConcurrency holds every start{{end}}.</p>
{{if .Top}}<table>
<tr><th class="key">scopes</th><th>requests</th><th>state</th><th>ready</th></tr>
{{range .Top}}<tr><td class="qkey">{{.Keys}}</td><td>{{.Requests}}</td><td>{{.State}}</td><td>{{.Ready}}</td></tr>
{{end}}</table>{{end}}
{{else}}<p class="none">No ReadyQueue on this page: its requests are not callers waiting in Acquire, so show them with status.WithQueue(name, q).</p>{{end}}

<h2 id="backoff">Scopes in backoff: {{.InBackoff}}, by backoff delay (top {{.N}})</h2>
{{if .ByBackoff}}{{template "rows" .ByBackoff}}{{else}}<p class="none">No scope is in backoff.</p>{{end}}

<h2 id="busy">Busiest scopes, by permits in flight, then requests (top {{.N}})</h2>
{{if .ByBusy}}{{template "rows" .ByBusy}}{{else}}<p class="none">No scopes yet.</p>{{end}}

<h2 id="legend">What the columns mean</h2>
<dl class="legend">
<dt>key</dt>
<dd>The scope: by default the request URL's host. Every limit on this page holds per scope.</dd>
<dt>in flight / concurrency</dt>
<dd>Requests of the scope running now (permits held) / how many it may run at once now: the configured Concurrency (rampup's when rampup is on), 1 under a robots.txt delay, fewer while backoff lowers it after timeouts.</dd>
<dt>waiting</dt>
<dd>Callers blocked in Acquire until this scope lets their request start.</dd>
<dt>delay</dt>
<dd>The least time between two starts in the scope now, before jitter: the largest of the configured Delay (rampup's when rampup is on), the robots.txt Crawl-delay, the AutoThrottle delay and the backoff delay.</dd>
<dt>pace: starts/s allowed (rule that binds)</dt>
<dd>How many requests a second the scope may start in the long run, all its rules together, and the one rule that sets that rate: delay, rampup, autothrottle, robots, backoff, slot delay, concurrency (its slots at the latency seen), quota, server gate (0/s until a server-given wait ends) or global concurrency. When a setting seems to do nothing, this names the rule that wins. “unbounded”: no rule bounds the rate yet (no delay, no latency seen); “–”: a scope with a custom ScopeManager.</dd>
<dt>why it waits now</dt>
<dd>Why a new request of this scope would wait if it asked now; “ready”: it would start at once. concurrency: every slot is taken; delay, slot delay: too little time since the last start (of the scope, of the free slots); server gate: a wait the server asked for (Retry-After, RateLimit headers); quota: the window's quota is spent; robots: robots.txt's Crawl-delay or Request-rate; backoff: the delay raised by signals; rampup, autothrottle: their delay; global concurrency: every permit of all scopes together is held; queue: earlier callers wait first.</dd>
<dt>ready</dt>
<dd>When that new request could start: “now”, “in 2.5s”, or “–” when it cannot be known yet (it waits for a running request to finish).</dd>
<dt>backoff delay</dt>
<dd>The delay backoff raised after signals (“–”: none), then, when they apply: “concurrency N” when timeouts lowered the concurrency to N, “outage” while the scope sends one probe per Backoff.OutageProbe until the server answers again, “gate 30s” for a server-given wait that ends in 30s.</dd>
<dt>AutoThrottle delay</dt>
<dd>The delay AutoThrottle sets from the latencies seen (latency / TargetConcurrency, within Delay and its MaxDelay); “off” when AutoThrottle is off for the scope.</dd>
<dt>last latency</dt>
<dd>How long the server took to answer the last request (to the first response byte, through the Transport).</dd>
<dt>requests</dt>
<dd>Permits granted since the scope was created (in the totals: since the manager was), for your requests: the manager's own robots.txt fetches are counted apart (robots.txt), and so are their answers.</dd>
<dt>1xx, 2xx, 3xx, 4xx, 5xx</dt>
<dd>Responses by status class.</dd>
<dt>errors</dt>
<dd>Requests that ended with a transport error or no response.</dd>
<dt>signals</dt>
<dd>Backoff signals: responses with a backoff status (by default 429 Too Many Requests and the overload statuses 502, 503, 504 and 520 to 524; Backoff.Statuses) and transport errors that show an overloaded server (timeouts, refused or reset connections). They are what slowed the scope down: after a signal backoff raises the scope's delay (with rampup on, rampup lowers its rate after a rate limit instead), and a timeout on a scope with more than one slot lowers its concurrency first; a burst of signals from requests already in flight counts as one step.</dd>
<dt>robots.txt (totals)</dt>
<dd>The robots.txt requests the manager made itself, once per origin and Robots.TTL (a day by default; a redirect it followed counts again). They take a slot while they run and their answers teach the scope (a 429 or 503 on robots.txt slows it down), but they are not in requests, the status classes or signals.</dd>
<dt>scopes in backoff (totals)</dt>
<dd>The scopes whose delay backoff raised or whose concurrency it lowered, that probe an outage, or that a server-given wait holds: the number of rows the backoff table would have without its limit.</dd>
<dt>busiest scopes over the last 15 minutes</dt>
<dd>For the scopes with the most answers lately (at most 12), their 2xx responses and backoff signals per second, in steps of 10 seconds; the last step is drawn once it is half over. A scope is counted from when it became one of the busiest (the grey part before), and the manager keeps these counts for those scopes only.</dd>
<dt>ReadyQueues</dt>
<dd>The requests a ReadyQueue holds (given with status.WithQueue), by group: the requests of one scope set, one host with the default scoper. Ready: it may start now; waiting: refused until a time (a delay, a gate, a quota window); parked: refused until a request of one of its scopes ends (every slot taken, or callers waiting in Acquire ahead).</dd>
<dt>global concurrency (totals)</dt>
<dd>Config.GlobalConcurrency: the most permits held at once in all scopes together.</dd>
</dl>
</body>
</html>
{{define "chart"}}<figure class="chart"><svg viewBox="0 0 352 106" width="352" height="106" role="img" aria-label="{{.Label}}">
<rect class="plot" x="44" y="8" width="300" height="80"/>{{if .NoData}}<rect class="nodata" x="44" y="8" width="{{.NoData}}" height="80"/>{{end}}
<line class="grid" x1="44" y1="48" x2="344" y2="48"/><line class="grid" x1="144" y1="8" x2="144" y2="88"/><line class="grid" x1="244" y1="8" x2="244" y2="88"/>
<text class="ax" x="40" y="15" text-anchor="end">{{.YMax}}</text><text class="ax" x="40" y="88" text-anchor="end">0</text>
<text class="ax" x="44" y="101">−15 min</text><text class="ax" x="144" y="101" text-anchor="middle">−10</text><text class="ax" x="244" y="101" text-anchor="middle">−5</text><text class="ax" x="344" y="101" text-anchor="end">now</text>
<polyline class="ok" points="{{.OK}}"/><polyline class="sig" points="{{.Signals}}"/>
</svg><figcaption><span class="key">{{.Key}}</span>: {{.Summary}}</figcaption></figure>{{end}}
{{define "rows"}}<table>
<tr><th class="key">key</th><th>in flight / concurrency</th><th>waiting</th><th>delay</th><th>pace: starts/s allowed (rule that binds)</th><th>why it waits now</th><th>ready</th><th>backoff delay</th><th>AutoThrottle delay</th><th>last latency</th><th>requests</th><th>2xx</th><th>4xx</th><th>5xx</th><th>errors</th><th>signals</th></tr>
{{range .}}<tr><td class="key">{{.Key}}</td><td>{{.InFlight}} / {{.Concurrency}}</td><td>{{.Waiting}}</td><td>{{.Delay}}</td><td class="why">{{.Pace}}</td><td class="why">{{.Why}}</td><td>{{.Ready}}</td><td>{{.Backoff}}</td><td>{{.Auto}}</td><td>{{.Latency}}</td><td>{{.Requests}}</td><td>{{.R2}}</td><td>{{.R4}}</td><td>{{.R5}}</td><td>{{.Errors}}</td><td>{{.Signals}}</td></tr>
{{end}}</table>{{end}}`

// The JSON document.

// statusJSON is the JSON document; see Handler for its fields.
type statusJSON struct {
	At                time.Time    `json:"at"`
	InFlight          int          `json:"in_flight"`
	Waiting           int          `json:"waiting"`
	GlobalConcurrency int          `json:"global_concurrency"`
	Scopes            int          `json:"scopes"`
	N                 int          `json:"n"`
	InBackoff         int          `json:"in_backoff"`
	Totals            countsJSON   `json:"totals"`
	Robots            robotsJSON   `json:"robots"`
	Series            []seriesJSON `json:"series"`
	Queues            []queueJSON  `json:"queues"`
	TopWaiting        []scopeJSON  `json:"top_waiting"`
	TopBackoff        []scopeJSON  `json:"top_backoff"`
	TopBusy           []scopeJSON  `json:"top_busy"`
}

type robotsJSON struct {
	Enabled  bool   `json:"enabled"`
	Client   bool   `json:"client"`
	Enforce  bool   `json:"enforce"`
	Origins  int    `json:"origins"`
	Fetching int    `json:"fetching"`
	Rules    int    `json:"rules"`
	NoRules  int    `json:"no_rules"`
	Failed   int    `json:"failed"`
	Delays   int    `json:"delays"`
	Note     string `json:"note"`
}

type seriesJSON struct {
	Key        string                     `json:"key"`
	KeyBytes   int                        `json:"key_bytes,omitempty"`
	Start      time.Time                  `json:"start"`
	Since      time.Time                  `json:"since"`
	StepS      float64                    `json:"step_s"`
	RecentPerS float64                    `json:"recent_per_s"`
	OK         [throttle.SeriesLen]uint32 `json:"2xx"`
	Signals    [throttle.SeriesLen]uint32 `json:"signals"`
}

type queueJSON struct {
	Name       string      `json:"name"`
	Len        int         `json:"len"`
	Groups     int         `json:"groups"`
	Ready      int         `json:"ready"`
	Waiting    int         `json:"waiting"`
	Parked     int         `json:"parked"`
	Robots     int         `json:"robots"`
	GlobalFull bool        `json:"global_full"`
	Poppers    int         `json:"poppers"`
	NextAt     time.Time   `json:"next_at,omitzero"`
	Top        []groupJSON `json:"top"`
}

type groupJSON struct {
	Keys     []string  `json:"keys"`
	Requests int       `json:"requests"`
	State    string    `json:"state"`
	ReadyAt  time.Time `json:"ready_at,omitzero"`
}

type countsJSON struct {
	Requests  uint64        `json:"requests"`
	Signals   uint64        `json:"signals"`
	Responses responsesJSON `json:"responses"`
	Robots    uint64        `json:"robots_txt"`
}

type responsesJSON struct {
	C1     uint64 `json:"1xx"`
	C2     uint64 `json:"2xx"`
	C3     uint64 `json:"3xx"`
	C4     uint64 `json:"4xx"`
	C5     uint64 `json:"5xx"`
	Errors uint64 `json:"errors"`
}

type scopeJSON struct {
	Key                 string     `json:"key"`
	KeyBytes            int        `json:"key_bytes,omitempty"`
	InFlight            int        `json:"in_flight"`
	Waiting             int        `json:"waiting"`
	Concurrency         int        `json:"concurrency"`
	DelayMS             float64    `json:"delay_ms"`
	Why                 string     `json:"why"`
	ReadyAt             time.Time  `json:"ready_at,omitzero"`
	BackoffDelayMS      float64    `json:"backoff_delay_ms"`
	BackoffConcurrency  int        `json:"backoff_concurrency"`
	BackoffBadMS        float64    `json:"backoff_bad_ms"`
	BackoffSafeMS       float64    `json:"backoff_safe_ms"`
	Outage              bool       `json:"outage"`
	AutoThrottleDelayMS float64    `json:"autothrottle_delay_ms"`
	RampupRate          float64    `json:"rampup_rate_per_s"`
	RatePerS            *float64   `json:"rate_per_s"`
	Binding             string     `json:"binding"`
	Gate                time.Time  `json:"gate,omitzero"`
	LastLatencyMS       float64    `json:"last_latency_ms"`
	Counts              countsJSON `json:"counts"`
}

func (sc *statusScratch) writeJSON(n int, queues []namedQueue) error {
	st := &sc.st
	sc.jsonWait = sc.scopesJSON(sc.jsonWait[:0], sc.byWait)
	sc.jsonBack = sc.scopesJSON(sc.jsonBack[:0], sc.byBackoff)
	sc.jsonBusy = sc.scopesJSON(sc.jsonBusy[:0], sc.byBusy)
	r := &st.Robots
	doc := statusJSON{
		At: st.At.UTC(), InFlight: st.InFlight, Waiting: st.Waiting, GlobalConcurrency: st.GlobalConcurrency,
		Scopes: len(st.Scopes), N: n, InBackoff: st.InBackoff, Totals: statusCounts(&st.Totals),
		Robots: robotsJSON{Enabled: r.Enabled, Client: r.Client, Enforce: r.Enforce, Origins: r.Origins,
			Fetching: r.Fetching, Rules: r.Rules, NoRules: r.NoRules, Failed: r.Failed, Delays: r.Delays,
			Note: robotsNote(r, st.Totals.Robots)},
		Series:     make([]seriesJSON, 0, min(n, len(st.Series))),
		Queues:     make([]queueJSON, 0, len(queues)),
		TopWaiting: sc.jsonWait, TopBackoff: sc.jsonBack, TopBusy: sc.jsonBusy,
	}
	for i := range st.Series[:min(n, len(st.Series))] {
		s := &st.Series[i]
		j := seriesJSON{Start: s.Start.UTC(), Since: s.Since.UTC(), StepS: throttle.SeriesStep.Seconds(),
			RecentPerS: finite(s.Recent)}
		j.Key, j.KeyBytes = jsonKey(s.Key)
		for k, b := range s.Buckets {
			j.OK[k], j.Signals[k] = b.OK, b.Signals
		}
		doc.Series = append(doc.Series, j)
	}
	for i := range sc.queues {
		qs := &sc.queues[i]
		name, _ := jsonKey(queues[i].name)
		q := queueJSON{Name: name, Len: qs.Len, Groups: qs.Groups, Ready: qs.Ready, Waiting: qs.Waiting,
			Parked: qs.Parked, Robots: qs.Robots, GlobalFull: qs.GlobalFull, Poppers: qs.Poppers, Top: make([]groupJSON, 0, len(qs.Top))}
		if !qs.NextAt.IsZero() {
			q.NextAt = qs.NextAt.UTC()
		}
		for _, g := range qs.Top {
			gj := groupJSON{Keys: make([]string, len(g.Keys)), Requests: g.Requests, State: g.State}
			for k, key := range g.Keys {
				gj.Keys[k], _ = jsonKey(key)
			}
			if !g.ReadyAt.IsZero() {
				gj.ReadyAt = g.ReadyAt.UTC()
			}
			q.Top = append(q.Top, gj)
		}
		doc.Queues = append(doc.Queues, q)
	}
	return json.NewEncoder(&sc.buf).Encode(&doc)
}

// maxKeyJSON is the most bytes of a scope key the JSON gives; a longer
// key is cut (on a character's boundary) and key_bytes gives its length.
const maxKeyJSON = 1024

// jsonKey returns key as the JSON gives it, and its length in bytes when
// it is cut (0 when whole).
func jsonKey(key string) (string, int) {
	if len(key) <= maxKeyJSON {
		return key, 0
	}
	n := maxKeyJSON
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return key[:n], len(key)
}

func (sc *statusScratch) scopesJSON(dst []scopeJSON, idx []int) []scopeJSON {
	if dst == nil {
		dst = make([]scopeJSON, 0, len(idx)) // [] in the JSON, not null
	}
	at := sc.st.At
	for _, i := range idx {
		s := &sc.st.Scopes[i]
		j := scopeJSON{
			InFlight: s.InFlight, Waiting: s.Waiting, Concurrency: s.Concurrency,
			DelayMS: statusMillis(s.Delay), Why: s.Reason.String(),
			BackoffDelayMS: statusMillis(s.BackoffDelay), BackoffConcurrency: s.BackoffConcurrency,
			BackoffBadMS: statusMillis(s.BackoffBad), BackoffSafeMS: statusMillis(s.BackoffSafe), Outage: s.Outage,
			AutoThrottleDelayMS: statusMillis(s.AutoThrottleDelay), RampupRate: finite(s.RampupRate),
			Binding:       s.Pace.Binding.String(),
			LastLatencyMS: statusMillis(s.LastLatency), Counts: statusCounts(&s.Counts),
		}
		j.Key, j.KeyBytes = jsonKey(s.Key)
		if r := s.Pace.Rate; !math.IsInf(r, 0) && !math.IsNaN(r) {
			j.RatePerS = &r
		}
		if !s.ReadyAt.IsZero() {
			j.ReadyAt = s.ReadyAt.UTC()
		}
		if s.Gate.After(at) {
			j.Gate = s.Gate.UTC()
		}
		dst = append(dst, j)
	}
	return dst
}

func statusCounts(c *throttle.Counts) countsJSON {
	r := &c.Responses
	return countsJSON{Requests: c.Requests, Signals: c.Signals, Robots: c.Robots,
		Responses: responsesJSON{C1: r[1], C2: r[2], C3: r[3], C4: r[4], C5: r[5], Errors: r[0]}}
}

// statusMillis is d in milliseconds.
func statusMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

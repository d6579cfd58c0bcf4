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
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
)

// Limits of the status page's tables (the n query parameter).
const (
	statusDefaultRows = 50   // rows per table when n is not given
	statusMaxRows     = 1000 // larger values of n are lowered to this
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
// and HTML is the default. Any other format, or an n that is not a
// positive integer, gets 400.
//
// Both formats show the totals (in flight, waiting, requests, responses by
// status class, backoff signals) and two tables of at most n scopes
// (?n=, default 50; larger values than 1000 count as 1000):
//
//   - by waiting: the scopes with the most callers waiting in Acquire,
//     then the most permits in flight, then the most requests, then by key;
//   - by backoff: the scopes in backoff (a raised delay, a lowered
//     concurrency, an outage probe or a server-given gate pending), the
//     highest backoff delay first, then the most signals, then by key.
//
// The JSON document is one object with these stable fields:
//
//	at                    snapshot time, RFC 3339 (UTC)
//	in_flight, waiting    permits held, callers waiting, all scopes
//	global_concurrency    throttle.Config.GlobalConcurrency
//	scopes                how many scopes the manager holds
//	n                     the row limit applied to the two lists
//	totals                counts, as below, since New
//	top_waiting, top_backoff  the two tables, lists of scopes:
//	  key, in_flight, waiting, concurrency, delay_ms, why,
//	  ready_at (omitted when unknown), backoff_delay_ms,
//	  backoff_concurrency, backoff_bad_ms, backoff_safe_ms, outage,
//	  autothrottle_delay_ms, rampup_rate_per_s, rate_per_s (the pace's
//	  rate: starts per second its rules allow, null when unbounded),
//	  binding (the rule that binds the pace, as why), gate (omitted when
//	  none), last_latency_ms, counts
//	counts: requests, signals, responses: 1xx 2xx 3xx 4xx 5xx errors
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
// everything it shows: scope keys come from the crawled URLs.
//
// Each request takes one snapshot with m.StatsInto into pooled memory and
// selects the top n of each table without sorting the rest: it costs one
// pass over the scopes, which locks each scope briefly, as m.Stats does.
func Handler(m *throttle.ThrottlingManager) http.Handler {
	return &statusHandler{m: m}
}

// statusHandler serves Handler's page.
type statusHandler struct {
	m    *throttle.ThrottlingManager
	pool sync.Pool // *statusScratch
}

// statusScratch is one request's memory, reused across requests.
type statusScratch struct {
	st        throttle.Stats
	byWait    []int // indices into st.Scopes
	byBackoff []int
	rowsWait  []statusRow
	rowsBack  []statusRow
	jsonWait  []scopeJSON
	jsonBack  []scopeJSON
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

	sc, _ := h.pool.Get().(*statusScratch)
	if sc == nil {
		sc = new(statusScratch)
	}
	defer h.pool.Put(sc)
	h.m.StatsInto(&sc.st)
	sc.selectTop(n)
	sc.buf.Reset()
	var err error
	ctype := "text/html; charset=utf-8"
	if asJSON {
		ctype = "application/json; charset=utf-8"
		err = sc.writeJSON(n)
	} else {
		err = sc.writeHTML(n)
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

// selectTop fills byWait and byBackoff with the top n scopes of each
// table, best first.
func (sc *statusScratch) selectTop(n int) {
	ss, at := sc.st.Scopes, sc.st.At
	sc.byWait = statusTopN(sc.byWait[:0], n, len(ss), nil, func(a, b int) bool {
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
		s := &ss[i]
		return s.BackoffDelay > 0 || s.BackoffConcurrency > 0 || s.Outage || s.Gate.After(at)
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
	At                        string
	N                         int
	InFlight, Waiting, Global int
	Scopes                    int
	Totals                    throttle.Counts
	ByWaiting, ByBackoff      []statusRow
}

func (sc *statusScratch) writeHTML(n int) error {
	st := &sc.st
	sc.rowsWait = sc.rows(sc.rowsWait[:0], sc.byWait)
	sc.rowsBack = sc.rows(sc.rowsBack[:0], sc.byBackoff)
	p := statusPage{
		At: st.At.UTC().Format(time.RFC3339), N: n,
		InFlight: st.InFlight, Waiting: st.Waiting, Global: st.GlobalConcurrency,
		Scopes: len(st.Scopes), Totals: st.Totals,
		ByWaiting: sc.rowsWait, ByBackoff: sc.rowsBack,
	}
	return statusTemplate().Execute(&sc.buf, &p)
}

func (sc *statusScratch) rows(dst []statusRow, idx []int) []statusRow {
	at := sc.st.At
	for _, i := range idx {
		s := &sc.st.Scopes[i]
		r := statusRow{
			Key: s.Key, InFlight: s.InFlight, Concurrency: s.Concurrency, Waiting: s.Waiting,
			Delay: statusDuration(s.Delay), Why: s.Reason.String(), Ready: "–",
			Backoff: "–", Auto: "off", Latency: "–",
			Requests: s.Counts.Requests, R2: s.Counts.Responses[2], R4: s.Counts.Responses[4],
			R5: s.Counts.Responses[5], Errors: s.Counts.Responses[0], Signals: s.Counts.Signals,
		}
		switch {
		case s.Reason == throttle.ReasonNone:
			r.Why, r.Ready = "ready", "now"
		case s.ReadyAt.IsZero():
		case !s.ReadyAt.After(at):
			r.Ready = "now"
		default:
			r.Ready = "in " + statusDuration(s.ReadyAt.Sub(at))
		}
		if s.BackoffDelay > 0 {
			r.Backoff = statusDuration(s.BackoffDelay)
		}
		if s.BackoffConcurrency > 0 {
			r.Backoff += ", concurrency " + strconv.Itoa(s.BackoffConcurrency)
		}
		if s.Outage {
			r.Backoff += ", outage"
		}
		if s.Gate.After(at) {
			r.Backoff += ", gate " + statusDuration(s.Gate.Sub(at))
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

// statusPace says a scope's pace for people: "4.85/s (rampup)".
func statusPace(p *throttle.Pace) string {
	if p.Binding == throttle.ReasonNone {
		return "–"
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
</style>
</head>
<body>
<h1>throttle status</h1>
<p>Snapshot at {{.At}}, {{.Scopes}} scopes. <a href="?format=json&amp;n={{.N}}">JSON</a></p>

<h2>Totals</h2>
<table>
<tr><th>in flight</th><th>global concurrency</th><th>waiting</th><th>requests</th><th>1xx</th><th>2xx</th><th>3xx</th><th>4xx</th><th>5xx</th><th>errors</th><th>signals</th></tr>
<tr><td>{{.InFlight}}</td><td>{{.Global}}</td><td>{{.Waiting}}</td><td>{{.Totals.Requests}}</td>
{{- with .Totals.Responses}}<td>{{index . 1}}</td><td>{{index . 2}}</td><td>{{index . 3}}</td><td>{{index . 4}}</td><td>{{index . 5}}</td><td>{{index . 0}}</td>{{end -}}
<td>{{.Totals.Signals}}</td></tr>
</table>

<h2 id="waiting">Scopes by waiting callers (top {{.N}})</h2>
{{template "rows" .ByWaiting}}

<h2 id="backoff">Scopes in backoff, by backoff delay (top {{.N}})</h2>
{{if .ByBackoff}}{{template "rows" .ByBackoff}}{{else}}<p class="none">No scope is in backoff.</p>{{end}}
</body>
</html>
{{define "rows"}}{{if .}}<table>
<tr><th class="key">key</th><th>in flight / concurrency</th><th>waiting</th><th>delay</th><th>pace (rule that binds)</th><th>why it waits now</th><th>ready</th><th>backoff delay</th><th>AutoThrottle delay</th><th>last latency</th><th>requests</th><th>2xx</th><th>4xx</th><th>5xx</th><th>errors</th><th>signals</th></tr>
{{range .}}<tr><td class="key">{{.Key}}</td><td>{{.InFlight}} / {{.Concurrency}}</td><td>{{.Waiting}}</td><td>{{.Delay}}</td><td class="why">{{.Pace}}</td><td class="why">{{.Why}}</td><td>{{.Ready}}</td><td>{{.Backoff}}</td><td>{{.Auto}}</td><td>{{.Latency}}</td><td>{{.Requests}}</td><td>{{.R2}}</td><td>{{.R4}}</td><td>{{.R5}}</td><td>{{.Errors}}</td><td>{{.Signals}}</td></tr>
{{end}}</table>{{else}}<p class="none">No scopes yet.</p>{{end}}{{end}}`

// The JSON document.

// statusJSON is the JSON document; see Handler for its fields.
type statusJSON struct {
	At                time.Time   `json:"at"`
	InFlight          int         `json:"in_flight"`
	Waiting           int         `json:"waiting"`
	GlobalConcurrency int         `json:"global_concurrency"`
	Scopes            int         `json:"scopes"`
	N                 int         `json:"n"`
	Totals            countsJSON  `json:"totals"`
	TopWaiting        []scopeJSON `json:"top_waiting"`
	TopBackoff        []scopeJSON `json:"top_backoff"`
}

type countsJSON struct {
	Requests  uint64        `json:"requests"`
	Signals   uint64        `json:"signals"`
	Responses responsesJSON `json:"responses"`
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

func (sc *statusScratch) writeJSON(n int) error {
	st := &sc.st
	sc.jsonWait = sc.scopesJSON(sc.jsonWait[:0], sc.byWait)
	sc.jsonBack = sc.scopesJSON(sc.jsonBack[:0], sc.byBackoff)
	doc := statusJSON{
		At: st.At.UTC(), InFlight: st.InFlight, Waiting: st.Waiting, GlobalConcurrency: st.GlobalConcurrency,
		Scopes: len(st.Scopes), N: n, Totals: statusCounts(&st.Totals),
		TopWaiting: sc.jsonWait, TopBackoff: sc.jsonBack,
	}
	return json.NewEncoder(&sc.buf).Encode(&doc)
}

func (sc *statusScratch) scopesJSON(dst []scopeJSON, idx []int) []scopeJSON {
	if dst == nil {
		dst = make([]scopeJSON, 0, len(idx)) // [] in the JSON, not null
	}
	at := sc.st.At
	for _, i := range idx {
		s := &sc.st.Scopes[i]
		j := scopeJSON{
			Key: s.Key, InFlight: s.InFlight, Waiting: s.Waiting, Concurrency: s.Concurrency,
			DelayMS: statusMillis(s.Delay), Why: s.Reason.String(),
			BackoffDelayMS: statusMillis(s.BackoffDelay), BackoffConcurrency: s.BackoffConcurrency,
			BackoffBadMS: statusMillis(s.BackoffBad), BackoffSafeMS: statusMillis(s.BackoffSafe), Outage: s.Outage,
			AutoThrottleDelayMS: statusMillis(s.AutoThrottleDelay), RampupRate: s.RampupRate,
			Binding:       s.Pace.Binding.String(),
			LastLatencyMS: statusMillis(s.LastLatency), Counts: statusCounts(&s.Counts),
		}
		if !math.IsInf(s.Pace.Rate, 1) {
			r := s.Pace.Rate
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
	return countsJSON{Requests: c.Requests, Signals: c.Signals,
		Responses: responsesJSON{C1: r[1], C2: r[2], C3: r[3], C4: r[4], C5: r[5], Errors: r[0]}}
}

// statusMillis is d in milliseconds.
func statusMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package throttleprom

import (
	"sync"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/topscopes"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxScopes is how many scopes get a label of their own when
// Options.MaxScopes is 0.
const DefaultMaxScopes = 50

// OtherScope, "other", is the scope label of the figures summed over
// every scope that has no label of its own.
const OtherScope = topscopes.Other

// classLabels are the class label values, in Counts.Responses' order.
var classLabels = [6]string{"errors", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Options configure a Collector. The zero value is ready to use: at most
// DefaultMaxScopes named scopes, no constant labels.
type Options struct {
	// MaxScopes is the most scopes that get series of their own (the
	// busiest: by permits in flight, then callers waiting, then
	// requests); the others are summed under scope="other". 0 means
	// DefaultMaxScopes; a negative value exports no per-scope series,
	// only the totals.
	MaxScopes int
	// ConstLabels are added to every series, e.g. {"crawler": "news"} to
	// tell apart the managers of one process. nil adds none. They are
	// checked when the Collector is registered: invalid ones make
	// Register fail.
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector over a ThrottlingManager's Stats:
// each Collect takes one StatsInto snapshot and exports it as constant
// metrics, with no goroutine and no hook. Make one with NewCollector; the
// zero value is not usable.
//
// A Collector is safe for concurrent use. Collections run one at a time
// (a second scrape waits for the first), which keeps a single snapshot in
// memory, reused from one collection to the next. One Collector per
// manager is enough: registered on several registries, it gives each
// counters that never go down.
type Collector struct {
	m     *throttle.ThrottlingManager
	limit int // named scopes; -1: none

	requests, responses, signals        *prometheus.Desc
	inFlight, waiting, scopes, globalCc *prometheus.Desc

	scopeInFlight, scopeWaiting, scopeConcurrency *prometheus.Desc
	scopeDelay, scopePace, scopeBackoffDelay      *prometheus.Desc
	scopeRequests, scopeResponses, scopeSignals   *prometheus.Desc

	mu   sync.Mutex // held through a Collect
	snap topscopes.Snapshot
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector exporting m's Stats; register it with
// prometheus.Registerer.Register or MustRegister. It panics if m is nil.
func NewCollector(m *throttle.ThrottlingManager, opts Options) *Collector {
	if m == nil {
		panic("throttleprom: NewCollector with a nil manager")
	}
	c := &Collector{m: m, limit: opts.MaxScopes}
	switch {
	case c.limit == 0:
		c.limit = DefaultMaxScopes
	case c.limit < 0:
		c.limit = -1
	}
	cl := opts.ConstLabels
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	c.requests = desc("throttle_requests_total",
		"Requests admitted, counted once in each of their scopes, forgotten scopes included.")
	c.responses = desc("throttle_responses_total",
		"Released requests by status class (1xx to 5xx, errors: a transport error or no response), counted once in each of their scopes.", "class")
	c.signals = desc("throttle_backoff_signals_total",
		"Responses that were backoff signals (429, 503, timeouts ...), counted once in each scope they slowed.")
	c.inFlight = desc("throttle_in_flight",
		"Permits held now, all scopes.")
	c.waiting = desc("throttle_waiting",
		"Callers blocked in Acquire now.")
	c.scopes = desc("throttle_scopes",
		"Scopes the manager holds now.")
	c.globalCc = desc("throttle_global_concurrency",
		"Config.GlobalConcurrency: the most permits held at once across all scopes.")

	c.scopeInFlight = desc("throttle_scope_in_flight",
		"Permits a scope holds now.", "scope")
	c.scopeWaiting = desc("throttle_scope_waiting",
		"Callers blocked in Acquire on a scope now.", "scope")
	c.scopeConcurrency = desc("throttle_scope_concurrency",
		"A scope's effective concurrency now (configured, learned or robots.txt's); other: the sum.", "scope")
	c.scopeDelay = desc("throttle_scope_delay_seconds",
		"A scope's effective delay between request starts now, before jitter.", "scope")
	c.scopePace = desc("throttle_scope_pace_starts_per_second",
		"A scope's effective pace: the starts per second all its rules allow together (+Inf when none bounds it).", "scope")
	c.scopeBackoffDelay = desc("throttle_scope_backoff_delay_seconds",
		"A scope's delay as raised by backoff signals (0: not in backoff).", "scope")
	c.scopeRequests = desc("throttle_scope_requests_total",
		"Requests a scope admitted.", "scope")
	c.scopeResponses = desc("throttle_scope_responses_total",
		"A scope's released requests by status class (1xx to 5xx, errors: a transport error or no response).", "scope", "class")
	c.scopeSignals = desc("throttle_scope_backoff_signals_total",
		"Responses that were backoff signals for a scope.", "scope")
	return c
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.requests, c.responses, c.signals, c.inFlight, c.waiting, c.scopes, c.globalCc,
	} {
		ch <- d
	}
	if c.limit < 0 {
		return
	}
	for _, d := range []*prometheus.Desc{
		c.scopeInFlight, c.scopeWaiting, c.scopeConcurrency, c.scopeDelay, c.scopePace,
		c.scopeBackoffDelay, c.scopeRequests, c.scopeResponses, c.scopeSignals,
	} {
		ch <- d
	}
}

// Collect takes one snapshot of the manager (ThrottlingManager.StatsInto)
// and sends its metrics: the totals, then the named scopes' series, then
// those of "other".
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.snap
	s.Take(c.m, c.limit)
	st := &s.Stats

	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	total := topscopes.CountersOf(&st.Totals)
	send(ch, c.requests, counter, float64(total[topscopes.Requests]))
	for i, class := range classLabels {
		send(ch, c.responses, counter, float64(total[topscopes.Responses+i]), class)
	}
	send(ch, c.signals, counter, float64(total[topscopes.Signals]))
	send(ch, c.inFlight, gauge, float64(st.InFlight))
	send(ch, c.waiting, gauge, float64(st.Waiting))
	send(ch, c.scopes, gauge, float64(len(st.Scopes)))
	send(ch, c.globalCc, gauge, float64(st.GlobalConcurrency))
	if c.limit < 0 {
		return
	}

	for _, i := range s.Named {
		ss := &st.Scopes[i]
		k := ss.Key
		send(ch, c.scopeInFlight, gauge, float64(ss.InFlight), k)
		send(ch, c.scopeWaiting, gauge, float64(ss.Waiting), k)
		send(ch, c.scopeConcurrency, gauge, float64(ss.Concurrency), k)
		send(ch, c.scopeDelay, gauge, ss.Delay.Seconds(), k)
		if ss.Pace != (throttle.Pace{}) { // zero: a custom ScopeManager, pace unknown
			send(ch, c.scopePace, gauge, ss.Pace.Rate, k)
		}
		send(ch, c.scopeBackoffDelay, gauge, ss.BackoffDelay.Seconds(), k)
		c.sendCounters(ch, topscopes.CountersOf(&ss.Counts), k)
	}
	send(ch, c.scopeInFlight, gauge, float64(s.OtherInFlight), OtherScope)
	send(ch, c.scopeWaiting, gauge, float64(s.OtherWaiting), OtherScope)
	send(ch, c.scopeConcurrency, gauge, float64(s.OtherConcurrency), OtherScope)
	c.sendCounters(ch, s.OtherCounts, OtherScope)
}

// sendCounters sends a scope's counters.
func (c *Collector) sendCounters(ch chan<- prometheus.Metric, n topscopes.Counters, scope string) {
	send(ch, c.scopeRequests, prometheus.CounterValue, float64(n[topscopes.Requests]), scope)
	for i, class := range classLabels {
		send(ch, c.scopeResponses, prometheus.CounterValue, float64(n[topscopes.Responses+i]), scope, class)
	}
	send(ch, c.scopeSignals, prometheus.CounterValue, float64(n[topscopes.Signals]), scope)
}

// send sends one constant metric. A metric that cannot be made (invalid
// constant labels, when the Collector was not registered) is sent as an
// invalid metric, which fails the scrape with its error instead of a panic.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

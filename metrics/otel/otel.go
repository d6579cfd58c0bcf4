package throttleotel

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/topscopes"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// DefaultMaxScopes is how many scopes get a ScopeKey attribute of their
// own when Options.MaxScopes is 0.
const DefaultMaxScopes = 50

// OtherScope, "other", is the ScopeKey value of the figures summed over
// every scope that has no attribute value of its own.
const OtherScope = topscopes.Other

// The attribute keys of the observations.
const (
	// ScopeKey is the scope of the per-scope instruments: a scope key, or
	// OtherScope.
	ScopeKey = attribute.Key("throttle.scope")
	// ClassKey is the status class of the responses instruments: "1xx" to
	// "5xx", or "errors" (a transport error or no response).
	ClassKey = attribute.Key("throttle.status_class")
)

// classNames are the ClassKey values, in Counts.Responses' order.
var classNames = [6]string{"errors", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Options configure Register. The zero value is ready to use: at most
// DefaultMaxScopes named scopes, no extra attributes.
type Options struct {
	// MaxScopes is the most scopes observed with their own ScopeKey
	// value (the busiest: by permits in flight, then callers waiting,
	// then requests); the others are summed under OtherScope. 0 means
	// DefaultMaxScopes; a negative value observes no per-scope
	// instrument, only the totals.
	MaxScopes int
	// Attributes are added to every observation, e.g.
	// attribute.String("crawler", "news") to tell apart the managers of
	// one process. nil adds none. Register copies them.
	Attributes []attribute.KeyValue
}

// Register creates the instruments on meter and registers one callback
// that, at each collection, takes one ThrottlingManager.StatsInto snapshot
// of m and observes it (see the package doc for the instruments). It
// starts no goroutine and sets no hook.
//
// The callback is safe for concurrent use: collections by several readers
// run one at a time, which keeps a single snapshot in memory, reused from
// one collection to the next. Unregister the returned Registration to
// stop observing. Register once per manager and meter; managers sharing
// a meter need different Options.Attributes, or their observations clash.
func Register(m *throttle.ThrottlingManager, meter metric.Meter, opts Options) (metric.Registration, error) {
	if m == nil {
		return nil, errors.New("throttleotel: Register with a nil manager")
	}
	if meter == nil {
		return nil, errors.New("throttleotel: Register with a nil meter")
	}
	a := &adapter{m: m, limit: opts.MaxScopes, base: append([]attribute.KeyValue(nil), opts.Attributes...)}
	switch {
	case a.limit == 0:
		a.limit = DefaultMaxScopes
	case a.limit < 0:
		a.limit = -1
	}
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		return i
	}
	upDown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		i, err := meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		return i
	}
	intGauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		i, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		return i
	}
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		i, err := meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		return i
	}

	a.requests = counter("throttle.requests", "{request}",
		"Requests admitted, counted once in each of their scopes, forgotten scopes included.")
	a.responses = counter("throttle.responses", "{response}",
		"Released requests by status class, counted once in each of their scopes.")
	a.signals = counter("throttle.backoff.signals", "{signal}",
		"Responses that were backoff signals (429, 503, timeouts ...), counted once in each scope they slowed.")
	a.inFlight = upDown("throttle.in_flight", "{permit}", "Permits held now, all scopes.")
	a.waiting = upDown("throttle.waiting", "{caller}", "Callers blocked in Acquire now.")
	a.scopes = upDown("throttle.scopes", "{scope}", "Scopes the manager holds now.")
	a.globalCc = intGauge("throttle.global_concurrency", "{permit}",
		"Config.GlobalConcurrency: the most permits held at once across all scopes.")
	instruments := []metric.Observable{a.requests, a.responses, a.signals, a.inFlight, a.waiting, a.scopes, a.globalCc}
	if a.limit > 0 {
		a.scopeInFlight = upDown("throttle.scope.in_flight", "{permit}", "Permits a scope holds now.")
		a.scopeWaiting = upDown("throttle.scope.waiting", "{caller}", "Callers blocked in Acquire on a scope now.")
		a.scopeConcurrency = intGauge("throttle.scope.concurrency", "{permit}",
			"A scope's effective concurrency now (configured, learned or robots.txt's); other: the sum.")
		a.scopeDelay = gauge("throttle.scope.delay", "s",
			"A scope's effective delay between request starts now, before jitter.")
		a.scopePace = gauge("throttle.scope.pace", "{start}/s",
			"A scope's effective pace: the starts per second all its rules allow together (+Inf when none bounds it).")
		a.scopeBackoffDelay = gauge("throttle.scope.backoff.delay", "s",
			"A scope's delay as raised by backoff signals (0: not in backoff).")
		a.scopeRequests = counter("throttle.scope.requests", "{request}", "Requests a scope admitted.")
		a.scopeResponses = counter("throttle.scope.responses", "{response}", "A scope's released requests by status class.")
		a.scopeSignals = counter("throttle.scope.backoff.signals", "{signal}", "Responses that were backoff signals for a scope.")
		instruments = append(instruments, a.scopeInFlight, a.scopeWaiting, a.scopeConcurrency, a.scopeDelay,
			a.scopePace, a.scopeBackoffDelay, a.scopeRequests, a.scopeResponses, a.scopeSignals)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	a.total = metric.WithAttributeSet(attribute.NewSet(a.base...))
	for i, class := range classNames {
		a.totalClasses[i] = metric.WithAttributeSet(attribute.NewSet(append(a.base[:len(a.base):len(a.base)], ClassKey.String(class))...))
	}
	a.other = a.newScopeAttrs(OtherScope)
	a.named = map[string]*scopeAttrs{}
	return meter.RegisterCallback(a.observe, instruments...)
}

// adapter is one registration: the instruments and the callback's state.
type adapter struct {
	m     *throttle.ThrottlingManager
	limit int // named scopes; -1: none
	base  []attribute.KeyValue

	requests, responses, signals metric.Int64ObservableCounter
	inFlight, waiting, scopes    metric.Int64ObservableUpDownCounter
	globalCc                     metric.Int64ObservableGauge

	scopeInFlight, scopeWaiting                 metric.Int64ObservableUpDownCounter
	scopeConcurrency                            metric.Int64ObservableGauge
	scopeDelay, scopePace, scopeBackoffDelay    metric.Float64ObservableGauge
	scopeRequests, scopeResponses, scopeSignals metric.Int64ObservableCounter

	// The attributes of the totals, of "other" and of the named scopes,
	// made once: a scope keeps its entry while it stays named.
	total        metric.ObserveOption
	totalClasses [6]metric.ObserveOption
	other        *scopeAttrs

	mu    sync.Mutex // held through a collection
	snap  topscopes.Snapshot
	named map[string]*scopeAttrs
	gen   uint64 // collections, to drop the entries of scopes no longer named
}

// scopeAttrs are the attributes of one scope's observations.
type scopeAttrs struct {
	scope   metric.ObserveOption    // base, ScopeKey
	classes [6]metric.ObserveOption // base, ScopeKey, ClassKey
	gen     uint64                  // the last collection that named it
}

func (a *adapter) newScopeAttrs(key string) *scopeAttrs {
	kv := make([]attribute.KeyValue, 0, len(a.base)+2)
	kv = append(append(kv, a.base...), ScopeKey.String(key))
	sa := &scopeAttrs{scope: metric.WithAttributeSet(attribute.NewSet(kv...))}
	for i, class := range classNames {
		sa.classes[i] = metric.WithAttributeSet(attribute.NewSet(append(kv, ClassKey.String(class))...))
	}
	return sa
}

// observe is the callback: one snapshot, observed.
func (a *adapter) observe(_ context.Context, o metric.Observer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.snap
	s.Take(a.m, a.limit)
	st := &s.Stats

	total := topscopes.CountersOf(&st.Totals)
	o.ObserveInt64(a.requests, clamp(total[topscopes.Requests]), a.total)
	for i := range classNames {
		o.ObserveInt64(a.responses, clamp(total[topscopes.Responses+i]), a.totalClasses[i])
	}
	o.ObserveInt64(a.signals, clamp(total[topscopes.Signals]), a.total)
	o.ObserveInt64(a.inFlight, int64(st.InFlight), a.total)
	o.ObserveInt64(a.waiting, int64(st.Waiting), a.total)
	o.ObserveInt64(a.scopes, int64(len(st.Scopes)), a.total)
	o.ObserveInt64(a.globalCc, int64(st.GlobalConcurrency), a.total)
	if a.limit < 0 {
		return nil
	}

	a.gen++
	for _, i := range s.Named {
		ss := &st.Scopes[i]
		sa := a.named[ss.Key]
		if sa == nil {
			sa = a.newScopeAttrs(ss.Key)
			a.named[ss.Key] = sa
		}
		sa.gen = a.gen
		o.ObserveInt64(a.scopeInFlight, int64(ss.InFlight), sa.scope)
		o.ObserveInt64(a.scopeWaiting, int64(ss.Waiting), sa.scope)
		o.ObserveInt64(a.scopeConcurrency, int64(ss.Concurrency), sa.scope)
		o.ObserveFloat64(a.scopeDelay, ss.Delay.Seconds(), sa.scope)
		if ss.Pace != (throttle.Pace{}) { // zero: a custom ScopeManager, pace unknown
			o.ObserveFloat64(a.scopePace, ss.Pace.Rate, sa.scope)
		}
		o.ObserveFloat64(a.scopeBackoffDelay, ss.BackoffDelay.Seconds(), sa.scope)
		a.observeCounters(o, topscopes.CountersOf(&ss.Counts), sa)
	}
	for key, sa := range a.named {
		if sa.gen != a.gen {
			delete(a.named, key)
		}
	}
	o.ObserveInt64(a.scopeInFlight, int64(s.OtherInFlight), a.other.scope)
	o.ObserveInt64(a.scopeWaiting, int64(s.OtherWaiting), a.other.scope)
	o.ObserveInt64(a.scopeConcurrency, int64(s.OtherConcurrency), a.other.scope)
	a.observeCounters(o, s.OtherCounts, a.other)
	return nil
}

// observeCounters observes a scope's counters.
func (a *adapter) observeCounters(o metric.Observer, n topscopes.Counters, sa *scopeAttrs) {
	o.ObserveInt64(a.scopeRequests, clamp(n[topscopes.Requests]), sa.scope)
	for i := range classNames {
		o.ObserveInt64(a.scopeResponses, clamp(n[topscopes.Responses+i]), sa.classes[i])
	}
	o.ObserveInt64(a.scopeSignals, clamp(n[topscopes.Signals]), sa.scope)
}

// clamp converts a count to int64, saturating.
func clamp(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

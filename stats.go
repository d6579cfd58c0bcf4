package throttle

import (
	"time"
)

// Counts are counters of requests and their outcomes: a snapshot copied
// out of the manager (Stats), a plain value safe to keep and read on any
// goroutine. The zero value is no requests.
//
// Requests, Responses and Signals count the caller's requests (pages)
// only; the robots.txt fetches the manager makes itself (see
// RobotsConfig) are counted in Robots alone, so a crawl of 2 pages on a
// host whose robots.txt is a 404 shows Requests 2, Responses[2] 2 and
// Robots 1, not a 4xx. A robots.txt fetch still takes a slot while it
// runs (ScopeStats.InFlight and Stats.InFlight count it), and its answer
// still teaches the scope's policy (a 429 or 503 on it backs the scope
// off; the Backoff hook's event has Robots set).
type Counts struct {
	Requests uint64 // permits granted, robots.txt fetches excluded
	// Responses counts the answers to those requests by status class:
	// Responses[2] the 2xx, Responses[5] the 5xx ...; Responses[0] the
	// requests that ended with a transport error or no response.
	Responses [6]uint64
	Signals   uint64 // backoff signals among them
	// Robots counts the robots.txt requests the manager made itself
	// through the throttle: one per fetch, and one per redirect it
	// followed (each hop is a request). Their answers are in no other
	// field.
	Robots uint64
}

func (c *Counts) add(o *Counts) {
	c.Requests += o.Requests
	for i := range c.Responses {
		c.Responses[i] += o.Responses[i]
	}
	c.Signals += o.Signals
	c.Robots += o.Robots
}

// ScopeStats is one scope at the moment of a Stats call. The zero value is
// a scope with nothing held and no one waiting (ReasonNone). A plain value:
// copy it freely, but don't change it while another goroutine reads it.
type ScopeStats struct {
	Key      string
	InFlight int // permits held
	Waiting  int // callers blocked in Acquire on it
	// Concurrency and Delay are the effective limits now: configured,
	// learned, robots.txt's.
	Concurrency int
	Delay       time.Duration
	// Pace is the scope's effective pace: the start rate all its rules
	// allow together and the rule that binds it (see Pace). Zero for a
	// scope with a custom ScopeManager.
	Pace Pace
	// Reason is why a request of this scope alone would wait now
	// (ReasonNone: it would start), ReadyAt until when, if known.
	Reason  Reason
	ReadyAt time.Time
	// Backoff: the raised delay and reduced concurrency (0: none), the
	// highest delay that drew a signal and the lowest proven safe in
	// this episode, and whether the scope is probing an outage.
	BackoffDelay       time.Duration
	BackoffConcurrency int
	BackoffBad         time.Duration
	BackoffSafe        time.Duration
	Outage             bool
	AutoThrottleDelay  time.Duration // 0 when AutoThrottle is off
	RampupRate         float64       // rampup's rate in starts/s; 0 when rampup is off
	Gate               time.Time     // a server-given wait pending until then
	LastLatency        time.Duration
	// Counts are this scope's since it was created (a forgotten scope's
	// counts stay in Stats.Totals).
	Counts Counts
}

// InBackoff reports whether the scope is in backoff at at (the Stats'
// At): its delay raised or its concurrency lowered by backoff, an outage
// being probed, or a server-given gate still pending.
func (ss *ScopeStats) InBackoff(at time.Time) bool {
	return ss.BackoffDelay > 0 || ss.BackoffConcurrency > 0 || ss.Outage || ss.Gate.After(at)
}

// Stats is a snapshot of a manager. The zero value is an empty snapshot.
// Stats returns a new one each call; StatsInto overwrites st and reuses its
// Scopes and Series slices, so st must not be read while StatsInto runs.
type Stats struct {
	At                time.Time
	InFlight          int // permits held, all scopes
	Waiting           int // callers blocked in Acquire
	GlobalConcurrency int
	Totals            Counts // since New, forgotten scopes included
	// InBackoff is how many scopes are in backoff (ScopeStats.InBackoff).
	InBackoff int
	// Robots is the robots.txt cache: what was fetched, and so why
	// Totals.Robots is what it is.
	Robots RobotsStats
	Scopes []ScopeStats
	// Series are the busiest scopes' answers over the last 15 minutes,
	// the busiest first: at most SeriesScopes scopes, those with the
	// most answers lately (see ScopeSeries). A scope is counted from
	// when it became one of them, and only while it is: the manager
	// keeps a ring for each of these scopes and none for the others.
	Series []ScopeSeries
}

// RobotsStats is the state of a manager's robots.txt handling (see
// RobotsConfig) at the moment of a Stats call. The origins are those in
// the cache (at most RobotsConfig.MaxOrigins); each is in one of Fetching,
// Rules, NoRules and Failed. Counts.Robots counts the fetches.
type RobotsStats struct {
	// Enabled is RobotsConfig.Enabled: without it nothing is fetched.
	Enabled bool
	// Client says RobotsConfig.Client fetches robots.txt: its fetches are
	// in Counts.Robots only if its Transport is this manager's.
	Client bool
	// Enforce is RobotsConfig.Enforce.
	Enforce bool
	// Origins is the number of origins (scheme, host, port) whose
	// robots.txt was fetched or is being fetched, and is still cached.
	Origins int
	// Fetching: a fetch under way, with no rules or failure from before.
	Fetching int
	// Rules: a robots.txt with rules (a 2xx answer).
	Rules int
	// NoRules: nothing applies (a 4xx answer, too many redirects):
	// everything allowed, no delay.
	NoRules int
	// Failed: the last fetch failed (a 5xx, a network error, a timeout);
	// it is tried again later, and rules fetched before still apply.
	Failed int
	// Delays is the number of hosts whose robots.txt asks for a delay
	// (Crawl-delay or Request-rate) for the user agent.
	Delays int
}

// countsNow returns s's counts (s locked).
func (s *scope) countsNow() Counts {
	c := &s.counts
	out := Counts{Requests: uint64(c.requests), Signals: uint64(c.signals), Robots: uint64(s.robotsFetches)}
	for i, n := range c.responses {
		out.Responses[i] = uint64(n)
	}
	return out
}

// Stats returns a snapshot of every scope and the manager's totals.
func (m *ThrottlingManager) Stats() Stats {
	var st Stats
	m.StatsInto(&st)
	return st
}

// StatsInto is Stats reusing st's Scopes slice, so a caller polling every
// second allocates nothing once the slice is large enough (keys are
// shared with the manager, not copied).
func (m *ThrottlingManager) StatsInto(st *Stats) {
	now := m.clock.Now()
	*st = Stats{At: now, Scopes: st.Scopes[:0], Series: st.Series, GlobalConcurrency: m.cfg.GlobalConcurrency,
		Waiting: int(m.waiting.Load()), InFlight: int(m.global.n.Load())}
	globalFull := m.global.n.Load() >= m.global.limit
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		if sh.forgotten != nil {
			st.Totals.add(sh.forgotten)
		}
		for _, s := range sh.m {
			st.Scopes = append(st.Scopes, ScopeStats{})
			ss := &st.Scopes[len(st.Scopes)-1]
			s.mu.Lock()
			m.scopeStats(s, now, globalFull, ss)
			s.mu.Unlock()
			st.Totals.add(&ss.Counts)
			if ss.InBackoff(now) {
				st.InBackoff++
			}
		}
		sh.mu.RUnlock()
	}
	// After the scopes, whose locks the series' table takes under its own.
	st.Series = m.series.snapshot(st.Series, now)
	m.robotsStats(&st.Robots)
}

// scopeStats fills ss with s's state; s is locked.
func (m *ThrottlingManager) scopeStats(s *scope, now time.Time, globalFull bool, ss *ScopeStats) {
	c := &s.counts
	*ss = ScopeStats{Key: s.key, InFlight: int(c.inFlight), Waiting: s.queue.n, LastLatency: c.latency, Counts: s.countsNow()}
	adm := s.pol.admit(now, 1)
	ss.Reason, ss.ReadyAt = adm.Reason, adm.At
	if ss.Reason == ReasonNone && globalFull {
		ss.Reason = ReasonGlobal
	}
	s.pol.fillStats(now, c.latency, ss)
}

// fillStats adds the default policy's state to ss: its limits, learned
// parts and Pace, given the scope's last latency. The global cap binds
// the pace when it is what the scope waits for.
func (s *defaultScope) fillStats(now time.Time, latency time.Duration, ss *ScopeStats) {
	ss.Pace = s.pace(now, latency)
	if ss.Reason == ReasonGlobal {
		ss.Pace.Binding = ReasonGlobal
	}
	ss.Concurrency = s.concurrency()
	ss.Delay, _ = s.delay()
	b := &s.backoff
	ss.BackoffDelay, ss.BackoffConcurrency, ss.Outage = b.delay, b.concurrency, b.outage
	if b.hasBad {
		ss.BackoffBad = b.bad
	}
	ss.BackoffSafe = b.safe
	ss.AutoThrottleDelay = s.auto.current(&s.cfg)
	if s.cfg.Rampup.Enabled {
		ss.RampupRate = s.rampup.current(&s.cfg)
	}
	ss.Gate = s.adm.Gate
}

package throttle

import (
	"fmt"
	"slices"
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
)

// BackoffConfig configures how a scope reacts to backoff signals: 429, 5xx
// overload statuses and transport timeouts.
//
// The rule, per scope:
//
//   - A signal multiplies the delay in effect by Factor, never above
//     MaxDelay; from a zero delay the first step is MinDelay. Only requests
//     started after the previous step count: responses to requests sent at
//     the old rate were already answered by that step, so a burst of 429s
//     from in-flight requests is one step, not ten (TCP's one reduction per
//     round trip).
//   - The first signal after a quiet spell is isolated until another one
//     confirms it: a token bucket paced right at its limit refuses a
//     request now and then, and that refusal says little about the pace.
//     It steps the delay by Factor, and five answers without a signal to
//     requests sent at the raised delay (or, on a slow scope, the first
//     such answer a Window after the step) return the scope to its own
//     delay: the step costs about 5×(Factor-1) starts, five with the
//     default Factor (under 2 % of the next minute's on a scope paced at
//     200 ms). A second signal before that return, or within a Window
//     after it, confirms a limit: the episode goes on by the rules below,
//     as one that began with two signals.
//   - A signal that is not known to be a rate limit (a timeout, or a 5xx
//     that follows another signal: a 503 storm, not a limiter refusing
//     between its successes) and confirms an episode steps to at least
//     MinDelay, so that outages are told apart at the same pace whatever
//     the configured delay. A rate limit (a 429, or a 5xx right after a
//     success) steps by Factor alone.
//   - A timeout on a scope with more than one slot first lowers the
//     concurrency by ConcurrencyFactor (never below 1), then the delay.
//   - Recovery of a confirmed episode is a bisection: a full Window with
//     responses and no signal proves the current delay safe; the delay then
//     moves halfway toward the highest delay that drew a signal, and a
//     signal while probing below the lowest safe delay returns there rather
//     than doubling. The scope thus settles just above what the server
//     tolerates (within 5 %) instead of ping-ponging, even when the
//     configured delay itself drew the signals. After ten settled windows
//     that bound is forgotten, so a server that became more lenient is
//     probed again: the delay then moves halfway toward the configured
//     delay per quiet window, and once within MinDelay of it backoff is
//     over.
//   - Outages: when signals persist after the delay grew by Factor² from
//     the larger of the configured delay and MinDelay (with rampup on:
//     four come in a row with no success between), and none is a rate
//     limit, the scope sends one probe per OutageProbe, and the first
//     response that is not a signal returns it to the delay it had before
//     the episode. If that return draws signals again, the episode is a
//     rate limit after all and plain doubling continues. This keeps a
//     storm to a handful of requests and recovers within one probe of its
//     end, where doubling to MaxDelay would take minutes to notice.
//
// Server-given waits (Retry-After, RateLimit headers) gate the scope on top
// of one step, capped at MaxDelay. Backoff only ever tightens: the delay is
// never below the configured one, the concurrency never above it.
//
// A zero BackoffConfig is invalid (Factor must be >= 1, even with Enabled
// false), except in a Config.Scopes entry or a SetScopeConfig argument,
// where it stands for Default's: to turn backoff off, start from
// DefaultConfig().Default.Backoff and clear Enabled. A plain value, but
// copies share the Statuses slice: don't change it while another goroutine
// reads it.
type BackoffConfig struct {
	// Enabled turns backoff on. Default true.
	Enabled bool
	// Statuses are the response statuses that are backoff signals.
	// Default 429, 502, 503, 504 and Cloudflare's 520-524; nil means none
	// (a FeedbackFunc's Feedback.Backoff and overload errors still are).
	Statuses []int
	// Factor multiplies the delay at each signal. Default 2. Must be >= 1.
	Factor float64
	// MinDelay is the first step from a zero delay; the least delay of a
	// confirmed episode's step on a signal that is not a rate limit (a
	// timeout, a 5xx after another signal), so that outages are told
	// apart at the same pace whatever the configured delay; and the
	// distance from the configured delay at which recovery ends. It is
	// no floor under a rate limit's step: a 429 on a scope paced at
	// 200 ms steps to 400 ms. Default 1s.
	MinDelay time.Duration
	// MaxDelay caps the backoff delay and server-given waits. Default 300s.
	MaxDelay time.Duration
	// Jitter replaces the scope's Jitter while backing off. Default ±10 %.
	Jitter Jitter
	// ConcurrencyFactor multiplies the concurrency at a timeout, on scopes
	// with Concurrency > 1. Default 0.5 (Scrapy's
	// BACKOFF_CONCURRENCY_FACTOR). Must be in (0, 1]; 1 turns it off.
	ConcurrencyFactor float64
	// OutageProbe is the interval of probes during an outage. Default 60s.
	// Zero turns outage detection off (plain exponential backoff).
	OutageProbe time.Duration
	// RedirectMaxDelay caps a Retry-After on a 3xx response, which delays
	// the redirect's next hop (RFC 9110 10.2.3). Default 60s.
	RedirectMaxDelay time.Duration
}

// defaultBackoffConfig returns the backoff defaults named on each field,
// DefaultConfig().Default.Backoff.
func defaultBackoffConfig() BackoffConfig {
	return BackoffConfig{
		Enabled:           true,
		Statuses:          slices.Clone(defaultBackoffStatuses),
		Factor:            2,
		MinDelay:          time.Second,
		MaxDelay:          300 * time.Second,
		Jitter:            symmetricJitter(0.1),
		ConcurrencyFactor: 0.5,
		OutageProbe:       time.Minute,
		RedirectMaxDelay:  time.Minute,
	}
}

func (c BackoffConfig) validate(prefix string, delay time.Duration) error {
	f := func(n string) string { return prefix + "." + n }
	for _, st := range c.Statuses {
		if st < 100 || st > 999 {
			return &ConfigError{Field: f("Statuses"), Reason: fmt.Sprintf("%d is not an HTTP status", st)}
		}
	}
	if err := checkFloat(f("Factor"), c.Factor); err != nil {
		return err
	}
	if c.Factor < 1 {
		return &ConfigError{Field: f("Factor"), Reason: "must be >= 1"}
	}
	for _, d := range []struct {
		n string
		v time.Duration
	}{{"MinDelay", c.MinDelay}, {"MaxDelay", c.MaxDelay}, {"OutageProbe", c.OutageProbe}, {"RedirectMaxDelay", c.RedirectMaxDelay}} {
		if err := checkDuration(f(d.n), d.v); err != nil {
			return err
		}
	}
	if c.MaxDelay < c.MinDelay {
		return &ConfigError{Field: f("MaxDelay"), Reason: "must be >= MinDelay"}
	}
	if err := c.Jitter.validate(f("Jitter")); err != nil {
		return err
	}
	if err := checkFloat(f("ConcurrencyFactor"), c.ConcurrencyFactor); err != nil {
		return err
	}
	if c.ConcurrencyFactor <= 0 || c.ConcurrencyFactor > 1 {
		return &ConfigError{Field: f("ConcurrencyFactor"), Reason: "must be in (0, 1]"}
	}
	return nil
}

// settleForget is how many settled quiet windows make backoff forget the
// delay that drew a signal and probe lower again.
const settleForget = 10

// backoff is the learned backoff state of one scope. Its flags sit
// together: a scope's size decides its allocation's size class.
//
// What a request outside an episode reads (quiet, the window's count, the
// signal test) comes first, in 55 bytes: one cache line where the backoff
// starts on one (see defaultScope).
type backoff struct {
	// winEnd is when the current window ends (its start plus Window):
	// quiet compares it with now, a test that inlines where now.Sub does
	// not.
	winEnd     time.Time
	winSignals int
	winOK      int
	minStatus  int // the lowest of Backoff.Statuses

	hasBad  bool // bad is known (it may be 0: a zero delay drew a signal)
	stepped bool
	outage  bool // probing an outage
	outaged bool // this episode already had an outage; don't detect again
	winSet  bool
	// iso says the episode is one isolated signal so far, isoOK counts
	// the answers without a signal since its step.
	iso   bool
	isoOK uint8

	delay       time.Duration // backoff delay; 0 when not backing off
	concurrency int           // reduced concurrency; 0 when not reduced

	bad      time.Duration // highest delay that drew a rate signal this episode
	safe     time.Duration // lowest delay proven safe by a quiet window
	base     time.Duration // the delay in effect when the episode began
	lastStep time.Time     // when the delay or concurrency last stepped up
	settled  int           // quiet windows spent settled just above bad
	// probation is when the Window after an isolated step's return ends:
	// a signal before then confirms it.
	probation time.Time
}

// configure applies cfg; oldWindow is the Window the current window
// started under, whose start stays as it was.
func (b *backoff) configure(cfg *ScopeConfig, oldWindow time.Duration) {
	if !cfg.Backoff.Enabled {
		*b = backoff{}
		return
	}
	if b.winSet && cfg.Window != oldWindow {
		b.winEnd = b.winEnd.Add(-oldWindow).Add(cfg.Window)
	}
	b.minStatus = 1000
	for _, st := range cfg.Backoff.Statuses {
		b.minStatus = min(b.minStatus, st)
	}
	b.delay = min(b.delay, cfg.Backoff.MaxDelay)
	if b.concurrency >= cfg.Concurrency {
		b.concurrency = 0
	}
}

// isSignalStatus reports whether status is one of the scope's
// Backoff.Statuses (answer.classify makes the whole test).
func (b *backoff) isSignalStatus(cfg *ScopeConfig, status int) bool {
	// Most responses are 2xx and no default signal is below 429: the
	// range check spares the search on the hot path.
	return cfg.Backoff.Enabled && status >= b.minStatus && status != 0 && slices.Contains(cfg.Backoff.Statuses, status)
}

// gateFor returns the server gate fb sets on the scope key at now, if
// any: a server-given wait (Retry-After, a RateLimit reset), capped at
// MaxDelay, when gates says the answer may gate (it is a backoff signal,
// or a success that says the quota is spent: fb.Exhausted, unless the
// scope learned that its quota slides, see spentQuota). The gate holds
// every start of the scope until it passes, on top of whatever the
// signal does to the delay.
func (b *backoff) gateFor(now time.Time, cfg *ScopeConfig, key string, fb *Feedback, gates bool) (time.Time, bool) {
	if fb.HasWait && fb.appliesTo(key) && gates {
		return now.Add(min(fb.Wait, cfg.Backoff.MaxDelay)), true
	}
	return time.Time{}, false
}

// onAnswer learns from one answer at now, after rampup (whose verdict
// the answer carries): a rate signal rampup acted on is rampup's (with
// rampup on, backoff keeps what is not a rate limit: transport timeouts
// and outages); an outage rampup saw is probed from the pace rampup
// resumes at (the answer's delay); another signal steps the delay up; a
// success may end an outage. It reports whether the delay changed where
// the scope would not otherwise recompute it (an outage's end).
func (b *backoff) onAnswer(now time.Time, cfg *ScopeConfig, a *answer) bool {
	switch {
	case a.rampup == rampupTook && !a.spent: // a spent quota's success is no signal to backoff
	case a.rampup == rampupOutage:
		b.onOutage(now, cfg, a.delay)
	case a.rampup == rampupStale: // an outage's probing goes on
	case a.signal:
		b.onSignal(now, cfg, a.started, a.delay, a.timeout, a.rateLimited, a.conc)
	case !a.failed:
		return b.onSuccess(now, cfg, a.started)
	}
	return false
}

// gapFloor bounds the gap after a start whose jitter factor came from
// Backoff.Jitter (see defaultScope.gap): backoff only ever tightens, so
// that jitter (±10 %), which may reach lower than the scope's Jitter,
// never brings a start closer than the delay without backoff (own) times
// 1+Jitter.Min, as it could come without backoff; and backoff never waits
// longer than MaxDelay, so its jitter does not carry the gap g past it.
// d is the delay in effect.
func (b *backoff) gapFloor(cfg *ScopeConfig, g, d, own time.Duration) time.Duration {
	return max(min(g, max(cfg.Backoff.MaxDelay, d)), admission.ScaleDuration(own, 1+cfg.Jitter.Min))
}

func (b *backoff) learned() bool { return b.delay > 0 || b.concurrency > 0 || b.hasBad }

// onSignal applies one backoff signal. eff is the delay in effect, conc the
// concurrency in effect, started when the signalling request started;
// rateLimited says the signal is a rate limit, which is never an outage: a
// 429, or a 5xx that follows a success (rate limiters that answer 503,
// such as nginx's limit_req, refuse between successes; an outage fails
// everything).
func (b *backoff) onSignal(now time.Time, cfg *ScopeConfig, started time.Time, eff time.Duration, timeout, rateLimited bool, conc int) {
	bc := cfg.Backoff
	if !bc.Enabled {
		return
	}
	b.winSignals++
	if b.stepped && started.Before(b.lastStep) {
		return // sent before the last step: already answered
	}
	confirms := true
	if b.delay == 0 && b.concurrency == 0 { // a new episode
		confirms = now.Before(b.probation)
		*b = backoff{minStatus: b.minStatus, winEnd: b.winEnd, winSet: b.winSet, winSignals: b.winSignals, winOK: b.winOK, base: eff}
	}
	b.iso = !confirms
	b.lastStep, b.stepped = now, true
	b.settled = 0
	if timeout && conc > 1 && bc.ConcurrencyFactor < 1 {
		b.iso = false // a saturated server: recovery by windows
		b.concurrency = max(1, int(float64(conc)*bc.ConcurrencyFactor))
		return
	}
	if b.safe > 0 && eff >= b.safe {
		b.safe = 0 // the safe delay isn't safe any more
	}
	threshold := admission.ScaleDuration(max(b.base, bc.MinDelay), bc.Factor*bc.Factor)
	switch {
	case b.outage:
		// still down: keep probing
	case bc.OutageProbe > 0 && !b.outaged && !rateLimited && eff >= threshold && bc.Factor > 1:
		b.outage, b.outaged = true, true
		b.bad, b.hasBad = 0, false // these signals say nothing about the rate
	default:
		b.bad, b.hasBad = max(b.bad, eff), true
	}
	var next time.Duration
	switch {
	case b.outage:
		next = max(bc.OutageProbe, eff)
	case eff == 0:
		next = bc.MinDelay
	default:
		next = admission.ScaleDuration(eff, bc.Factor)
		if !b.iso && !rateLimited {
			next = max(next, bc.MinDelay)
		}
		if b.safe > eff {
			next = min(next, b.safe) // bisection: back to the last safe delay
		}
	}
	b.delay = min(max(next, b.delay), bc.MaxDelay)
}

// onOutage starts probing an outage at once: rampup saw a run of failures
// with no success between (see outageRun), at a pace whose delay was eff.
// Backoff's own rule (signals that persist after the delay grew by
// Factor²) would first send a request at 1, 2 and 4 times MinDelay; a run
// at a rate that rampup had proven good needs no such confirmation. The
// first probe comes after outageFirstProbe, the next ones OutageProbe
// apart: a rate limiter that refused a run of requests answers the first
// probe, and costs 5 s rather than a minute. It does nothing once the
// episode had its outage.
func (b *backoff) onOutage(now time.Time, cfg *ScopeConfig, eff time.Duration) {
	bc := cfg.Backoff
	if !bc.Enabled || bc.OutageProbe <= 0 || b.outage || b.outaged {
		return
	}
	if b.delay == 0 && b.concurrency == 0 { // a new episode
		*b = backoff{minStatus: b.minStatus, winEnd: b.winEnd, winSet: b.winSet, winSignals: b.winSignals, winOK: b.winOK, base: eff}
	}
	b.lastStep, b.stepped = now, true
	b.outage, b.outaged = true, true
	b.bad, b.hasBad, b.settled = 0, false, 0
	b.delay = min(max(min(outageFirstProbe, bc.OutageProbe), eff, b.delay), bc.MaxDelay)
}

// outageFirstProbe is how long after rampup saw an outage begin backoff
// sends its first probe (see onOutage).
const outageFirstProbe = 5 * time.Second

// isolatedQuiet is how many answers without a signal, to requests sent
// at the raised delay, end the step of an isolated signal (the five of
// BackoffConfig's doc): over them a token bucket gains that many tokens
// (at twice the delay, one a start), and the step costs about
// isolatedQuiet×(Factor-1) starts. A limiter that still refuses the old
// pace refuses it again within the Window after, which confirms.
const isolatedQuiet = 5

// onSuccess notes a response that is not a signal to a request started
// at started. It reports whether the delay changed (an outage or an
// isolated step ended).
func (b *backoff) onSuccess(now time.Time, cfg *ScopeConfig, started time.Time) bool {
	b.winOK++
	if b.outage {
		// The server answers again: back to the delay before the
		// episode, which ends (the scope's own delay holds it there),
		// so the next outage is probed as this one was.
		*b = backoff{minStatus: b.minStatus, winEnd: b.winEnd, winSet: b.winSet, winSignals: b.winSignals, winOK: b.winOK}
		return true
	}
	if !b.iso || started.Before(b.lastStep) {
		return false
	}
	if b.isoOK++; b.isoOK < isolatedQuiet && now.Sub(b.lastStep) < cfg.Window {
		return false
	}
	// The isolated signal was not confirmed: back to the scope's own
	// delay, on probation for a Window.
	*b = backoff{minStatus: b.minStatus, winEnd: b.winEnd, winSet: b.winSet, winSignals: b.winSignals, winOK: b.winOK,
		lastStep: b.lastStep, stepped: true, probation: now.Add(cfg.Window)}
	return true
}

// quiet reports whether tick has nothing to do at now: backoff is off, or
// now is inside the current window.
func (b *backoff) quiet(now time.Time, cfg *ScopeConfig) bool {
	return !cfg.Backoff.Enabled || b.winSet && now.Before(b.winEnd)
}

// tick processes the windows that ended before now. base is the scope's
// delay without backoff, the floor recovery returns to.
// It reports whether the delay or concurrency changed.
// own is the delay of the scope's other rules (configured or rampup's,
// robots.txt's, AutoThrottle's): a window in which it was at least the
// backoff delay proves nothing about that delay, which did not pace a
// single start, and recovers nothing.
func (b *backoff) tick(now time.Time, cfg *ScopeConfig, base, own time.Duration) bool {
	if !cfg.Backoff.Enabled {
		return false
	}
	w := cfg.Window
	if !b.winSet {
		b.winEnd, b.winSet = now.Add(w), true
		return false
	}
	if now.Before(b.winEnd) {
		return false
	}
	changed := false
	held := b.concurrency == 0 && b.delay <= own
	if b.winSignals == 0 && b.winOK > 0 && (b.delay > 0 || b.concurrency > 0) && !held && !b.iso {
		b.recover(cfg, base)
		changed = true
	}
	b.winEnd = b.winEnd.Add(now.Sub(b.winEnd.Add(-w)) / w * w)
	b.winSignals, b.winOK = 0, 0
	return changed
}

// recover takes one step back after a quiet window: halfway from the
// delay just proven safe toward the highest delay that drew a signal, and
// once within 5 % of it, no further (settled) until settleForget windows
// have passed. With no such delay known (none, or forgotten), halfway
// toward the configured delay, and back to it once within MinDelay.
func (b *backoff) recover(cfg *ScopeConfig, base time.Duration) {
	if b.concurrency > 0 {
		b.concurrency = (b.concurrency + cfg.Concurrency + 1) / 2
		if b.concurrency >= cfg.Concurrency {
			b.concurrency = 0
		}
	}
	if b.delay == 0 || b.outage {
		return
	}
	b.safe = b.delay
	if b.hasBad && b.bad >= base {
		if b.delay-b.bad <= max(b.delay/20, time.Millisecond) {
			if b.settled++; b.settled >= settleForget {
				b.bad, b.hasBad, b.settled = 0, false, 0 // probe lower again
			}
			return
		}
		b.delay = b.bad + (b.delay-b.bad)/2
		return
	}
	next := base + (b.delay-base)/2
	if next-base < cfg.Backoff.MinDelay {
		*b = backoff{minStatus: b.minStatus, winEnd: b.winEnd, winSet: b.winSet, winSignals: b.winSignals, winOK: b.winOK}
		return
	}
	b.delay = next
}

// spentQuota learns whether a server's quota, reported spent on a success
// (X-RateLimit-Remaining: 0, RateLimit r=0), is empty until the reset it
// names or slides.
//
// A quota of fixed windows (GitHub's per hour, most APIs' per minute) is
// empty until its reset: the scope is gated until then. A sliding window
// (go-chi/httprate's counter, a quota in any trailing minute) frees what
// the last window took gradually: a client near its limit is told "0
// remaining" on most successes, while its next request would still be
// admitted. Gated until each reset, such a client loses up to a window per
// spent answer (55 % of httprate's limit in the field suite), and the
// gate itself, by emptying the window, hides what the server is.
//
// So the first spent answer is tested rather than believed: it does not
// gate the scope (the next request starts at the scope's pace), and the
// answer to a request started after it, before its reset, tells: a success says the quota slides, a refusal (429, with the
// server's Retry-After) that it is fixed. From then on a spent answer of a
// fixed quota gates the scope until its reset and counts as a rate signal
// for rampup; one of a sliding quota does neither, and the server's
// refusals still do. The test costs a fixed quota one refusal, once. A
// request started after the reset tests nothing (the quota may have been
// refilled) and drops the test; the next spent answer starts another.
//
// Its times are Unix nanoseconds (0: none), so that every scope, most of
// which never see such an answer, carries 40 bytes of it, not 100.
type spentQuota struct {
	kind      quotaKind
	probe     int64 // pending test: the spent answer's time; 0: none
	reset     int64 // and the reset it named
	gated     int64 // a fixed quota's last gate: the reset it waited for
	left      int64 // the remaining count last reported, of the window ending at leftReset
	leftReset int64
}

// quotaKind is what spentQuota learned of a scope's quota.
type quotaKind uint8

const (
	quotaUnknown quotaKind = iota
	quotaFixed             // empty until its reset
	quotaSliding           // frees gradually: "0 remaining" is no refusal
)

// spent learns from an answer with status, no backoff signal, to a
// request started at started, at now, that says the quota is spent until
// reset, and reports whether it gates the scope until reset (and counts
// as a rate signal).
func (q *spentQuota) spent(now, started, reset time.Time, status int) bool {
	if q.kind == quotaUnknown && q.pending(started) {
		q.learn(status)
	}
	q.afterGate(started, status, true)
	switch q.kind {
	case quotaFixed:
		q.gated = reset.UnixNano()
		return true
	case quotaSliding:
		return false
	}
	q.probe, q.reset = now.UnixNano(), reset.UnixNano()
	return false
}

// afterGate tests a fixed quota again with the first answer to a request
// started after the reset its last gate waited for: a window of a fixed
// quota is full again then, so its first success has quota to spare. A
// refusal, or a success that says the quota is spent again (spentAgain),
// says the quota slides after all: a sliding counter, as
// go-chi/httprate's, still counts most of the last window at its reset,
// and its refusal of the request after a spent answer looked like a
// fixed quota's.
func (q *spentQuota) afterGate(started time.Time, status int, spentAgain bool) {
	if q.kind != quotaFixed || q.gated == 0 || started.UnixNano() < q.gated || status == 0 {
		return
	}
	q.gated = 0
	if spentAgain || status < 200 || status >= 300 {
		q.kind = quotaSliding
	}
}

// remaining learns from a remaining count left reported for a request
// started at started, with the reset it names: a count that grew before
// the reset the last one named says the quota slides (a fixed window's
// count only falls until its reset). It decides at once, with no
// refusal, what spent tests with one.
func (q *spentQuota) remaining(started time.Time, left int64, reset time.Time) {
	if q.kind != quotaSliding && q.leftReset != 0 && started.UnixNano() < q.leftReset && left > q.left {
		q.kind, q.probe, q.gated = quotaSliding, 0, 0
	}
	q.left, q.leftReset = left, reset.UnixNano()
}

// learn ends the pending test with the status of the request that made
// it: a 2xx was admitted after a spent answer, anything else refused (a
// 429, or GitHub's 403 for a spent quota).
func (q *spentQuota) learn(status int) {
	q.probe = 0
	if status >= 200 && status < 300 {
		q.kind = quotaSliding
	} else {
		q.kind = quotaFixed
	}
}

// other learns from an answer with status that does not say the quota is
// spent (or is a backoff signal); a transport error (status 0) tells
// nothing.
func (q *spentQuota) other(started time.Time, status int) {
	if status != 0 && q.kind == quotaUnknown && q.pending(started) {
		q.learn(status)
	}
	q.afterGate(started, status, false)
}

// pending reports whether a request started at started tests a pending
// spent answer: it started after that answer came and before its reset.
func (q *spentQuota) pending(started time.Time) bool {
	if q.probe == 0 {
		return false
	}
	if started.UnixNano() >= q.reset {
		q.probe = 0 // nothing was sent in time: test the next one
		return false
	}
	return started.UnixNano() >= q.probe
}

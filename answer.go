package throttle

import (
	"net/http"
	"time"
)

// answer is one response as a scope's policies learn from it: the
// Feedback read once for this scope, and the pace the scope had when it
// came. AutoThrottle, backoff and rampup are the same kind of state
// machine: each is configured from the ScopeConfig (configure), fed each
// answer at its time (onAnswer), rolls its windows forward at a time
// (tick), and reports whether it holds anything learned (learned); none
// reads a clock. The scope feeds rampup first, then backoff, then
// AutoThrottle, and an answer carries rampup's verdict to backoff: rampup
// owns the rate signals it acts on, backoff what remains.
type answer struct {
	started time.Time     // when its request started
	latency time.Duration // how long the server took
	status  int           // the response's status; 0: a transport error
	failed  bool          // a transport error
	timeout bool          // a transport timeout
	// What the answer is, as classify decides it: a signal for this
	// scope or a success; a signal's rateLimited says backoff reads it
	// as a rate limit (a 429, or a 5xx right after a success: a limiter
	// refusing between its successes), and limitStatus that its status
	// says so itself (429), which no outage answers.
	signal, rateLimited, limitStatus bool
	// spent says it is a success whose headers say the scope's quota is
	// spent (X-RateLimit-Remaining: 0 and the like), and that the scope
	// believes them (see spentQuota).
	spent bool
	// gated says it gates the scope with a server-given wait, gate long.
	gated bool
	gate  time.Duration
	// stated is the rate the server states it allows (Feedback.StatedRate),
	// a policy when policy is set (Feedback.StatedPolicy).
	stated float64
	policy bool
	// reset is the reset the server named with a stated rate that is not
	// a policy (its wait from now); zero when none.
	reset time.Time
	// remaining is the count the server says is left (Feedback.Remaining);
	// -1 when it names none.
	remaining int64

	// The scope when it came: its delay and concurrency in effect, and
	// the manager's GlobalConcurrency (rampup's cap on slots).
	delay     time.Duration
	conc      int
	globalCap int

	// rampup is rampup's verdict on it, for backoff (rampupLeft when
	// rampup is off).
	rampup rampupVerdict
}

// answerFor reads fb for the scope at now: the answer to the request of
// ticket t. prevSignal says the scope's previous answer was a signal.
func (s *defaultScope) answerFor(now time.Time, t *Ticket, fb *Feedback, prevSignal bool) answer {
	a := answer{started: t.Start, latency: fb.Latency, status: fb.Status, failed: fb.Err != nil, timeout: fb.Timeout,
		stated: fb.StatedRate, policy: fb.StatedPolicy, globalCap: s.globalCap, conc: s.concurrency()}
	a.classify(&s.cfg, s.key, fb, &s.backoff, prevSignal)
	signal := a.signal
	a.delay, _ = s.delay()
	a.remaining = -1
	if fb.HasRemaining {
		a.remaining = fb.Remaining
	}
	if fb.StatedRate > 0 && !fb.StatedPolicy && fb.HasWait {
		a.reset = now.Add(fb.Wait)
	}
	if fb.HasRemaining && fb.HasWait && fb.appliesTo(s.key) {
		s.quota.remaining(t.Start, fb.Remaining, now.Add(fb.Wait))
	}
	switch {
	case !fb.appliesTo(s.key):
	case !signal && fb.Exhausted && fb.HasWait:
		a.spent = s.quota.spent(now, t.Start, now.Add(fb.Wait), fb.Status)
	case !signal && fb.Exhausted:
		a.spent = s.quota.kind != quotaSliding // no reset to test it against
	default:
		s.quota.other(t.Start, fb.Status)
	}
	if s.rampup != nil {
		// Rampup paces the scope under the server's limit: a success
		// that says the quota is spent gates nothing (a sliding quota
		// says so at most successes near its limit, and its reset,
		// rounded up to a second, would cost a second a request).
		a.spent = false
	}
	if gate, ok := s.backoff.gateFor(now, &s.cfg, s.key, fb, signal || a.spent); ok {
		a.gated, a.gate = true, gate.Sub(now)
	}
	return a
}

// classify decides what fb is for the scope key, the one place the
// policies' reading of an answer is made: a signal when it applies to
// the scope and either says so (Feedback.Backoff: a transport error that
// shows overload, see isBackoffError, or a FeedbackFunc's verdict) or has
// one of the scope's Backoff.Statuses; else a success. A signal whose
// status is 429 is a limit by its status (limitStatus: rampup never
// counts it toward an outage); one with any status right after an answer
// that was no signal (prevSignal false) backoff reads as a rate limit
// too (rateLimited), while a run of them may be an outage.
func (a *answer) classify(cfg *ScopeConfig, key string, fb *Feedback, b *backoff, prevSignal bool) {
	a.signal = fb.appliesTo(key) && (fb.Backoff || b.isSignalStatus(cfg, fb.Status))
	a.limitStatus = fb.Status == http.StatusTooManyRequests
	a.rateLimited = a.limitStatus || fb.Status != 0 && !prevSignal
}

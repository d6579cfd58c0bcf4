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
	// signal says it is a backoff signal for this scope (see
	// backoff.isSignal); rateLimited that it is a rate limit, never an
	// outage: a 429, or a 5xx right after a success (a limiter refusing
	// between its successes).
	signal, rateLimited bool
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
	signal := s.backoff.isSignal(&s.cfg, s.key, fb)
	a := answer{started: t.Start, latency: fb.Latency, status: fb.Status, failed: fb.Err != nil, timeout: fb.Timeout,
		signal: signal, stated: fb.StatedRate, policy: fb.StatedPolicy, globalCap: s.globalCap, conc: s.concurrency()}
	a.delay, _ = s.delay()
	a.remaining = -1
	if fb.HasRemaining {
		a.remaining = fb.Remaining
	}
	if fb.StatedRate > 0 && !fb.StatedPolicy && fb.HasWait {
		a.reset = now.Add(fb.Wait)
	}
	a.rateLimited = fb.Status == http.StatusTooManyRequests || fb.Status != 0 && !prevSignal
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
	if gate, ok := s.backoff.gateFor(now, &s.cfg, s.key, fb, a.spent); ok {
		a.gated, a.gate = true, gate.Sub(now)
	}
	return a
}

package throttle

import "time"

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

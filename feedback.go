package throttle

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/crawlerkit/throttle/ratelimit"
)

// Feedback is what one response, or one transport error, tells the scopes of
// the request that produced it. A FeedbackFunc builds it at Release; the
// manager fills Latency when the FeedbackFunc left it zero, then hands it to
// each scope's ScopeManager.Finish. The zero Feedback reports a request
// that ended with no response, no error and no signal; ReleaseFeedback
// fills in its Latency. A plain value, but copies share the BackoffScopes
// and Quota slices: don't change them while another goroutine reads them.
type Feedback struct {
	// Latency is how long the server took: connection obtained to first
	// response byte through the Transport; Acquire's return to Release for
	// manual callers who don't report one.
	Latency time.Duration
	// Status is the response's status code; 0 when there was no response.
	Status int
	// Err is the transport error, if any.
	Err error
	// Size is the response's size in bytes when known (Content-Length),
	// else -1. Used only for logging.
	Size int64

	// Backoff marks a backoff signal: the server says, or shows, that it is
	// overloaded or rate limiting, and the scope slows down (see
	// BackoffConfig; with rampup on, RampupConfig).
	Backoff bool
	// Timeout marks a signal that the server is saturated rather than rate
	// limiting (a timeout, a refused or reset connection): scopes with
	// Concurrency > 1 lower their concurrency before their delay.
	Timeout bool
	// BackoffScopes, when not nil, restricts Backoff and Wait to these scope
	// keys among the request's scopes (e.g. an upstream 429 reported by a
	// scraping API slows the target site's scope, not the API's).
	BackoffScopes []string

	// Wait is a server-given wait from the time of the feedback (Retry-After,
	// RateLimit and X-RateLimit headers); HasWait says one was given.
	// With Backoff it gates the scope on top of one backoff step; with
	// Exhausted alone it gates the scope without any backoff step.
	Wait    time.Duration
	HasWait bool
	// Exhausted says the headers report the quota spent (remaining 0) on a
	// response that is not a backoff signal. The default ScopeManager
	// tests the first such answer of a scope (the next request goes at
	// its pace): refused, the quota is of fixed windows, and every later
	// spent answer gates the scope until Wait, so the 429 never comes;
	// admitted, the quota slides (go-chi/httprate) and "0 remaining" is
	// no refusal: the scope is not gated for it.
	Exhausted bool
	// Remaining is the smallest count of requests the headers say are
	// left in the quota (ratelimit.Wait.Remaining), when HasRemaining.
	// A quota whose remaining count grows before the reset it named
	// slides, and its "0 remaining" is no refusal (see Exhausted).
	Remaining    int64
	HasRemaining bool

	// StatedRate is the request rate the server states it allows, in
	// requests per second (ratelimit.Wait.Rate); 0 when it states none.
	// StatedPolicy reports that the server stated it as a policy
	// (RateLimit-Policy's quota and window, ratelimit.Wait.Policy):
	// rampup then paces 2 % under it from the first response that states
	// it, and never above. A rate estimated from a limit and its reset
	// (X-RateLimit-*) is a hint: rampup climbs towards it, and past it if
	// the server accepts more.
	StatedRate   float64
	StatedPolicy bool

	// Quota corrects the quota counts of the request's scopes: a scope
	// admits at most Quota in cost per Window, counted with the actual
	// costs reported here.
	Quota []QuotaUse

	// NoAdjust asks the learned policies (AutoThrottle, backoff, rampup) to
	// ignore this response, like Scrapy's autothrottle_dont_adjust_delay.
	NoAdjust bool
}

// QuotaUse corrects one scope's quota count at Release. The zero QuotaUse
// corrects nothing. A plain value: copy it freely, but don't change it
// while another goroutine reads it.
type QuotaUse struct {
	// Scope is the scope key; "" means every scope of the request.
	Scope string
	// Cost, when HasCost, is the request's actual cost; it replaces the cost
	// counted at admission (e.g. from an X-Actual-Cost header).
	Cost    int64
	HasCost bool
	// Remaining, when HasRemaining, is the server's count of what is left in
	// the current window; the window's count is raised to Quota-Remaining.
	Remaining    int64
	HasRemaining bool
}

// appliesTo reports whether a backoff signal or wait in fb applies to scope.
func (fb *Feedback) appliesTo(scope string) bool {
	return fb.BackoffScopes == nil || slices.Contains(fb.BackoffScopes, scope)
}

// A FeedbackFunc turns a response, or a transport error, into Feedback. now
// is the manager's clock at Release, against which HTTP dates are parsed.
// It may be called concurrently. Config.Feedback nil means DefaultFeedback.
//
// A custom FeedbackFunc usually calls DefaultFeedback and adjusts the result,
// e.g. to read an X-Upstream-Status header set by a scraping API.
type FeedbackFunc func(now time.Time, resp *http.Response, err error) Feedback

// defaultBackoffStatuses are the statuses that are backoff signals unless a
// scope's Backoff.Statuses says otherwise: 429, 502, 503, 504 and
// Cloudflare's 520-524.
var defaultBackoffStatuses = []int{429, 502, 503, 504, 520, 521, 522, 523, 524}

// DefaultFeedback is the FeedbackFunc used when Config.Feedback is nil.
//
// A response's status is reported; whether it is a backoff signal is decided
// per scope against that scope's Backoff.Statuses (429, 502, 503, 504 and
// 520-524 unless configured), so DefaultFeedback sets Backoff (and Timeout)
// only for a transport error that shows an overloaded server: a timeout
// (net.Error.Timeout, the client's deadline), a refused or reset
// connection, or an unexpected EOF; not a request the caller cancelled
// (context.Canceled). Server-given waits come from ratelimit.Parse on the
// response's headers. DefaultFeedback(now, nil, err).Backoff tells whether
// err is such an error.
func DefaultFeedback(now time.Time, resp *http.Response, err error) Feedback {
	var fb Feedback
	defaultFeedback(&fb, now, resp, err)
	return fb
}

// defaultFeedback is DefaultFeedback filling *fb, which is zero, in place.
func defaultFeedback(fb *Feedback, now time.Time, resp *http.Response, err error) {
	fb.Size = -1
	if err != nil { // fb.Err is nil already: no write, and no write barrier while the GC marks
		fb.Err = err
	}
	if resp != nil {
		fb.Status = resp.StatusCode
		fb.Size = resp.ContentLength
		w := ratelimit.Parse(resp.Header, now)
		fb.Wait, fb.HasWait, fb.Exhausted, fb.StatedRate, fb.StatedPolicy = w.Duration, w.Present, w.Exhausted, w.Rate, w.Policy
		fb.Remaining, fb.HasRemaining = w.Remaining, w.Remaining >= 0
		return
	}
	if err != nil && isBackoffError(err) {
		fb.Backoff = true
		fb.Timeout = true
	}
}

// isBackoffError reports whether a transport error shows an overloaded
// server: a timeout (net.Error.Timeout, the client's deadline), a refused or
// reset connection, or an unexpected EOF. A request the caller cancelled
// (context.Canceled) is not the server's fault and is not a signal.
func isBackoffError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// WithoutAdjust returns a context whose requests' feedback changes nothing
// learned (AutoThrottle, backoff, rampup): Feedback.NoAdjust is set for them.
func WithoutAdjust(ctx context.Context) context.Context {
	return withValues(ctx, func(v *ctxValues) { v.noAdjust = true })
}

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

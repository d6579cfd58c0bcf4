package throttle

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spentAnswer is a 200 that says the quota is spent until wait from now.
func spentAnswer(wait time.Duration) Feedback {
	return Feedback{Status: 200, Wait: wait, HasWait: true, Exhausted: true}
}

// gatedUntil is the scope's server gate, or zero.
func (p *policyRig) gatedUntil() time.Time {
	if a := p.s.Admit(p.now, 1); a.Reason == ReasonGate {
		return a.At
	}
	return time.Time{}
}

// TestSpentQuotaSliding: go-chi/httprate tells a client near its limit "0
// remaining" on its successes while it still admits the next request. The
// first spent answer does not gate the scope; a success to the next
// request, started before the reset, shows the quota slides: from then on
// no spent answer gates the scope.
func TestSpentQuotaSliding(t *testing.T) {
	p := newPolicy(t, backoffConfig())
	p.request(10*ms, spentAnswer(time.Second))
	assert.True(t, p.gatedUntil().IsZero(), "the first spent answer is tested, not believed")
	p.now = p.now.Add(100 * ms)
	p.request(10*ms, spentAnswer(900*ms)) // admitted before the reset
	assert.Equal(t, quotaSliding, p.s.quota.kind)
	for range 5 {
		p.now = p.now.Add(100 * ms)
		p.request(10*ms, spentAnswer(time.Second))
		assert.True(t, p.gatedUntil().IsZero(), "a sliding quota's spent answer gates nothing")
	}
	p.request(10*ms, Feedback{Status: 429, Wait: 10 * time.Second, HasWait: true})
	assert.Equal(t, p.now.Add(10*time.Second), p.gatedUntil(), "its refusals still gate")
}

// TestSpentQuotaFixed: a request started after the first spent answer and
// before its reset is refused (429, or GitHub's 403): the quota is of fixed
// windows, and every later spent answer gates the scope until its reset.
func TestSpentQuotaFixed(t *testing.T) {
	for _, status := range []int{429, 403} {
		p := newPolicy(t, backoffConfig())
		p.request(10*ms, spentAnswer(time.Minute))
		assert.True(t, p.gatedUntil().IsZero())
		p.now = p.now.Add(time.Second)
		p.request(10*ms, Feedback{Status: status, Wait: 59 * time.Second, HasWait: true, Exhausted: true})
		assert.Equal(t, quotaFixed, p.s.quota.kind, "status %d", status)

		q := newPolicy(t, backoffConfig())
		q.s.quota = p.s.quota
		q.request(10*ms, spentAnswer(30*time.Second))
		assert.Equal(t, q.now.Add(30*time.Second), q.gatedUntil(), "status %d: a fixed quota's spent answer gates", status)
	}
}

// TestSpentQuotaUntested: answers that cannot tell leave the test pending
// or drop it: a transport error, a request started before the spent
// answer came (it was on its way), or none started before the reset.
func TestSpentQuotaUntested(t *testing.T) {
	p := newPolicy(t, backoffConfig())
	early := p.s.Start(p.now, 1) // on its way when the spent answer comes
	p.request(10*ms, spentAnswer(time.Second))
	p.s.Finish(p.now, early, &Feedback{Status: 200})
	assert.Equal(t, quotaUnknown, p.s.quota.kind, "started before the spent answer")
	p.request(10*ms, Feedback{Err: io.ErrUnexpectedEOF})
	assert.Equal(t, quotaUnknown, p.s.quota.kind, "a transport error tells nothing")
	p.now = p.now.Add(2 * time.Second) // past the reset
	p.request(10*ms, Feedback{Status: 200})
	assert.Equal(t, quotaUnknown, p.s.quota.kind, "started after the reset: the quota may have been refilled")
	assert.Zero(t, p.s.quota.probe, "the test is dropped")
	p.request(10*ms, spentAnswer(time.Second)) // a new test
	p.now = p.now.Add(100 * ms)
	p.request(10*ms, Feedback{Status: 200})
	assert.Equal(t, quotaSliding, p.s.quota.kind)
}

// TestSpentQuotaHostileReset: a fixed quota's spent answer with a reset
// 20 digits long gates the scope for Backoff.MaxDelay at most.
func TestSpentQuotaHostileReset(t *testing.T) {
	cfg := backoffConfig()
	p := newPolicy(t, cfg)
	p.s.quota.kind = quotaFixed
	p.request(10*ms, spentAnswer(1<<62))
	require.False(t, p.gatedUntil().IsZero())
	assert.Equal(t, p.now.Add(cfg.Backoff.MaxDelay), p.gatedUntil())
}

// TestSpentQuotaRemainingGrows: a remaining count that grows before the
// reset the last answer named says the quota slides (a fixed window's
// count only falls until its reset), at once and with no refusal; one
// that grows at the reset says nothing.
func TestSpentQuotaRemainingGrows(t *testing.T) {
	left := func(n int64, wait time.Duration) Feedback {
		return Feedback{Status: 200, Wait: wait, HasWait: true, Remaining: n, HasRemaining: true}
	}
	p := newPolicy(t, backoffConfig())
	p.request(10*ms, left(3, 10*time.Second))
	p.now = p.now.Add(time.Second)
	p.request(10*ms, left(2, 9*time.Second))
	assert.Equal(t, quotaUnknown, p.s.quota.kind, "falling: no telling yet")
	p.now = p.now.Add(time.Second)
	p.request(10*ms, left(4, 8*time.Second)) // grew before the reset
	assert.Equal(t, quotaSliding, p.s.quota.kind)

	q := newPolicy(t, backoffConfig())
	q.request(10*ms, left(1, 2*time.Second))
	q.now = q.now.Add(3 * time.Second) // past the reset: a new window, full again
	q.request(10*ms, left(9, 10*time.Second))
	assert.Equal(t, quotaUnknown, q.s.quota.kind)
}

// TestSpentQuotaAfterGate: the first answer after a fixed quota's gate
// ends tests it again: a fixed window is full then, so a refusal, or a
// success that says the quota is spent again, says it slides.
func TestSpentQuotaAfterGate(t *testing.T) {
	for _, fb := range []Feedback{spentAnswer(2 * time.Second), {Status: 429}} {
		p := newPolicy(t, backoffConfig())
		p.s.quota.kind = quotaFixed
		p.request(10*ms, spentAnswer(2*time.Second))
		end := p.gatedUntil()
		require.False(t, end.IsZero(), "a fixed quota's spent answer gates")
		p.now = end
		p.request(10*ms, fb)
		assert.Equal(t, quotaSliding, p.s.quota.kind, "status %d", fb.Status)
	}
	p := newPolicy(t, backoffConfig())
	p.s.quota.kind = quotaFixed
	p.request(10*ms, spentAnswer(2*time.Second))
	p.now = p.gatedUntil()
	p.request(10*ms, Feedback{Status: 200, Remaining: 59, HasRemaining: true})
	assert.Equal(t, quotaFixed, p.s.quota.kind, "full again after its reset: fixed")
}

// TestSpentQuotaUnderRampup: with rampup on, a spent answer gates
// nothing: rampup paces under the limit, and a sliding quota's reset,
// rounded up to a second, would cost a second a request.
func TestSpentQuotaUnderRampup(t *testing.T) {
	p := newPolicy(t, rampConfig())
	p.s.quota.kind = quotaFixed
	p.request(10*ms, spentAnswer(5*time.Second))
	assert.True(t, p.gatedUntil().IsZero())
}

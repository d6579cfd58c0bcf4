package throttle

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReleaseIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Default.Concurrency = 1
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		p2, err := m.Acquire(context.Background(), get(t, "http://b.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		p.Release(ok200, nil)
		p.ReleaseFeedback(Feedback{})
		var nilPermit *Permit
		nilPermit.Release(nil, nil) // no panic
		assert.Equal(t, int64(1), m.global.n.Load(), "a second Release frees nothing more")
		s := m.mustScope(t, "a.example")
		s.mu.Lock()
		assert.Equal(t, int32(0), s.pol.(*defaultScope).adm.InFlight)
		s.mu.Unlock()
		p2.Release(ok200, nil)
		assert.Zero(t, m.global.n.Load())
	})
}

// TestReleaseFeedbackCustomManager: a custom ScopeManager gets the Feedback
// through the interface; scopes after it in the permit (sorted by key) see
// what it changed, as when all scopes of a permit shared one Feedback.
func TestReleaseFeedbackCustomManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		var seen []int
		custom := cfg.Default
		custom.NewManager = func(p ScopeParams) ScopeManager {
			return &recordingScope{ScopeManager: NewDefaultScopeManager(p), onFinish: func(fb *Feedback) {
				seen = append(seen, fb.Status)
				fb.Status = http.StatusServiceUnavailable
			}}
		}
		cfg.Scopes = map[string]ScopeConfig{"a": custom}
		m := newManager(t, cfg)
		req := get(t, "http://x.example/").WithContext(WithScopeKeys(context.Background(), "b", "a"))
		p, err := m.Acquire(req.Context(), req)
		require.NoError(t, err)
		p.Release(ok200, nil)
		assert.Equal(t, []int{200}, seen)
		b := m.mustScope(t, "b")
		b.mu.Lock()
		assert.Equal(t, cfg.Default.Backoff.MinDelay, b.pol.(*defaultScope).backoff.delay, "b saw a's 503")
		b.mu.Unlock()
	})
}

// TestReleaseCustomFeedbackFunc: Release gives a custom FeedbackFunc the
// manager's time and hands its result to the scopes.
func TestReleaseCustomFeedbackFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		var at time.Time
		cfg.Feedback = func(now time.Time, resp *http.Response, err error) Feedback {
			at = now
			fb := DefaultFeedback(now, resp, err)
			if resp.Header.Get("X-Upstream-Status") == "429" {
				fb.Status = http.StatusTooManyRequests
			}
			return fb
		}
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		time.Sleep(time.Second)
		p.Release(&http.Response{StatusCode: 200, Header: http.Header{"X-Upstream-Status": {"429"}}}, nil)
		assert.Equal(t, m.clock.Now(), at)
		s := m.mustScope(t, "a.example")
		s.mu.Lock()
		assert.Equal(t, cfg.Default.Backoff.MinDelay, s.pol.(*defaultScope).backoff.delay, "the 429 reached the scope")
		s.mu.Unlock()
	})
}

// TestFreshPermitsAreDistinct: a shard's slab hands each Permit out once,
// across slabs and to callers racing for the last ones.
func TestFreshPermitsAreDistinct(t *testing.T) {
	var sh shard
	const callers, each = 8, 10 * permitsPerSlab
	got := make([][]*Permit, callers)
	var wg sync.WaitGroup
	for c := range got {
		wg.Go(func() {
			for range each {
				got[c] = append(got[c], sh.freshPermit())
			}
		})
	}
	wg.Wait()
	seen := make(map[*Permit]bool)
	for _, ps := range got {
		for _, p := range ps {
			require.False(t, seen[p], "a Permit handed out twice")
			require.True(t, p.ext == nil && p.scopes() == nil && !p.released.Load(), "a Permit not zero")
			seen[p] = true
		}
	}
}

// TestPermitSize: a Permit is 88 bytes, so a slab (permitSlab) holds
// permitsPerSlab of them in its size class; the scope that holds the
// manager in its stead stays in its 144-byte class.
func TestPermitSize(t *testing.T) {
	assert.Equal(t, uintptr(88), unsafe.Sizeof(Permit{}))
	assert.LessOrEqual(t, unsafe.Sizeof(permitSlab{}), uintptr(2048))
	assert.LessOrEqual(t, unsafe.Sizeof(scope{}), uintptr(144))
}

// startlessScope is a ScopeManager whose Tickets have no Start.
type startlessScope struct {
	ScopeManager
	finished []Ticket
}

func (s *startlessScope) Start(now time.Time, cost int64) Ticket {
	t := s.ScopeManager.Start(now, cost)
	t.Start = time.Time{}
	return t
}

func (s *startlessScope) Finish(now time.Time, t Ticket, fb *Feedback) {
	s.finished = append(s.finished, t)
	s.ScopeManager.Finish(now, t, fb)
}

// TestPermitAcquired: Acquired is the clock's reading at admission, and a
// Release's latency is measured from it, whether the Permit has one scope
// whose Ticket starts then, one whose Ticket does not (a custom policy's
// own Start), or several; the scopes' Tickets are the policies' own.
func TestPermitAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		var sm *startlessScope
		custom := cfg.Default
		custom.NewManager = func(p ScopeParams) ScopeManager {
			sm = &startlessScope{ScopeManager: NewDefaultScopeManager(p)}
			return sm
		}
		cfg.Scopes = map[string]ScopeConfig{"custom": custom}
		m := newManager(t, cfg)
		for _, keys := range [][]string{{"plain"}, {"custom"}, {"plain", "other"}, {"custom", "plain"}} {
			req := get(t, "http://x.example/").WithContext(WithScopeKeys(context.Background(), keys...))
			want := time.Now()
			p, err := m.Acquire(req.Context(), req)
			require.NoError(t, err)
			assert.True(t, want.Equal(p.Acquired()), "%v: Acquired %v, want %v", keys, p.Acquired(), want)
			for _, h := range p.scopes() {
				if h.s.key == "custom" {
					assert.True(t, h.ticket.Start.IsZero(), "%v: the custom policy's Ticket", keys)
				} else {
					assert.True(t, want.Equal(h.ticket.Start), "%v: %s's Ticket", keys, h.s.key)
				}
			}
			time.Sleep(time.Second)
			var latency time.Duration
			p.ReleaseFeedback(Feedback{Status: 200})
			for _, h := range p.scopes() {
				h.s.mu.Lock()
				latency = h.s.counts.latency
				h.s.mu.Unlock()
			}
			assert.Equal(t, time.Second, latency, "%v", keys)
			assert.True(t, want.Equal(p.Acquired()), "%v: Acquired after Release", keys)
		}
		require.Len(t, sm.finished, 2)
		for _, tk := range sm.finished {
			assert.True(t, tk.Start.IsZero(), "Finish gets the Ticket Start returned")
		}
	})
}

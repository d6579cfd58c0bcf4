package throttle

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRealClockTracksWallClock(t *testing.T) {
	c := newRealClock()
	before := time.Now()
	got := c.Now()
	after := time.Now()
	assert.False(t, got.Before(before.Add(-time.Millisecond)))
	assert.False(t, got.After(after.Add(time.Millisecond)))
	// An old base is replaced by a fresh wall-clock reading.
	old := time.Now().Add(-2 * rebaseAfter)
	c.base.Store(&old)
	got = c.Now()
	assert.WithinDuration(t, time.Now(), got, time.Second)
	assert.NotSame(t, &old, c.base.Load())
	tm := c.NewTimer(time.Hour)
	assert.True(t, tm.Stop())
	assert.False(t, tm.Reset(time.Hour))
	assert.True(t, tm.Stop())
}

// timeRecordingScope is the default policy, recording the times it is handed.
type timeRecordingScope struct {
	ScopeManager
	mu    *sync.Mutex
	times *[]time.Time
}

func (r *timeRecordingScope) saw(now time.Time) {
	r.mu.Lock()
	*r.times = append(*r.times, now)
	r.mu.Unlock()
}
func (r *timeRecordingScope) Admit(now time.Time, cost int64) Admission {
	r.saw(now)
	return r.ScopeManager.Admit(now, cost)
}
func (r *timeRecordingScope) Start(now time.Time, cost int64) Ticket {
	r.saw(now)
	return r.ScopeManager.Start(now, cost)
}
func (r *timeRecordingScope) Finish(now time.Time, t Ticket, fb *Feedback) {
	r.saw(now)
	r.ScopeManager.Finish(now, t, fb)
}
func (r *timeRecordingScope) Idle(now time.Time) Idleness {
	r.saw(now)
	return r.ScopeManager.Idle(now)
}
func (r *timeRecordingScope) SetConfig(now time.Time, cfg ScopeConfig) {
	r.saw(now)
	r.ScopeManager.SetConfig(now, cfg)
}

// TestCustomClockNeverGoesBack (issue 14 item 7): a custom Clock that goes
// back (a wall clock set back, an NTP step) never makes the manager hand
// its policies a time earlier than one it handed before; the time it
// hands goes on from there at the clock's pace.
func TestCustomClockNeverGoesBack(t *testing.T) {
	clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var mu sync.Mutex
	var times []time.Time
	cfg := plainConfig()
	cfg.Clock = clk
	cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
	cfg.NewScopeManager = func(p ScopeParams) ScopeManager {
		return &timeRecordingScope{ScopeManager: NewDefaultScopeManager(p), mu: &mu, times: &times}
	}
	m := newManager(t, cfg)
	req := get(t, "http://a.example/")
	var acquired []time.Time
	for _, step := range []time.Duration{0, time.Second, -time.Hour, time.Second, -time.Minute, -time.Hour, 2 * time.Second} {
		clk.t = clk.t.Add(step)
		p, adm, err := m.TryAcquire(req) // stepClock makes no timers: nothing may wait
		require.NoError(t, err)
		require.NotNil(t, p, "after a step of %v: refused, %+v", step, adm)
		acquired = append(acquired, p.Acquired())
		p.Release(ok200, nil)
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, times)
	for i := 1; i < len(times); i++ {
		require.False(t, times[i].Before(times[i-1]), "time %d handed to the policy, %v, is before the one before, %v", i, times[i], times[i-1])
	}
	// The clock moved 4 s forward in all: so did the manager's time.
	assert.Equal(t, []time.Duration{0, time.Second, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 4 * time.Second},
		durationsSince(acquired[0], acquired))
	assert.Equal(t, acquired[len(acquired)-1], m.Clock().Now(), "Clock gives the manager's time")
}

func durationsSince(t0 time.Time, ts []time.Time) []time.Duration {
	d := make([]time.Duration, len(ts))
	for i, t := range ts {
		d[i] = t.Sub(t0)
	}
	return d
}

// steppingClock is a Clock whose time only moves forward, by Step, with
// no timers: enough to read from many goroutines at once.
type steppingClock struct{ ns atomic.Int64 }

func (c *steppingClock) Now() time.Time               { return time.Unix(0, c.ns.Load()) }
func (c *steppingClock) NewTimer(time.Duration) Timer { panic("steppingClock has no timers") }
func (c *steppingClock) Step(d time.Duration)         { c.ns.Add(int64(d)) }

// TestMonotonicClockConcurrentReadersAddNoOffset: readers racing a clock
// that only goes forward never make the manager's clock run ahead of it.
// A reading taken before another caller's later one, and compared after
// it, looked like a jump back: its offset moved every later reading
// ahead for good (TestBlockUntilTimersWithManager saw two starts a Delay
// apart by the manager's clock at one instant of the fake clock's).
func TestMonotonicClockConcurrentReadersAddNoOffset(t *testing.T) {
	base := &steppingClock{}
	base.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	c := newMonotonicClock(base)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					c.Now()
				}
			}
		})
	}
	for range 20000 {
		base.Step(time.Millisecond)
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	assert.Equal(t, base.Now(), c.Now(), "the manager's clock ran ahead of one that never went back")
}

// TestStaleNowDoesNotShortenTheDelay: the manager reads its clock before
// it takes a scope's lock, so a caller may check a scope at a time read
// before another caller's start was recorded there. That is a stale
// reading, not the clock going back (the manager's never does), and it
// must not move the delay's start back: a check at the real time after
// it still waits the whole delay from the previous start.
func TestStaleNowDoesNotShortenTheDelay(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Delay, cfg.Jitter = time.Second, Jitter{}
	require.NoError(t, cfg.validate("test"))
	s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
		Rand: rand.New(rand.NewPCG(1, 2))}).(*defaultScope)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tk := s.Start(t0.Add(time.Second), 1) // another caller's start, recorded first
	s.Finish(t0.Add(time.Second), tk, &Feedback{Status: 200})
	adm := s.Admit(t0, 1) // read at t0, checked after that start
	assert.Equal(t, t0.Add(2*time.Second), adm.At, "a stale reading waits for the delay after the start it did not see")
	adm = s.Admit(t0.Add(time.Second), 1)
	assert.Equal(t, ReasonDelay, adm.Reason, "at the start's own instant the delay still holds")
	assert.Equal(t, t0.Add(2*time.Second), adm.At)
}

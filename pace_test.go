package throttle

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// warnings collects the manager's warnings through the Warning hook.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) hook(e hooks.Warning) {
	w.mu.Lock()
	w.msgs = append(w.msgs, e.Message)
	w.mu.Unlock()
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, "\n")
}

// starts admits n requests of one scope back to back, each as soon as it
// may start, and returns the gaps between their starts.
func starts(t *testing.T, cfg ScopeConfig, n int) []time.Duration {
	t.Helper()
	s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
		Rand: rand.New(rand.NewPCG(1, 2))})
	now := time.Unix(1_000_000, 0)
	var gaps []time.Duration
	last := now
	for i := range n {
		adm := s.Admit(now, 1)
		if adm.Reason != ReasonNone {
			require.False(t, adm.At.IsZero(), "start %d waits for a release", i)
			now = adm.At
			continue
		}
		if i > 0 {
			gaps = append(gaps, now.Sub(last))
		}
		last = now
		tk := s.Start(now, 1)
		s.Finish(now.Add(10*ms), tk, &Feedback{Status: 200, Latency: 10 * ms})
	}
	return gaps
}

// TestDelay100msOnDefaults: the colly or Scrapy user's first setting,
// Delay 100ms on DefaultConfig, gives starts 100 ms apart on average
// (50-150 ms with the default ±50 % jitter), not one a second, and New
// warns about nothing.
func TestDelay100msOnDefaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Default.Delay = 100 * ms
	var w warnings
	cfg.Hooks.Warning = w.hook
	newManager(t, cfg)
	assert.Empty(t, w.all())

	gaps := starts(t, cfg.Default, 400)
	var sum time.Duration
	for _, g := range gaps {
		assert.GreaterOrEqual(t, g, 50*ms)
		assert.LessOrEqual(t, g, 150*ms)
		sum += g
	}
	mean := sum / time.Duration(len(gaps))
	assert.InDelta(t, float64(100*ms), float64(mean), float64(5*ms), "mean gap %v", mean)
}

// TestIneffectiveDelayWarned: a Delay that another rule always overrides
// is reported once by New, naming both fields.
func TestIneffectiveDelayWarned(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Default.Delay = 100 * ms
	cfg.Default.SlotDelay = time.Second
	cfg.Scopes = map[string]ScopeConfig{"api.example": cfg.Default}
	var w warnings
	cfg.Hooks.Warning = w.hook
	m := newManager(t, cfg)
	msg := w.all()
	assert.Contains(t, msg, "Default.Delay 100ms has no effect: Default.SlotDelay 1s with Concurrency 1 allows one start per 1s")
	assert.Contains(t, msg, `Scopes["api.example"].Delay 100ms has no effect`)

	// And the pace says which rule binds.
	_, _, err := m.TryAcquire(get(t, "http://a.example/"))
	require.NoError(t, err)
	p := m.Stats().Scopes[0].Pace
	assert.Equal(t, ReasonSlotDelay, p.Binding)
	assert.InDelta(t, 1.0, p.Rate, 1e-9)

	// Delay 0 is no setting to warn about, nor a slot delay that binds
	// only with several slots.
	for _, sc := range []ScopeConfig{{Delay: 0, SlotDelay: time.Second, Concurrency: 1}, {Delay: 300 * ms, SlotDelay: time.Second, Concurrency: 4}} {
		assert.Empty(t, ineffectiveSettings("Default", &sc))
	}
}

// TestPaceNamesTheRuleThatBinds: Stats' Pace is the rate all the rules
// allow together and the rule that sets it.
func TestPaceNamesTheRuleThatBinds(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*ScopeConfig)
		fb   *Feedback
		rate float64
		why  Reason
	}{
		{"default", func(*ScopeConfig) {}, nil, 1, ReasonDelay},
		{"jitter off, 250ms", func(sc *ScopeConfig) { sc.Delay, sc.Jitter = 250*ms, Jitter{} }, nil, 4, ReasonDelay},
		{"asymmetric jitter", func(sc *ScopeConfig) { sc.Jitter = Jitter{Min: 0, Max: 1} }, nil, 1 / 1.5, ReasonDelay},
		{"slots at the latency", func(sc *ScopeConfig) { sc.Delay, sc.Concurrency = 0, 2 }, &Feedback{Status: 200, Latency: 500 * ms}, 4, ReasonConcurrency},
		{"quota", func(sc *ScopeConfig) { sc.Delay, sc.Quota = 0, 30 }, nil, 0.5, ReasonQuota},
		{"backoff", func(sc *ScopeConfig) { sc.Jitter = Jitter{} }, &Feedback{Status: 429}, 0.5, ReasonBackoff},
		{"gate", func(*ScopeConfig) {}, &Feedback{Status: 503, Wait: time.Hour, HasWait: true}, 0, ReasonGate},
		{"autothrottle", func(sc *ScopeConfig) { sc.AutoThrottle.Enabled, sc.Jitter = true, Jitter{} }, nil, 0.2, ReasonAutoThrottle},
		{"rampup", func(sc *ScopeConfig) { sc.Rampup.Enabled = true }, nil, 1 / 1.01, ReasonRampup}, // jitter +0-2 %
		{"robots", func(sc *ScopeConfig) {}, nil, 0, ReasonRobots},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := defaultScopeConfig()
			c.set(&sc)
			s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: sc, GlobalConcurrency: 16}).(*defaultScope)
			now := time.Unix(1_000_000, 0)
			lat := time.Duration(0)
			if c.name == "robots" {
				s.setRobotsDelay(4 * time.Second)
				c.rate = 1 / 4.0 / 1.0 // ±50 % jitter keeps the mean
			}
			if c.fb != nil {
				tk := s.Start(now, 1)
				s.Finish(now, tk, c.fb)
				lat = c.fb.Latency
			}
			p := s.pace(now, lat)
			assert.Equal(t, c.why, p.Binding)
			assert.InDelta(t, c.rate, p.Rate, 1e-9)
		})
	}
}

// TestSlotsAboveALoweredConcurrency: Concurrency 4, Delay 0, no jitter,
// SlotDelay 1 s; four starts at 0, then Concurrency 1. The slots the scope
// no longer has do not start requests: 1.0, 2.0, 3.0 s (the bug: 1.0,
// 1.1, 1.2, 1.3, 2.0 with the old slots still counted).
func TestSlotsAboveALoweredConcurrency(t *testing.T) {
	cfg := backoffConfig()
	cfg.Concurrency, cfg.SlotDelay = 4, time.Second
	p := newPolicy(t, cfg)
	t0 := p.now
	var tks []Ticket
	for range 4 {
		require.Equal(t, ReasonNone, p.s.Admit(p.now, 1).Reason)
		tks = append(tks, p.s.Start(p.now, 1))
	}
	for _, tk := range tks {
		p.s.Finish(p.now.Add(100*ms), tk, &ok)
	}
	one := cfg
	one.Concurrency = 1
	p.s.SetConfig(p.now, one)
	var at []time.Duration
	now := p.now
	for range 3 {
		adm := p.s.Admit(now, 1)
		if adm.Reason != ReasonNone {
			require.Equal(t, ReasonSlotDelay, adm.Reason)
			now = adm.At
		}
		at = append(at, now.Sub(t0))
		tk := p.s.Start(now, 1)
		p.s.Finish(now.Add(100*ms), tk, &ok)
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, at)
}

// TestBackoffFirstWaitDrawsBackoffJitter: the wait that follows a backoff
// step is drawn from Backoff.Jitter (±10 %) and stays within MaxDelay,
// even when the start before the signal drew the scope's ±50 % (the bug:
// with MaxDelay 300 s, waits of 2m33s to 7m29s).
func TestBackoffFirstWaitDrawsBackoffJitter(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Backoff.Factor = 300 // 1 s x 300: MaxDelay
	cfg.Backoff.OutageProbe = 0
	for seed := range uint64(200) {
		s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
			Rand: rand.New(rand.NewPCG(seed, 1))}).(*defaultScope)
		now := time.Unix(1_000_000, 0)
		tk := s.Start(now, 1)
		s.Finish(now.Add(ms), tk, &tooMany) // backoff: 300 s
		adm := s.Admit(now.Add(ms), 1)
		require.Equal(t, ReasonBackoff, adm.Reason)
		wait := adm.At.Sub(now)
		require.GreaterOrEqual(t, wait, 270*time.Second, "seed %d", seed)
		require.LessOrEqual(t, wait, 300*time.Second, "seed %d: never past MaxDelay", seed)
	}
}

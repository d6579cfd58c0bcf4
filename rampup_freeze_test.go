package throttle

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"
)

// The controller's two no-freeze invariants, checked after histories a
// generator or the fuzzer draws rather than after the cases the other
// rampup tests set up: whatever state a history leaves,
//
//   - a wall, a server that refuses everything (429, no Retry-After) for
//     a minute, is sent less and less: at most freezeWallTail requests
//     start in its last 30 s (the drain halves the rate per round of
//     refusals, down to two per time since the event);
//   - an open door, a server that accepts everything, is probed: within
//     freezeOpen, or freezeDoorAnswers answers at a rate so low that they
//     take longer, the rate rises above what it was when the door opened,
//     or it is at the cap (MaxRate) already.
//
// A history is a few phases of a server that accepts a share of the
// requests and refuses the others with 429 or 503, with or without a
// Retry-After, at one latency from 1 ms to 2 s.
const (
	freezeWall     = time.Minute
	freezeWallTail = 10
	freezeOpen     = 6 * time.Minute
	freezeMaxRate  = 50
	// freezeDoorAnswers is the least answers the open door gives: a
	// round needs four, and a climb a round at least.
	freezeDoorAnswers = 10
)

// freezeLogger, when not nil, logs checkNoFreeze's adjustments (a debug
// aid).
var freezeLogger *slog.Logger

// freezePhase is one phase of a history.
type freezePhase struct {
	d       time.Duration
	accept  float64 // the share of requests accepted
	status  int     // a refusal's status
	wait    time.Duration
	latency time.Duration
}

func (ph freezePhase) String() string {
	return fmt.Sprintf("{%v accept %.2f %d wait %v latency %v}", ph.d, ph.accept, ph.status, ph.wait, ph.latency)
}

// drawPhase draws a phase from next, a source of bytes.
func drawPhase(next func() byte) freezePhase {
	accepts := []float64{0, 0.1, 0.5, 0.9, 1}
	lats := []time.Duration{time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond, time.Second, 2 * time.Second}
	ph := freezePhase{
		d:       time.Duration(1+int(next())%90) * time.Second,
		accept:  accepts[int(next())%len(accepts)],
		status:  429,
		latency: lats[int(next())%len(lats)],
	}
	if next()%2 == 1 {
		ph.status = 503
	}
	if w := int(next()) % 8; w <= 5 && w > 0 {
		ph.wait = time.Duration(w) * time.Second
	}
	return ph
}

// checkNoFreeze runs the phases, then the wall and the open door, on one
// default scope with rampup on (16 workers, in explicit time), and
// reports a broken invariant.
func checkNoFreeze(t *testing.T, rng *rand.Rand, phases []freezePhase) {
	t.Helper()
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	cfg.Rampup.MaxRate = freezeMaxRate
	cfg.Window = 10 * time.Second // probes at most 100 s apart
	s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
		Rand: rand.New(rand.NewPCG(1, 2)), Logger: freezeLogger}).(*defaultScope)
	d := &scopeDriver{s: s, now: time.Unix(1_000_000, 0), workers: 16}
	var starts []time.Time
	var peak float64 // the highest rate since it was last reset
	run := func(ph freezePhase) {
		end := d.now.Add(ph.d)
		for d.now.Before(end) {
			peak = max(peak, s.rampup.current(&s.cfg))
			d.start(func(now time.Time) Feedback {
				starts = append(starts, now)
				fb := Feedback{Status: 200, Latency: ph.latency}
				if rng.Float64() >= ph.accept {
					fb.Status = ph.status
					if ph.wait > 0 {
						fb.Wait, fb.HasWait = ph.wait, true
					}
				}
				return fb
			})
			d.advance(end)
			s.tick(d.now)
		}
	}
	count := func(from, to time.Time) int {
		n := 0
		for _, st := range starts {
			if !st.Before(from) && st.Before(to) {
				n++
			}
		}
		return n
	}
	for _, ph := range phases {
		run(ph)
	}
	wallAt := d.now
	run(freezePhase{d: freezeWall, status: 429, latency: 50 * time.Millisecond})
	if n := count(wallAt.Add(freezeWall/2), d.now); n > freezeWallTail {
		t.Fatalf("a wall of refusals: %d requests started in its last %v (at most %d) after %v",
			n, freezeWall/2, freezeWallTail, phases)
	}
	// The door opens: the first 30 s drain what the wall left; within the
	// rest the rate must rise above where it came back to.
	run(freezePhase{d: 30 * time.Second, accept: 1, latency: 50 * time.Millisecond})
	back := s.rampup.current(&s.cfg)
	peak = 0
	// Rounds are counted in answers: at the floor (one request per
	// Backoff.MaxDelay) the door stays open for freezeDoorAnswers of them.
	open := max(freezeOpen-30*time.Second, time.Duration(freezeDoorAnswers/back*float64(time.Second)))
	run(freezePhase{d: open, accept: 1, latency: 50 * time.Millisecond})
	if peak <= back && back < 0.9*freezeMaxRate {
		t.Fatalf("an open door: the rate stayed at %.3g a second for %v (at most %d): no probe, after %v",
			back, open, freezeMaxRate, phases)
	}
}

// TestRampupNoFreeze checks the no-freeze invariants after 200 histories
// of one to four phases, drawn from a fixed seed.
func TestRampupNoFreeze(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	gen := rand.New(rand.NewPCG(7, 11))
	next := func() byte { return byte(gen.Uint32()) }
	for i := range n {
		phases := make([]freezePhase, 1+int(next())%4)
		for j := range phases {
			phases[j] = drawPhase(next)
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkNoFreeze(t, rand.New(rand.NewPCG(uint64(i), 3)), phases)
		})
	}
}

// FuzzRampupNoFreeze checks the no-freeze invariants after a history the
// fuzzer's bytes draw (five bytes a phase, at most four phases).
func FuzzRampupNoFreeze(f *testing.F) {
	f.Add([]byte{30, 0, 0, 0, 0})
	f.Add([]byte{60, 2, 1, 1, 5, 20, 4, 4, 0, 0})
	f.Add([]byte{89, 1, 4, 1, 3, 10, 0, 2, 0, 0, 45, 3, 3, 1, 1})
	f.Fuzz(noFreezeFromBytes)
}

func noFreezeFromBytes(t *testing.T, data []byte) {
	{
		i := 0
		next := func() byte {
			if i >= len(data) {
				return 0
			}
			i++
			return data[i-1]
		}
		var phases []freezePhase
		for len(phases) < 4 && i < len(data) {
			phases = append(phases, drawPhase(next))
		}
		checkNoFreeze(t, rand.New(rand.NewPCG(uint64(len(data)), 3)), phases)
	}
}

// TestRampupBlipAfterLongHold: a scope that held its rate for minutes
// meets one refusal, or ten seconds of them, and the server then
// accepts everything again. The refusal came too late after the rise for
// a hold to wait for it (rampupLateOK): the scope is back to 90 % of the
// rate within a minute (10-25 s). Before, it took four to six: the
// refusal taught a memory of two minutes, and each climb back was held
// that long.
func TestRampupBlipAfterLongHold(t *testing.T) {
	for _, one := range []bool{true, false} {
		for _, lat := range []time.Duration{time.Millisecond, 50 * time.Millisecond, time.Second} {
			cfg := defaultScopeConfig()
			cfg.Rampup.Enabled = true
			cfg.Rampup.MaxRate = freezeMaxRate
			s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
				Rand: rand.New(rand.NewPCG(1, 2))}).(*defaultScope)
			d := &scopeDriver{s: s, now: time.Unix(1_000_000, 0), workers: 16}
			rate := func() float64 { return s.rampup.current(&s.cfg) }
			refused := 0
			// run serves status for d, or until done holds.
			run := func(d0 time.Duration, status int, done func() bool) bool {
				end := d.now.Add(d0)
				for d.now.Before(end) {
					if done() {
						return true
					}
					d.start(func(time.Time) Feedback {
						if status != 200 {
							refused++
						}
						return Feedback{Status: status, Latency: lat}
					})
					d.advance(end)
					s.tick(d.now)
				}
				return done()
			}
			never := func() bool { return false }
			run(3*time.Minute, 200, never)
			held := rate()
			blip := "10 s of refusals"
			if one {
				blip = "one refusal"
			}
			run(10*time.Second, 429, func() bool { return one && refused > 0 })
			if !run(time.Minute, 200, func() bool { return rate() >= 0.9*held }) {
				t.Errorf("%s, latency %v: held %.3g req/s for 3 minutes, %.3g a minute after",
					blip, lat, held, rate())
			}
		}
	}
}

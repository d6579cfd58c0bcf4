package topscopes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/throttletest"
)

// scope is a ScopeStats with the fields selection reads.
func scope(key string, inFlight, waiting int, requests uint64) throttle.ScopeStats {
	return throttle.ScopeStats{Key: key, InFlight: inFlight, Waiting: waiting, Concurrency: 2,
		Counts: throttle.Counts{Requests: requests}}
}

// keys returns the keys of the named scopes, in order.
func (s *Snapshot) keys() []string {
	out := make([]string, 0, len(s.Named))
	for _, i := range s.Named {
		out = append(out, s.Stats.Scopes[i].Key)
	}
	return out
}

func TestCountersOf(t *testing.T) {
	c := throttle.Counts{Requests: 1, Responses: [6]uint64{2, 3, 4, 5, 6, 7}, Signals: 8}
	got := CountersOf(&c)
	if want := (Counters{1, 2, 3, 4, 5, 6, 7, 8}); got != want {
		t.Fatalf("CountersOf = %v, want %v", got, want)
	}
	if got[Requests] != c.Requests || got[Signals] != c.Signals {
		t.Errorf("Requests, Signals: %d, %d", got[Requests], got[Signals])
	}
	for i, n := range c.Responses {
		if got[Responses+i] != n {
			t.Errorf("Responses+%d: %d, want %d", i, got[Responses+i], n)
		}
	}
}

// TestSelectionOrder: the named scopes come busiest first, by permits in
// flight, then callers waiting, then requests, then key.
func TestSelectionOrder(t *testing.T) {
	var s Snapshot
	s.Stats.Scopes = []throttle.ScopeStats{
		scope("requests-10", 0, 0, 10),
		scope("waiting-1", 0, 1, 0),
		scope("b-tie", 0, 0, 5),
		scope("inflight-1-waiting-2", 1, 2, 0),
		scope("inflight-2", 2, 0, 0),
		scope("a-tie", 0, 0, 5),
		scope("inflight-1", 1, 0, 100),
		scope("idle", 0, 0, 0),
	}
	s.update(100)
	want := []string{"inflight-2", "inflight-1-waiting-2", "inflight-1", "waiting-1", "requests-10", "a-tie", "b-tie", "idle"}
	if got := s.keys(); !slices.Equal(got, want) {
		t.Errorf("named %q, want %q", got, want)
	}
	if s.OtherInFlight != 0 || s.OtherWaiting != 0 || s.OtherConcurrency != 0 || s.OtherCounts != (Counters{}) {
		t.Errorf("other with every scope named: %d %d %d %v, want zeros",
			s.OtherInFlight, s.OtherWaiting, s.OtherConcurrency, s.OtherCounts)
	}
}

// TestSelectionBound: at most limit scopes are named, the busiest, in any
// order of Stats.Scopes; none when limit <= 0; the gauges of other sum
// the rest.
func TestSelectionBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := rng.IntN(40)
		sc := make([]throttle.ScopeStats, n)
		for i := range sc {
			key := fmt.Sprintf("s%d.example", i)
			switch rng.IntN(10) {
			case 0:
				key = Other
			case 1:
				key = fmt.Sprintf("s%d\xff", i)
			}
			// Few distinct values, so that ties reach the key.
			sc[i] = scope(key, rng.IntN(3), rng.IntN(3), uint64(rng.IntN(4)))
		}
		var ref []int // every nameable scope, busiest first
		for i := range sc {
			if nameable(sc[i].Key) {
				ref = append(ref, i)
			}
		}
		slices.SortFunc(ref, func(a, b int) int {
			if busier(&sc[a], &sc[b]) {
				return -1
			}
			if busier(&sc[b], &sc[a]) {
				return 1
			}
			return 0
		})

		var s Snapshot
		for _, limit := range []int{-1, 0, 1, 2, 3, 5, n / 2, n, n + 1} {
			s.Stats.Scopes = sc
			s.update(limit)
			want := ref[:min(max(limit, 0), len(ref))]
			if !slices.Equal(s.Named, want) {
				t.Fatalf("round %d, %d scopes, limit %d: named %v, want %v", round, n, limit, s.Named, want)
			}
			inFlight, waiting, cc := 0, 0, 0
			for i := range sc {
				if !slices.Contains(s.Named, i) {
					inFlight += sc[i].InFlight
					waiting += sc[i].Waiting
					cc += sc[i].Concurrency
				}
			}
			if s.OtherInFlight != inFlight || s.OtherWaiting != waiting || s.OtherConcurrency != cc {
				t.Fatalf("round %d, limit %d: other's gauges %d %d %d, want %d %d %d", round, limit,
					s.OtherInFlight, s.OtherWaiting, s.OtherConcurrency, inFlight, waiting, cc)
			}
		}
	}
}

// TestNeverNamed: a scope whose key is Other or is not valid UTF-8 gets no
// name, however busy; its figures go to other.
func TestNeverNamed(t *testing.T) {
	for _, key := range []string{Other, "\xff", "a.example\xfe", "\xed\xa0\x80" /* a surrogate */} {
		if nameable(key) {
			t.Errorf("nameable(%q)", key)
		}
	}
	for _, key := range []string{"a.example", "ünïcode.example", "", "Other", "others"} {
		if !nameable(key) {
			t.Errorf("not nameable(%q)", key)
		}
	}

	var s Snapshot
	s.Stats.Scopes = []throttle.ScopeStats{
		scope(Other, 5, 5, 50),
		scope("\xff", 4, 4, 40),
		scope("quiet.example", 0, 0, 1),
		scope("x\xfe", 3, 3, 30),
	}
	s.Stats.Totals.Requests = 121
	s.update(3)
	if got, want := s.keys(), []string{"quiet.example"}; !slices.Equal(got, want) {
		t.Errorf("named %q, want %q", got, want)
	}
	if s.OtherInFlight != 12 || s.OtherWaiting != 12 || s.OtherConcurrency != 6 || s.OtherCounts[Requests] != 120 {
		t.Errorf("other: in flight %d, waiting %d, concurrency %d, requests %d; want 12, 12, 6, 120",
			s.OtherInFlight, s.OtherWaiting, s.OtherConcurrency, s.OtherCounts[Requests])
	}
}

// TestOtherMonotonic walks the cases by hand: other's counters stay put
// when a scope joins the top or is forgotten, and grow by what the scopes
// it sums add.
func TestOtherMonotonic(t *testing.T) {
	var s Snapshot
	step := func(name string, limit int, totals uint64, scopes []throttle.ScopeStats, wantNamed []string, wantOther uint64) {
		t.Helper()
		s.Stats.Scopes = append(s.Stats.Scopes[:0], scopes...)
		s.Stats.Totals = throttle.Counts{Requests: totals, Responses: [6]uint64{2: totals}}
		s.update(limit)
		if got := s.keys(); !slices.Equal(got, wantNamed) {
			t.Errorf("%s: named %q, want %q", name, got, wantNamed)
		}
		if want := (Counters{Requests: wantOther, Responses + 2: wantOther}); s.OtherCounts != want {
			t.Errorf("%s: other's counters %v, want %v", name, s.OtherCounts, want)
		}
	}
	withCounts := func(key string, inFlight int, n uint64) throttle.ScopeStats {
		ss := scope(key, inFlight, 0, n)
		ss.Counts.Responses[2] = n
		return ss
	}

	// a and b named; c and d summed.
	step("first", 2, 10+5+3+2, []throttle.ScopeStats{
		withCounts("a", 0, 10), withCounts("b", 0, 5), withCounts("c", 0, 3), withCounts("d", 0, 2),
	}, []string{"a", "b"}, 5)

	// c holds a permit and joins the top with its 3; b leaves: other
	// stays at 5 (a plain sum of the rest would be 7, then 2 when c
	// joins: a drop, read as a reset).
	step("c joins, b leaves", 2, 20, []throttle.ScopeStats{
		withCounts("a", 0, 10), withCounts("b", 0, 5), withCounts("c", 1, 3), withCounts("d", 0, 2),
	}, []string{"c", "a"}, 5)

	// b and d, not named, count 4 more; a and c, named, 6 more.
	step("the rest counts", 2, 30, []throttle.ScopeStats{
		withCounts("a", 0, 13), withCounts("b", 0, 7), withCounts("c", 1, 6), withCounts("d", 0, 4),
	}, []string{"c", "a"}, 9)

	// d is forgotten (its counts stay in Totals) and a too, named: other
	// keeps its counts; b takes a's place with its 7, which stay in
	// other.
	step("forgotten", 2, 30, []throttle.ScopeStats{
		withCounts("b", 0, 7), withCounts("c", 1, 6),
	}, []string{"c", "b"}, 9)

	// a is made again, from 0, counts 1 and is named: that 1, counted
	// before a was named, goes to other, as a newcomer's counts do.
	step("made again", 3, 31, []throttle.ScopeStats{
		withCounts("a", 0, 1), withCounts("b", 0, 7), withCounts("c", 1, 6),
	}, []string{"c", "b", "a"}, 10)

	// c is forgotten and made again while named, between two updates: it
	// counts 2 from 0, which does not go to other.
	step("c made again", 3, 33, []throttle.ScopeStats{
		withCounts("a", 0, 1), withCounts("b", 0, 7), withCounts("c", 1, 2),
	}, []string{"c", "b", "a"}, 10)

	// No scope named: other counts what every scope adds.
	step("none named", 0, 36, []throttle.ScopeStats{
		withCounts("a", 0, 2), withCounts("b", 0, 8), withCounts("c", 1, 3),
	}, nil, 13)
}

// model is a manager's counts as Stats shows them: live scopes, and
// forgotten ones summed in Totals only.
type model struct {
	live      map[string]*throttle.ScopeStats
	forgotten throttle.Counts
}

func add(to *throttle.Counts, c *throttle.Counts) {
	to.Requests += c.Requests
	for i := range to.Responses {
		to.Responses[i] += c.Responses[i]
	}
	to.Signals += c.Signals
}

// TestOtherNeverGoesDown: over random traffic, scopes that join and leave
// the top, are forgotten and made again, no counter of other ever goes
// down, and the named scopes are the busiest nameable ones.
func TestOtherNeverGoesDown(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", Other, "\xff"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := model{live: map[string]*throttle.ScopeStats{}}
		limit := rng.IntN(5)
		var s Snapshot
		var prev Counters
		for round := range 300 {
			for range rng.IntN(20) {
				key := keys[rng.IntN(len(keys))]
				ss := m.live[key]
				if ss == nil {
					ss = &throttle.ScopeStats{Key: key}
					m.live[key] = ss
				}
				ss.Counts.Requests++
				ss.Counts.Responses[rng.IntN(6)]++
				if rng.IntN(4) == 0 {
					ss.Counts.Signals++
				}
			}
			for key, ss := range m.live {
				ss.InFlight, ss.Waiting = rng.IntN(3), rng.IntN(2)
				if rng.IntN(8) == 0 {
					add(&m.forgotten, &ss.Counts)
					delete(m.live, key)
				}
			}

			s.Stats.Scopes = s.Stats.Scopes[:0]
			s.Stats.Totals = m.forgotten
			for _, ss := range m.live {
				s.Stats.Scopes = append(s.Stats.Scopes, *ss)
				add(&s.Stats.Totals, &ss.Counts)
			}
			s.update(limit)

			if len(s.Named) > limit {
				t.Fatalf("seed %d, round %d: %d named, limit %d", seed, round, len(s.Named), limit)
			}
			for k, i := range s.Named {
				ss := &s.Stats.Scopes[i]
				if !nameable(ss.Key) {
					t.Fatalf("seed %d, round %d: %q named", seed, round, ss.Key)
				}
				if k > 0 && !busier(&s.Stats.Scopes[s.Named[k-1]], ss) {
					t.Fatalf("seed %d, round %d: named out of order: %q", seed, round, s.keys())
				}
			}
			for f := range s.OtherCounts {
				if s.OtherCounts[f] < prev[f] {
					t.Fatalf("seed %d, round %d: other's counter %d went down from %d to %d",
						seed, round, f, prev[f], s.OtherCounts[f])
				}
			}
			prev = s.OtherCounts
		}
	}
}

// TestTake reads a manager: Stats is its snapshot, the scope holding a
// permit is named, the other's counts go to other.
func TestTake(t *testing.T) {
	cfg := throttle.DefaultConfig()
	cfg.Clock = throttletest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg.Robots.Enabled = false
	cfg.Default.Concurrency = 2
	cfg.Default.Delay = 0
	cfg.Default.Jitter = throttle.Jitter{}
	m, err := throttle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admit := func(url string) *throttle.Permit {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, adm, err := m.TryAcquire(req)
		if err != nil || p == nil {
			t.Fatalf("%s not admitted: %v, %v", url, adm.Reason, err)
		}
		return p
	}
	for range 3 {
		p := admit("http://a.example/")
		p.Release(nil, nil)
	}
	held := admit("http://b.example/")
	defer held.Release(nil, nil)

	var s Snapshot
	s.Take(m, 1)
	if got, want := s.keys(), []string{"b.example"}; !slices.Equal(got, want) {
		t.Errorf("named %q, want %q", got, want)
	}
	if s.Stats.Totals.Requests != 4 || len(s.Stats.Scopes) != 2 || s.Stats.InFlight != 1 {
		t.Errorf("stats: %d requests, %d scopes, %d in flight; want 4, 2, 1",
			s.Stats.Totals.Requests, len(s.Stats.Scopes), s.Stats.InFlight)
	}
	if want := (Counters{Requests: 3, Responses: 3}); s.OtherCounts != want || s.OtherInFlight != 0 {
		t.Errorf("other: %v, %d in flight; want %v, 0", s.OtherCounts, s.OtherInFlight, want)
	}
}

package throttle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// ---- the checker ----

// stressViolations counts violations per rule (index 1-6, as listed at TestStressInvariants) and keeps
// the first few described.
type stressViolations struct {
	rule     [7]int
	examples []string
	// pressure counts the starts at a rule's limit, to show the rules
	// were put to the test: the scope full (1), a start within 10 % of
	// Delay*(1+Jitter.Max) after the previous one (2), Concurrency starts
	// within 1.1 SlotDelay (3), the costs admitted in a quota window
	// reaching the quota (4), the global cap full (6).
	pressure [7]int
}

func (v *stressViolations) add(rule int, format string, args ...any) {
	v.rule[rule]++
	if len(v.examples) < 20 {
		v.examples = append(v.examples, fmt.Sprintf("rule %d: ", rule)+fmt.Sprintf(format, args...))
	}
}

func (v *stressViolations) total() int {
	n := 0
	for _, c := range v.rule {
		n += c
	}
	return n
}

func (v *stressViolations) pressureSummary() string {
	return fmt.Sprintf("scope full %d, delay-bound %d, slot-bound %d, quota full %d, global cap full %d",
		v.pressure[1], v.pressure[2], v.pressure[3], v.pressure[4], v.pressure[6])
}

func (v *stressViolations) summary() string {
	names := [...]string{1: "concurrency", 2: "delay", 3: "slot delay", 4: "quota", 5: "same instant", 6: "global"}
	var b strings.Builder
	for i := 1; i <= 6; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s: %d", i, names[i], v.rule[i])
	}
	return b.String()
}

// stressStart and stressEnd are one scope's view of a permit.
type stressStart struct {
	at   time.Time
	cost int64
}

type stressEnd struct {
	at     time.Time
	tStart time.Time
	cost   int64
	quota  []QuotaUse
}

// checkStress checks the records of a run against rules 1-6. It
// does not use the library's logic: it models the rules from their statement
// and the documented quota windows. Events at the same fake instant may
// have happened in either order, so from the permits' records alone it
// gives the library the benefit of the doubt (a release at the instant of
// a start came first when that helps); the recorded scopes' event
// sequences are exact and are checked exactly.
func checkStress(cfgs map[string]ScopeConfig, gc int, permits []stressPermit, recs map[string][]scopeEv) *stressViolations {
	v := &stressViolations{}
	starts := make(map[string][]stressStart)
	ends := make(map[string][]stressEnd)
	type gev struct {
		at time.Time
		d  int
	}
	var global []gev
	for i, p := range permits {
		if !p.observed.Equal(p.start) {
			v.add(5, "permit %d: Acquired() %v but Acquire returned at %v", i, p.start, p.observed)
		}
		if !slices.Equal(p.keys, p.gotKeys) {
			v.add(5, "permit %d: Scopes() %q, want %q", i, p.gotKeys, p.keys)
		}
		if !p.end.After(p.start) {
			panic(fmt.Sprintf("permit %d released at its start: the checker assumes it never is", i))
		}
		for j, k := range p.keys {
			starts[k] = append(starts[k], stressStart{p.start, p.costs[j]})
			ends[k] = append(ends[k], stressEnd{p.end, p.start, p.costs[j], p.quota})
		}
		global = append(global, gev{p.start, 1}, gev{p.end, -1})
	}

	// Rule 6: releases first at the same instant.
	slices.SortFunc(global, func(a, b gev) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.d, b.d)) })
	n := 0
	for _, e := range global {
		if n += e.d; n > gc {
			v.add(6, "%d permits at %v, GlobalConcurrency %d", n, e.at, gc)
		} else if n == gc && e.d > 0 {
			v.pressure[6]++
		}
	}

	keys := make([]string, 0, len(cfgs))
	for k := range cfgs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cfg := cfgs[k]
		ss, es := starts[k], ends[k]
		slices.SortStableFunc(ss, func(a, b stressStart) int { return a.at.Compare(b.at) })
		slices.SortStableFunc(es, func(a, b stressEnd) int { return a.at.Compare(b.at) })

		// Rule 1: releases first at the same instant.
		n, j := 0, 0
		for _, s := range ss {
			for j < len(es) && !es[j].at.After(s.at) {
				n--
				j++
			}
			if n++; n > cfg.Concurrency {
				v.add(1, "scope %s: %d permits at %v, Concurrency %d", k, n, s.at, cfg.Concurrency)
			} else if n == cfg.Concurrency {
				v.pressure[1]++
			}
		}

		// Rule 2: consecutive starts at least Delay*(1+Jitter.Min) apart;
		// AutoThrottle and backoff only ever raise the delay.
		tight := time.Duration(1.1 * float64(cfg.Delay) * (1 + cfg.Jitter.Max))
		if minGap := time.Duration(float64(cfg.Delay) * (1 + cfg.Jitter.Min)); minGap > 1 {
			for i := 1; i < len(ss); i++ {
				if ss[i].at.Sub(ss[i-1].at) <= tight {
					v.pressure[2]++
				}
				if gap := ss[i].at.Sub(ss[i-1].at); gap < minGap-1 {
					v.add(2, "scope %s: starts at %v and %v, %v apart; Delay %v, Jitter %+v: at least %v",
						k, ss[i-1].at, ss[i].at, gap, cfg.Delay, cfg.Jitter, minGap)
				}
			}
		}

		// Rule 3, the consequence visible from outside: at most
		// Concurrency starts within any SlotDelay.
		if c := cfg.Concurrency; cfg.SlotDelay > 0 {
			for i := c; i < len(ss); i++ {
				if gap := ss[i].at.Sub(ss[i-c].at); gap < cfg.SlotDelay*11/10 {
					v.pressure[3]++
				}
				if gap := ss[i].at.Sub(ss[i-c].at); gap < cfg.SlotDelay {
					v.add(3, "scope %s: %d starts from %v to %v (%v); SlotDelay %v, Concurrency %d",
						k, c+1, ss[i-c].at, ss[i].at, gap, cfg.SlotDelay, c)
				}
			}
		}

		if cfg.Quota > 0 && len(ss) > 0 {
			checkQuota(v, k, &cfg, ss, es)
		}

		if evs, ok := recs[k]; ok {
			checkRecorded(v, k, &cfg, evs, ss, es)
		}
	}
	return v
}

// quotaModel is the quota window as documented on ScopeConfig: the first window starts at the
// scope's first start, later ones follow back to back, Window long each.
type quotaModel struct {
	q      int64
	w      time.Duration
	origin time.Time
	win    int64
	used   int64
}

func (m *quotaModel) window(t time.Time) int64 { return int64(t.Sub(m.origin) / m.w) }

func (m *quotaModel) roll(t time.Time) {
	if w := m.window(t); w != m.win {
		m.win, m.used = w, 0
	}
}

// correction applies one release's corrections naming key exactly:
// an actual cost replaces the admitted one when the release comes in the
// window of the start; the server's remaining count raises the count.
func (m *quotaModel) correction(key string, e *stressEnd) {
	for _, u := range e.quota {
		if u.Scope != "" && u.Scope != key {
			continue
		}
		if u.HasCost && u.Cost >= 0 && m.window(e.tStart) == m.win {
			m.used = max(0, m.used+u.Cost-e.cost)
		}
		if u.HasRemaining && u.Remaining >= 0 && u.Remaining <= m.q {
			m.used = max(m.used, m.q-u.Remaining)
		}
	}
}

// checkQuota checks rule 4 from the permits' records. Releases at the
// instant of starts may have come before or after them: the check uses
// the lowest count any order gives (the lowering cost corrections first,
// the raising ones and the remaining counts after).
func checkQuota(v *stressViolations, key string, cfg *ScopeConfig, ss []stressStart, es []stressEnd) {
	m := quotaModel{q: cfg.Quota, w: cfg.Window, origin: ss[0].at}
	i, j := 0, 0
	admWin, admitted := int64(0), int64(0) // the costs admitted in the window
	for i < len(ss) || j < len(es) {
		var t time.Time
		switch {
		case i == len(ss):
			t = es[j].at
		case j == len(es) || ss[i].at.Before(es[j].at):
			t = ss[i].at
		default:
			t = es[j].at
		}
		m.roll(t)
		var lower, raise, floor int64 = 0, 0, -1
		for ; j < len(es) && es[j].at.Equal(t); j++ {
			e := &es[j]
			for _, u := range e.quota {
				if u.Scope != "" && u.Scope != key {
					continue
				}
				if u.HasCost && u.Cost >= 0 && m.window(e.tStart) == m.win {
					if d := u.Cost - e.cost; d < 0 {
						lower += d
					} else {
						raise += d
					}
				}
				if u.HasRemaining && u.Remaining >= 0 && u.Remaining <= m.q {
					floor = max(floor, m.q-u.Remaining)
				}
			}
		}
		var sum int64
		first := i
		for ; i < len(ss) && ss[i].at.Equal(t); i++ {
			sum += ss[i].cost
		}
		if k := i - first; k > 0 {
			u := max(0, m.used+lower)
			if u > 0 && u+sum > m.q || u == 0 && k > 1 && sum > m.q {
				v.add(4, "scope %s: %d in the window at %v, then %d starts costing %d; Quota %d per %v from %v",
					key, u, t, k, sum, m.q, m.w, m.origin)
			}
		}
		m.used = max(0, max(m.used, floor)+lower+raise+sum)
		if m.win != admWin {
			admWin, admitted = m.win, 0
		}
		if admitted += sum; admitted >= m.q && sum > 0 {
			v.pressure[4]++
		}
	}
}

// checkRecorded checks a recorded scope's exact sequence of Start and
// Finish calls: rules 1 and 4 exactly, and rule 5: the starts the policy
// saw are the permits' starts, at the permits' instants, with their
// costs, and each permit finished once.
func checkRecorded(v *stressViolations, key string, cfg *ScopeConfig, evs []scopeEv, ss []stressStart, es []stressEnd) {
	var rs []stressStart
	var rEnds, pEnds []time.Time
	inFlight := 0
	var m *quotaModel
	for _, e := range evs {
		if e.start {
			rs = append(rs, stressStart{e.at, e.cost})
			if inFlight++; inFlight > cfg.Concurrency {
				v.add(1, "recorded scope %s: %d in flight at %v, Concurrency %d", key, inFlight, e.at, cfg.Concurrency)
			}
			if cfg.Quota > 0 {
				if m == nil {
					m = &quotaModel{q: cfg.Quota, w: cfg.Window, origin: e.at}
				}
				m.roll(e.at)
				if m.used > 0 && m.used+e.cost > m.q {
					v.add(4, "recorded scope %s: %d in the window at %v, a start costing %d; Quota %d per %v from %v",
						key, m.used, e.at, e.cost, m.q, m.w, m.origin)
				}
				m.used += e.cost
			}
			continue
		}
		rEnds = append(rEnds, e.at)
		inFlight--
		if m != nil {
			m.roll(e.at)
			m.correction(key, &stressEnd{at: e.at, tStart: e.tStart, cost: e.cost, quota: e.quota})
		}
	}
	slices.SortStableFunc(rs, func(a, b stressStart) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.cost, b.cost)) })
	ps := slices.Clone(ss)
	slices.SortStableFunc(ps, func(a, b stressStart) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.cost, b.cost)) })
	same := func(a, b stressStart) bool { return a.at.Equal(b.at) && a.cost == b.cost }
	if !slices.EqualFunc(rs, ps, same) {
		v.add(5, "recorded scope %s: its policy saw %d starts, the permits %d, not at the same instants with the same costs", key, len(rs), len(ps))
	}
	for _, e := range es {
		pEnds = append(pEnds, e.at)
	}
	slices.SortFunc(rEnds, time.Time.Compare)
	if !slices.EqualFunc(rEnds, pEnds, time.Time.Equal) {
		v.add(5, "recorded scope %s: its policy saw %d finishes, the permits %d releases", key, len(rEnds), len(pEnds))
	}
}

// TestStressChecker: the checker finds a violation of each rule in
// made-up records, and none in records that keep the rules.
func TestStressChecker(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	perm := func(start, end int, keys []string, costs []int64, q ...QuotaUse) stressPermit {
		return stressPermit{keys: keys, costs: costs, start: at(start), observed: at(start), end: at(end), gotKeys: keys, quota: q}
	}
	one := func(start, end int) stressPermit { return perm(start, end, []string{"a"}, []int64{1}) }
	base := ScopeConfig{Concurrency: 2, Delay: 100 * time.Millisecond, SlotDelay: time.Second, Jitter: Jitter{Min: -0.5, Max: 0.5}, Window: 10 * time.Second}
	quota := base
	quota.Quota = 5
	cases := []struct {
		name    string
		cfg     ScopeConfig
		gc      int
		permits []stressPermit
		recs    []scopeEv
		rule    int // 0: no violation
	}{
		{"fine", base, 2, []stressPermit{one(0, 500), one(50, 60), one(1000, 1100), one(1050, 1100)}, nil, 0},
		{"release and start at one instant", base, 2, []stressPermit{one(0, 2000), one(1000, 1500), one(1500, 1600)}, nil, 0},
		{"concurrency", base, 9, []stressPermit{one(0, 5000), one(1000, 5000), one(2000, 5000)}, nil, 1},
		{"delay", base, 9, []stressPermit{one(0, 1), one(49, 50)}, nil, 2},
		{"delay, same instant", base, 9, []stressPermit{one(0, 1), one(0, 1)}, nil, 2},
		{"slot delay", base, 9, []stressPermit{one(0, 1), one(100, 101), one(999, 1000)}, nil, 3},
		{"quota", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{3}), perm(1000, 1001, []string{"a"}, []int64{3})}, nil, 4},
		{"quota, next window", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{3}), perm(10_000, 10_001, []string{"a"}, []int64{3})}, nil, 0},
		{"quota, window from the first start", quota, 9, []stressPermit{perm(5000, 5001, []string{"a"}, []int64{3}), perm(14_999, 15_001, []string{"a"}, []int64{3})}, nil, 4},
		{"quota, oversize alone", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{9}), perm(10_000, 10_001, []string{"a"}, []int64{9})}, nil, 0},
		{"quota, oversize then one more", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{9}), perm(1000, 1001, []string{"a"}, []int64{1})}, nil, 4},
		{"quota, actual cost lowers", quota, 9, []stressPermit{perm(0, 1000, []string{"a"}, []int64{5}, QuotaUse{Cost: 1, HasCost: true}), perm(1000, 1001, []string{"a"}, []int64{4})}, nil, 0},
		{"quota, actual cost in a later window is dropped", quota, 9, []stressPermit{perm(0, 10_000, []string{"a"}, []int64{5}, QuotaUse{Cost: 0, HasCost: true}), perm(10_000, 10_001, []string{"a"}, []int64{5}), perm(11_000, 11_001, []string{"a"}, []int64{1})}, nil, 4},
		{"quota, remaining raises", quota, 9, []stressPermit{perm(0, 500, []string{"a"}, []int64{1}, QuotaUse{Scope: "a", Remaining: 0, HasRemaining: true}), perm(1000, 1001, []string{"a"}, []int64{1})}, nil, 4},
		{"quota, remaining of another scope", quota, 9, []stressPermit{perm(0, 500, []string{"a"}, []int64{1}, QuotaUse{Scope: "b", Remaining: 0, HasRemaining: true}), perm(1000, 1001, []string{"a"}, []int64{1})}, nil, 0},
		{"same instant", base, 9, []stressPermit{{keys: []string{"a"}, costs: []int64{1}, start: at(0), observed: at(1), end: at(5), gotKeys: []string{"a"}}}, nil, 5},
		{"scopes", base, 9, []stressPermit{{keys: []string{"a"}, costs: []int64{1}, start: at(0), observed: at(0), end: at(5), gotKeys: []string{"a", "b"}}}, nil, 5},
		{"recorded: fine", quota, 9, []stressPermit{one(0, 5), one(100, 105)},
			[]scopeEv{{start: true, at: at(0), cost: 1}, {at: at(5), cost: 1, tStart: at(0)}, {start: true, at: at(100), cost: 1}, {at: at(105), cost: 1, tStart: at(100)}}, 0},
		{"recorded: a start at another instant", base, 9, []stressPermit{one(0, 5)},
			[]scopeEv{{start: true, at: at(1), cost: 1}, {at: at(5), cost: 1, tStart: at(1)}}, 5},
		{"recorded: a start with another cost", base, 9, []stressPermit{one(0, 5)},
			[]scopeEv{{start: true, at: at(0), cost: 2}, {at: at(5), cost: 2, tStart: at(0)}}, 5},
		{"recorded: finished twice", base, 9, []stressPermit{one(0, 5)},
			[]scopeEv{{start: true, at: at(0), cost: 1}, {at: at(5), cost: 1, tStart: at(0)}, {at: at(5), cost: 1, tStart: at(0)}}, 5},
		{"recorded: start before the release at one instant", base, 9, []stressPermit{one(0, 1500), one(100, 1500), one(1500, 1600)},
			[]scopeEv{{start: true, at: at(0), cost: 1}, {start: true, at: at(100), cost: 1}, {start: true, at: at(1500), cost: 1},
				{at: at(1500), cost: 1, tStart: at(0)}, {at: at(1500), cost: 1, tStart: at(100)}, {at: at(1600), cost: 1, tStart: at(1500)}}, 1},
		{"global", base, 1, []stressPermit{one(0, 500), perm(200, 300, []string{"b"}, []int64{1})}, nil, 6},
		{"global, release first at one instant", base, 1, []stressPermit{one(0, 500), perm(500, 600, []string{"b"}, []int64{1})}, nil, 0},
	}
	for _, c := range cases {
		cfgs := map[string]ScopeConfig{"a": c.cfg, "b": c.cfg}
		var recs map[string][]scopeEv
		if c.recs != nil {
			recs = map[string][]scopeEv{"a": c.recs}
		}
		v := checkStress(cfgs, c.gc, c.permits, recs)
		if c.rule == 0 {
			if v.total() != 0 {
				t.Errorf("%s: %v", c.name, v.examples)
			}
			continue
		}
		if v.rule[c.rule] == 0 || v.total() != v.rule[c.rule] {
			t.Errorf("%s: want a violation of rule %d, got %s %v", c.name, c.rule, v.summary(), v.examples)
		}
	}
}

package throttle

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReadySetOrder holds readySet to the order of one sorted list of the
// same groups, through pushes in order and out of it, changed ranks
// (fix), removals before a group's turn (holes in the run, and their
// compaction) and the run's growth.
func TestReadySetOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var (
		r    readySet
		in   []*setQueue // the reference: the groups in r
		seq  uint64
		ops  [4]int
		runs int // pushes that went to the run
		used = make(map[uint64]bool)
	)
	rankOf := func(g *setQueue) {
		seq += 64
		g.headSeq = seq
		for rng.IntN(8) == 0 { // an old head, as from waiting (seqs are unique)
			g.headSeq = uint64(rng.Int64N(int64(seq))) + 1
			if !used[g.headSeq] {
				break
			}
			g.headSeq = seq
		}
		used[g.headSeq] = true
		g.prio = 0
		if rng.IntN(10) == 0 {
			g.prio = rng.IntN(3)
		}
		g.share = 0
		if rng.IntN(10) == 0 {
			g.share = float64(rng.IntN(4)) / 4
		}
	}
	best := func() *setQueue {
		return slices.MinFunc(in, func(a, b *setQueue) int {
			ia, ib := readyItemOf(a), readyItemOf(b)
			if ia.before(&ib) {
				return -1
			}
			return 1
		})
	}
	for step := range 100000 {
		// It grows and drains in turns of 5,000 steps.
		grow := step / 5000 % 2
		switch op := rng.IntN(10); {
		case len(in) == 0 || op < 2+4*grow:
			g := &setQueue{idx: -1}
			rankOf(g)
			r.push(g)
			if g.inRun {
				runs++
			}
			in = append(in, g)
			ops[0]++
		case op < 7: // the first goes, as a pop does
			g := r.first()
			if want := best(); g != want {
				t.Fatalf("step %d: first is %+v, want %+v", step, *g, *want)
			}
			r.remove(g)
			in = slices.DeleteFunc(in, func(x *setQueue) bool { return x == g })
			ops[1]++
		case op < 9: // any group gets a new head (Push), or the first's next head (a pop)
			g := in[rng.IntN(len(in))]
			if rng.IntN(2) == 0 {
				g = r.first()
			}
			rankOf(g)
			r.fix(g)
			ops[2]++
		default: // any group goes
			i := rng.IntN(len(in))
			r.remove(in[i])
			in = slices.Delete(in, i, i+1)
			ops[3]++
		}
		if r.len() != len(in) {
			t.Fatalf("step %d: len %d, want %d", step, r.len(), len(in))
		}
		if len(in) > 0 {
			if g, want := r.first(), best(); g != want {
				t.Fatalf("step %d: first is %+v, want %+v", step, *g, *want)
			}
		}
	}
	for len(in) > 0 {
		g := r.first()
		if want := best(); g != want {
			t.Fatalf("draining: first is %+v, want %+v", *g, *want)
		}
		r.remove(g)
		in = slices.DeleteFunc(in, func(x *setQueue) bool { return x == g })
	}
	if r.len() != 0 || r.live != 0 || len(r.heap) != 0 {
		t.Fatalf("drained set holds %d (run %d, heap %d)", r.len(), r.live, len(r.heap))
	}
	t.Logf("ops (push, first, fix, remove): %v; %d of %d pushes to the run", ops, runs, ops[0])
	if runs == 0 || runs == ops[0] {
		t.Fatalf("%d of %d pushes went to the run: the test should exercise both halves", runs, ops[0])
	}
}

// TestReadySetHoles: groups taken out of the run before their turn leave
// holes, which the run closes once they outnumber its groups (and 32),
// keeping the order and each group's position.
func TestReadySetHoles(t *testing.T) {
	var r readySet
	gs := make([]*setQueue, 200)
	for i := range gs {
		gs[i] = &setQueue{idx: -1, headSeq: uint64(i + 1)}
		r.push(gs[i])
	}
	if len(r.heap) != 0 || r.live != len(gs) {
		t.Fatalf("pushed in order: run %d, heap %d; want all in the run", r.live, len(r.heap))
	}
	// Every group but the first and each tenth goes: 179 holes.
	var left []*setQueue
	for i, g := range gs {
		if i == 0 || i%10 == 0 {
			left = append(left, g)
			continue
		}
		r.remove(g)
	}
	if holes := r.tail - r.head - r.live; holes > max(32, r.live) {
		t.Errorf("%d holes for %d groups: not closed", holes, r.live)
	}
	if r.tail-r.head > 64 {
		t.Errorf("the run spans %d positions for %d groups", r.tail-r.head, r.live)
	}
	for _, g := range left {
		if !g.inRun || r.run[g.idx&(len(r.run)-1)].g != g {
			t.Fatalf("group %d is not at its position %d", g.headSeq, g.idx)
		}
	}
	// An out-of-order group goes to the heap and comes first.
	old := &setQueue{idx: -1, headSeq: 5}
	r.push(old)
	if old.inRun {
		t.Fatal("a group before the run's last went to the run")
	}
	want := append([]*setQueue{gs[0], old}, left[1:]...)
	for i, w := range want {
		g := r.first()
		if g != w {
			t.Fatalf("pop %d: group %d, want %d", i, g.headSeq, w.headSeq)
		}
		r.remove(g)
	}
	if r.len() != 0 {
		t.Fatalf("len %d after draining", r.len())
	}
}

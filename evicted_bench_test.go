package throttle

import (
	"strconv"
	"testing"
	"time"
)

// farmKeys makes the keys of new hosts, one allocation each, as a crawl
// gets them.
type farmKeys struct{ buf []byte }

func (k *farmKeys) key(i int) string {
	k.buf = append(k.buf[:0], "farm"...)
	k.buf = strconv.AppendInt(k.buf, int64(i), 10)
	k.buf = append(k.buf, ".example"...)
	return string(k.buf)
}

// BenchmarkNewScope is the cost of one new scope in a table of N scopes
// kept at its size:
//
//   - N=…/map-fifo: the baseline, MaxScopes off, and each new scope
//     followed by a plain map delete of the oldest (the benchmark keeps
//     the keys in order): the same scopes made, the same live heap, the
//     table kept at N with no eviction policy;
//   - N=…/evict-idle: MaxScopes N, each new scope evicting one with
//     nothing pending;
//   - N=…/evict-gated: the same with every scope gated for 300 s, as a
//     link farm answering Retry-After leaves them: each eviction writes a
//     record.
//
// Eviction's cost is evict minus map-fifo. The work (examined/op: scopes
// eviction looked at per new scope) is the same at N = 1,000 and
// N = 100,000; the time may differ by the cache misses of a larger heap,
// which the baseline pays too.
func BenchmarkNewScope(b *testing.B) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, limit := range []int{1000, 100_000} {
		for _, mode := range []string{"map-fifo", "evict-idle", "evict-gated"} {
			b.Run("N="+strconv.Itoa(limit)+"/"+mode, func(b *testing.B) {
				cfg := benchConfig()
				cfg.MaxScopes = limit
				fifo := mode == "map-fifo"
				if fifo {
					cfg.MaxScopes = 0
				}
				m, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				var keys farmKeys
				order := make([]string, limit)
				newScope := func(i int) {
					k := keys.key(i)
					s, err := m.lookup(k, now)
					if err != nil {
						b.Fatal(err)
					}
					if mode == "evict-gated" {
						s.mu.Lock()
						s.pol.(*defaultScope).setGate(now.Add(300 * time.Second))
						s.mu.Unlock()
					}
					if !fifo {
						return
					}
					j := i % limit
					if old := order[j]; old != "" {
						sh := m.shardOf(old)
						sh.mu.Lock()
						delete(sh.m, old)
						sh.mu.Unlock()
					}
					order[j] = k
				}
				for i := range 2 * limit { // fill the table, and start evicting
					newScope(i)
				}
				examined, evicted, _ := m.evictionWork()
				b.ReportAllocs()
				n := 0
				for i := 2 * limit; b.Loop(); i++ {
					newScope(i)
					n++
				}
				e, v, _ := m.evictionWork()
				b.ReportMetric(float64(e-examined)/float64(n), "examined/op")
				b.ReportMetric(float64(v-evicted)/float64(n), "evicted/op")
				if m.NumScopes() > limit {
					b.Fatalf("Len %d over %d", m.NumScopes(), limit)
				}
			})
		}
	}
}

package throttle

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// linkFarmSeconds is how long TestLinkFarmGatedHour crawls, in fake
// seconds: 5 minutes (300,000 hosts) by default, 2 minutes under -short or
// the race detector; THROTTLE_LINKFARM_SECONDS=3600 runs the full hour
// (about a minute on 2 shared cores).
func linkFarmSeconds(t *testing.T) int {
	if s := os.Getenv("THROTTLE_LINKFARM_SECONDS"); s != "" {
		var n int
		_, err := fmt.Sscan(s, &n)
		require.NoError(t, err, "THROTTLE_LINKFARM_SECONDS")
		require.GreaterOrEqual(t, n, 100, "THROTTLE_LINKFARM_SECONDS: 100,000 hosts at least")
		return n
	}
	if raceEnabled || testing.Short() {
		return 120
	}
	return 300
}

// TestLinkFarmGatedHour is the link farm of issue 22 for an hour of fake
// time, or 5 minutes by default (see linkFarmSeconds): 1,000 new hosts a
// second, each answering
// 429 with Retry-After: 300, under MaxScopes 1,000, while 20 other hosts
// hold a permit all along. Every second it checks that the table holds
// at most MaxScopes scopes plus the 20 held, and sends one request again to
// hosts first seen 1, 2, 5, 30 and 200 s before: one whose record is still
// in the evicted-record table must be refused until its gate ends, to the
// nanosecond. It reports the table size, the live heap, the scopes
// eviction looked at per 1,000 new hosts at 2,000 and at 100,000 hosts
// seen (work, not time: the machine is shared), and how many re-seen hosts
// had lost their record by age.
func TestLinkFarmGatedHour(t *testing.T) {
	const (
		perSecond = 1000
		limit     = 1000
		held      = 20
		gate      = 300 * time.Second
	)
	seconds := linkFarmSeconds(t)
	cfg := DefaultConfig()
	cfg.GlobalConcurrency = 1 << 20
	before := liveHeap()
	m, clk := stepManager(t, cfg, limit)
	start := clk.t
	reqs := newHostRequests()
	var permits []*Permit
	for i := range held {
		p, _, err := m.TryAcquire(reqs.to("held", i))
		require.NoError(t, err)
		require.NotNil(t, p)
		permits = append(permits, p)
	}

	type ageStats struct{ reseen, kept, refused, lost int }
	ages := []int{1, 2, 5, 30, 200}
	byAge := make(map[int]*ageStats, len(ages))
	for _, a := range ages {
		byAge[a] = &ageStats{}
	}
	examinedAt := map[int]uint64{}
	var heapFull, heapPeak int64
	hosts := 0
	for sec := range seconds {
		for _, age := range ages {
			if sec < age {
				continue
			}
			// The host first seen age seconds ago, at the same place
			// in its second as this one in this second.
			i := (sec-age)*perSecond + sec%perSecond
			key := fmt.Sprintf("farm%d.example", i)
			st := byAge[age]
			st.reseen++
			gateEnd := start.Add(time.Duration(sec-age)*time.Second + gate)
			recorded, kept := m.peekRecord(key, clk.t)
			if m.has(key) {
				kept, recorded = true, gateEnd
			}
			p, adm, err := m.TryAcquire(reqs.to("farm", i))
			require.NoError(t, err)
			if kept {
				st.kept++
				require.Equal(t, gateEnd, recorded, "%s: the record keeps its gate's end", key)
				require.Nil(t, p, "%s, re-seen %d s later, is still gated", key, age)
				require.Equal(t, ReasonGate, adm.Reason, key)
				require.Equal(t, gateEnd, adm.At, "%s waits for its gate's end", key)
				st.refused++
				continue
			}
			if p == nil {
				st.refused++
				continue
			}
			st.lost++
			p.Release(retryAfter300(), nil)
		}
		farmStep(t, m, reqs, "farm", sec*perSecond, perSecond, retryAfter300)
		hosts += perSecond
		if hosts <= 2000 || hosts == 99_000 || hosts == 100_000 {
			examined, _, _ := m.evictionWork()
			examinedAt[hosts] = examined
		}
		n := m.NumScopes()
		require.LessOrEqual(t, n, limit+held, "after %d hosts", hosts)
		if hosts == 10_000 || sec%600 == 599 || sec == seconds-1 {
			d := int64(liveHeap()) - int64(before)
			if hosts == 10_000 {
				heapFull = d
			}
			heapPeak = max(heapPeak, d)
			t.Logf("%7d hosts, %4d s: Len %d, live heap %+d B", hosts, sec+1, n, d)
		}
		clk.t = clk.t.Add(time.Second)
	}
	for _, p := range permits {
		p.Release(ok200, nil)
	}

	examined, evicted, lost := m.evictionWork()
	at2k := examinedAt[2000] - examinedAt[1000]
	at100k := examinedAt[100_000] - examinedAt[99_000]
	t.Logf("%d hosts in %d s of fake time; evicted %d, looked at %d (%.2f per eviction)",
		hosts, seconds, evicted, examined, float64(examined)/float64(evicted))
	t.Logf("scopes looked at per 1,000 new hosts: %d at 2,000 hosts seen, %d at 100,000", at2k, at100k)
	t.Logf("live heap: %+d B with the table full (10,000 hosts), %+d B at most; evicted-record tables %d B",
		heapFull, heapPeak, m.evictedRecordBytes())
	t.Logf("records lost while pending: %d (the table holds %d records; %d hosts a second gated %v need %d)",
		lost, m.evictedRecordBytes()/16, perSecond, gate, perSecond*int(gate/time.Second))
	for _, a := range ages {
		st := byAge[a]
		t.Logf("re-seen %3d s later: %d hosts, %d with their state kept (all refused), %d refused, %d sent early (record lost)",
			a, st.reseen, st.kept, st.refused, st.lost)
	}
	assert.NotZero(t, at2k)
	assert.LessOrEqual(t, at100k, 2*at2k, "the cost per new scope does not grow with the hosts seen")
	assert.LessOrEqual(t, float64(examined)/float64(evicted), 3.0)
	assert.Less(t, heapPeak-heapFull, int64(1<<20), "the heap does not grow once the table is full")
	assert.Less(t, heapPeak, int64(limit+held)*2048+int64(m.evictedRecordBytes()), "at most 2 KiB a scope, and the records")
	assert.Greater(t, byAge[1].kept, byAge[1].reseen*9/10, "a host re-seen a second later is nearly always held")
	runtime.KeepAlive(m)
}

// TestMaxScopesKeepsHeldAndWaiting: a scope with a permit and one with a
// waiter (the second scope of a request waiting for the first) stay
// through 10,000 new hosts under MaxScopes 64; the table holds at most 64
// scopes besides them; the waiter then gets its permit.
func TestMaxScopesKeepsHeldAndWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := benchConfig()
		cfg.MaxScopes = 64
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://held.example/"))
		require.NoError(t, err)
		got := make(chan *Permit)
		go func() {
			ctx := WithScopeKeys(context.Background(), "held.example", "waiting.example")
			q, err := m.Acquire(ctx, get(t, "http://held.example/"))
			assert.NoError(t, err)
			got <- q
		}()
		synctest.Wait()
		reqs := newHostRequests()
		for i := range 10_000 {
			crawlOnce(t, m, reqs.to("farm", i), Feedback{Status: http.StatusTooManyRequests, Wait: 300 * time.Second, HasWait: true, Backoff: true})
			if i%100 == 0 {
				require.LessOrEqual(t, m.NumScopes(), cfg.MaxScopes+2)
			}
		}
		assert.True(t, m.has("held.example"), "a scope with a permit stays")
		assert.True(t, m.has("waiting.example"), "a scope with a waiter stays")
		p.Release(ok200, nil)
		q := <-got
		require.NotNil(t, q)
		q.Release(ok200, nil)
	})
}

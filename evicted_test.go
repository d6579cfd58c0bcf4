package throttle

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evictionWork returns the scopes eviction looked at and evicted, and the
// records lost, summed over the shards.
func (m *ThrottlingManager) evictionWork() (examined, evicted, lost uint64) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		if ev := sh.ev; ev != nil {
			examined += ev.examined
			evicted += ev.evicted
			lost += ev.records.lost
		}
		sh.mu.RUnlock()
	}
	return
}

// evictedRecordBytes returns the bytes of the evicted-record tables.
func (m *ThrottlingManager) evictedRecordBytes() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		if ev := sh.ev; ev != nil {
			n += cap(ev.records.slots) * 16
		}
		sh.mu.RUnlock()
	}
	return n
}

// peekRecord returns the end of the wait recorded for key when it was
// evicted, if its record is still there, without taking it.
func (m *ThrottlingManager) peekRecord(key string, now time.Time) (time.Time, bool) {
	sh, h := m.hashShard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if sh.ev == nil || sh.ev.records.slots == nil {
		return time.Time{}, false
	}
	t := &sh.ev.records
	for _, sl := range t.bucket(h) {
		if sl.tag|evictedGate == h|evictedUsed|evictedGate && sl.at > now.Sub(t.base) {
			return t.base.Add(sl.at), true
		}
	}
	return time.Time{}, false
}

// evictOut sends one request to each of n new hosts at the clock's time,
// answered 200, until key is no longer in the table: with MaxScopes 64,
// each shard holds one scope, so a new host of key's shard evicts it.
func evictOut(t *testing.T, m *ThrottlingManager, key string) {
	t.Helper()
	reqs := newHostRequests()
	for i := 0; m.has(key); i++ {
		require.Less(t, i, 100_000, "%s never evicted", key)
		farmStep(t, m, reqs, "other", i, 1, func() *http.Response { return ok200 })
	}
}

// TestRegistryEvictedGateKept: a host answering 429 with Retry-After: 300
// is evicted 1 s later by new hosts; re-seen 200 s after its answer, it is
// refused until the gate's end, to the nanosecond, and admitted then.
func TestRegistryEvictedGateKept(t *testing.T) {
	for _, custom := range []bool{false, true} {
		t.Run(fmt.Sprintf("custom=%v", custom), func(t *testing.T) {
			cfg := benchConfig()
			if custom {
				cfg.NewScopeManager = func(p ScopeParams) ScopeManager {
					return &policyCalls{ScopeManager: NewDefaultScopeManager(p), n: new(int)}
				}
			}
			m, clk := stepManager(t, cfg, numShards)
			gated := get(t, "http://gated.example/")
			p, _, err := m.TryAcquire(gated)
			require.NoError(t, err)
			require.NotNil(t, p)
			p.Release(retryAfter300(), nil)
			end := clk.t.Add(300 * time.Second)

			clk.t = clk.t.Add(time.Second)
			evictOut(t, m, "gated.example")
			assert.LessOrEqual(t, m.NumScopes(), numShards)
			clk.t = clk.t.Add(199 * time.Second)
			p, adm, err := m.TryAcquire(gated)
			require.NoError(t, err)
			require.Nil(t, p, "re-seen before its gate ends")
			assert.Equal(t, Admission{At: end, Reason: ReasonGate}, adm)

			clk.t = end.Add(-time.Nanosecond)
			evictOut(t, m, "gated.example") // evicted again: the record is made anew
			p, adm, err = m.TryAcquire(gated)
			require.NoError(t, err)
			require.Nil(t, p, "a nanosecond before the gate's end")
			assert.Equal(t, Admission{At: end, Reason: ReasonGate}, adm)

			clk.t = end
			p, _, err = m.TryAcquire(gated)
			require.NoError(t, err)
			require.NotNil(t, p, "admitted at the gate's end")
			p.Release(ok200, nil)
		})
	}
}

// TestRegistryEvictedDelayGapKept: with Delay 10 s, a host evicted right
// after its start is refused until 10 s after that start, for its delay,
// even with a clock that has not moved; a host evicted with nothing
// pending leaves no record.
func TestRegistryEvictedDelayGapKept(t *testing.T) {
	cfg := benchConfig()
	slowCfg := cfg.Default
	slowCfg.Delay = 10 * time.Second
	cfg.Scopes = map[string]ScopeConfig{"slow.example": slowCfg}
	m, clk := stepManager(t, cfg, numShards)
	slow := get(t, "http://slow.example/")
	p, _, err := m.TryAcquire(slow)
	require.NoError(t, err)
	require.NotNil(t, p)
	p.Release(ok200, nil)
	start := clk.t

	evictOut(t, m, "slow.example")
	p, adm, err := m.TryAcquire(slow)
	require.NoError(t, err)
	require.Nil(t, p, "re-seen at once, with the clock frozen")
	assert.Equal(t, Admission{At: start.Add(10 * time.Second), Reason: ReasonDelay}, adm)

	clk.t = start.Add(5 * time.Second)
	evictOut(t, m, "slow.example")
	p, adm, err = m.TryAcquire(slow)
	require.NoError(t, err)
	require.Nil(t, p, "5 s after its start")
	assert.Equal(t, Admission{At: start.Add(10 * time.Second), Reason: ReasonDelay}, adm)

	clk.t = start.Add(10 * time.Second)
	p, _, err = m.TryAcquire(slow)
	require.NoError(t, err)
	require.NotNil(t, p, "admitted when the delay has passed")
	p.Release(ok200, nil)

	// The other hosts had no delay: nothing pending, no record; the
	// records of slow.example were taken when it came back.
	records := 0
	for i := range m.shards {
		if ev := m.shards[i].ev; ev != nil {
			for _, sl := range ev.records.slots {
				if sl.tag != 0 {
					records++
				}
			}
		}
	}
	assert.Zero(t, records)
}

// TestRegistryEvictedRecordTable: the records of a bucket: the same key
// updates its record; a free or expired slot is taken before a pending
// one; with every slot pending, the record that ends first is lost (and
// counted), not the one being written; take removes a record, and returns
// it only while it is pending.
func TestRegistryEvictedRecordTable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var tb evictedTimes
	const limit = 8
	hs := make([]uint64, evictedWays+2)
	for i := range hs {
		// Same high half modulo the buckets: one bucket; different
		// low bits: different keys.
		hs[i] = uint64(3)<<32 | uint64(i+1)<<8
	}
	tb.put(hs[0], at(100), true, t0, limit)
	require.Len(t, tb.slots, evictedRecordsPerScope*limit)
	tb.put(hs[0], at(50), false, t0, limit) // same key: updated
	for i := 1; i < evictedWays; i++ {
		tb.put(hs[i], at(10*i+100), true, t0, limit)
	}
	assert.Zero(t, tb.lost, "the bucket is not over full yet")
	tb.put(hs[evictedWays], at(300), true, t0, limit)
	assert.Equal(t, uint64(1), tb.lost)
	_, _, ok := tb.take(hs[0], t0)
	assert.False(t, ok, "the record ending first (at 50 s) was lost")

	// At 115 s, the record of 110 s has expired: a new key takes its
	// slot, and nothing pending is lost.
	tb.put(hs[evictedWays+1], at(400), false, at(115), limit)
	assert.Equal(t, uint64(1), tb.lost)
	_, _, ok = tb.take(hs[1], at(100))
	assert.False(t, ok, "the expired record's slot was taken")
	got, gate, ok := tb.take(hs[evictedWays], at(115))
	require.True(t, ok)
	assert.Equal(t, at(300), got)
	assert.True(t, gate)
	_, _, ok = tb.take(hs[evictedWays], at(115))
	assert.False(t, ok, "take removes the record")
	got, gate, ok = tb.take(hs[evictedWays+1], at(115))
	require.True(t, ok)
	assert.Equal(t, at(400), got)
	assert.False(t, gate)
	got, _, ok = tb.take(hs[2], at(115))
	require.True(t, ok)
	assert.Equal(t, at(120), got)
	_, _, ok = tb.take(hs[3], at(130))
	assert.False(t, ok, "a record whose time has passed is not returned")
}

// TestRegistryRingForgetsSwept: once eviction has started in the shards,
// the idle scopes a sweep forgets leave their rings too (no dead scope
// kept in memory by its ring entry), and the rings give their room back.
func TestRegistryRingForgetsSwept(t *testing.T) {
	cfg := benchConfig()
	cfg.IdleTimeout = time.Minute
	m, clk := stepManager(t, cfg, 64*numShards)
	reqs := newHostRequests()
	farmStep(t, m, reqs, "h", 0, 20_000, func() *http.Response { return ok200 })
	require.Equal(t, 64*numShards, m.NumScopes())
	alive := get(t, "http://alive.example/")
	for range cfg.IdleTimeout/time.Second + numShards + 1 {
		clk.t = clk.t.Add(time.Second)
		p, _, err := m.TryAcquire(alive)
		require.NoError(t, err)
		require.NotNil(t, p)
		p.Release(ok200, nil)
	}
	assert.Equal(t, 1, m.NumScopes())
	entries, dead, room := 0, 0, 0
	for i := range m.shards {
		r := &m.shards[i].ev.ring
		entries += r.n
		room = max(room, len(r.buf))
		for j := range r.n {
			if r.buf[(r.head+j)%len(r.buf)].s.dead {
				dead++
			}
		}
	}
	assert.LessOrEqual(t, entries, 1, "the live scope only")
	assert.Zero(t, dead, "no ring keeps a forgotten scope")
	assert.LessOrEqual(t, room, 2*clockMinRoom, "the rings gave their room back")
}

// TestMaxScopesConcurrentGatesKept: 8 goroutines crawl 24 hosts that
// answer every request 429 with Retry-After: 1, while another floods the
// manager with new hosts under MaxScopes 64, 640 a second, so the 24
// scopes are evicted and made again all along, some while others wait
// for them or admit them. No host is sent a request before the gate of
// its previous answer ends. The table holds at most MaxScopes scopes
// besides the ones in use when the last scope of their part was made (at
// most the 8 workers' and the flood's), and none once new scopes have
// come to every part. In fake time (synctest); run it with -race.
func TestMaxScopesConcurrentGatesKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := benchConfig()
		cfg.MaxScopes = numShards
		cfg.Default.Backoff.MaxDelay = 2 * time.Second // many rounds in little fake time
		m := newManager(t, cfg)
		const hosts, workers, each = 24, 8, 100
		var mu sync.Mutex
		gateEnd := make(map[string]time.Time)
		early := 0
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					req := get(t, fmt.Sprintf("http://g%d.example/", (w*each+i)%hosts))
					p, err := m.Acquire(context.Background(), req)
					if !assert.NoError(t, err) {
						return
					}
					now := time.Now()
					mu.Lock()
					if now.Before(gateEnd[req.URL.Host]) {
						early++
					}
					gateEnd[req.URL.Host] = now.Add(time.Second)
					mu.Unlock()
					p.Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}}, nil)
				}
			})
		}
		stop := make(chan struct{})
		flood := make(chan int)
		go func() {
			reqs := newHostRequests()
			n := 0
			for {
				select {
				case <-stop:
					flood <- n
					return
				default:
				}
				p, _, err := m.TryAcquire(reqs.to("farm", n))
				if assert.NoError(t, err) && p != nil {
					p.Release(ok200, nil)
				}
				n++
				if n%64 == 0 {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
		wg.Wait()
		close(stop)
		n := <-flood
		_, evicted, lost := m.evictionWork()
		t.Logf("%d new hosts, %d evictions, %d records lost", n, evicted, lost)
		assert.Zero(t, early, "requests sent before their host's gate ended")
		assert.Zero(t, lost)
		assert.Greater(t, evicted, uint64(n/2))
		assert.LessOrEqual(t, m.NumScopes(), cfg.MaxScopes+workers+1)
		reqs := newHostRequests()
		farmStep(t, m, reqs, "after", 0, 100*numShards, func() *http.Response { return ok200 })
		assert.LessOrEqual(t, m.NumScopes(), cfg.MaxScopes)
	})
}

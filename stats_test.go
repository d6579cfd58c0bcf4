package throttle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/stretchr/testify/require"
)

func statsConfig() Config {
	cfg := DefaultConfig()
	cfg.Default.SlotDelay, cfg.Default.Jitter, cfg.Default.Backoff.Jitter = 0, Jitter{}, Jitter{}
	return cfg
}

func scopeStat(st Stats, key string) *ScopeStats {
	for i := range st.Scopes {
		if st.Scopes[i].Key == key {
			return &st.Scopes[i]
		}
	}
	return nil
}

// TestStatsSaysWhyAndCounts: in flight, waiting, the reason a scope waits
// now, backoff state and counts by status class.
func TestStatsSaysWhyAndCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, statsConfig())
		ctx := context.Background()
		p, err := m.Acquire(ctx, get(t, "http://a.test/"))
		require.NoError(t, err)
		go func() {
			q, err := m.Acquire(ctx, get(t, "http://a.test/"))
			if err == nil {
				q.Release(&http.Response{StatusCode: 200}, nil)
			}
		}()
		synctest.Wait()
		st := m.Stats()
		a := scopeStat(st, "a.test")
		require.NotNil(t, a)
		require.Equal(t, 1, a.InFlight)
		require.Equal(t, 1, a.Waiting)
		require.Equal(t, ReasonConcurrency, a.Reason)
		require.Equal(t, 1, a.Concurrency)
		require.Equal(t, time.Second, a.Delay)
		require.Equal(t, 1, st.Waiting)
		require.Equal(t, 1, st.InFlight)

		p.Release(&http.Response{StatusCode: 503}, nil)
		synctest.Wait()
		time.Sleep(10 * time.Second) // the waiter went after the backoff delay
		synctest.Wait()
		st = m.Stats()
		a = scopeStat(st, "a.test")
		require.Equal(t, uint64(2), a.Counts.Requests)
		require.Equal(t, uint64(1), a.Counts.Responses[5])
		require.Equal(t, uint64(1), a.Counts.Responses[2])
		require.Equal(t, uint64(1), a.Counts.Signals)
		require.Equal(t, 2*time.Second, a.BackoffDelay)
		require.Equal(t, ReasonNone, a.Reason)
		require.Equal(t, uint64(2), st.Totals.Requests)

		// The counts of forgotten scopes stay in the totals.
		time.Sleep(2 * time.Hour)
		q, err := m.Acquire(ctx, get(t, "http://b.test/"))
		require.NoError(t, err)
		q.Release(nil, errors.New("refused"))
		for i := range m.shards { // sweep every shard now (the crawl would, in turn)
			sh := &m.shards[i]
			sh.mu.Lock()
			m.sweep(sh, time.Now())
			sh.mu.Unlock()
		}
		st = m.Stats()
		require.Nil(t, scopeStat(st, "a.test"), "a.test forgotten")
		require.Equal(t, uint64(3), st.Totals.Requests)
		require.Equal(t, uint64(1), st.Totals.Responses[0])
	})
}

func TestMaxWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := statsConfig()
		cfg.MaxWaiting = 2
		m := newManager(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, err := m.Acquire(ctx, get(t, "http://a.test/"))
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { m.Acquire(ctx, get(t, "http://a.test/")) })
		}
		synctest.Wait()
		_, err = m.Acquire(ctx, get(t, "http://a.test/"))
		require.ErrorIs(t, err, ErrTooManyWaiting)
		require.Contains(t, err.Error(), "Config.MaxWaiting 2")
		cancel()
		wg.Wait()
		p.Release(nil, nil)
	})
}

// TestMaxRefusal: a scope that has answered only 503s for longer than
// MaxRefusal fails a waiting request at once, naming the scope and when
// to retry; its own probe still goes through, and an answer resets it.
func TestMaxRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := statsConfig()
		cfg.MaxRefusal = 5 * time.Minute
		m := newManager(t, cfg)
		ctx := context.Background()
		req := get(t, "http://down.test/")
		for time.Since(time.Time{}) > 0 {
			p, err := m.Acquire(ctx, req)
			if err != nil {
				var re *WaitError
				require.ErrorAs(t, err, &re)
				require.ErrorIs(t, err, ErrScopeRefusing)
				require.Equal(t, "down.test", re.Scope)
				require.False(t, re.ReadyAt.IsZero())
				require.Contains(t, err.Error(), `"down.test"`)
				require.GreaterOrEqual(t, time.Since(re.RefusingSince), 5*time.Minute)
				// Waiting until ReadyAt, the probe is admitted.
				time.Sleep(time.Until(re.ReadyAt))
				p, err = m.Acquire(ctx, req)
				require.NoError(t, err)
				p.Release(&http.Response{StatusCode: 200}, nil)
				_, err = m.Acquire(ctx, req) // answered: waits again normally
				require.NoError(t, err)
				return
			}
			p.Release(&http.Response{StatusCode: 503}, nil)
		}
	})
}

// TestHooks: every hook is called, without locks held (each calls back
// into the manager).
func TestHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		rec := func(s string) {
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		}
		var m *ThrottlingManager
		cfg := statsConfig()
		cfg.Default.Concurrency = 4
		cfg.Hooks = hooks.Hooks{
			Admitted: func(e hooks.Admitted) { m.Stats(); rec(fmt.Sprintf("admitted %v waited %v", e.Scopes, e.Waited)) },
			Released: func(e hooks.Released) { m.Stats(); rec(fmt.Sprintf("released %v %d", e.Scopes, e.Status)) },
			DelayChanged: func(e hooks.DelayChanged) {
				m.Stats()
				rec(fmt.Sprintf("delay %s %v->%v (%v)", e.Scope, e.OldDelay, e.NewDelay, e.Reason))
			},
			Backoff: func(e hooks.Backoff) { m.Stats(); rec(fmt.Sprintf("backoff %s %d", e.Scope, e.Status)) },
			GateSet: func(e hooks.GateSet) { m.Stats(); rec(fmt.Sprintf("gate %s +%v", e.Scope, time.Until(e.Until))) },
		}
		m = newManager(t, cfg)
		ctx := context.Background()
		req := get(t, "http://h.test/")
		p, err := m.Acquire(ctx, req)
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"30"}}}, nil)
		p, err = m.Acquire(ctx, req)
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 200}, nil)
		require.Equal(t, []string{
			"admitted [h.test] waited 0s",
			"delay h.test 1s->2s (backoff)",
			"backoff h.test 429",
			"gate h.test +30s",
			"released [h.test] 429",
			"admitted [h.test] waited 30s",
			"released [h.test] 200",
		}, got)
	})
}

// TestWarnings: each warning once, in words, to the log and the hook.
func TestWarnings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log bytes.Buffer
		var hooked []hooks.Warning
		cfg := statsConfig()
		cfg.Default.Concurrency, cfg.Default.Delay = 16, time.Second
		cfg.Default.AutoThrottle.TargetConcurrency = 32
		cfg.Default.AutoThrottle.Enabled = true
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
		cfg.Hooks.Warning = func(e hooks.Warning) { hooked = append(hooked, e) }
		m := newManager(t, cfg)
		ctx := context.Background()
		for _, host := range []string{"a.test", "b.test"} {
			for range 2 * ineffectiveAfter {
				p, err := m.Acquire(ctx, get(t, "http://"+host+"/"))
				require.NoError(t, err)
				time.Sleep(200 * time.Millisecond) // a request takes 200 ms; the delay is 1 s or more
				p.Release(&http.Response{StatusCode: 200}, nil)
			}
		}
		out := log.String()
		require.Equal(t, 1, strings.Count(out, "TargetConcurrency 32 exceeds Concurrency 16"), out)
		require.Equal(t, 1, strings.Count(out, "Default.AutoThrottle is on but Default.Delay 1s floors it"), out)
		require.Equal(t, 1, strings.Count(out, "Concurrency 16 has had no effect"), out)
		require.Contains(t, out, "never more than 1 was in flight")
		require.Len(t, hooked, 3)
		require.Equal(t, "a.test", hooked[2].Scope)
	})
}

// TestHooksCarryTheRequestContext: the Admitted and Released events carry
// the request's context (and URL), so a hook can tie a wait to the
// caller's trace; a request without a context of its own gets
// context.Background(), never nil.
func TestHooksCarryTheRequestContext(t *testing.T) {
	type key struct{}
	var admitted, released []context.Context
	cfg := plainConfig()
	cfg.Hooks.Admitted = func(ev hooks.Admitted) { admitted = append(admitted, ev.Context) }
	cfg.Hooks.Released = func(ev hooks.Released) { released = append(released, ev.Context) }
	m := newManager(t, cfg)
	ctx := context.WithValue(context.Background(), key{}, "trace-1")
	req := get(t, "http://a.example/").WithContext(ctx)
	p, err := m.Acquire(ctx, req)
	require.NoError(t, err)
	p.Release(ok200, nil)
	require.Len(t, admitted, 1)
	require.Len(t, released, 1)
	require.Equal(t, "trace-1", admitted[0].Value(key{}))
	require.Equal(t, "trace-1", released[0].Value(key{}))

	p, _, err = m.TryAcquire(get(t, "http://b.example/"))
	require.NoError(t, err)
	p.Release(ok200, nil)
	require.Len(t, released, 2)
	require.NotNil(t, released[1])
	require.Nil(t, released[1].Value(key{}))
}

// BenchmarkStatsSeries: Acquire and Release with the series recorded
// (RecordSeries) and without, in the same run: one scope (charted: its
// counters are read at each release), 10 scopes (all charted) and 10,000
// scopes (most of them counted as candidates or not at all), on one
// goroutine and on parallel ones (the table's lock).
func BenchmarkStatsSeries(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		for _, hosts := range []int{1, 10, 10000} {
			if parallel && hosts != 10000 {
				continue
			}
			for _, series := range []bool{true, false} {
				name := fmt.Sprintf("hosts=%d/series=%v", hosts, series)
				if parallel {
					name = "parallel/" + name
				}
				b.Run(name, func(b *testing.B) {
					m, err := New(benchConfig())
					if err != nil {
						b.Fatal(err)
					}
					if series {
						m.RecordSeries()
					}
					reqs := benchRequests(b, hosts)
					var next atomic.Int64
					loop := func(more func() bool) {
						ctx := context.Background()
						for i := int(next.Add(1)) * 7919; more(); i++ {
							p, err := m.Acquire(ctx, reqs[i%hosts])
							if err != nil {
								b.Error(err)
								return
							}
							p.Release(ok200, nil)
						}
					}
					b.ReportAllocs()
					if parallel {
						b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
					} else {
						loop(b.Loop)
					}
				})
			}
		}
	}
}

// seriesConfig admits at once: the series tests count answers, not waits.
func seriesConfig() Config {
	cfg := statsConfig()
	cfg.Default.Delay = 0
	return cfg
}

// seriesAnswer acquires one request of host and releases it with status, at
// the clock's time (a fake one: synctest's).
func seriesAnswer(t *testing.T, m *ThrottlingManager, host string, status int) {
	t.Helper()
	p, err := m.Acquire(context.Background(), get(t, "http://"+host+"/"))
	require.NoError(t, err)
	p.Release(&http.Response{StatusCode: status, Header: http.Header{}}, nil)
}

// seriesOf returns the series of key in st, or nil.
func seriesOf(st *Stats, key string) *ScopeSeries {
	for i := range st.Series {
		if st.Series[i].Key == key {
			return &st.Series[i]
		}
	}
	return nil
}

// bucketAt returns the bucket of ser that holds at.
func bucketAt(t *testing.T, ser *ScopeSeries, at time.Time) SeriesBucket {
	t.Helper()
	i := int(at.Sub(ser.Start) / SeriesStep)
	require.True(t, i >= 0 && i < SeriesLen, "%v is outside the series from %v", at, ser.Start)
	return ser.Buckets[i]
}

// TestStatsSeriesBuckets: after RecordSeries, a scope's 2xx and backoff
// signals land in the 10-second bucket of the time they came, the last
// bucket holds Stats.At, the buckets sum to the scope's counts, and they
// slide out after 15 minutes. Without RecordSeries there is no series.
// In fake time.
func TestStatsSeriesBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, seriesConfig())
		seriesAnswer(t, m, "before.test", 200)
		require.Empty(t, m.Stats().Series, "not recorded before RecordSeries")
		m.RecordSeries()
		m.RecordSeries() // idempotent

		t0 := time.Now() // synctest's epoch: 2000-01-01, on a step
		require.Equal(t, t0, t0.Truncate(SeriesStep))
		for range 3 {
			seriesAnswer(t, m, "a.test", 200)
		}
		time.Sleep(12 * time.Second)
		seriesAnswer(t, m, "a.test", 200)
		seriesAnswer(t, m, "a.test", 200)
		seriesAnswer(t, m, "a.test", 503) // a signal: backoff raises the delay
		time.Sleep(20 * time.Second)
		seriesAnswer(t, m, "a.test", 429)
		seriesAnswer(t, m, "a.test", 404) // neither

		st := m.Stats()
		require.Len(t, st.Series, 1, "before.test answered before RecordSeries")
		a := seriesOf(&st, "a.test")
		require.NotNil(t, a)
		require.Equal(t, st.At.Truncate(SeriesStep), a.Start.Add((SeriesLen-1)*SeriesStep), "the last bucket holds At")
		require.Equal(t, t0, a.Since)
		require.Equal(t, SeriesBucket{OK: 3}, bucketAt(t, a, t0))
		require.Equal(t, SeriesBucket{OK: 2, Signals: 1}, bucketAt(t, a, t0.Add(SeriesStep)))
		require.Equal(t, SeriesBucket{}, bucketAt(t, a, t0.Add(2*SeriesStep)))
		require.Equal(t, SeriesBucket{Signals: 1}, bucketAt(t, a, st.At))
		var sum SeriesBucket
		for _, b := range a.Buckets {
			sum.OK += b.OK
			sum.Signals += b.Signals
		}
		c := scopeStat(st, "a.test").Counts
		require.Equal(t, SeriesBucket{OK: uint32(c.Responses[2]), Signals: uint32(c.Signals)}, sum)
		require.Greater(t, a.Recent, 0.0)
		for i := range SeriesLen - 4 {
			require.Equal(t, SeriesBucket{}, a.Buckets[i], "bucket %d: before Since", i)
		}

		// 14 minutes on, the first bucket is still in; 2 more and all
		// are out: the scope is no longer shown.
		time.Sleep(14 * time.Minute)
		st = m.Stats()
		a = seriesOf(&st, "a.test")
		require.NotNil(t, a)
		require.Equal(t, SeriesBucket{OK: 3}, bucketAt(t, a, t0))
		time.Sleep(2 * time.Minute)
		st = m.Stats()
		require.Nil(t, seriesOf(&st, "a.test"), "nothing in 15 minutes: not busy")
	})
}

// TestStatsSeriesBusiest: with more scopes than SeriesScopes, the series
// follow the busiest. 40 scopes answer once every step; then three
// answer 20 times a step, and within a minute they are charted, the
// busiest first, from the step they were charted. The table never holds
// more than SeriesScopes rings and seriesCandidates counts, whatever the
// number of scopes: 5,000 more that answer once change neither.
func TestStatsSeriesBusiest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, seriesConfig())
		m.RecordSeries()
		light := func() {
			for i := range 40 {
				seriesAnswer(t, m, fmt.Sprintf("light%d.test", i), 200)
			}
		}
		light()
		time.Sleep(SeriesStep)
		t1 := time.Now()
		for range 6 {
			light()
			for i, host := range []string{"heavy0.test", "heavy1.test", "heavy2.test"} {
				for range 20 + 5*i {
					seriesAnswer(t, m, host, 200)
				}
			}
			time.Sleep(SeriesStep)
		}
		st := m.Stats()
		require.LessOrEqual(t, len(st.Series), SeriesScopes)
		keys := make([]string, 0, 3)
		for _, s := range st.Series[:3] {
			keys = append(keys, s.Key)
		}
		require.Equal(t, []string{"heavy2.test", "heavy1.test", "heavy0.test"}, keys)
		for i, s := range st.Series[:3] {
			require.False(t, s.Since.Before(t1), "%s charted from %v", s.Key, s.Since)
			require.True(t, s.Since.Before(t1.Add(time.Minute)), "%s charted from %v", s.Key, s.Since)
			// From Since on, every answer is counted, in its step.
			for at := s.Since; at.Before(time.Now().Truncate(SeriesStep)); at = at.Add(SeriesStep) {
				require.Equal(t, SeriesBucket{OK: uint32(30 - 5*i)}, bucketAt(t, &s, at), "%s at %v", s.Key, at)
			}
			require.Equal(t, SeriesBucket{}, bucketAt(t, &s, s.Since.Add(-SeriesStep)), "%s before Since", s.Key)
		}
		require.Greater(t, st.Series[0].Recent, st.Series[2].Recent)

		for i := range 5000 {
			seriesAnswer(t, m, fmt.Sprintf("once%d.test", i), 200)
		}
		m.series.mu.Lock()
		shown, cands := len(m.series.shown), len(m.series.cands)
		m.series.mu.Unlock()
		require.Equal(t, SeriesScopes, shown)
		require.Equal(t, seriesCandidates, cands)
		st = m.Stats()
		require.Equal(t, "heavy2.test", st.Series[0].Key, "the busiest stay charted")
	})
}

// TestStatsSeriesMemory: the series cost a fixed table per manager (a
// ring for each charted scope, a count for each candidate), and nothing
// for the other scopes: 10,000 scopes answered with RecordSeries take
// the same heap as without, but for the table.
func TestStatsSeriesMemory(t *testing.T) {
	heap := func(series bool) int64 {
		before := liveHeap()
		m := newManager(t, seriesConfig())
		if series {
			m.RecordSeries()
		}
		for i := range 10000 {
			p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://h%d.test/", i)))
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		after := liveHeap()
		runtime.KeepAlive(m)
		return int64(after) - int64(before)
	}
	slot := int64(unsafe.Sizeof(seriesSlot{}))
	table := SeriesScopes*slot + seriesCandidates*int64(unsafe.Sizeof(seriesCount{})) + int64(unsafe.Sizeof(seriesTable{}))
	heap(true) // warm up: the first manager's allocations
	without, with := heap(false), heap(true)
	t.Logf("%d B per charted scope (ring of %d buckets), table %d B; live heap for 10,000 scopes: %d B without the series, %d B with (%+d B)",
		slot, SeriesLen, table, without, with, with-without)
	require.Less(t, with-without, table+16<<10, "nothing per scope but the charted ones")
}

// TestStatsInBackoff: Stats counts the scopes in backoff as
// ScopeStats.InBackoff says: a raised delay, a server gate.
func TestStatsInBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, seriesConfig())
		seriesAnswer(t, m, "ok.test", 200)
		seriesAnswer(t, m, "slow.test", 503)
		p, err := m.Acquire(context.Background(), get(t, "http://gated.test/"))
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"30"}}}, nil)
		st := m.Stats()
		require.Equal(t, 2, st.InBackoff)
		require.False(t, scopeStat(st, "ok.test").InBackoff(st.At))
		require.True(t, scopeStat(st, "slow.test").InBackoff(st.At))
		require.True(t, scopeStat(st, "gated.test").InBackoff(st.At))
	})
}

// robotsSites is a RoundTripper of several robotsSites, by host.
type robotsSites map[string]*robotsSite

func (s robotsSites) RoundTrip(req *http.Request) (*http.Response, error) {
	return s[req.URL.Hostname()].RoundTrip(req)
}

// TestStatsRobots: Stats.Robots says why Counts.Robots is what it is:
// robots.txt off, nothing fetched yet, and then for each origin whether
// its robots.txt had rules, none (a 404) or failed (a 503), and how many
// hosts it asks a delay of.
func TestStatsRobots(t *testing.T) {
	off := newManager(t, seriesConfig())
	require.Equal(t, RobotsStats{}, off.Stats().Robots)

	synctest.Test(t, func(t *testing.T) {
		m := robotsManager(t, func(c *Config) { c.Robots.Enforce = true })
		st := m.Stats()
		require.Equal(t, RobotsStats{Enabled: true, Enforce: true}, st.Robots, "nothing fetched yet")
		sites := robotsSites{
			"rules.test": {robotsTxt: "User-agent: *\nCrawl-delay: 1\nDisallow: /private\n"},
			"none.test":  {robotsStatus: 404},
			"down.test":  {robotsStatus: 503},
		}
		client := &http.Client{Transport: m.Transport(sites)}
		for host := range sites {
			resp, err := client.Get("http://" + host + "/")
			if err == nil {
				resp.Body.Close()
			}
		}
		st = m.Stats()
		require.Equal(t, RobotsStats{Enabled: true, Enforce: true, Origins: 3, Rules: 1, NoRules: 1, Failed: 1, Delays: 1}, st.Robots)
		require.Equal(t, uint64(3), st.Totals.Robots)
	})
}

// TestStatsReadyQueue: ReadyQueue.Stats shows the backlog: the requests
// held, the groups in each place, the Pop callers waiting, when the next
// waiting group is asked, and the groups that hold the most.
func TestStatsReadyQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, statsConfig()) // Delay 1s, Concurrency 1
		q := NewReadyQueue(m)
		require.Equal(t, QueueStats{At: time.Now()}, q.Stats(5), "empty")
		for host, n := range map[string]int{"a.test": 5, "b.test": 3, "c.test": 1} {
			for range n {
				require.NoError(t, q.Push(get(t, "http://"+host+"/"), 0))
			}
		}
		st := q.Stats(5)
		require.Equal(t, 9, st.Len)
		require.Equal(t, 3, st.Groups)
		require.Equal(t, 3, st.Ready)
		require.Equal(t, []QueueGroupStats{{Keys: []string{"a.test"}, Requests: 5, State: "ready"},
			{Keys: []string{"b.test"}, Requests: 3, State: "ready"}, {Keys: []string{"c.test"}, Requests: 1, State: "ready"}}, st.Top)

		// One request of each host starts and holds its slot: the others
		// park until a release.
		held := map[string]*Permit{}
		for range 3 {
			req, p, _, err := q.TryPop()
			require.NoError(t, err)
			require.NotNil(t, p)
			held[req.URL.Host] = p
		}
		req, _, _, _ := q.TryPop()
		require.Nil(t, req)
		st = q.Stats(1)
		require.Equal(t, QueueStats{At: time.Now(), Len: 6, Groups: 2, Parked: 2,
			Top: []QueueGroupStats{{Keys: []string{"a.test"}, Requests: 4, State: "parked"}}}, st)

		// a's release unparks it; its next start waits for the delay, and
		// a Pop caller waits for it.
		held["a.test"].Release(ok200, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			q.Pop(ctx)
		}()
		synctest.Wait()
		st = q.Stats(5)
		next := held["a.test"].Acquired().Add(time.Second)
		require.Equal(t, 1, st.Poppers)
		require.Equal(t, 1, st.Waiting)
		require.Equal(t, 1, st.Parked)
		require.Equal(t, next, st.NextAt)
		require.Equal(t, QueueGroupStats{Keys: []string{"a.test"}, Requests: 4, State: "waiting", ReadyAt: next}, st.Top[0])
		cancel()
		<-done
		for _, p := range held {
			p.Release(ok200, nil)
		}
	})
}

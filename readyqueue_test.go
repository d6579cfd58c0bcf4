package throttle

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// popped is one request a test took from a queue, and when.
type popped struct {
	url string
	at  time.Duration
}

// popAll pops n requests one after the other, releasing each at once, and
// returns them with their times since t0.
func popAll(t *testing.T, q *ReadyQueue, n int, t0 time.Time) []popped {
	t.Helper()
	var out []popped
	for range n {
		req, p, err := q.Pop(context.Background())
		require.NoError(t, err)
		out = append(out, popped{req.URL.String(), time.Since(t0)})
		p.Release(ok200, nil)
	}
	return out
}

// TestReadyQueueOrderByReadyTime: requests come out in the order their
// hosts can start them, across hosts with different delays.
func TestReadyQueueOrderByReadyTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.SlotDelay = 0
		for h, d := range map[string]time.Duration{"a": time.Second, "b": 3 * time.Second, "c": 2 * time.Second} {
			sc := cfg.Default
			sc.Delay = d
			if cfg.Scopes == nil {
				cfg.Scopes = map[string]ScopeConfig{}
			}
			cfg.Scopes[h] = sc
		}
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		for i := range 3 {
			for _, h := range []string{"a", "b", "c"} {
				require.NoError(t, q.Push(get(t, fmt.Sprintf("http://%s/%d", h, i)), 0))
			}
		}
		assert.Equal(t, 9, q.Len())
		got := popAll(t, q, 9, time.Now())
		s := time.Second
		assert.Equal(t, []popped{
			{"http://a/0", 0}, {"http://b/0", 0}, {"http://c/0", 0}, // all can start: push order
			{"http://a/1", s}, {"http://c/1", 2 * s}, {"http://a/2", 2 * s},
			{"http://b/1", 3 * s}, {"http://c/2", 4 * s}, {"http://b/2", 6 * s},
		}, got)
		assert.Equal(t, 0, q.Len())
	})
}

// TestReadyQueueNoHeadOfLineBlocking: a slow host's backlog, pushed
// first, holds none of the fast hosts pushed after it.
func TestReadyQueueNoHeadOfLineBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 10*time.Second, 0
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		for i := range 100 {
			require.NoError(t, q.Push(get(t, fmt.Sprintf("http://slow/%d", i)), 0))
		}
		for i := range 50 {
			require.NoError(t, q.Push(get(t, fmt.Sprintf("http://fast%d/", i)), 0))
		}
		got := popAll(t, q, 53, time.Now())
		assert.Equal(t, popped{"http://slow/0", 0}, got[0])
		for i, p := range got[1:51] {
			assert.Equal(t, popped{fmt.Sprintf("http://fast%d/", i), 0}, p)
		}
		assert.Equal(t, []popped{{"http://slow/1", 10 * time.Second}, {"http://slow/2", 20 * time.Second}}, got[51:])
		assert.Equal(t, 97, q.Len())
	})
}

// TestReadyQueueTieBreaks: among requests that can start at once, the
// higher priority first, then the larger share of the remaining quota,
// then push order; within one host too, priority before push order.
func TestReadyQueueTieBreaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		small, big := cfg.Default, cfg.Default
		small.Quota, big.Quota = 10, 100
		cfg.Scopes = map[string]ScopeConfig{"small": small, "big": big}
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		costs := func(u string, sc ...Scope) *http.Request {
			return get(t, u).WithContext(WithScopes(context.Background(), sc...))
		}
		// Spend 4 of small's 10: 6 left.
		p, _, err := m.TryAcquire(costs("http://warmup/", Scope{Key: "small", Cost: 4}))
		require.NoError(t, err)
		p.Release(ok200, nil)

		push := func(req *http.Request, prio int) { require.NoError(t, q.Push(req, prio)) }
		push(get(t, "http://fifo1/"), 0)
		push(costs("http://share-small/", Scope{Key: "small", Cost: 3}), 0) // 3 of 6 left: 0.5
		push(costs("http://share-big/", Scope{Key: "big", Cost: 30}), 0)    // 30 of 100: 0.3
		push(get(t, "http://fifo2/"), 0)
		push(get(t, "http://prio/"), 2)
		push(get(t, "http://host/low"), 1)
		push(get(t, "http://host/high"), 3)
		got := popAll(t, q, 7, time.Now())
		var urls []string
		for _, p := range got {
			urls = append(urls, p.url)
		}
		assert.Equal(t, []string{
			"http://host/high", "http://prio/", "http://host/low",
			"http://share-small/", "http://share-big/", "http://fifo1/", "http://fifo2/",
		}, urls)
	})
}

// TestReadyQueuePopContext: Pop returns at its context's cancellation or
// deadline, and leaves the queue as it was.
func TestReadyQueuePopContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 5*time.Second, 0
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		require.NoError(t, q.Push(get(t, "http://a/1"), 0))
		require.NoError(t, q.Push(get(t, "http://a/2"), 0))
		_, p, err := q.Pop(context.Background())
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()

		// A deadline before the next ready time: Pop waits until it.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, p, err := q.Pop(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, req)
		assert.Nil(t, p)
		assert.Equal(t, 2*time.Second, time.Since(t0))

		// Cancelled while waiting.
		ctx, cancel = context.WithCancel(context.Background())
		errc := make(chan error)
		go func() {
			_, _, err := q.Pop(ctx)
			errc <- err
		}()
		synctest.Wait()
		cancel()
		assert.ErrorIs(t, <-errc, context.Canceled)
		assert.Equal(t, 2*time.Second, time.Since(t0))

		// Already cancelled: at once.
		_, _, err = q.Pop(ctx)
		assert.ErrorIs(t, err, context.Canceled)

		// The queue is intact: the request comes at its time.
		assert.Equal(t, 1, q.Len())
		req, when, err := func() (*http.Request, time.Time, error) {
			r, p, at, err := q.TryPop()
			assert.Nil(t, p)
			return r, at, err
		}()
		require.NoError(t, err)
		assert.Nil(t, req)
		assert.Equal(t, 5*time.Second, when.Sub(t0))
		got := popAll(t, q, 1, t0)
		assert.Equal(t, []popped{{"http://a/2", 5 * time.Second}}, got)
	})
}

// TestReadyQueueConcurrentPop: 50 workers pop 3,000 requests over 1,000
// hosts while more are pushed; each request is popped exactly once, and
// each host's starts keep its delay.
func TestReadyQueueConcurrentPop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hosts, perHost, workers = 1000, 3, 50
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 100*time.Millisecond, 0
		cfg.GlobalConcurrency = 32
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		for h := range hosts {
			require.NoError(t, q.Push(get(t, fmt.Sprintf("http://h%d/0", h)), 0))
		}
		var (
			mu     sync.Mutex
			seen   = map[string]int{}
			starts = map[string][]time.Time{}
			total  atomic.Int32
		)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for {
					req, p, err := q.Pop(ctx)
					if err != nil {
						assert.ErrorIs(t, err, context.Canceled)
						return
					}
					mu.Lock()
					seen[req.URL.String()]++
					starts[req.URL.Host] = append(starts[req.URL.Host], time.Now())
					mu.Unlock()
					time.Sleep(time.Duration(w%7+1) * time.Millisecond) // the fetch
					p.Release(ok200, nil)
					if total.Add(1) == hosts*perHost {
						cancel()
					}
				}
			})
		}
		for i := 1; i < perHost; i++ { // more while they pop
			for h := range hosts {
				require.NoError(t, q.Push(get(t, fmt.Sprintf("http://h%d/%d", h, i)), 0))
			}
			time.Sleep(50 * time.Millisecond)
		}
		wg.Wait()
		assert.Len(t, seen, hosts*perHost)
		for u, n := range seen {
			if n != 1 {
				t.Errorf("%s popped %d times", u, n)
			}
		}
		for h, ts := range starts {
			for i := 1; i < len(ts); i++ {
				if d := ts[i].Sub(ts[i-1]); d < cfg.Default.Delay {
					t.Errorf("%s: starts %v apart", h, d)
				}
			}
		}
		assert.Equal(t, 0, q.Len())
	})
}

// TestReadyQueueUnadmittable: Push refuses what Acquire would refuse; a
// request whose context ended, or that TryAcquire fails, comes out with
// its error.
func TestReadyQueueUnadmittable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := false
		cfg := plainConfig()
		cfg.Scoper = func(req *http.Request) ([]Scope, error) {
			if fail {
				return nil, errors.New("scoper down")
			}
			return HostScope(req)
		}
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		assert.ErrorIs(t, q.Push(nil, 0), ErrNilRequest)
		assert.ErrorIs(t, q.Push(&http.Request{URL: nil}, 0), ErrNoHost)
		assert.Equal(t, 0, q.Len())

		ctx, cancel := context.WithCancel(context.Background())
		gone := get(t, "http://a/gone").WithContext(ctx)
		require.NoError(t, q.Push(gone, 0))
		require.NoError(t, q.Push(get(t, "http://b/"), 0))
		cancel()
		req, p, _, err := q.TryPop()
		assert.Same(t, gone, req)
		assert.Nil(t, p)
		assert.ErrorIs(t, err, context.Canceled)

		fail = true
		req, p, err = q.Pop(context.Background())
		assert.Equal(t, "http://b/", req.URL.String())
		assert.Nil(t, p)
		assert.ErrorContains(t, err, "scoper down")
		assert.Equal(t, 0, q.Len())
	})
}

// benchReadyQueue makes the ReadyQueue benchmarks' queue: a manager on a
// stepClock with a 1 s delay, and two requests queued for each of hosts
// hosts, each also handed to also (the baseline's push).
func benchReadyQueue(b *testing.B, hosts int, also func(*http.Request)) (*stepClock, *ReadyQueue, []*http.Request) {
	b.Helper()
	clock := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := benchConfig()
	cfg.Clock = clock
	cfg.Default.Delay = time.Second
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	reqs := benchRequests(b, hosts)
	q := NewReadyQueue(m)
	for range 2 {
		for _, req := range reqs {
			if err := q.Push(req, 0); err != nil {
				b.Fatal(err)
			}
			also(req)
		}
	}
	return clock, q, reqs
}

// BenchmarkReadyQueue: a crawl over 20,000 hosts, each allowed one
// request a second (Concurrency 1, Delay 1s), with two requests queued
// per host. Each op pushes one request and pops one; a popped request
// holds its slot until the batch of pops it came in has ended, as a fetch
// would. The clock moves 1s/20,000 per pop, so a host comes due at each:
// the pops go round the hosts in push order, and a host's next head is
// asked 20,000 pops (1s) after its last start, its delay over and its slot
// released, so every head asked starts, and none is parked or waits for
// its delay: the queue of a crawl whose workers, not its hosts, are the
// bottleneck. push-ns and pop-ns are the two halves of an op; pop-ns
// includes the TryAcquire calls it makes and the release of the permit
// (with the queue's release hook).
func BenchmarkReadyQueue(b *testing.B) {
	const hosts, batch = 20000, 1000
	clock, q, reqs := benchReadyQueue(b, hosts, func(*http.Request) {})
	step := time.Second / hosts
	var pushT, popT time.Duration
	held := make([]*Permit, 0, batch)
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(batch, b.N-done)
		t := time.Now()
		for range k {
			if err := q.Push(reqs[next], 0); err != nil {
				b.Fatal(err)
			}
			next = (next + 1) % hosts
		}
		pushT += time.Since(t)
		t = time.Now()
		held = popBatch(b, q, clock, step, k, held)
		popT += time.Since(t)
		done += k
	}
	b.ReportMetric(float64(pushT.Nanoseconds())/float64(b.N), "push-ns/op")
	b.ReportMetric(float64(popT.Nanoseconds())/float64(b.N), "pop-ns/op")
	if n := q.Len(); n != 2*hosts {
		b.Fatalf("queue holds %d requests, want %d", n, 2*hosts)
	}
}

// popBatch is one batch of BenchmarkReadyQueue's crawl: it pops k
// requests from q, moving clock a step before each and on to the time
// TryPop names while none is ready, then releases their permits (held is
// scratch space, returned empty).
func popBatch(b *testing.B, q *ReadyQueue, clock *stepClock, step time.Duration, k int, held []*Permit) []*Permit {
	for range k {
		clock.t = clock.t.Add(step)
		for {
			_, p, at, err := q.TryPop()
			if err != nil {
				b.Fatal(err)
			}
			if p != nil {
				held = append(held, p)
				break
			}
			if at.IsZero() {
				b.Fatal("nothing to pop")
			}
			clock.t = at
		}
	}
	for _, p := range held {
		p.Release(ok200, nil)
	}
	return held[:0]
}

// heapFrontier is the ReadyQueue a crawler writes by hand with
// container/heap: each host's requests in a FIFO, the hosts that have
// requests and no request in flight in a heap ordered by when their delay
// next lets them start, one start a second each. It is
// BenchmarkReadyQueueVsHeap's baseline: the same ordering, without scopes,
// robots.txt, priorities or permits.
type heapFrontier struct {
	hosts map[string]*frontierHost
	heap  frontierHeap
	delay time.Duration
}

type frontierHost struct {
	reqs []*http.Request
	next time.Time // no start before
	busy bool      // a request of the host is in flight
	idx  int       // in the heap; -1 when not
}

type frontierHeap []*frontierHost

func (h frontierHeap) Len() int           { return len(h) }
func (h frontierHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h frontierHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx, h[j].idx = i, j }
func (h *frontierHeap) Push(x any)        { e := x.(*frontierHost); e.idx = len(*h); *h = append(*h, e) }
func (h *frontierHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h, e.idx = old[:len(old)-1], -1
	return e
}

func (f *heapFrontier) push(req *http.Request) {
	e := f.hosts[req.URL.Host]
	if e == nil {
		e = &frontierHost{idx: -1}
		f.hosts[req.URL.Host] = e
	}
	e.reqs = append(e.reqs, req)
	if !e.busy && e.idx < 0 {
		heap.Push(&f.heap, e)
	}
}

// pop returns the request that may start at now, or when one may.
func (f *heapFrontier) pop(now time.Time) (*http.Request, *frontierHost, time.Time) {
	if len(f.heap) == 0 {
		return nil, nil, time.Time{}
	}
	e := f.heap[0]
	if e.next.After(now) {
		return nil, nil, e.next
	}
	heap.Pop(&f.heap)
	req := e.reqs[0]
	e.reqs[0] = nil
	e.reqs = e.reqs[1:]
	e.busy, e.next = true, now.Add(f.delay)
	return req, e, time.Time{}
}

func (f *heapFrontier) release(e *frontierHost) {
	e.busy = false
	if len(e.reqs) > 0 {
		heap.Push(&f.heap, e)
	}
}

// BenchmarkReadyQueueVsHeap runs BenchmarkReadyQueue's crawl (20,000
// hosts at one start a second, two requests queued a host, batches of
// 1,000 pops whose requests hold their host until the batch ends) on a
// ReadyQueue and on heapFrontier, in alternating batches of the same run,
// and reports the pops' time on each and their ratio. A queue pop includes
// the admission of its request (TryAcquire: the host's scope's lock and
// policy, a new Permit) and the permit's Release; heapFrontier keeps its
// hosts' delay itself and admits nothing.
func BenchmarkReadyQueueVsHeap(b *testing.B) {
	const hosts, batch = 20000, 1000
	f := &heapFrontier{hosts: make(map[string]*frontierHost), delay: time.Second}
	clock, q, reqs := benchReadyQueue(b, hosts, f.push)
	start := clock.t
	step := time.Second / hosts
	fnow := start
	var qT, fT time.Duration
	held := make([]*Permit, 0, batch)
	fheld := make([]*frontierHost, 0, batch)
	qnext, fnext := 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(batch, b.N-done)
		for range k {
			if err := q.Push(reqs[qnext], 0); err != nil {
				b.Fatal(err)
			}
			qnext = (qnext + 1) % hosts
		}
		t := time.Now()
		held = popBatch(b, q, clock, step, k, held)
		qT += time.Since(t)

		for range k {
			f.push(reqs[fnext])
			fnext = (fnext + 1) % hosts
		}
		t = time.Now()
		for range k {
			fnow = fnow.Add(step)
			for {
				req, e, at := f.pop(fnow)
				if req != nil {
					fheld = append(fheld, e)
					break
				}
				if at.IsZero() {
					b.Fatal("nothing to pop")
				}
				fnow = at
			}
		}
		for _, e := range fheld {
			f.release(e)
		}
		fheld = fheld[:0]
		fT += time.Since(t)
		done += k
	}
	b.ReportMetric(float64(qT.Nanoseconds())/float64(b.N), "queue-pop-ns/op")
	b.ReportMetric(float64(fT.Nanoseconds())/float64(b.N), "heap-pop-ns/op")
	b.ReportMetric(float64(qT)/float64(max(fT, 1)), "ratio")
}

// TestReadyQueueRequestContext: what a pop needs of a request's context
// is its context's as it was at Push (the queue keeps the request
// unchanged): WithoutAdjust makes the permit's feedback NoAdjust, and a
// context ended since Push ends the request, whether the context is a
// background one or not.
func TestReadyQueueRequestContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		cancelled, cancel := context.WithCancel(context.Background())
		reqs := []*http.Request{
			get(t, "http://a/"),
			get(t, "http://b/").WithContext(context.TODO()),
			get(t, "http://c/").WithContext(WithoutAdjust(context.Background())),
			get(t, "http://d/").WithContext(WithoutAdjust(cancelled)),
			get(t, "http://e/").WithContext(cancelled),
		}
		for _, req := range reqs {
			require.NoError(t, q.Push(req, 0))
		}
		cancel()
		noAdjust := map[string]bool{}
		var ended []string
		for q.Len() > 0 {
			req, p, _, err := q.TryPop()
			require.NotNil(t, req)
			if err != nil {
				assert.ErrorIs(t, err, context.Canceled)
				assert.Nil(t, p)
				ended = append(ended, req.URL.Host)
				continue
			}
			noAdjust[req.URL.Host] = p.noAdjust
			p.Release(ok200, nil)
		}
		assert.Equal(t, map[string]bool{"a": false, "b": false, "c": true}, noAdjust)
		assert.Equal(t, []string{"d", "e"}, ended)
	})
}

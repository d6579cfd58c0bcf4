package sim

import (
	"fmt"
	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"
)

// Epoch is the virtual time at which every run starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Limits of the ready-time queue: how many URLs one pull may take from
// the frontier looking for a host it can start, and how many URLs the
// queue may hold.
const (
	maxPull     = 10000
	maxBuffered = 1 << 20
)

// Run runs one policy through one scenario with a seed and returns what
// it measured. It is deterministic: the same arguments give the same
// Result. Runs share nothing, so several may run at once.
func Run(sc Scenario, p PolicySpec, seed uint64) Result {
	r := &runner{
		loop:    NewLoop(Epoch),
		sc:      &sc,
		rawGate: make(map[string]time.Time),
	}
	r.rec.t0 = Epoch
	r.rec.hosts = make(map[string]int32)
	r.srv = sc.NewServer(Epoch, rand.New(rand.NewPCG(deriveSeed(seed, sc.Name, "server"), 1)))
	clients := max(sc.Clients, 1)
	var st store.Store
	if p.NewStore != nil {
		st = p.NewStore(r.loop.Clock())
	}
	for i := range clients {
		var in *instance
		if p.Shared && i > 0 {
			in = r.insts[0]
		} else {
			env := Env{Clock: r.loop.Clock(), Seed: deriveSeed(seed, sc.Name, p.Name, "policy", strconv.Itoa(i)), Limit: sc.Limit, Store: st}
			if p.Robots {
				env.Robots = r.robots
			}
			in = &instance{pol: p.New(env), queues: make(map[string]*hostQueue), knownGate: make(map[string]time.Time)}
			r.insts = append(r.insts, in)
		}
		c := &client{id: i, inst: in, ready: p.Ready,
			next: sc.Frontier(rand.New(rand.NewPCG(deriveSeed(seed, sc.Name, "frontier", strconv.Itoa(i)), 2)))}
		if c.ready {
			qp, ok := in.pol.(queuePolicy)
			if !ok {
				panic(fmt.Sprintf("sim: policy %s: Ready needs a throttle policy", p.Name))
			}
			c.qp, c.rq, c.queued = qp, qp.newQueue(), make(map[string]int)
			in.ready = append(in.ready, c)
		}
		r.clients = append(r.clients, c)
	}
	for _, c := range r.clients {
		for range sc.Workers {
			w := &worker{c: c}
			if c.ready {
				c.idle = append(c.idle, w)
			} else {
				r.loop.At(Epoch, func() { r.next(w) })
			}
		}
		if c.ready {
			r.loop.At(Epoch, func() { r.dispatch(c) })
		}
	}
	end := Epoch.Add(sc.Duration)
	r.loop.Run(end)
	res := measure(&sc, p, &r.rec, end)
	res.Metrics.Seed, res.Metrics.Seeds = seed, 1
	return res
}

// deriveSeed makes a non-zero seed for one part of one run.
func deriveSeed(seed uint64, parts ...string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(seed >> (8 * i))
	}
	h.Write(b[:])
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	if s := h.Sum64(); s != 0 {
		return s
	}
	return 1
}

type runner struct {
	loop    *Loop
	sc      *Scenario
	srv     Server
	rec     recorder
	insts   []*instance
	clients []*client
	rawGate map[string]time.Time // per host: no arrival before this (the server's own Retry-After)
}

// instance is one policy instance and the workers waiting on it.
type instance struct {
	pol       Policy
	queues    map[string]*hostQueue // workers holding a URL of the host, in arrival order
	relWait   []*hostQueue          // queues whose head waits for a release
	knownGate map[string]time.Time  // per host: the Retry-After gates delivered to this instance
	ready     []*client             // clients with a ReadyQueue on this instance
}

// client is one crawler process: a frontier and its workers.
type client struct {
	id    int
	inst  *instance
	next  func() string
	ready bool

	// with a ReadyQueue
	qp          queuePolicy
	rq          *throttle.ReadyQueue
	queued      map[string]int // URLs in rq per host
	buffered    int            // URLs in rq
	idle        []*worker
	dispatchGen uint64
	dispatchAt  time.Time
	dispatchSet bool
}

type worker struct{ c *client }

// hostQueue is the FIFO of the workers that hold a URL of one host and
// wait for it, as blocking Acquire callers do. Only the head asks.
type hostQueue struct {
	host    string
	workers []*worker
	gen     uint64 // invalidates the head's scheduled retries
	relWait bool
}

func (in *instance) queue(host string) *hostQueue {
	q := in.queues[host]
	if q == nil {
		q = &hostQueue{host: host}
		in.queues[host] = q
	}
	return q
}

// next gives worker w the next URL in frontier order; it waits for it.
func (r *runner) next(w *worker) {
	c := w.c
	q := c.inst.queue(c.next())
	q.workers = append(q.workers, w)
	if len(q.workers) == 1 {
		r.tryHead(c.inst, q)
	}
}

func (r *runner) tryHead(in *instance, q *hostQueue) {
	q.gen++
	q.relWait = false
	if len(q.workers) == 0 {
		return
	}
	now := r.loop.Now()
	tk, at, ok := in.pol.Try(now, q.host)
	if ok {
		w := q.workers[0]
		copy(q.workers, q.workers[1:])
		q.workers = q.workers[:len(q.workers)-1]
		r.start(w, q.host, tk)
		if len(q.workers) > 0 {
			r.wake(in, q)
		}
		return
	}
	if at.IsZero() {
		q.relWait = true
		in.relWait = append(in.relWait, q)
		return
	}
	if !at.After(now) {
		at = now.Add(time.Millisecond)
	}
	gen := q.gen
	r.loop.At(at, func() {
		if q.gen == gen {
			r.tryHead(in, q)
		}
	})
}

// wake makes q's head ask again now, after the events already due.
func (r *runner) wake(in *instance, q *hostQueue) {
	gen := q.gen
	r.loop.At(r.loop.Now(), func() {
		if q.gen == gen {
			r.tryHead(in, q)
		}
	})
}

// start sends w's request for host, admitted with tk, to the server.
func (r *runner) start(w *worker, host string, tk any) {
	now := r.loop.Now()
	in := w.c.inst
	raw := now.Before(r.rawGate[host])
	known := now.Before(in.knownGate[host])
	resp := r.srv.Handle(now, host)
	var gate time.Time
	if resp.RetryAfter > 0 {
		gate = now.Add(resp.RetryAfter)
		if gate.After(r.rawGate[host]) {
			r.rawGate[host] = gate
		}
	}
	id := r.rec.add(host, now, resp.Status, raw, known)
	r.loop.At(now.Add(resp.Latency), func() { r.done(w, host, tk, resp, id, gate) })
}

// robots answers a robots.txt fetch for host at now from the server: it
// reaches the server as any request does, answered at once.
func (r *runner) robots(host string) Response {
	now := r.loop.Now()
	resp := r.srv.Handle(now, host)
	id := r.rec.add(host, now, resp.Status, false, false)
	r.rec.end(id, now)
	return resp
}

// done delivers a response: the policy learns from it, waiters on the
// policy ask again, and the worker takes its next URL.
func (r *runner) done(w *worker, host string, tk any, resp Response, id int, gate time.Time) {
	now := r.loop.Now()
	c := w.c
	in := c.inst
	in.pol.Done(now, tk, resp)
	r.rec.end(id, now)
	if gate.After(in.knownGate[host]) {
		in.knownGate[host] = gate
	}
	r.released(in, host)
	if c.ready {
		c.idle = append(c.idle, w)
		r.dispatch(c)
	} else {
		r.next(w)
	}
}

// released wakes what waits for a release of in: the heads waiting for a
// slot, and the head for host, whose admission time may have changed. The
// ReadyQueues on in heard of the release from the manager; their clients
// with idle workers look again.
func (r *runner) released(in *instance, host string) {
	waiting := in.relWait
	in.relWait = nil
	for _, q := range waiting {
		if q.relWait {
			q.relWait = false
			r.wake(in, q)
		}
	}
	if q := in.queues[host]; q != nil && len(q.workers) > 0 {
		r.wake(in, q)
	}
	for _, c := range in.ready {
		r.scheduleDispatch(c, r.loop.Now())
	}
}

// dispatch gives c's idle workers the requests its ReadyQueue says can
// start now, pulling URLs from the frontier while none can. When idle
// workers remain, it comes back at the soonest ready time the queue
// named; a release brings it back sooner.
func (r *runner) dispatch(c *client) {
	var next time.Time
	for len(c.idle) > 0 {
		req, pm, at, err := c.rq.TryPop()
		if err != nil {
			panic(fmt.Sprintf("sim: ReadyQueue: %v", err))
		}
		if req == nil {
			next = at
			if !r.pull(c) {
				break
			}
			continue
		}
		host := req.URL.Host
		w := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		c.buffered--
		if c.queued[host]--; c.queued[host] == 0 {
			delete(c.queued, host)
		}
		r.start(w, host, pm)
	}
	if len(c.idle) > 0 && !next.IsZero() {
		r.scheduleDispatch(c, next)
	}
}

// pull pushes URLs from c's frontier into its queue until one is for a
// host the queue holds none of, and reports whether it found one.
func (r *runner) pull(c *client) bool {
	for i := 0; i < maxPull && c.buffered < maxBuffered; i++ {
		h := c.next()
		if err := c.rq.Push(c.qp.request(h), 0); err != nil {
			panic(fmt.Sprintf("sim: ReadyQueue: %v", err))
		}
		c.buffered++
		c.queued[h]++
		if c.queued[h] == 1 {
			return true
		}
	}
	return false
}

// scheduleDispatch makes sure c dispatches at at, if it has idle workers.
func (r *runner) scheduleDispatch(c *client, at time.Time) {
	if len(c.idle) == 0 {
		return
	}
	if c.dispatchSet && !c.dispatchAt.After(at) {
		return
	}
	c.dispatchGen++
	c.dispatchAt, c.dispatchSet = at, true
	gen := c.dispatchGen
	r.loop.At(at, func() {
		if c.dispatchGen == gen {
			c.dispatchSet = false
			r.dispatch(c)
		}
	})
}

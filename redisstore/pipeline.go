package redisstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle/store"
	"github.com/redis/go-redis/v9"
)

// Concurrent callers' scripts go to Redis together: a few sender
// goroutines (per store, not per request) each take whatever calls are
// queued, up to maxBatch, and send them as one pipeline. Each script still
// runs alone and atomically in Redis, and each admission is still one
// EVALSHA in one round trip; what a batch shares is the round trip's
// system calls and wakeups, on both sides. One caller alone gets a
// pipeline of one: two goroutine switches more than calling go-redis
// directly, microseconds against a round trip of a hundred or more.
//
// A caller that stops waiting (its context ended) leaves its call behind:
// not sent if it was still queued; if it was in flight and Redis admitted
// it, the sender gives the leases and quota costs back in its next
// pipeline, where a direct call would have left them held until LeaseTTL.

// maxBatch caps a pipeline: beyond it, a batch only delays its first call.
const maxBatch = 128

// Call states: a call is waited on until the sender claims its reply
// (done) or its caller stops waiting (left), whichever comes first.
const (
	callWaiting int32 = iota
	callDone
	callLeft
)

// script is one of the store's scripts, as EVALSHA and EVAL take it.
type script struct {
	sha, src any // (boxed once: a call's arguments reuse them)
}

func newScript(rs *redis.Script, src string) *script { return &script{sha: rs.Hash(), src: src} }

var (
	admitLua   = newScript(admitScript, admitSrc)
	releaseLua = newScript(releaseScript, releaseSrc)
	renewLua   = newScript(renewScript, renewSrc)
)

// call is one script run for a caller.
type call struct {
	script *script
	// args is the whole command, built once: "evalsha", sha, the number
	// of keys, the keys, the script's arguments (go-redis's Script.EvalSha
	// would copy them into a new slice).
	args []any

	cmd        *redis.Cmd
	sent, recv time.Time // when its pipeline was sent and answered
	state      atomic.Int32
	done       chan struct{} // (buffered) signalled once, when the sender claims the reply
	own        bool          // made by the sender: no one waits for it

	// For an admission: its lease and scopes, given back if Redis admitted
	// it after its caller left.
	lease  string
	scopes []store.Scope
}

// newCall starts the command of a call to sc on nkeys keys: the caller
// appends the keys, then the arguments. The call comes from a pool when a
// caller will wait for it (waited); free returns it there.
func newCall(sc *script, nkeys int, waited bool) *call {
	var c *call
	if waited {
		c = callPool.Get().(*call)
	} else {
		c = &call{}
	}
	c.script = sc
	c.args = append(c.args[:0], "evalsha", sc.sha, nkeys)
	return c
}

// key returns the i-th key of c's command.
func (c *call) key(i int) string { return c.args[3+i].(string) }

// callPool holds calls whose callers are done with them: run's channel
// and the command's slice are reused.
var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1), args: make([]any, 0, 32)} }}

// free returns c to the pool once its caller has read its reply; not a
// call its caller left (the sender may still hold it).
func free(c *call) {
	if c.done == nil || c.state.Load() == callLeft {
		return
	}
	clear(c.args)
	*c = call{done: c.done, args: c.args[:0]}
	callPool.Put(c)
}

// run has c sent by the senders and waits for its reply, the end of ctx
// or dl (the call's bound), whichever comes first. After Close the caller
// sends it itself.
func (s *Store) run(ctx context.Context, dl time.Time, c *call) error {
	// qmu orders enqueueing before Close: every call queued before it is
	// in the channel when the senders drain it.
	s.qmu.RLock()
	if s.qclosed {
		s.qmu.RUnlock()
		ctx, cancel := context.WithDeadline(ctx, dl)
		defer cancel()
		return s.runDirect(ctx, c)
	}
	t := waitTimers.Get().(*time.Timer)
	t.Reset(time.Until(dl))
	defer func() {
		t.Stop()
		waitTimers.Put(t)
	}()
	select {
	case s.queue <- c:
		s.qmu.RUnlock()
	case <-ctx.Done():
		s.qmu.RUnlock()
		return ctx.Err()
	case <-t.C:
		s.qmu.RUnlock()
		return context.DeadlineExceeded
	}
	var err error
	select {
	case <-c.done:
		return c.cmd.Err()
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = context.DeadlineExceeded
	}
	if c.state.CompareAndSwap(callWaiting, callLeft) {
		return err
	}
	<-c.done // the sender claimed the reply meanwhile: it is there
	return c.cmd.Err()
}

// waitTimers are run's timers, reused: a call's bound costs no allocation
// (a stopped timer keeps no stale tick since Go 1.23).
var waitTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// runDirect runs c on the caller's goroutine.
func (s *Store) runDirect(ctx context.Context, c *call) error {
	s.exec(ctx, []*call{c})
	return c.cmd.Err()
}

// sender sends batches until Close, then what is left in the queue.
func (s *Store) sender() {
	defer s.done.Done()
	batch := make([]*call, 0, maxBatch)
	var extra []*call // calls the sender made itself (giving back abandoned leases)
	for {
		batch = batch[:0]
		if len(extra) == 0 {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			case <-s.stop:
				// Close: what is queued is sent, and what gives back
				// the leases of callers that left meanwhile.
				for {
					batch = append(s.fill(batch[:0]), extra...)
					if len(batch) == 0 {
						return
					}
					extra = s.send(batch, extra[:0])
				}
			}
		}
		batch = append(batch, extra...)
		extra = s.send(s.fill(batch), extra[:0])
	}
}

// fill adds queued calls to batch, up to maxBatch, without waiting.
func (s *Store) fill(batch []*call) []*call {
	for len(batch) < maxBatch {
		select {
		case c := <-s.queue:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// send runs batch as one pipeline (a second one, with EVAL, for the
// scripts Redis no longer had: after a restart or SCRIPT FLUSH), hands
// out the replies and returns extra with the calls that give back the
// leases of admissions whose callers left.
func (s *Store) send(batch []*call, extra []*call) []*call {
	live := batch[:0] // (filtered in place)
	for _, c := range batch {
		if c.own || c.state.Load() != callLeft { // no one waits for a left call: not sent
			live = append(live, c)
		}
	}
	if len(live) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
		s.exec(ctx, live)
		cancel()
	}
	for _, c := range live {
		if c.own {
			if err := c.cmd.Err(); err != nil {
				s.opts.Logger.Debug("redisstore: giving back an abandoned lease failed; it expires", "err", err)
			}
			continue
		}
		if c.state.CompareAndSwap(callWaiting, callDone) {
			c.done <- struct{}{}
			continue
		}
		// The caller left while the call was sent.
		if c.scopes != nil && c.cmd.Err() == nil {
			if g := s.giveBack(c.cmd, c.lease, c.scopes); g != nil {
				g.own = true
				extra = append(extra, g)
			}
		}
	}
	return extra
}

// senders is how many pipelines a store keeps in flight: while one is
// sent or answered, the next batch gathers. 2, 4 and 8 measured the same
// at 50 callers (BenchmarkRedisAcquireRelease50); 16 was slower.
const senders = 4

// exec runs calls as one pipeline, and those Redis answered NOSCRIPT (it
// lost its scripts: a restart, SCRIPT FLUSH) as a second one with EVAL.
// Each call gets its own reply or error.
func (s *Store) exec(ctx context.Context, calls []*call) {
	sent := time.Now()
	pipe := s.rdb.Pipeline()
	for _, c := range calls {
		c.cmd = redis.NewCmd(ctx, c.args...)
		c.cmd.SetFirstKeyPos(3) // (a cluster routes by the first key)
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // each command has its own error
	var again []*call
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		pipe := s.rdb.Pipeline()
		for _, c := range again {
			args := slices.Clone(c.args)
			args[0], args[1] = "eval", c.script.src
			c.cmd = redis.NewCmd(ctx, args...)
			c.cmd.SetFirstKeyPos(3)
			_ = pipe.Process(ctx, c.cmd)
		}
		_, _ = pipe.Exec(ctx)
	}
	recv := time.Now()
	for _, c := range calls {
		c.sent, c.recv = sent, recv
	}
}

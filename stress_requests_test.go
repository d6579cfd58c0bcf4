package throttle

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// stressReqPlan is one request's random choices, all drawn up front so a
// goroutine's sequence of requests does not depend on outcomes.
type stressReqPlan struct {
	scopes   []Scope
	withCost bool
	onReq    bool // scopes on the request's context, not Acquire's
	ctxMode  int
	ctxAfter time.Duration
	try      bool
	noAdjust bool
	dur      time.Duration
	signal   []float64 // per scope: below the scope's rate, a backoff signal
	targeted bool      // the signal names the scope (Feedback.BackoffScopes)
	kind     int       // which signal
	okKind   int       // which answer when no signal
	retry    int       // Retry-After seconds
	quotaSel int
	quotaR   uint64
	double   bool
	think    time.Duration
}

func (st *stressRun) plan(r *rand.Rand) stressReqPlan {
	var p stressReqPlan
	n := 1
	switch x := r.IntN(20); {
	case x >= 18:
		n = 4
	case x >= 15:
		n = 3
	case x >= 10:
		n = 2
	}
	p.withCost = r.IntN(2) == 0
	for range n {
		i, _ := slices.BinarySearch(st.cumWeight, r.Float64()*st.cumWeight[len(st.cumWeight)-1])
		if r.IntN(2) == 0 {
			i = r.IntN(len(st.scopes))
		}
		sc := Scope{Key: st.scopes[min(i, len(st.scopes)-1)].key}
		if p.withCost {
			sc.Cost = r.Int64N(6) // 0 counts as 1
		}
		p.scopes = append(p.scopes, sc)
	}
	p.onReq = r.IntN(4) == 0
	p.ctxMode = r.IntN(100)
	p.ctxAfter = time.Duration(r.Int64N(int64(10 * time.Second)))
	p.try = r.IntN(10) == 0
	p.noAdjust = r.IntN(50) == 0
	p.dur = time.Millisecond + time.Duration(r.ExpFloat64()*float64(time.Second))
	if r.IntN(20) == 0 { // a slow response: its release may fall in another quota window
		p.dur = time.Second + time.Duration(r.ExpFloat64()*float64(5*time.Second))
	}
	p.dur = min(p.dur, 30*time.Second)
	for range p.scopes {
		p.signal = append(p.signal, r.Float64())
	}
	p.targeted = len(p.scopes) > 1 && r.IntN(5) > 0
	p.kind = r.IntN(8)
	p.okKind = r.IntN(100)
	p.retry = 1 + r.IntN(20)
	p.quotaSel = r.IntN(3)
	p.quotaR = r.Uint64()
	p.double = r.IntN(50) == 0
	if r.IntN(4) == 0 {
		p.think = time.Duration(r.Int64N(int64(200 * time.Millisecond)))
	}
	return p
}

// stressMerge merges a request's scopes as the manager must: one slot per
// distinct key, costs added, a zero cost counting as 1; sorted by key.
func stressMerge(scopes []Scope) ([]string, []int64) {
	costs := make(map[string]int64)
	for _, s := range scopes {
		costs[s.Key] += max(s.Cost, 1)
	}
	keys := make([]string, 0, len(costs))
	for k := range costs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = costs[k]
	}
	return keys, out
}

func (st *stressRun) worker(id, n int) {
	r := rand.New(rand.NewPCG(st.seed, uint64(id)+1))
	for range n {
		st.request(st.plan(r))
	}
}

func (st *stressRun) request(pl stressReqPlan) {
	st.attempts.Add(1)
	ctx := context.Background()
	var cancel context.CancelFunc = func() {}
	switch {
	case pl.ctxMode < 4: // cancelled before Acquire
		ctx, cancel = context.WithCancel(ctx)
		cancel()
	case pl.ctxMode < 50: // a deadline: a crawler's workers don't wait for a slow host for ever
		ctx, cancel = context.WithTimeout(ctx, pl.ctxAfter)
	case pl.ctxMode < 60: // cancelled while it may be waiting
		var c context.CancelFunc
		ctx, c = context.WithCancel(ctx)
		tm := time.AfterFunc(pl.ctxAfter, c)
		cancel = func() { tm.Stop(); c() }
	}
	defer cancel()
	if pl.noAdjust {
		ctx = WithoutAdjust(ctx)
	}
	var scoped context.Context
	if pl.withCost {
		scoped = WithScopes(ctx, pl.scopes...)
	} else {
		keys := make([]string, len(pl.scopes))
		for i, s := range pl.scopes {
			keys[i] = s.Key
		}
		scoped = WithScopeKeys(ctx, keys...)
	}
	req, err := http.NewRequest(http.MethodGet, "http://stress.test/", nil)
	if err != nil {
		panic(err)
	}
	acqCtx := scoped
	if pl.onReq {
		req = req.WithContext(scoped)
		acqCtx = ctx
	}
	keys, costs := stressMerge(pl.scopes)

	var p *Permit
	if pl.try {
		tr := req
		if !pl.onReq {
			tr = req.WithContext(scoped)
		}
		p, _, err = st.m.TryAcquire(tr)
		if err != nil {
			st.badErr(err)
			return
		}
		if p != nil {
			st.tryHits.Add(1)
		}
	}
	if p == nil {
		p, err = st.m.Acquire(acqCtx, req)
	}
	if err != nil {
		var we *WaitError
		switch {
		case !errors.As(err, &we):
			st.badErr(err)
		case errors.Is(err, context.Canceled):
			st.canceled.Add(1)
		case errors.Is(err, context.DeadlineExceeded):
			st.deadline.Add(1)
		default:
			st.badErr(err)
		}
		time.Sleep(pl.think)
		return
	}
	rec := stressPermit{keys: keys, costs: costs, start: p.Acquired(), observed: time.Now(), gotKeys: p.Scopes()}
	time.Sleep(pl.dur)

	var fb *Feedback // nil: Release with a response or error
	var resp *http.Response
	var rerr error
	// The first scope that draws a backoff signal at its own rate fails
	// the request: the signal goes to it alone (Feedback.BackoffScopes)
	// or, as a plain response, to every scope of the request.
	bad := ""
	for i, sc := range pl.scopes {
		if pl.signal[i] < st.byKey[sc.Key].signal {
			bad = sc.Key
			break
		}
	}
	var only []string
	if bad != "" && pl.targeted {
		only = []string{bad}
	}
	wait := time.Duration(pl.retry) * time.Second
	switch {
	case bad == "" && pl.okKind < 40:
		resp = &http.Response{StatusCode: 200, Header: http.Header{}}
	case bad == "" && pl.okKind < 80:
		fb = &Feedback{Status: 200, Size: -1}
	case bad == "":
		fb = &Feedback{Status: 200, Size: -1, Quota: stressQuota(pl, keys, costs, st.byKey)}
		rec.quota = fb.Quota
	case pl.kind < 2 && only == nil:
		resp = &http.Response{StatusCode: 429, Header: http.Header{}}
	case pl.kind < 2:
		fb = &Feedback{Status: 429, Backoff: true, BackoffScopes: only}
	case pl.kind < 4 && only == nil:
		resp = &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {strconv.Itoa(pl.retry)}}}
	case pl.kind < 4:
		fb = &Feedback{Status: 429, Backoff: true, Wait: wait, HasWait: true, BackoffScopes: only}
	case pl.kind < 6 && only == nil:
		resp = &http.Response{StatusCode: 503, Header: http.Header{}}
	case pl.kind < 6:
		fb = &Feedback{Status: 503, Backoff: true, BackoffScopes: only}
	case only == nil:
		rerr = context.DeadlineExceeded // DefaultFeedback: a timeout, a backoff signal
	default:
		fb = &Feedback{Err: context.DeadlineExceeded, Timeout: true, Backoff: true, Size: -1, BackoffScopes: only}
	}
	release := func() {
		if fb != nil {
			p.ReleaseFeedback(*fb)
		} else {
			p.Release(resp, rerr)
		}
	}
	rec.end = time.Now()
	if pl.double {
		// Release is idempotent and safe from any goroutine: two at once.
		st.doubles.Add(1)
		var wg sync.WaitGroup
		wg.Go(release)
		wg.Go(release)
		wg.Wait()
	} else {
		release()
	}
	release() // and once more: nothing happens
	st.mu.Lock()
	st.permits = append(st.permits, rec)
	st.mu.Unlock()
	time.Sleep(pl.think)
}

// stressQuota draws the quota corrections of a release: the actual cost
// for every scope of the request, or per scope, or the server's remaining
// count for one scope. At most one cost per scope, so corrections never
// stack.
func stressQuota(pl stressReqPlan, keys []string, costs []int64, byKey map[string]*stressScope) []QuotaUse {
	r := rand.New(rand.NewPCG(pl.quotaR, 7))
	switch pl.quotaSel {
	case 0:
		return []QuotaUse{{Cost: r.Int64N(6), HasCost: true}}
	case 1:
		var q []QuotaUse
		for i, k := range keys {
			if r.IntN(3) > 0 {
				q = append(q, QuotaUse{Scope: k, Cost: r.Int64N(2*costs[i] + 1), HasCost: true})
			}
		}
		return q
	}
	k := keys[r.IntN(len(keys))]
	return []QuotaUse{{Scope: k, Remaining: r.Int64N(max(byKey[k].cfg.Quota, 1) + 1), HasRemaining: true}}
}

func (st *stressRun) badErr(err error) {
	if st.badErrs.Add(1) <= 5 {
		st.t.Errorf("unexpected error: %v", err)
	}
}

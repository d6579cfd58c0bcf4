package sim

import (
	"math"
	"slices"
	"time"

	"github.com/crawlerkit/throttle"
)

// BucketWidth is the width of the time buckets of a Series.
const BucketWidth = 10 * time.Second

// Result is what one run of a policy through a scenario measured.
type Result struct {
	Metrics Metrics
	Series  Series
	// About describes the policy's configuration.
	About string
}

// Metrics are one row of the report. Pointer fields are nil where the
// figure does not apply to the scenario ("-" in the table, null in JSON).
type Metrics struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	// Seed is the run's seed and Seeds 1; a row aggregated over several
	// seeds (RunSeeds, Aggregate) has the first seed and how many.
	Seed  uint64 `json:"seed"`
	Seeds int    `json:"seeds"`
	// Requests is how many requests reached the server in the whole run.
	Requests int `json:"requests"`
	// MeasureFrom and MeasureTo bound the measurement window, in seconds
	// from the start.
	MeasureFrom float64 `json:"measure_from_s"`
	MeasureTo   float64 `json:"measure_to_s"`
	// SentRate and OKRate are the requests and the 2xx responses per second
	// in the window (by arrival time).
	SentRate float64 `json:"sent_per_s"`
	OKRate   float64 `json:"ok_per_s"`
	// Capacity is what the server can take in req/s (the hidden limit, the
	// capacity, the worker-bound ideal, the agreed rate), and OKPerCapacity
	// OKRate divided by it.
	Capacity      *float64 `json:"capacity_per_s"`
	OKPerCapacity *float64 `json:"ok_per_capacity"`
	// OKPerCapacityMean is the mean of OKPerCapacity over the seeds of an
	// aggregated row (OKPerCapacity is then the worst seed's); for one
	// seed it equals OKPerCapacity.
	OKPerCapacityMean *float64 `json:"ok_per_capacity_mean"`
	// SignalsPerMin is the backoff signals (429, 5xx overload statuses)
	// per minute in the window (from Scenario.SignalsFrom when set).
	SignalsPerMin float64 `json:"signals_per_min"`
	// MeanInFlight is the mean number of requests in flight at the server
	// (queued or served) in the window.
	MeanInFlight float64 `json:"mean_in_flight"`
	// ColdStart90 is the cold start: the time in seconds from the first
	// request until the trailing-60-s 2xx rate first reaches 90 % of
	// Capacity, over the whole run, not only the window; -1 if it never
	// does. The trailing rate at t is the 2xx arrivals in (t-60s, t]
	// divided by a fixed 60 s, so the first minute counts the time before
	// the start as zero: a start-up burst gets no credit beyond its
	// requests. It only rises at a 2xx arrival, where it is evaluated, so
	// the figure is exact.
	ColdStart90 *float64 `json:"cold_start_90_s"`
	// First5Share is the 2xx arrivals in the first 5 minutes from the
	// first request, divided by what the capacity allows in them
	// (Capacity x 300 s); nil if the run is shorter.
	First5Share *float64 `json:"first5_share"`
	// StormRequests is how many requests reached the server during the
	// storm.
	StormRequests *int `json:"storm_requests"`
	// StormKnown is how many of them the client sent after the first
	// storm answer reached it: the requests it chose to send knowing of
	// the storm (the others were on their way, or sent before any answer
	// could tell, which no client can avoid).
	StormKnown *int `json:"storm_known"`
	// StormQuietAfter is how many storm signals the client received before
	// it went quiet for the rest of the storm: from then on every gap
	// between its requests is at least ten times the mean gap before the
	// storm (a rate below 10 %); -1 if it never went quiet.
	StormQuietAfter *int `json:"storm_quiet_after_signals"`
	// RecoverSeconds is the time from the end of the storm to the first
	// 2xx of a minute whose 2xx rate is back to >= 90 % of the rate before
	// the storm; -1 if it never was.
	RecoverSeconds *float64 `json:"recover_s"`
	// InGate is how many requests started inside a Retry-After gate the
	// server gave and the policy had already received; InGateRaw also
	// counts those started while the response with the gate was still on
	// its way, which no client can avoid.
	InGate    *int `json:"in_gate"`
	InGateRaw *int `json:"in_gate_raw"`
}

// Series are a run's figures per BucketWidth bucket, for the plots.
type Series struct {
	// Rate is the requests sent per second; OK and Refused those of them
	// answered 2xx and with a backoff signal.
	Rate, OK, Refused []float64
	// Gap is the mean time between consecutive starts at the busiest host
	// (the one with the most requests), in seconds: the effective delay;
	// NaN where no gap ended in the bucket.
	Gap []float64
	// InFlight is the mean number of requests in flight at the server.
	InFlight []float64
}

// req is one request as the server saw it.
type req struct {
	start, end time.Duration // from t0; end < 0 while unanswered
	host       int32
	status     int16
	raw, known bool
}

// recorder keeps every request of a run.
type recorder struct {
	t0    time.Time
	hosts map[string]int32
	reqs  []req
}

func (r *recorder) add(host string, now time.Time, status int, raw, known bool) int {
	h, ok := r.hosts[host]
	if !ok {
		h = int32(len(r.hosts))
		r.hosts[host] = h
	}
	r.reqs = append(r.reqs, req{start: now.Sub(r.t0), end: -1, host: h, status: int16(status), raw: raw, known: known})
	return len(r.reqs) - 1
}

func (r *recorder) end(id int, now time.Time) { r.reqs[id].end = now.Sub(r.t0) }

// backoffStatuses are the statuses that are backoff signals by default.
var backoffStatuses = throttle.DefaultConfig().Default.Backoff.Statuses

func isSignal(status int16) bool {
	return slices.Contains(backoffStatuses, int(status))
}

func isOK(status int16) bool { return status >= 200 && status < 300 }

func ptr[T any](v T) *T { return &v }

// quietAfter returns how many signals (ends: when their responses were
// delivered, sorted) a client received before it went quiet in a storm:
// from then on every gap between its storm requests (starts, sorted) is at
// least thr, so its rate is below 10 % of the rate before when thr is ten
// times the mean gap before. The signals counted are those delivered
// before the first long gap ended. It returns -1 if the client never went
// quiet.
func quietAfter(starts, ends []time.Duration, sTo, thr time.Duration) int {
	n := len(starts)
	if n == 0 {
		return 0
	}
	i := n - 1
	for i > 0 && starts[i]-starts[i-1] >= thr {
		i--
	}
	if i == n-1 && sTo-starts[i] < thr {
		return -1
	}
	bound := sTo
	if i+1 < n {
		bound = starts[i+1]
	}
	k, _ := slices.BinarySearch(ends, bound+1)
	return k
}

// measure computes a run's Metrics and Series from its requests.
func measure(sc *Scenario, p PolicySpec, rec *recorder, end time.Time) Result {
	runLen := end.Sub(rec.t0)
	reqs := rec.reqs // in order of start
	from, to := sc.MeasureFrom, sc.MeasureTo
	if to <= 0 || to > runLen {
		to = runLen
	}
	m := Metrics{Scenario: sc.Name, Policy: p.Name, Requests: len(reqs), MeasureFrom: from.Seconds(), MeasureTo: to.Seconds()}
	win := (to - from).Seconds()
	sigFrom := from
	if sc.SignalsFrom > 0 {
		sigFrom = sc.SignalsFrom
	}
	var sent, ok, sig int
	var area float64
	for _, q := range reqs {
		if isSignal(q.status) && q.start >= sigFrom && q.start < to {
			sig++
		}
		e := q.end
		if e < 0 {
			e = runLen
		}
		if ov := min(e, to) - max(q.start, from); ov > 0 {
			area += ov.Seconds()
		}
		if q.start < from || q.start >= to {
			continue
		}
		sent++
		if isOK(q.status) {
			ok++
		}
	}
	m.SentRate, m.OKRate = float64(sent)/win, float64(ok)/win
	m.SignalsPerMin = float64(sig) / ((to - sigFrom).Seconds() / 60)
	m.MeanInFlight = area / win
	if sc.Capacity > 0 {
		m.Capacity = ptr(sc.Capacity)
		m.OKPerCapacity = ptr(m.OKRate / sc.Capacity)
		m.OKPerCapacityMean = ptr(*m.OKPerCapacity)
		m.ColdStart90, m.First5Share = coldStart(reqs, sc.Capacity, runLen)
	}
	if sc.RetryAfter {
		var in, raw int
		for _, q := range reqs {
			if q.known {
				in++
			}
			if q.raw {
				raw++
			}
		}
		m.InGate, m.InGateRaw = &in, &raw
	}
	if sc.StormFrom > 0 && sc.StormTo > sc.StormFrom {
		stormMetrics(&m, reqs, sc.StormFrom, sc.StormTo, runLen)
	}
	return Result{Metrics: m, Series: series(reqs, len(rec.hosts), runLen), About: p.About}
}

// Cold-start parameters: the trailing window of ColdStart90 and the share
// of capacity it must reach; the span of First5Share.
const (
	coldWindow = time.Minute
	coldShare  = 0.9
	firstSpan  = 5 * time.Minute
)

// coldStart returns ColdStart90 and First5Share of a run's requests (in
// order of start) against capacity req/s; runLen is the run's length.
func coldStart(reqs []req, capacity float64, runLen time.Duration) (cold90, first5 *float64) {
	if len(reqs) == 0 {
		return ptr(-1.0), nil
	}
	first := reqs[0].start
	// The 2xx count a trailing window needs; the epsilon keeps a product
	// like 0.9 x 60 from rounding up past a whole number.
	need := max(1, int(math.Ceil(coldShare*capacity*coldWindow.Seconds()-1e-9)))
	var oks []time.Duration
	n5 := 0
	for _, q := range reqs {
		if !isOK(q.status) {
			continue
		}
		oks = append(oks, q.start)
		if q.start < first+firstSpan {
			n5++
		}
	}
	cold := -1.0
	j := 0
	for k, t := range oks {
		for oks[j] <= t-coldWindow {
			j++
		}
		if k-j+1 >= need {
			cold = (t - first).Seconds()
			break
		}
	}
	if first+firstSpan <= runLen {
		first5 = ptr(float64(n5) / (capacity * firstSpan.Seconds()))
	}
	return &cold, first5
}

func stormMetrics(m *Metrics, reqs []req, sFrom, sTo, runLen time.Duration) {
	bFrom := max(0, sFrom-5*time.Minute)
	var before, beforeOK int
	var starts, ends []time.Duration // of the storm's requests; ends of its signals
	var oks []time.Duration          // 2xx after the storm
	for _, q := range reqs {
		switch {
		case q.start >= bFrom && q.start < sFrom:
			before++
			if isOK(q.status) {
				beforeOK++
			}
		case q.start >= sFrom && q.start < sTo:
			starts = append(starts, q.start)
			if isSignal(q.status) && q.end >= 0 {
				ends = append(ends, q.end)
			}
		case q.start >= sTo && isOK(q.status):
			oks = append(oks, q.start)
		}
	}
	m.StormRequests = ptr(len(starts))
	bLen := (sFrom - bFrom).Seconds()
	slices.Sort(ends)
	known := 0
	for _, s := range starts {
		if len(ends) > 0 && s >= ends[0] {
			known++
		}
	}
	m.StormKnown = ptr(known)
	if before > 0 {
		m.StormQuietAfter = ptr(quietAfter(starts, ends, sTo, time.Duration(10*bLen/float64(before)*float64(time.Second))))
	}
	need := 0.9 * float64(beforeOK) / bLen * 60
	rec := -1.0
	j := 0
	for i, t := range oks {
		if t+time.Minute > runLen || need <= 0 {
			break
		}
		for j < len(oks) && oks[j] < t+time.Minute {
			j++
		}
		if float64(j-i) >= need {
			rec = (t - sTo).Seconds()
			break
		}
	}
	m.RecoverSeconds = ptr(rec)
}

func series(reqs []req, hosts int, runLen time.Duration) Series {
	n := int((runLen + BucketWidth - 1) / BucketWidth)
	s := Series{Rate: make([]float64, n), OK: make([]float64, n), Refused: make([]float64, n), Gap: make([]float64, n), InFlight: make([]float64, n)}
	gapN := make([]int, n)
	perHost := make([]int, hosts)
	for _, q := range reqs {
		perHost[q.host]++
	}
	busiest := int32(0)
	for h, c := range perHost {
		if c > perHost[busiest] {
			busiest = int32(h)
		}
	}
	last := time.Duration(-1)
	bw := BucketWidth.Seconds()
	for _, q := range reqs {
		b := int(q.start / BucketWidth)
		s.Rate[b] += 1 / bw
		if isOK(q.status) {
			s.OK[b] += 1 / bw
		}
		if isSignal(q.status) {
			s.Refused[b] += 1 / bw
		}
		if q.host == busiest {
			if last >= 0 {
				s.Gap[b] += (q.start - last).Seconds()
				gapN[b]++
			}
			last = q.start
		}
		e := q.end
		if e < 0 {
			e = runLen
		}
		for t := q.start; t < e; {
			bi := int(t / BucketWidth)
			next := min(e, time.Duration(bi+1)*BucketWidth)
			s.InFlight[bi] += (next - t).Seconds() / bw
			t = next
		}
	}
	for i := range s.Gap {
		if gapN[i] == 0 {
			s.Gap[i] = math.NaN()
		} else {
			s.Gap[i] /= float64(gapN[i])
		}
	}
	return s
}

package sim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file models real rate limiters exactly, from their source: nginx's
// limit_req, HAProxy's http_req_rate on a stick table, go-redis/redis_rate's
// GCRA; and describes every model of the package (those of server.go too)
// by one Limiter value, so that a grid of shapes can be generated.
//
// Each model keeps one limiter per host: a host of the simulation is one
// server, crawled by one client, so a zone or a table keyed by the client
// holds one entry per host here.

// LimiterKind names a model of a rate limiter, as Limiter.Kind.
type LimiterKind string

// The kinds of Limiter.
const (
	// KindNginx is nginx's limit_req (NginxLimitReq).
	KindNginx LimiterKind = "nginx"
	// KindHAProxy is HAProxy's http_req_rate on a stick table
	// (HAProxyReqRate).
	KindHAProxy LimiterKind = "haproxy"
	// KindGCRA is go-redis/redis_rate's GCRA (GCRAServer).
	KindGCRA LimiterKind = "gcra"
	// KindBucket is a continuous token bucket (BurstServer).
	KindBucket LimiterKind = "bucket"
	// KindFixed is a quota per window aligned to the window
	// (FixedWindowServer).
	KindFixed LimiterKind = "fixed"
	// KindSliding is a quota in any trailing window
	// (SlidingWindowServer).
	KindSliding LimiterKind = "sliding"
	// KindHTTPRate is go-chi/httprate's sliding counter (CounterServer).
	KindHTTPRate LimiterKind = "httprate"
)

// Statement is how a server states its limit in the headers of its
// answers, as Limiter.Stated and StatedServer.Style.
type Statement int

// The statements of StatedServer.
const (
	// StateNone adds no header.
	StateNone Statement = iota
	// StateIETF adds RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy:
	// "default";q=<quota>;w=<window, s>` and `RateLimit:
	// "default";r=<remaining>;t=<reset, s>`.
	StateIETF
	// StateX adds X-RateLimit-Limit (the quota), X-RateLimit-Remaining
	// and X-RateLimit-Reset (the Unix time of the reset, in seconds,
	// rounded up), as GitHub and go-chi/httprate send them.
	StateX
)

// Limiter describes a model of a rate limiter by its parameters; NewServer
// builds it and String names it. The zero Limiter is not valid: Validate
// says what a kind needs. A Limiter is a plain value; the Server it builds
// has state and serves one run.
type Limiter struct {
	// Kind is the model.
	Kind LimiterKind
	// Requests per Period is the limit:
	//
	//   - nginx: rate=<Requests>r/s with Period 1 s, r/m with 1 min
	//     (no other period: nginx has none);
	//   - haproxy: refused while sc_http_req_rate(0) over
	//     http_req_rate(<Period>) is greater than Requests; Period in
	//     whole milliseconds;
	//   - gcra: redis_rate.Limit{Rate: Requests, Period: Period};
	//   - bucket: Requests/Period tokens a second;
	//   - fixed, sliding, httprate: a quota of Requests per window of
	//     Period.
	Requests int
	Period   time.Duration
	// Burst is nginx's burst (requests accepted at once beyond the
	// first), gcra's burst (requests accepted at once, at least 1) and
	// the bucket's (BurstServer.Burst: 1 + Burst tokens). Other kinds
	// have none: 0.
	Burst int
	// NoDelay is nginx's nodelay: a request within the burst is served
	// at once. Without it a request within the burst is delayed (its
	// answer comes excess/rate later), unless Delay says otherwise.
	// nginx only.
	NoDelay bool
	// Delay is nginx's delay=N: without NoDelay, the first Delay
	// requests of the burst are served at once and the rest delayed.
	// nginx only.
	Delay int
	// Status is the status of a refusal; 0 means the kind's default:
	// 503 for nginx (limit_req_status's default), 429 for the others
	// (HAProxy's deny answers 403 without deny_status; a rate limit sets
	// it). httprate always answers 429.
	Status int
	// RetryAfter, in whole seconds, adds a constant Retry-After to every
	// refusal, as a server configured to add one sends it (nginx's
	// `error_page 429 = @limited` to a location that adds the header,
	// HAProxy's `http-request deny ... hdr Retry-After`); 0 means none.
	RetryAfter time.Duration
	// RetryAfterWait adds to every refusal a Retry-After of the
	// limiter's own wait until it accepts again (whole seconds, rounded
	// up, at least 1): gcra, bucket, fixed and sliding. Not with
	// RetryAfter. (nginx and HAProxy cannot: they know no such wait.
	// httprate always sends Retry-After: its window.)
	RetryAfterWait bool
	// CountRefused makes a sliding window count refused requests too.
	// sliding only (haproxy always counts them).
	CountRefused bool
	// Latency is the time every answer takes (an nginx delay comes on
	// top).
	Latency time.Duration
	// Stated adds the headers by which a server states its limit
	// (StatedServer). httprate states its own X-RateLimit-*: not with
	// StateX.
	Stated Statement
}

// Rate is the limit in requests per second: Requests over Period.
func (l Limiter) Rate() float64 { return float64(l.Requests) / l.Period.Seconds() }

// Validate reports whether l describes a model, and if not which field is
// wrong and why.
func (l Limiter) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("sim: limiter %s: %s", l.Kind, fmt.Sprintf(format, a...))
	}
	switch l.Kind {
	case KindNginx, KindHAProxy, KindGCRA, KindBucket, KindFixed, KindSliding, KindHTTPRate:
	default:
		return fmt.Errorf("sim: limiter kind %q is none of nginx, haproxy, gcra, bucket, fixed, sliding, httprate", string(l.Kind))
	}
	nginx := l.Kind == KindNginx
	switch {
	case l.Requests < 1:
		return bad("Requests %d: want at least 1", l.Requests)
	case l.Period <= 0:
		return bad("Period %v: want more than 0", l.Period)
	case nginx && l.Period != time.Second && l.Period != time.Minute:
		return bad("Period %v: nginx's rate is per second or per minute", l.Period)
	case l.Kind == KindHAProxy && (l.Period%time.Millisecond != 0 || l.Period > math.MaxInt32*time.Millisecond):
		return bad("Period %v: HAProxy's period is in whole milliseconds, below 2^31", l.Period)
	case l.Burst < 0:
		return bad("Burst %d: want at least 0", l.Burst)
	case l.Kind == KindGCRA && l.Burst < 1:
		return bad("Burst %d: redis_rate refuses every request below 1", l.Burst)
	case l.Burst > 0 && !nginx && l.Kind != KindGCRA && l.Kind != KindBucket:
		return bad("Burst %d: only nginx, gcra and bucket have a burst", l.Burst)
	case (l.NoDelay || l.Delay != 0) && !nginx:
		return bad("NoDelay and Delay are nginx's")
	case l.Delay < 0 || l.Delay > 0 && l.NoDelay:
		return bad("Delay %d: want at least 0, and not with NoDelay", l.Delay)
	case l.Status != 0 && (l.Status < 400 || l.Status > 599):
		return bad("Status %d: want 0 or 400-599", l.Status)
	case l.Status != 0 && l.Status != http.StatusTooManyRequests && l.Kind == KindHTTPRate:
		return bad("Status %d: httprate answers 429", l.Status)
	case l.RetryAfter < 0 || l.RetryAfter%time.Second != 0:
		return bad("RetryAfter %v: want whole seconds, at least 0", l.RetryAfter)
	case l.RetryAfter > 0 && l.RetryAfterWait:
		return bad("RetryAfter and RetryAfterWait: one Retry-After at most")
	case (l.RetryAfter > 0 || l.RetryAfterWait) && l.Kind == KindHTTPRate:
		return bad("httprate sends its own Retry-After")
	case l.RetryAfterWait && (nginx || l.Kind == KindHAProxy):
		return bad("RetryAfterWait: %s knows no wait; use RetryAfter", l.Kind)
	case l.CountRefused && l.Kind != KindSliding:
		return bad("CountRefused is the sliding window's")
	case l.Latency < 0:
		return bad("Latency %v: want at least 0", l.Latency)
	case l.Stated < StateNone || l.Stated > StateX:
		return bad("Stated %d: want StateNone, StateIETF or StateX", l.Stated)
	case l.Stated == StateX && l.Kind == KindHTTPRate:
		return bad("httprate states its own X-RateLimit-*")
	}
	return nil
}

// NewServer builds the model l describes, with no state: a Server for one
// run. It panics if l is not valid (Validate says why).
func (l Limiter) NewServer() Server {
	if err := l.Validate(); err != nil {
		panic(err)
	}
	var s Server
	switch l.Kind {
	case KindNginx:
		s = &NginxLimitReq{Rate: l.Requests, PerMinute: l.Period == time.Minute, Burst: l.Burst,
			NoDelay: l.NoDelay, Delay: l.Delay, Status: l.Status, Latency: l.Latency}
	case KindHAProxy:
		s = &HAProxyReqRate{Limit: l.Requests, Period: l.Period, Status: l.Status, Latency: l.Latency}
	case KindGCRA:
		s = &GCRAServer{Rate: l.Requests, Period: l.Period, Burst: l.Burst, Status: l.Status,
			RetryAfter: l.RetryAfterWait, Latency: l.Latency}
	case KindBucket:
		s = &BurstServer{Rate: l.Rate(), Burst: l.Burst, Status: l.Status, RetryAfter: l.RetryAfterWait, Latency: l.Latency}
	case KindFixed:
		s = &FixedWindowServer{Quota: l.Requests, Window: l.Period, Status: l.Status, RetryAfter: l.RetryAfterWait, Latency: l.Latency}
	case KindSliding:
		s = &SlidingWindowServer{Quota: l.Requests, Window: l.Period, Status: l.Status, RetryAfter: l.RetryAfterWait,
			Latency: l.Latency, CountRefused: l.CountRefused}
	case KindHTTPRate:
		s = &CounterServer{Quota: l.Requests, Window: l.Period, Latency: l.Latency}
	}
	if l.Stated != StateNone {
		s = &StatedServer{Server: s.(LimitStater), Style: l.Stated}
	}
	if l.RetryAfter > 0 {
		s = &RetryAfterServer{Server: s, RetryAfter: l.RetryAfter}
	}
	return s
}

// String names l in a short stable form, the same for equal Limiters and
// usable in a file name: the kind, the limit, then what is set, dashed:
//
//	nginx-5rps-b10-nodelay-429-ra2-50ms   rate=5r/s burst=10 nodelay, 429 with Retry-After: 2
//	nginx-30rpm-b0-delay-503-1ms         rate=30r/m, delay mode, limit_req's 503
//	nginx-10rps-b8-delay3-503-1ms        burst=8 delay=3
//	haproxy-50per10s-429-ietf-2s         http_req_rate(10s) gt 50, RateLimit headers
//	gcra-5per1s-b10-429-rawait-xrl-1ms   Retry-After of its wait, X-RateLimit-*
//	sliding-60per1m-429-counting-50ms    refused requests counted
//
// Parts: the limit (nginx: <n>rps or <n>rpm; others: <n>per<period>),
// b<burst> (nginx, gcra, bucket), nodelay, delay or delay<N> (nginx),
// the refusal status, ra<seconds> or rawait, counting, ietf or xrl, the
// latency.
func (l Limiter) String() string {
	parts := []string{string(l.Kind)}
	if l.Kind == KindNginx {
		unit := "rps"
		if l.Period == time.Minute {
			unit = "rpm"
		}
		parts = append(parts, strconv.Itoa(l.Requests)+unit)
	} else {
		parts = append(parts, fmt.Sprintf("%dper%s", l.Requests, shortDuration(l.Period)))
	}
	if l.Kind == KindNginx || l.Kind == KindGCRA || l.Kind == KindBucket {
		parts = append(parts, "b"+strconv.Itoa(l.Burst))
	}
	if l.Kind == KindNginx {
		switch {
		case l.NoDelay:
			parts = append(parts, "nodelay")
		case l.Delay > 0:
			parts = append(parts, "delay"+strconv.Itoa(l.Delay))
		default:
			parts = append(parts, "delay")
		}
	}
	parts = append(parts, strconv.Itoa(l.status()))
	switch {
	case l.RetryAfter > 0:
		parts = append(parts, "ra"+strconv.FormatInt(int64(l.RetryAfter/time.Second), 10))
	case l.RetryAfterWait:
		parts = append(parts, "rawait")
	}
	if l.CountRefused {
		parts = append(parts, "counting")
	}
	switch l.Stated {
	case StateIETF:
		parts = append(parts, "ietf")
	case StateX:
		parts = append(parts, "xrl")
	}
	parts = append(parts, shortDuration(l.Latency))
	return strings.Join(parts, "-")
}

// status is the status of l's refusals.
func (l Limiter) status() int {
	switch {
	case l.Status != 0:
		return l.Status
	case l.Kind == KindNginx:
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// shortDuration formats d as time.Duration does, without the zero units
// it appends: "1m" for 1m0s, "1h" for 1h0m0s, "1h30m" for 1h30m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// NginxLimitReq is nginx's limit_req module (ngx_http_limit_req_module.c,
// unchanged from nginx 1.22.1, the one fieldtest runs, to 1.31) with one
// limit_req on a zone keyed by the client:
//
//	limit_req_zone $binary_remote_addr zone=z:1m rate=<Rate>r/s;   (r/m with PerMinute)
//	limit_req zone=z burst=<Burst> [nodelay | delay=<Delay>];
//	limit_req_status <Status>;
//
// in nginx's own integer arithmetic. The rate is stored in thousandths of
// a request per second (rate*1000/60 for r/m, truncated: 7r/m is 116), the
// clock is nginx's, in whole milliseconds (the model truncates now to the
// millisecond), and the client's node holds last (the millisecond of its
// last accepted request that moved the clock) and excess (thousandths of a
// request). A request at now, ms = now - last:
//
//	excess = node.excess - rate*ms/1000 + 1000   (integer division; below 0 is 0)
//
// is refused (Status) if excess > Burst*1000, and the node is left as it
// was: a refusal changes nothing. Otherwise it is accepted, node.excess =
// excess, and node.last = now unless ms is 0. A client's first request
// creates its node with excess 0 and is accepted: Burst 0 lets one request
// through at once, Burst b lets 1 + b. An accepted request is delayed, in
// delay mode (not NoDelay), by (excess - Delay*1000)*1000/rate ms when
// excess is above Delay*1000: its answer comes that much later. nginx
// removes a node only to make room for another client's, so a node here
// lives as long as the run.
//
// Every answer takes Latency (plus the delay). A constant Retry-After (an
// error_page to a location that adds it) is RetryAfterServer's, or
// Limiter.RetryAfter's.
type NginxLimitReq struct {
	// Rate is the zone's rate: rate=<Rate>r/s, or r/m with PerMinute.
	Rate      int
	PerMinute bool
	// Burst is limit_req's burst.
	Burst int
	// NoDelay is limit_req's nodelay: the burst is served at once.
	NoDelay bool
	// Delay is limit_req's delay=<Delay>, without NoDelay: the first
	// Delay requests of the burst are served at once.
	Delay int
	// Status is limit_req_status; 0 means 503, nginx's default.
	Status  int
	Latency time.Duration

	nodes perHost[nginxNode]
}

// nginxNode is a client's node of a limit_req zone.
type nginxNode struct {
	last   int64 // ms
	excess int64 // thousandths of a request
}

// rate is the zone's rate in thousandths of a request per second.
func (s *NginxLimitReq) rate() int64 {
	if s.PerMinute {
		return int64(s.Rate) * 1000 / 60
	}
	return int64(s.Rate) * 1000
}

// delayFrom is the excess above which an accepted request is delayed, in
// thousandths; nodelay sets it beyond any excess, as nginx does.
func (s *NginxLimitReq) delayFrom() int64 {
	if s.NoDelay {
		return math.MaxInt64
	}
	return int64(s.Delay) * 1000
}

// excess returns the excess of a request at ms on n, as nginx's lookup
// computes it, and the milliseconds since n.last it counted (a clock gone
// back counts 0, or 1 beyond a minute).
func (s *NginxLimitReq) excess(n *nginxNode, ms int64) (excess, elapsed int64) {
	d := ms - n.last
	if d < -60000 {
		d = 1
	} else if d < 0 {
		d = 0
	}
	return max(0, n.excess-s.rate()*d/1000+1000), d
}

// Handle implements Server.
func (s *NginxLimitReq) Handle(now time.Time, host string) Response {
	ms := now.UnixMilli()
	n, found := s.nodes.get(host)
	if !found {
		n.last = ms
		return Response{Status: http.StatusOK, Latency: s.Latency}
	}
	excess, elapsed := s.excess(n, ms)
	if excess > int64(s.Burst)*1000 {
		return Response{Status: s.status(), Latency: s.Latency}
	}
	if elapsed != 0 {
		n.last = ms
	}
	n.excess = excess
	var delay time.Duration
	if from := s.delayFrom(); excess > from {
		delay = time.Duration((excess-from)*1000/s.rate()) * time.Millisecond
	}
	return Response{Status: http.StatusOK, Latency: s.Latency + delay}
}

func (s *NginxLimitReq) status() int {
	if s.Status == 0 {
		return http.StatusServiceUnavailable
	}
	return s.Status
}

// LimitState implements LimitStater: the quota is the rate per second or
// per minute; Remaining is how many requests nginx would accept at now
// (1 + Burst once the node has drained); Reset is the time until it
// accepts 1 + Burst again.
func (s *NginxLimitReq) LimitState(now time.Time, host string) LimitState {
	st := LimitState{Quota: s.Rate, Window: time.Second, Remaining: 1 + s.Burst}
	if s.PerMinute {
		st.Window = time.Minute
	}
	n := s.nodes[host]
	if n == nil {
		return st
	}
	ms := now.UnixMilli()
	burst := int64(s.Burst) * 1000
	if first, _ := s.excess(n, ms); first > burst {
		st.Remaining = 0
	} else {
		st.Remaining = 1 + int((burst-first)/1000)
	}
	// Drained when rate*(ms-last)/1000 >= excess + 1000.
	full := n.last + ceilDiv((n.excess+1000)*1000, s.rate())
	st.Reset = time.Duration(max(0, full-ms)) * time.Millisecond
	return st
}

// HAProxyReqRate is HAProxy's http_req_rate on a stick table keyed by the
// client, tracked and checked in this order:
//
//	stick-table type ip size 100k expire 30s store http_req_rate(<Period>)
//	http-request track-sc0 src
//	http-request deny deny_status <Status> if { sc_http_req_rate(0) gt <Limit> }
//
// in HAProxy's arithmetic (include/haproxy/freq_ctr.h and src/freq_ctr.c
// of 2.6, the one fieldtest runs; 2.8 has the same arithmetic, reading
// the thread's clock first). The counter is a freq_ctr: curr_ctr counts
// the events of the current period, which began at curr_tick (ms),
// prev_ctr those of the one before. track-sc0 counts every request,
// refused ones included, before deny reads the rate:
//
//   - update at now (32-bit ms, wrapping): if now - curr_tick < Period,
//     curr_ctr++; else the period rolls over: prev_ctr = curr_ctr,
//     curr_ctr = 1, curr_tick += Period, and if now - curr_tick is still
//     >= Period (a period was skipped) prev_ctr = 0 and curr_tick = now;
//     curr_tick is then rounded down to an even ms (its low bit is
//     HAProxy's rotation lock);
//   - read: remain = curr_tick + Period - now (ms left in the current
//     period); the rate is (prev_ctr*remain + curr_ctr*Period) / Period,
//     integer division: the previous period weighted by the share of
//     the current one still to come, rounded down.
//
// A fresh entry is all zeros (curr_tick 0), so its first request starts a
// period at its own ms. The table's expire is not modelled: an expire of
// at least twice the period (30 s for fieldtest's 1-10 s) changes nothing,
// since an entry idle for two periods counts nothing.
//
// Every answer takes Latency. A constant Retry-After (`hdr Retry-After` on
// the deny) is RetryAfterServer's, or Limiter.RetryAfter's.
type HAProxyReqRate struct {
	// Limit is the rate above which a request is denied.
	Limit int
	// Period is http_req_rate's period, in whole milliseconds.
	Period time.Duration
	// Status is deny_status; 0 means 429.
	Status  int
	Latency time.Duration

	ctrs perHost[freqCtr]
}

// freqCtr is HAProxy's struct freq_ctr.
type freqCtr struct {
	currTick   uint32
	curr, prev uint32
}

// update is update_freq_ctr_period(ctr, period, 1) at now.
func (c *freqCtr) update(now, period uint32) {
	if now-c.currTick < period {
		c.curr++
		return
	}
	c.prev, c.curr = c.curr, 1
	tick := c.currTick + period
	if now-tick >= period {
		c.prev, tick = 0, now
	}
	c.currTick = tick &^ 1
}

// total is freq_ctr_total(ctr, period, pend) at now: pend < 0 asks for
// the flapping correction of read_freq_ctr_period.
func (c *freqCtr) total(now, period uint32, pend int) uint64 {
	curr, past := uint64(c.curr), uint64(c.prev)
	remain := int32(c.currTick + period - now)
	if remain < 0 {
		remain += int32(period)
		if remain >= 0 {
			past = curr
		} else {
			past = 0
		}
		curr = 0
	}
	if pend < 0 {
		pend = 0
		if curr == 0 && past <= 1 {
			return past * uint64(period)
		}
	}
	return past*uint64(int64(remain)) + (curr+uint64(pend))*uint64(period)
}

// haproxyNow is HAProxy's now_ms at now: the milliseconds of the Unix
// time, wrapping at 32 bits.
func haproxyNow(now time.Time) uint32 { return uint32(now.UnixMilli()) }

func (s *HAProxyReqRate) period() uint32 { return uint32(s.Period / time.Millisecond) }

// Handle implements Server.
func (s *HAProxyReqRate) Handle(now time.Time, host string) Response {
	c, _ := s.ctrs.get(host)
	t, p := haproxyNow(now), s.period()
	c.update(t, p)
	if c.total(t, p, -1)/uint64(p) > uint64(s.Limit) {
		return Response{Status: limitStatus(s.Status), Latency: s.Latency}
	}
	return Response{Status: http.StatusOK, Latency: s.Latency}
}

// LimitState implements LimitStater: the quota is Limit per Period;
// Remaining is freq_ctr_remain_period(ctr, period, Limit, 0), how many
// requests HAProxy would accept at now; Reset is the time until the
// current period and the one before stop counting.
func (s *HAProxyReqRate) LimitState(now time.Time, host string) LimitState {
	st := LimitState{Quota: s.Limit, Window: s.Period, Remaining: s.Limit}
	c := s.ctrs[host]
	if c == nil {
		return st
	}
	t, p := haproxyNow(now), s.period()
	avg := c.total(t, p, 0) / uint64(p)
	st.Remaining = s.Limit - int(min(avg, uint64(s.Limit)))
	if left := int32(c.currTick + 2*p - t); left > 0 {
		st.Reset = time.Duration(left) * time.Millisecond
	}
	return st
}

// GCRAServer is go-redis/redis_rate v10's limiter (lua.go's allowN script,
// cost 1) keyed by the client, in its float arithmetic: with
// redis_rate.Limit{Rate, Burst, Period}, the emission interval is T =
// Period/Rate (seconds), and a request at now (Redis TIME: whole
// microseconds, counted in seconds from 2017-01-01 as a float64) and tat
// = max(the stored tat, now) (now when none is stored):
//
//	new_tat = tat + T; allow_at = new_tat - Burst*T; diff = now - allow_at
//
// is refused if diff < 0 (RetryAfter = -diff, ResetAfter = tat - now, tat
// unchanged), otherwise accepted (tat = new_tat, Remaining = diff/T
// truncated, ResetAfter = new_tat - now). So Burst requests pass at once
// and then one every T; Burst 0 refuses every request. The waits go back
// to Go as the script's tostring of them (14 significant digits) and
// redis_rate's dur (truncated to the nanosecond), as in its Result.
//
// The HTTP server in front answers Status (0 means 429) on a refusal,
// with Retry-After: RetryAfter in whole seconds rounded up (at least 1)
// when RetryAfter is set. Every answer takes Latency.
type GCRAServer struct {
	Rate   int
	Period time.Duration
	Burst  int
	Status int
	// RetryAfter sends Retry-After on refusals.
	RetryAfter bool
	Latency    time.Duration

	tats perHost[float64]
}

// GCRAResult is redis_rate's Result of one request.
type GCRAResult struct {
	// Allowed is 1 if the request is accepted, 0 if not.
	Allowed int
	// Remaining is the requests that would still pass at once.
	Remaining int
	// RetryAfter is the wait until the request would pass; -1 when
	// allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to its full
	// burst.
	ResetAfter time.Duration
}

// gcraEpoch is redis_rate's jan_1_2017, the origin of its clock.
const gcraEpoch = 1483228800

// gcraNow is the script's now: Redis TIME in seconds since 2017.
func gcraNow(now time.Time) float64 {
	return float64(now.Unix()-gcraEpoch) + float64(now.Nanosecond()/1000)/1000000
}

// gcraDur is redis_rate's dur of the script's tostring of f.
func gcraDur(f float64) time.Duration {
	f, _ = strconv.ParseFloat(strconv.FormatFloat(f, 'g', 14, 64), 64)
	if f == -1 {
		return -1
	}
	return time.Duration(f * float64(time.Second))
}

// interval is the emission interval T, in seconds.
func (s *GCRAServer) interval() float64 { return s.Period.Seconds() / float64(s.Rate) }

// Allow is redis_rate's Limiter.Allow for host at now.
func (s *GCRAServer) Allow(now time.Time, host string) GCRAResult {
	tat, found := s.tats.get(host)
	t := gcraNow(now)
	cur := t
	if found {
		cur = math.Max(*tat, t)
	}
	T := s.interval()
	newTAT := cur + T
	diff := t - (newTAT - T*float64(s.Burst))
	if diff/T < 0 {
		if !found {
			delete(s.tats, host)
		}
		return GCRAResult{RetryAfter: gcraDur(-diff), ResetAfter: gcraDur(cur - t)}
	}
	*tat = newTAT
	return GCRAResult{Allowed: 1, Remaining: int(diff / T), RetryAfter: -1, ResetAfter: gcraDur(newTAT - t)}
}

// Handle implements Server.
func (s *GCRAServer) Handle(now time.Time, host string) Response {
	r := s.Allow(now, host)
	if r.Allowed == 1 {
		return Response{Status: http.StatusOK, Latency: s.Latency}
	}
	resp := Response{Status: limitStatus(s.Status), Latency: s.Latency}
	if s.RetryAfter {
		resp.RetryAfter = retryAfter(r.RetryAfter)
	}
	return resp
}

// LimitState implements LimitStater: the quota is Rate per Period;
// Remaining and Reset are redis_rate's Remaining and ResetAfter at now
// (Remaining 0 on a refusal).
func (s *GCRAServer) LimitState(now time.Time, host string) LimitState {
	st := LimitState{Quota: s.Rate, Window: s.Period, Remaining: s.Burst}
	tat, ok := s.tats[host]
	if !ok {
		return st
	}
	t := gcraNow(now)
	cur := math.Max(*tat, t)
	T := s.interval()
	st.Remaining = max(0, int((t-(cur-T*float64(s.Burst)))/T))
	st.Reset = gcraDur(cur - t)
	return st
}

// LimitState is a limiter's state as a server states it in the headers of
// an answer.
type LimitState struct {
	// Quota is the requests allowed per Window.
	Quota  int
	Window time.Duration
	// Remaining is how many more requests the limiter would accept at
	// once.
	Remaining int
	// Reset is the time until the limiter is back to its whole quota:
	// the window's end (fixed, httprate), the time until every counted
	// request has left the window (sliding, haproxy), until the bucket
	// is full (nginx, gcra, bucket).
	Reset time.Duration
}

// A LimitStater is a Server that can state its limit: LimitState, called
// right after Handle with the same now and host, returns the state the
// answer leaves.
type LimitStater interface {
	Server
	LimitState(now time.Time, host string) LimitState
}

// StatedServer adds to every answer of Server the headers of Style,
// stating the wrapped limiter's real state after the answer: a server
// that states its limit. Times are stated in whole seconds rounded up.
type StatedServer struct {
	Server LimitStater
	Style  Statement
}

// Handle implements Server.
func (s *StatedServer) Handle(now time.Time, host string) Response {
	r := s.Server.Handle(now, host)
	if s.Style == StateNone {
		return r
	}
	st := s.Server.LimitState(now, host)
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	reset := ceilSeconds(st.Reset)
	switch s.Style {
	case StateIETF:
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, st.Quota, ceilSeconds(st.Window)))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, st.Remaining, reset))
	case StateX:
		h.Set("X-RateLimit-Limit", strconv.Itoa(st.Quota))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(st.Remaining))
		at := now.Add(st.Reset)
		sec := at.Unix()
		if at.Nanosecond() > 0 {
			sec++
		}
		h.Set("X-RateLimit-Reset", strconv.FormatInt(sec, 10))
	}
	r.Header = h
	return r
}

// RetryAfterServer adds a constant Retry-After to every answer of Server
// that is not 2xx: a server configured to send one with its refusals
// (nginx's error_page to a location that adds it, HAProxy's deny with
// `hdr Retry-After`). A Retry-After the server sends itself is replaced.
type RetryAfterServer struct {
	Server Server
	// RetryAfter is the header's value, whole seconds.
	RetryAfter time.Duration
}

// Handle implements Server.
func (s *RetryAfterServer) Handle(now time.Time, host string) Response {
	r := s.Server.Handle(now, host)
	if r.Status/100 != 2 {
		r.RetryAfter = s.RetryAfter
	}
	return r
}

// The models of server.go state their limits too.

// LimitState implements LimitStater: the quota is Rate per second, or per
// the shortest whole number of seconds (up to an hour) in which it is a
// whole number of requests (0.1 req/s is 1 per 10 s); Remaining is the
// whole tokens left; Reset is the time until the bucket is full.
func (s *BurstServer) LimitState(now time.Time, host string) LimitState {
	capacity := 1 + float64(max(0, s.Burst))
	q, w := quotaPerWindow(s.Rate)
	st := LimitState{Quota: q, Window: w, Remaining: int(capacity)}
	if b := s.buckets[host]; b != nil {
		tokens := math.Min(capacity, b.tokens+now.Sub(b.last).Seconds()*b.Rate)
		st.Remaining = int(tokens)
		st.Reset = time.Duration((capacity - tokens) / s.Rate * float64(time.Second))
	}
	return st
}

// LimitState implements LimitStater: Quota per Window; Remaining is what
// is left of the current window's quota; Reset is the window's end.
func (s *FixedWindowServer) LimitState(now time.Time, host string) LimitState {
	st := LimitState{Quota: s.Quota, Window: s.Window, Remaining: s.Quota}
	start := now.Truncate(s.Window)
	if w := s.windows[host]; w != nil && w.start.Equal(start) {
		st.Remaining = max(0, s.Quota-w.n)
	}
	st.Reset = start.Add(s.Window).Sub(now)
	return st
}

// LimitState implements LimitStater: Quota per Window; Remaining is what
// is left of the quota in the trailing window; Reset is the time until
// the last counted request has left it.
func (s *SlidingWindowServer) LimitState(now time.Time, host string) LimitState {
	st := LimitState{Quota: s.Quota, Window: s.Window, Remaining: s.Quota}
	w := s.windows[host]
	if w == nil {
		return st
	}
	cut := now.Add(-s.Window)
	n := 0
	for _, t := range w.accepted[w.head:] {
		if t.After(cut) {
			n++
		}
	}
	st.Remaining = max(0, s.Quota-n)
	if n > 0 {
		st.Reset = w.accepted[len(w.accepted)-1].Add(s.Window).Sub(now)
	}
	return st
}

// LimitState implements LimitStater: what httprate states in its own
// X-RateLimit-* headers, its Reset the current window's end.
func (s *CounterServer) LimitState(now time.Time, host string) LimitState {
	cur := now.Truncate(s.Window)
	st := LimitState{Quota: s.Quota, Window: s.Window, Remaining: s.Quota, Reset: cur.Add(s.Window).Sub(now)}
	w := s.counts[host]
	if w == nil {
		return st
	}
	prev, curr := w.prev, w.curr
	if !cur.Equal(w.start) {
		prev, curr = 0, 0
		if cur.Equal(w.start.Add(s.Window)) {
			prev = w.curr
		}
	}
	rate := int(math.Round(float64(prev)*float64(s.Window-now.Sub(cur))/float64(s.Window) + float64(curr)))
	st.Remaining = max(0, s.Quota-rate)
	return st
}

// perHost is a model's state per host, made on first use.
type perHost[T any] map[string]*T

// get returns host's state, and whether it was there before.
func (m *perHost[T]) get(host string) (*T, bool) {
	if *m == nil {
		*m = make(perHost[T])
	}
	v, ok := (*m)[host]
	if !ok {
		v = new(T)
		(*m)[host] = v
	}
	return v, ok
}

// quotaPerWindow writes rate (req/s) as a quota per window of whole
// seconds: the shortest window, up to an hour, in which the quota is a
// whole number (within 1e-9), else the rate over one hour, rounded.
func quotaPerWindow(rate float64) (int, time.Duration) {
	for w := 1; w <= 3600; w++ {
		if q := rate * float64(w); math.Abs(q-math.Round(q)) < 1e-9 {
			return int(math.Round(q)), time.Duration(w) * time.Second
		}
	}
	return int(math.Round(rate * 3600)), time.Hour
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Second))
}

var (
	_ LimitStater = (*NginxLimitReq)(nil)
	_ LimitStater = (*HAProxyReqRate)(nil)
	_ LimitStater = (*GCRAServer)(nil)
	_ LimitStater = (*BurstServer)(nil)
	_ LimitStater = (*FixedWindowServer)(nil)
	_ LimitStater = (*SlidingWindowServer)(nil)
	_ LimitStater = (*CounterServer)(nil)
)

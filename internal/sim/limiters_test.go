package sim

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/ratelimit"
)

// step is one request of a model's table test: its time from Epoch, and
// the answer's status and latency.
type step struct {
	at      time.Duration
	status  int
	latency time.Duration
}

// runSteps sends the steps to s for host "a" in order and fails t at the
// first answer that differs.
func runSteps(t *testing.T, s Server, steps []step) {
	t.Helper()
	for i, c := range steps {
		r := s.Handle(Epoch.Add(c.at), "a")
		if r.Status != c.status || r.Latency != c.latency {
			t.Fatalf("step %d at %v: %d after %v, want %d after %v", i, c.at, r.Status, r.Latency, c.status, c.latency)
		}
	}
}

const ms = time.Millisecond

// TestNginxLimitReq pins nginx's limit_req arithmetic: rate in
// thousandths of a request per second (10r/s is 10 a millisecond), excess
// in thousandths, a millisecond clock, the first request free, a refusal
// leaving the node as it was.
func TestNginxLimitReq(t *testing.T) {
	lat := 5 * ms
	cases := []struct {
		name  string
		s     *NginxLimitReq
		steps []step
	}{
		{"burst 0", &NginxLimitReq{Rate: 10, Latency: lat}, []step{
			{0, 200, lat},       // a new node: excess 0, accepted
			{50 * ms, 503, lat}, // 0 - 10*50 + 1000 = 500 > 0: limit_req_status's default
			{99 * ms, 503, lat}, // 10 left
			{100 * ms, 200, lat},
			{100 * ms, 503, lat},                      // same ms: nothing drained
			{199*ms + 999*time.Microsecond, 503, lat}, // nginx's clock is at 199 ms: 10 left
			{200*ms + 900*time.Microsecond, 200, lat}, // 200 ms
			{10 * time.Second, 200, lat},              // a long pause saves nothing
			{10 * time.Second, 503, lat},
		}},
		{"burst 2, nodelay, 429", &NginxLimitReq{Rate: 10, Burst: 2, NoDelay: true, Status: 429, Latency: lat}, []step{
			{0, 200, lat}, {0, 200, lat}, {0, 200, lat}, // excess 0, 1000, 2000: 1 + burst at once
			{0, 429, lat},        // 3000 > 2000
			{50 * ms, 429, lat},  // 2000 - 500 + 1000 = 2500: refused, and the node stays at 2000 since 0 ms
			{100 * ms, 200, lat}, // 2000 - 1000 + 1000 = 2000 (2500 from 50 ms had the refusal counted)
			{100 * ms, 429, lat},
			{300 * ms, 200, lat},                                                      // 2000 - 2000 + 1000 = 1000
			{time.Second, 200, lat}, {time.Second, 200, lat}, {time.Second, 200, lat}, // drained: 0, 1000, 2000
			{time.Second, 429, lat},
		}},
		{"burst 3, delay mode", &NginxLimitReq{Rate: 10, Burst: 3, Latency: lat}, []step{
			{0, 200, lat},                 // excess 0: no delay
			{0, 200, lat + 100*ms},        // 1000: delayed 1000*1000/10000 ms
			{0, 200, lat + 200*ms},        // 2000
			{0, 200, lat + 300*ms},        // 3000
			{0, 503, lat},                 // 4000 > 3000: refused at once
			{150 * ms, 200, lat + 250*ms}, // 3000 - 1500 + 1000 = 2500
			{time.Second, 200, lat},       // drained
		}},
		{"burst 3, delay=1", &NginxLimitReq{Rate: 10, Burst: 3, Delay: 1, Latency: lat}, []step{
			{0, 200, lat}, {0, 200, lat}, // excess 0 and 1000 <= delay*1000
			{0, 200, lat + 100*ms}, // (2000 - 1000)*1000/10000
			{0, 200, lat + 200*ms},
			{0, 503, lat},
		}},
		{"7r/m is 116 thousandths a second", &NginxLimitReq{Rate: 7, PerMinute: true, Latency: lat}, []step{
			{0, 200, lat},
			{8571 * ms, 503, lat}, // 7/60 r/s would have a request back by 8571.4 ms
			{8620 * ms, 503, lat}, // 116*8620/1000 = 999 drained: 1 left
			{8621 * ms, 200, lat}, // 116*8621/1000 = 1000
		}},
		{"7r/m, delay mode", &NginxLimitReq{Rate: 7, PerMinute: true, Burst: 1, Latency: lat}, []step{
			{0, 200, lat},
			{0, 200, lat + 8620*ms}, // 1000*1000/116 = 8620, truncated
			{0, 503, lat},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runSteps(t, c.s, c.steps) })
	}

	s := &NginxLimitReq{Rate: 10}
	if s.Handle(Epoch, "a").Status != 200 || s.Handle(Epoch, "a").Status != 503 || s.Handle(Epoch, "b").Status != 200 {
		t.Fatal("each host has its own node")
	}
}

// TestHAProxyReqRate pins HAProxy's freq_ctr over a 1 s period with
// "deny if sc_http_req_rate(0) gt 3": refused requests counted, the
// previous period weighted by what is left of the current one, the rate
// rounded down, a skipped period forgotten, periods starting on even
// milliseconds, the 32-bit clock wrapping.
func TestHAProxyReqRate(t *testing.T) {
	const e = 1994041344 // Epoch's now_ms: 1767225600000 mod 2^32, even
	if got := haproxyNow(Epoch); got != e {
		t.Fatalf("now_ms at Epoch: %d, want %d", got, e)
	}
	s := &HAProxyReqRate{Limit: 3, Period: time.Second, Latency: ms}
	tick := func(want uint32) {
		t.Helper()
		if got := s.ctrs["a"].currTick; got != e+want {
			t.Fatalf("curr_tick at Epoch + %d ms, want + %d", got-e, want)
		}
	}
	steps := []step{
		{0, 200, ms},               // a fresh entry: the period starts now, curr 1: rate 1
		{0, 200, ms}, {0, 200, ms}, // rate 2, 3: not greater than 3
		{0, 429, ms},         // curr 4: 4 > 3
		{999 * ms, 429, ms},  // curr 5: refused requests count
		{1000 * ms, 429, ms}, // rollover: prev 5, curr 1, remain 1000: (5000 + 1000)/1000 = 6
		{1800 * ms, 200, ms}, // curr 2, remain 200: (5*200 + 2*1000)/1000 = 3
		{1801 * ms, 200, ms}, // curr 3, remain 199: 3995/1000 rounds down to 3
		{1900 * ms, 429, ms}, // curr 4, remain 100: (500 + 4000)/1000 = 4
		{2700 * ms, 200, ms}, // rollover: prev 4, curr 1, remain 300: (1200 + 1000)/1000 = 2
		{2701 * ms, 200, ms}, // curr 2, remain 299: 3196/1000 = 3
		{2702 * ms, 429, ms}, // curr 3: 4192/1000 = 4
		{2703 * ms, 429, ms}, // curr 4
		{5001 * ms, 200, ms}, // [3000, 4000) was skipped: prev 0 (not 4), the period starts at 5000 (even), curr 1
	}
	runSteps(t, s, steps[:len(steps)-1])
	tick(2000)
	runSteps(t, s, steps[len(steps)-1:])
	tick(5000)
	runSteps(t, s, []step{
		{5002 * ms, 200, ms}, {5003 * ms, 200, ms}, // curr 2, 3
		{5999 * ms, 429, ms}, // curr 4, still the period of 5000
		{6000 * ms, 429, ms}, // rollover at 6000, not 6001: prev 4, curr 1, remain 1000: 5
	})
	tick(6000)
	runSteps(t, s, []step{
		{6750 * ms, 200, ms}, // curr 2, remain 250: (4*250 + 2000)/1000 = 3
	})

	// now_ms wraps at 2^32 ms, 2300925952 ms after Epoch: the counter
	// goes on across the wrap.
	wrap := time.Duration(1<<32-e) * ms
	s = &HAProxyReqRate{Limit: 1, Period: 10 * time.Second, Status: 403}
	runSteps(t, s, []step{
		{wrap - 2*time.Second, 200, 0},        // period from now_ms 2^32 - 2000
		{wrap + 7*time.Second, 403, 0},        // curr 2 across the wrap
		{wrap + 8*time.Second, 403, 0},        // rollover: prev 2, curr 1, remain 10000: 3
		{wrap + 8*time.Second + 5*ms, 403, 0}, // prev 2 * 9995 / 10000 + curr 2: 3
	})
}

// TestGCRAServer pins redis_rate's GCRA: 4 per second (T = 0.25 s),
// burst 2, on binary-exact times.
func TestGCRAServer(t *testing.T) {
	if got := gcraNow(Epoch); got != 283996800 {
		t.Fatalf("the script's now at Epoch: %v, want 283996800 s after 2017", got)
	}
	s := &GCRAServer{Rate: 4, Period: time.Second, Burst: 2, RetryAfter: true, Latency: ms}
	for i, c := range []struct {
		at   time.Duration
		want GCRAResult
	}{
		{0, GCRAResult{1, 1, -1, 250 * ms}},       // tat now + 0.25, allow_at now - 0.25
		{0, GCRAResult{1, 0, -1, 500 * ms}},       // diff 0: allowed, none left
		{0, GCRAResult{0, 0, 250 * ms, 500 * ms}}, // diff -0.25: refused, tat unchanged
		{125 * ms, GCRAResult{0, 0, 125 * ms, 375 * ms}},
		{250 * ms, GCRAResult{1, 0, -1, 500 * ms}},        // one emission interval later
		{2 * time.Second, GCRAResult{1, 1, -1, 250 * ms}}, // tat is behind now: the burst is back
	} {
		if got := s.Allow(Epoch.Add(c.at), "a"); got != c.want {
			t.Fatalf("request %d at %v: %+v, want %+v", i, c.at, got, c.want)
		}
	}
	// The HTTP answers: 429 with Retry-After rounded up to whole seconds.
	s = &GCRAServer{Rate: 4, Period: time.Second, Burst: 1, RetryAfter: true, Latency: ms}
	if r := s.Handle(Epoch, "a"); r.Status != 200 || r.Latency != ms {
		t.Fatalf("first: %+v", r)
	}
	if r := s.Handle(Epoch.Add(125*ms), "a"); r.Status != 429 || r.RetryAfter != time.Second {
		t.Fatalf("0.125 s early: %+v, want 429 with Retry-After 1 s", r)
	}
	if r := s.Handle(Epoch.Add(250*ms), "a"); r.Status != 200 {
		t.Fatalf("on time: %+v", r)
	}
	if r := (&GCRAServer{Rate: 4, Period: time.Second, Status: 503}).Handle(Epoch, "a"); r.Status != 503 || r.RetryAfter != 0 {
		t.Fatalf("without RetryAfter: %+v", r)
	}
	// Burst 0 refuses everything and stores nothing.
	s = &GCRAServer{Rate: 4, Period: time.Second}
	if got := s.Allow(Epoch, "a"); got != (GCRAResult{0, 0, 250 * ms, 0}) || len(s.tats) != 0 {
		t.Fatalf("burst 0: %+v, %d keys", got, len(s.tats))
	}
}

// TestStatedServer: the headers state the wrapped limiter's real state
// after each answer, and the library's parser reads the limit from them.
func TestStatedServer(t *testing.T) {
	type want struct {
		at     time.Duration
		status int
		h      map[string]string
	}
	unix := Epoch.Unix()
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	cases := []struct {
		name string
		l    Limiter
		want []want
	}{
		{"nginx, IETF", Limiter{Kind: KindNginx, Requests: 10, Period: time.Second, Burst: 2, NoDelay: true, Stated: StateIETF}, []want{
			// Excess 0 after the first: 2 more at once; drained of the next one's 1000 in 100 ms.
			{0, 200, map[string]string{"RateLimit-Policy": `"default";q=10;w=1`, "RateLimit": `"default";r=2;t=1`}},
			{0, 200, map[string]string{"RateLimit": `"default";r=1;t=1`}},
			{0, 200, map[string]string{"RateLimit": `"default";r=0;t=1`}},
			{0, 503, map[string]string{"RateLimit": `"default";r=0;t=1`}},
			{2500 * ms, 200, map[string]string{"RateLimit": `"default";r=2;t=1`}},
		}},
		{"nginx r/m, X", Limiter{Kind: KindNginx, Requests: 6, Period: time.Minute, Stated: StateX}, []want{
			// 6r/m: 100 thousandths a second, 10 s to drain 1000.
			{0, 200, map[string]string{"X-RateLimit-Limit": "6", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": itoa(unix + 10)}},
			{4 * time.Second, 503, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": itoa(unix + 10)}},
		}},
		{"haproxy, IETF", Limiter{Kind: KindHAProxy, Requests: 3, Period: 10 * time.Second, Stated: StateIETF}, []want{
			// Rate 1 after the first: 2 left; counted until the end of the next period.
			{0, 200, map[string]string{"RateLimit-Policy": `"default";q=3;w=10`, "RateLimit": `"default";r=2;t=20`}},
			{0, 200, nil}, {0, 200, nil},
			{1500 * ms, 429, map[string]string{"RateLimit": `"default";r=0;t=19`}},
		}},
		{"gcra, X", Limiter{Kind: KindGCRA, Requests: 4, Period: time.Second, Burst: 2, Stated: StateX, RetryAfterWait: true}, []want{
			{0, 200, map[string]string{"X-RateLimit-Limit": "4", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": itoa(unix + 1)}},
			{0, 200, map[string]string{"X-RateLimit-Remaining": "0"}},
			{0, 429, map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": ""}},
		}},
		{"fixed, IETF", Limiter{Kind: KindFixed, Requests: 2, Period: time.Minute, Stated: StateIETF, RetryAfter: 5 * time.Second}, []want{
			{30 * time.Second, 200, map[string]string{"RateLimit-Policy": `"default";q=2;w=60`, "RateLimit": `"default";r=1;t=30`}},
			{31 * time.Second, 200, map[string]string{"RateLimit": `"default";r=0;t=29`}},
			{32 * time.Second, 429, map[string]string{"RateLimit": `"default";r=0;t=28`}},
		}},
		{"bucket 0.1 req/s, IETF", Limiter{Kind: KindBucket, Requests: 1, Period: 10 * time.Second, Stated: StateIETF}, []want{
			{0, 200, map[string]string{"RateLimit-Policy": `"default";q=1;w=10`, "RateLimit": `"default";r=0;t=10`}},
		}},
		{"sliding, X", Limiter{Kind: KindSliding, Requests: 2, Period: 10 * time.Second, Stated: StateX}, []want{
			{0, 200, map[string]string{"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": itoa(unix + 10)}},
			{3 * time.Second, 200, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": itoa(unix + 13)}},
			{11 * time.Second, 200, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": itoa(unix + 21)}},
		}},
		{"httprate, IETF", Limiter{Kind: KindHTTPRate, Requests: 2, Period: time.Second, Stated: StateIETF}, []want{
			{0, 200, map[string]string{"RateLimit": `"default";r=1;t=1`, "X-RateLimit-Remaining": "1"}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.l.NewServer()
			for i, w := range c.want {
				now := Epoch.Add(w.at)
				r := s.Handle(now, "a")
				if r.Status != w.status {
					t.Fatalf("answer %d: status %d, want %d", i, r.Status, w.status)
				}
				for k, v := range w.h {
					if k == "Retry-After" {
						if r.RetryAfter == 0 {
							t.Fatalf("answer %d: no Retry-After", i)
						}
						continue
					}
					if got := r.Header.Get(k); got != v {
						t.Fatalf("answer %d: %s: %q, want %q (all: %v)", i, k, got, v, r.Header)
					}
				}
				if i == 0 && r.Status == 200 && c.l.Kind != KindHTTPRate {
					// The library reads the stated limit back.
					if rate := ratelimit.Parse(r.Header, now).Rate; rate <= 0 {
						t.Fatalf("ratelimit.Parse reads no rate from %v", r.Header)
					}
				}
			}
		})
	}
	// IETF: the policy's quota over its window is the limit.
	r := Limiter{Kind: KindNginx, Requests: 5, Period: time.Second, Stated: StateIETF}.NewServer().Handle(Epoch, "a")
	if w := ratelimit.Parse(r.Header, Epoch); w.Rate != 5 || w.Remaining != 0 {
		t.Fatalf("parsed %+v from %v, want rate 5, remaining 0", w, r.Header)
	}
}

// TestRetryAfterServer: a constant Retry-After on refusals only.
func TestRetryAfterServer(t *testing.T) {
	s := Limiter{Kind: KindNginx, Requests: 1, Period: time.Second, Status: 429, RetryAfter: 3 * time.Second}.NewServer()
	if r := s.Handle(Epoch, "a"); r.Status != 200 || r.RetryAfter != 0 {
		t.Fatalf("accepted: %+v", r)
	}
	if r := s.Handle(Epoch, "a"); r.Status != 429 || r.RetryAfter != 3*time.Second {
		t.Fatalf("refused: %+v, want 429 with Retry-After 3 s", r)
	}
	// It replaces the limiter's own.
	s = &RetryAfterServer{Server: &FixedWindowServer{Quota: 1, Window: time.Hour, RetryAfter: true}, RetryAfter: 2 * time.Second}
	s.Handle(Epoch, "a")
	if r := s.Handle(Epoch, "a"); r.RetryAfter != 2*time.Second {
		t.Fatalf("refused: %+v, want Retry-After 2 s", r)
	}
}

// TestLimiter: names, validation, and the models each kind builds.
func TestLimiter(t *testing.T) {
	for _, c := range []struct {
		l    Limiter
		name string
	}{
		{Limiter{Kind: KindNginx, Requests: 5, Period: time.Second, Burst: 10, NoDelay: true, Status: 429, RetryAfter: 2 * time.Second, Latency: 50 * ms},
			"nginx-5rps-b10-nodelay-429-ra2-50ms"},
		{Limiter{Kind: KindNginx, Requests: 30, Period: time.Minute, Latency: ms}, "nginx-30rpm-b0-delay-503-1ms"},
		{Limiter{Kind: KindNginx, Requests: 10, Period: time.Second, Burst: 8, Delay: 3, Latency: ms}, "nginx-10rps-b8-delay3-503-1ms"},
		{Limiter{Kind: KindHAProxy, Requests: 50, Period: 10 * time.Second, Stated: StateIETF, Latency: 2 * time.Second}, "haproxy-50per10s-429-ietf-2s"},
		{Limiter{Kind: KindGCRA, Requests: 5, Period: time.Second, Burst: 10, RetryAfterWait: true, Stated: StateX, Latency: ms}, "gcra-5per1s-b10-429-rawait-xrl-1ms"},
		{Limiter{Kind: KindSliding, Requests: 60, Period: time.Minute, CountRefused: true, Latency: 50 * ms}, "sliding-60per1m-429-counting-50ms"},
		{Limiter{Kind: KindBucket, Requests: 1, Period: 10 * time.Second}, "bucket-1per10s-b0-429-0s"},
		{Limiter{Kind: KindFixed, Requests: 100, Period: 90 * time.Minute, Status: 503}, "fixed-100per1h30m-503-0s"},
	} {
		if err := c.l.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := c.l.String(); got != c.name {
			t.Errorf("String: %q, want %q", got, c.name)
		}
	}

	for _, c := range []struct {
		l    Limiter
		want string
	}{
		{Limiter{}, "kind"},
		{Limiter{Kind: KindNginx, Period: time.Second}, "Requests"},
		{Limiter{Kind: KindNginx, Requests: 1, Period: 10 * time.Second}, "per second or per minute"},
		{Limiter{Kind: KindHAProxy, Requests: 1, Period: 1500 * time.Microsecond}, "whole milliseconds"},
		{Limiter{Kind: KindGCRA, Requests: 1, Period: time.Second}, "refuses every request"},
		{Limiter{Kind: KindFixed, Requests: 1, Period: time.Second, Burst: 1}, "burst"},
		{Limiter{Kind: KindGCRA, Requests: 1, Period: time.Second, Burst: 1, NoDelay: true}, "nginx's"},
		{Limiter{Kind: KindNginx, Requests: 1, Period: time.Second, NoDelay: true, Delay: 1}, "not with NoDelay"},
		{Limiter{Kind: KindNginx, Requests: 1, Period: time.Second, Status: 200}, "Status"},
		{Limiter{Kind: KindNginx, Requests: 1, Period: time.Second, RetryAfter: 1500 * ms}, "whole seconds"},
		{Limiter{Kind: KindNginx, Requests: 1, Period: time.Second, RetryAfterWait: true}, "knows no wait"},
		{Limiter{Kind: KindFixed, Requests: 1, Period: time.Second, RetryAfter: time.Second, RetryAfterWait: true}, "one Retry-After"},
		{Limiter{Kind: KindHTTPRate, Requests: 1, Period: time.Second, RetryAfterWait: true}, "its own Retry-After"},
		{Limiter{Kind: KindHTTPRate, Requests: 1, Period: time.Second, Status: 503}, "answers 429"},
		{Limiter{Kind: KindFixed, Requests: 1, Period: time.Second, CountRefused: true}, "CountRefused"},
		{Limiter{Kind: KindFixed, Requests: 1, Period: time.Second, Latency: -1}, "Latency"},
		{Limiter{Kind: KindHTTPRate, Requests: 1, Period: time.Second, Stated: StateX}, "states its own"},
		{Limiter{Kind: KindFixed, Requests: 1, Period: time.Second, Stated: 7}, "Stated"},
	} {
		err := c.l.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.l, err, c.want)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("NewServer of an invalid Limiter did not panic")
			}
		}()
		Limiter{}.NewServer()
	}()

	// Each kind builds its model, with its parameters.
	for _, c := range []struct {
		l    Limiter
		want Server
	}{
		{Limiter{Kind: KindNginx, Requests: 7, Period: time.Minute, Burst: 2, Delay: 1, Status: 429, Latency: ms},
			&NginxLimitReq{Rate: 7, PerMinute: true, Burst: 2, Delay: 1, Status: 429, Latency: ms}},
		{Limiter{Kind: KindHAProxy, Requests: 50, Period: 10 * time.Second, Status: 403},
			&HAProxyReqRate{Limit: 50, Period: 10 * time.Second, Status: 403}},
		{Limiter{Kind: KindGCRA, Requests: 5, Period: time.Minute, Burst: 3, RetryAfterWait: true},
			&GCRAServer{Rate: 5, Period: time.Minute, Burst: 3, RetryAfter: true}},
		{Limiter{Kind: KindBucket, Requests: 1, Period: 4 * time.Second, Burst: 10, Status: 503},
			&BurstServer{Rate: 0.25, Burst: 10, Status: 503}},
		{Limiter{Kind: KindFixed, Requests: 60, Period: time.Minute, RetryAfterWait: true},
			&FixedWindowServer{Quota: 60, Window: time.Minute, RetryAfter: true}},
		{Limiter{Kind: KindSliding, Requests: 60, Period: time.Minute, CountRefused: true},
			&SlidingWindowServer{Quota: 60, Window: time.Minute, CountRefused: true}},
		{Limiter{Kind: KindHTTPRate, Requests: 10, Period: time.Second, Latency: ms},
			&CounterServer{Quota: 10, Window: time.Second, Latency: ms}},
	} {
		got := c.l.NewServer()
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v: %#v, want %#v", c.l, got, c.want)
		}
		if rate := c.l.Rate(); rate <= 0 {
			t.Errorf("%v: rate %v", c.l, rate)
		}
	}
	s := Limiter{Kind: KindNginx, Requests: 5, Period: time.Second, Stated: StateX, RetryAfter: time.Second}.NewServer()
	ra, ok := s.(*RetryAfterServer)
	if !ok {
		t.Fatalf("%T, want the RetryAfterServer outside", s)
	}
	if st, ok := ra.Server.(*StatedServer); !ok || st.Style != StateX {
		t.Fatalf("%#v, want a StatedServer inside", ra.Server)
	}
}

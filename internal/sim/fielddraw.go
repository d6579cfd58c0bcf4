package sim

import (
	"math"
	"math/rand/v2"
	"net/http"
	"time"
)

// The field draw: the limiter shapes the field suite (fieldtest's
// TestFieldRandom) crawls on real nginx and HAProxy, drawn here so that
// the simulator can crawl many more of the same space in virtual time
// (TestFieldDraws) than the suite can in real time.
const (
	// The space drawn from: the grid's for nginx and HAProxy, at limits a
	// crawl of a few minutes can measure.
	FieldMinLimit  = 0.5 // req/s
	FieldMaxLimit  = 20  // req/s
	FieldMaxBurst  = 10  // nginx
	FieldMaxRetry  = 5   // s of Retry-After, when there is one
	FieldMaxPeriod = 10  // s of HAProxy's http_req_rate

	fieldDrawStream = 0x6669656c64
)

// The field suite's floors, which fail a crawl of a field draw, on the
// real servers (fieldtest) as in virtual time (TestFieldDraws): under
// FieldFloorShare of the limit over the last third of the crawl, or more
// than FieldFloorSignals refusals a minute after the first.
const (
	FieldFloorShare   = 0.6
	FieldFloorSignals = 6.0
)

// FieldKinds are the limiters the field draw takes, in turn.
var FieldKinds = []LimiterKind{KindNginx, KindHAProxy}

// FieldShapes draws n shapes of real limiters from seed, as many of
// nginx's limit_req as of HAProxy's http_req_rate (one more of either
// when n is odd), by Latin hypercube within each kind: each parameter's
// range is cut into as many strata as the kind has shapes, each stratum
// used once. The parameters: limits of FieldMinLimit-FieldMaxLimit req/s
// (on a log scale), refused with 429 or 503, without Retry-After or with
// one of 1-FieldMaxRetry s, robots.txt on or off; nginx per second (per
// minute below 2 req/s) with a burst of 0-FieldMaxBurst, in nodelay or
// delay mode; HAProxy over a period of 1-FieldMaxPeriod s. The servers
// answer at once (no Latency). The same seed gives the same shapes.
func FieldShapes(seed uint64, n int) []Shape {
	rng := rand.New(rand.NewPCG(seed, fieldDrawStream))
	strata := func(m int) []float64 { // m points of [0, 1), one per stratum, shuffled
		u := make([]float64, m)
		for i, p := range rng.Perm(m) {
			u[i] = (float64(p) + rng.Float64()) / float64(m)
		}
		return u
	}
	first := rng.IntN(len(FieldKinds))
	shapes := make([]Shape, 0, n)
	for k := range FieldKinds {
		kind := FieldKinds[(first+k)%len(FieldKinds)]
		m := (n + len(FieldKinds) - 1 - k) / len(FieldKinds)
		limit, burst, mode, period, status, retry, robots := strata(m), strata(m), strata(m), strata(m), strata(m), strata(m), strata(m)
		for i := range m {
			rate := FieldMinLimit * math.Pow(FieldMaxLimit/FieldMinLimit, limit[i])
			l := Limiter{Kind: kind, Status: http.StatusServiceUnavailable}
			switch kind {
			case KindNginx:
				l.Period = time.Second
				if rate < 2 {
					l.Period = time.Minute
				}
				l.Burst = min(FieldMaxBurst, int(burst[i]*(FieldMaxBurst+1)))
				l.NoDelay = mode[i] >= 0.5
			case KindHAProxy:
				l.Period = time.Duration(1+min(FieldMaxPeriod-1, int(period[i]*FieldMaxPeriod))) * time.Second
			}
			l.Requests = max(1, int(math.Round(rate*l.Period.Seconds())))
			if status[i] >= 0.5 {
				l.Status = http.StatusTooManyRequests
			}
			if retry[i] >= 0.5 {
				l.RetryAfter = time.Duration(1+min(FieldMaxRetry-1, int((retry[i]-0.5)*2*FieldMaxRetry))) * time.Second
			}
			shapes = append(shapes, Shape{Limiter: l, Robots: robots[i] < 0.5})
		}
	}
	return shapes
}

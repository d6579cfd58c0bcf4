package redisstore_test

import (
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/sim"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/store"
)

// TestSimFleetOnRedis runs the simulator's fleet scenario (4 processes x 4
// workers, one site, agreed rate 1 req/s) with one manager per process
// sharing a redisstore on a real redis-server, next to per-process
// throttles and the store.Memory: the per-process ones send ~4x the rate,
// both stores hold it. The store takes the simulator's virtual clock.
func TestSimFleetOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	sc := sim.FleetScenario(4, 4*time.Minute)
	redisPolicy := sim.StorePolicy("throttle/redis", "a manager per process sharing a redisstore",
		func(clock throttle.Clock) store.Store {
			s, _ := newStore(t, srv, redisstore.Options{Clock: clock})
			return s
		})
	sc.Policies = []sim.PolicySpec{sc.Policies[0], sc.Policies[1], redisPolicy}
	res := sim.RunAll([]sim.Scenario{sc}, 1, 1)[0].Results
	got := map[string]float64{}
	for _, r := range res {
		m := r.Metrics
		got[m.Policy] = *m.OKPerCapacity
		t.Logf("%-18s %5.2f req/s, %.2fx the agreed rate, %d requests", m.Policy, m.OKRate, *m.OKPerCapacity, m.Requests)
	}
	per, mem, red := got["throttle"], got["throttle/memstore"], got["throttle/redis"]
	if per < 3 || mem > 1.05 || red > 1.05 || red < 0.8 {
		t.Errorf("per-process %.2fx the agreed rate, store.Memory %.2fx, redisstore %.2fx", per, mem, red)
	}
}

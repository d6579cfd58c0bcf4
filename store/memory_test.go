package store_test

import (
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/storetest"
)

func TestMemoryConformance(t *testing.T) {
	var mem *store.Memory
	plant := func(t *testing.T, key string, f storetest.Foreign) {
		mem.Plant(key, f.Lease, f.LastStart, f.Gate, f.QuotaStart, f.QuotaUsed, f.Delay, f.Concurrency,
			f.Version, f.Data, f.Turn, f.Garbage)
	}
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		mem = store.NewMemory(clock)
		return mem
	}, storetest.WithForeign(plant, 30*time.Second))
}

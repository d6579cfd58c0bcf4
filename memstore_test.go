package throttle_test

import (
	"testing"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) throttle.Store {
		return throttle.NewMemoryStore(clock)
	})
}

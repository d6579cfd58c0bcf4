package store_test

import (
	"testing"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		return store.NewMemory(clock)
	})
}

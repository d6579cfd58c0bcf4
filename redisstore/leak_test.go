package redisstore_test

import (
	"testing"

	"github.com/crawlerkit/throttle/internal/leakcheck"
)

// TestMain fails the run if goroutines of this module (the store's renewal
// and dispatch goroutines, redistest's readers, the tests' own) are still
// alive after every test: stores must be closed and servers stopped.
func TestMain(m *testing.M) { leakcheck.Main(m, "crawlerkit/throttle") }

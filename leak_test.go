package throttle

import (
	"testing"

	"github.com/crawlerkit/throttle/internal/leakcheck"
)

// TestMain fails the run if goroutines started by this package's code are
// still alive after every test.
func TestMain(m *testing.M) { leakcheck.Main(m, "crawlerkit/throttle.") }

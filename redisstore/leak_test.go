package redisstore_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if goroutines of this module (the store's renewal
// and dispatch goroutines, redistest's readers, the tests' own) are still
// alive after every test: stores must be closed and servers stopped.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to d for goroutines running or started by code
// of this module (other than this one) to end, and returns their stacks if
// any remain.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "crawlerkit/throttle") && !strings.Contains(g, "redisstore_test.leakedGoroutines") &&
				!strings.Contains(g, "redisstore_test.TestMain") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond) // polls the stacks: there is no event to wait on
	}
}

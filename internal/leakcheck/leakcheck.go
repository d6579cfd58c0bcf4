// Package leakcheck is the TestMain of the project's modules: it runs the
// tests, then fails the run if goroutines of the project's code are still
// alive (stores not closed, servers not stopped, waiters left behind).
// testing/synctest bubbles check their own; this catches the tests on real
// time and real sockets.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs m and exits, failing if a goroutine whose stack contains
// match (a package path such as "crawlerkit/throttle.") outlives the tests
// by more than five seconds.
func Main(m *testing.M, match string) {
	code := m.Run()
	if code == 0 {
		if leaked := leaked(match, 5*time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leaked waits up to d for the goroutines matching match (other than the
// caller's) to end, and returns their stacks if any remain.
func leaked(match string, d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var found []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, match) && !strings.Contains(g, "leakcheck.Main") {
				found = append(found, g)
			}
		}
		if len(found) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(found, "\n\n")
		}
		// Goroutines that are ending get the CPU; there is no event to
		// wait on for "every other goroutine has returned".
		runtime.Gosched()
	}
}

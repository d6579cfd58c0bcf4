package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/crawlerkit/throttle/internal/leakcheck"
)

// TestMain fails the run if goroutines of this module (the store's renewal
// and dispatch goroutines, redistest's readers, the tests' own) are still
// alive after every test: stores must be closed and servers stopped.
//
// It also drops go-redis's log of failed dials. The failover and fault
// tests kill servers on purpose, and the client then logs each dial it
// retries to stderr: hundreds of lines that go test files under whichever
// test is running, where they once hid the assertion that failed. What
// the tests learn from those failures they read from the store's errors.
func TestMain(m *testing.M) {
	redis.SetLogger(quietDials{})
	leakcheck.Main(m, "crawlerkit/throttle")
}

// quietDials is go-redis's logger without its lines about failed dials.
type quietDials struct{}

func (quietDials) Printf(_ context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "failed to dial") {
		return
	}
	fmt.Fprintln(os.Stderr, "redis:", msg)
}

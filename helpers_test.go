package throttle

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// plainConfig is DefaultConfig without jitter or backoff noise, for tests
// that check exact times.
func plainConfig() Config {
	cfg := DefaultConfig()
	cfg.Default.Jitter = Jitter{}
	return cfg
}

// newManager makes a manager for tests on made-up hosts: robots.txt off,
// so no test reaches for the network (robots tests make their own).
func newManager(t testing.TB, cfg Config) *ThrottlingManager {
	t.Helper()
	cfg.Robots.Enabled = false
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

func get(t testing.TB, rawURL string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	return req
}

// ok200 is a response a Release can report.
var ok200 = &http.Response{StatusCode: 200, Header: http.Header{}}

func (m *ThrottlingManager) mustScope(t testing.TB, key string) *scope {
	t.Helper()
	s, err := m.lookup(key, m.clock.Now())
	require.NoError(t, err)
	return s
}

// stepClock is a Clock that moves only when told and makes no timers, for
// tests on one goroutine in which nothing waits.
type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time                 { return c.t }
func (c *stepClock) NewTimer(d time.Duration) Timer { panic("stepClock: nothing should wait") }

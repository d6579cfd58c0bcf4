package fieldtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseArrival: the lines nginx and HAProxy send, after their syslog
// header; health checks are skipped, anything else is an error.
func TestParseArrival(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want Arrival
		keep bool
		err  string
	}{
		{"<190>Nov 27 09:16:01 nginx: throttle-arrival nginx 1795771044.393 0.250 7 12.345 12.095 200 /",
			Arrival{At: time.UnixMilli(1795771044143), Status: 200, Held: 250 * time.Millisecond,
				Conn: 7, ConnArrival: 12095 * time.Millisecond, ConnAnswer: 12345 * time.Millisecond}, true, ""},
		{"throttle-arrival nginx 1795771044.393 0.000 7 12.345 12.345 204 /healthz", Arrival{}, false, ""},
		{"throttle-arrival haproxy 1795771044393 429\n", Arrival{At: time.UnixMilli(1795771044393), Status: 429}, true, ""},
		{"throttle-arrival haproxy - 200\n", Arrival{}, false, ""},
		{"throttle-arrival nginx 1795771044.39 0.000 7 1.000 1.000 200 /", Arrival{}, false, "3 decimals"},
		{"throttle-arrival nginx 1795771044.393 0.000 x 1.000 1.000 200 /", Arrival{}, false, "invalid syntax"},
		{"throttle-arrival haproxy 17957710443x 200", Arrival{}, false, "invalid syntax"},
		{"throttle-arrival haproxy 1 2 3", Arrival{}, false, "want nginx"},
		{"hello", Arrival{}, false, "no throttle-arrival"},
	} {
		a, keep, err := parseArrival(c.msg)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.msg)
			continue
		}
		require.NoError(t, err, c.msg)
		assert.Equal(t, c.keep, keep, c.msg)
		if keep {
			assert.Equal(t, c.want, a, c.msg)
		}
	}
}

// FuzzParseArrival: any datagram gives an arrival, a skip or an error,
// never a panic.
func FuzzParseArrival(f *testing.F) {
	f.Add("throttle-arrival nginx 1795771044.393 0.250 7 12.345 12.095 200 /")
	f.Add("throttle-arrival haproxy 1795771044393 429")
	f.Add("throttle-arrival haproxy - 200")
	f.Fuzz(func(t *testing.T, msg string) {
		if _, keep, err := parseArrival(msg); err != nil && keep {
			t.Fatalf("%q: kept with error %v", msg, err)
		}
	})
}

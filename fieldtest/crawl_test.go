package fieldtest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummarize checks the figures on a made-up crawl of 120 s against a
// limit of 5 req/s: 1 2xx/s for 30 s, then 5/s, with a 429 every 30 s
// from 60 s on.
func TestSummarize(t *testing.T) {
	var samples []Sample
	for ms := 0; ms < 120_000; ms += 10 {
		at := time.Duration(ms) * time.Millisecond
		switch {
		case ms < 30_000 && ms%1000 == 0, ms >= 30_000 && ms%200 == 0:
			samples = append(samples, Sample{At: at, Status: 200})
		}
		if ms >= 60_000 && ms%30_000 == 10 {
			samples = append(samples, Sample{At: at, Status: 429})
		}
	}
	samples = append(samples,
		Sample{At: 70 * time.Second, Status: 503},
		Sample{At: 80 * time.Second, Status: 404},
		Sample{At: 90 * time.Second, Err: errors.New("reset")},
		Sample{At: 120 * time.Second, Err: context.Canceled, Shutdown: true},
	)
	s := SummarizeUntil(samples, 5, 120*time.Second)

	assert.Equal(t, 120*time.Second, s.End)
	require.Len(t, s.Buckets, 12)
	assert.InDelta(t, 1, s.Buckets[0], 1e-9)
	assert.InDelta(t, 5, s.Buckets[11], 1e-9)
	// 40 2xx in (t-10 s, t] first at t = 37.4 s: 2 at 28 and 29 s, 38
	// from 30 s to 37.4 s.
	require.True(t, s.Reached)
	assert.InDelta(t, 37.4, s.Reach.Seconds(), 1e-9)
	assert.Equal(t, 60*time.Second, s.SteadyFrom)
	// 90 % of 5/s over 60 s is 270 2xx. From t = 60 s on, the window
	// (t-60 s, t] holds the 1/s answers after t-60 s (29 - floor(t-60)
	// of them) and the 5/s ones from 30 s: 7 + 263 = 270 at t = 82.4 s;
	// 269 at 82.2 s.
	require.True(t, s.ColdReached)
	assert.InDelta(t, 82.4, s.Cold.Seconds(), 1e-9)
	// (80 s, 120 s]: 5/s but for the 2xx at 80 s, none at 120 s.
	assert.InDelta(t, 199.0/40, s.LastThirdRate, 1e-9)
	assert.InDelta(t, 199.0/40/5, s.LastThirdFraction, 1e-9)
	assert.InDelta(t, 5, s.SteadyRate, 0.01)
	assert.InDelta(t, 1, s.SteadyFraction, 0.01)
	// 429 at 60.01 s and 90.01 s, 503 at 70 s: 3 in a minute.
	assert.InDelta(t, 3, s.SteadySignalsPerMin, 1e-9)
	assert.Equal(t, 3, s.Signals)
	assert.Equal(t, 1, s.Other)
	assert.Equal(t, 1, s.Errors)
	assert.Equal(t, 1, s.ShutdownErrors)
	assert.Equal(t, 30+450+3+1, s.Requests)
	assert.Contains(t, s.String(), "2xx/s per 10s: 1.0 1.0 1.0 5.0")

	short := Summarize(samples[:10], 5)
	assert.Equal(t, short.End/2, short.SteadyFrom, "a short crawl's steady part is its second half")
	// Its cold window too: 90 % of 5/s over 4.5 s is 20.25 2xx, and
	// (t-4.5 s, t] holds 5 at most.
	assert.Equal(t, 9*time.Second, short.End)
	assert.False(t, short.ColdReached)
	// The first 60 s: a cold window of 30 s, 135 2xx. (t-30 s, t] holds
	// 3 of the 1/s answers and 132 of the 5/s ones at t = 56.2 s; 134 at
	// 56 s.
	var first []Sample
	for _, x := range samples {
		if x.At <= 60*time.Second {
			first = append(first, x)
		}
	}
	half := SummarizeUntil(first, 5, 60*time.Second)
	require.True(t, half.ColdReached)
	assert.InDelta(t, 56.2, half.Cold.Seconds(), 1e-9)
	assert.False(t, Summarize(nil, 5).Reached)
}

// TestCrawl runs a short crawl against a local server without a throttle:
// every request gets a Sample, in order, and the ones cut by the end are
// marked Shutdown.
func TestCrawl(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write([]byte(strings.Repeat("x", 100)))
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	samples := Crawl(t.Context(), &http.Client{Transport: tr}, srv.URL, 4, 200*time.Millisecond)
	s := Summarize(samples, 1000)
	assert.Positive(t, s.OK)
	assert.Positive(t, s.Signals)
	assert.Zero(t, s.Errors, "%v", s.FirstErrors)
	assert.LessOrEqual(t, s.ShutdownErrors, 4)
	// A cancelled request may or may not have reached the server.
	assert.GreaterOrEqual(t, int(n.Load()), s.Requests)
	assert.LessOrEqual(t, int(n.Load()), s.Requests+s.ShutdownErrors)
	for i := 1; i < len(samples); i++ {
		assert.LessOrEqual(t, samples[i-1].At, samples[i].At)
	}
}

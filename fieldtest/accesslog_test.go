package fieldtest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLogLine(t *testing.T) {
	e, err := ParseLogLine("1767225600123 429 /")
	require.NoError(t, err)
	assert.Equal(t, LogEntry{At: time.UnixMilli(1767225600123), Status: 429, URI: "/"}, e)
	assert.False(t, e.Health())

	e, err = ParseLogLine("1767225600123 -1 /healthz")
	require.NoError(t, err)
	assert.Equal(t, -1, e.Status)
	assert.True(t, e.Health())

	for _, bad := range []string{
		"",
		"1767225600123",
		"1767225600123 200",
		"1767225600123 200 ",
		"1767225600.123 200 /", // nginx's $msec, not turned into ms
		"-5 200 /",
		"1767225600123 2000 /",
		"1767225600123 99 /",
		"1767225600123 OK /",
	} {
		_, err := ParseLogLine(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestReadAccessLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	require.NoError(t, os.WriteFile(path, []byte("1000 200 /\n2000 503 /a b\n"), 0o644))
	entries, err := ReadAccessLog(path)
	require.NoError(t, err)
	assert.Equal(t, []LogEntry{
		{At: time.UnixMilli(1000), Status: 200, URI: "/"},
		{At: time.UnixMilli(2000), Status: 503, URI: "/a b"},
	}, entries)

	require.NoError(t, os.WriteFile(path, []byte("1000 200 /\nbad\n"), 0o644))
	_, err = ReadAccessLog(path)
	assert.ErrorContains(t, err, "access.log:2:")

	require.NoError(t, os.WriteFile(path, []byte("1000 200 /"+strings.Repeat("x", maxLogLine)+"\n"), 0o644))
	_, err = ReadAccessLog(path)
	assert.Error(t, err, "a line over maxLogLine")
}

// FuzzParseLogLine checks that ParseLogLine never panics, and that what it
// accepts prints back to a line that parses the same.
func FuzzParseLogLine(f *testing.F) {
	for _, s := range []string{"1767225600123 429 /", "0 -1 /healthz", "1 200 /a b", "x 200 /", "1  /"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, err := ParseLogLine(line)
		if err != nil {
			return
		}
		again, err := ParseLogLine(fmt.Sprintf("%d %d %s", e.At.UnixMilli(), e.Status, e.URI))
		require.NoError(t, err)
		assert.Equal(t, e, again)
	})
}

// TestAccessLog sends a quick burst to a server of each kind, started with
// an access log, and checks that the log has every answer the client got,
// in order, with the health checks apart and times between the request's
// start and its answer's end.
func TestAccessLog(t *testing.T) {
	for _, fc := range []fieldCase{fieldCases[0], fieldCases[2], fieldCases[3], fieldCases[4]} { // nginx (Retry-After: its error_page), HAProxy, httprate
		t.Run(fc.name, func(t *testing.T) {
			SkipUnlessEnabled(t)
			t.Parallel()
			path := filepath.Join(t.TempDir(), "access.log")
			url := fc.start(t, path)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			type answer struct {
				status     int
				start, end time.Time
			}
			var answers []answer
			refused := 0
			for len(answers) < 200 && refused < 3 {
				start := time.Now()
				resp, err := client.Get(url)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answers = append(answers, answer{resp.StatusCode, start, time.Now()})
				if isSignal(resp.StatusCode) {
					refused++
				}
			}
			require.Equal(t, 3, refused, "refusals in %d requests", len(answers))

			var entries []LogEntry
			require.Eventually(t, func() bool {
				all, err := ReadAccessLog(path)
				require.NoError(t, err)
				entries = entries[:0]
				for _, e := range all {
					if !e.Health() {
						entries = append(entries, e)
					}
				}
				return len(entries) >= len(answers)
			}, 5*time.Second, 20*time.Millisecond, "the log's lines")
			require.Len(t, entries, len(answers))
			for i, a := range answers {
				e := entries[i]
				assert.Equal(t, a.status, e.Status, "answer %d", i)
				assert.Equal(t, pagePath, e.URI, "answer %d", i)
				// The servers take the time to the ms, from a clock
				// they read once per event loop.
				assert.WithinRange(t, e.At, a.start.Add(-10*time.Millisecond), a.end.Add(10*time.Millisecond), "answer %d", i)
			}
		})
	}
}

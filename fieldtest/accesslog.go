package fieldtest

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The access log: every server that [StartNginx], [StartHAProxy] and
// [StartHTTPRate] start writes, when its options name an AccessLog file,
// one line per answer in the same format,
//
//	<Unix time in ms when it answered> <status> <request URI>
//
// as "1767225600123 429 /", so that one reader, [ReadAccessLog], counts
// the answers of every server the same way whatever client sent the
// requests. Health checks are logged too, with the path "/healthz"
// ([LogEntry.Health]).

// nginxAccessLog returns the http-level lines that make nginx write the
// access log to path: $msec ("1767225600.123") without its dot is the time
// in ms.
func nginxAccessLog(path string) string {
	return fmt.Sprintf(`  map $msec $field_ms { "~^(?<s>[0-9]+)\.(?<ms>[0-9]+)$" $s$ms; }
  log_format field '$field_ms $status $request_uri';
  access_log %s field;
`, path)
}

// haproxyLogFormat is HAProxy's log-format of the access log. The date
// fetch is evaluated when the log line is written, at the end of the
// transaction.
const haproxyLogFormat = "%[date(0,ms)] %ST %HU"

// maxLogLine bounds the length of an access-log line that ReadAccessLog
// reads; a longer line is an error.
const maxLogLine = 64 << 10

// LogEntry is one line of an access log.
type LogEntry struct {
	// At is when the server answered, to the millisecond.
	At time.Time
	// Status is the answer's status code, or -1 when the server logged
	// the request without an answer (HAProxy does, for a client that went
	// away first).
	Status int
	// URI is the request's URI as the request line had it ("/").
	URI string
}

// Health reports whether the entry is a health check of the server, which
// every server answers without rate limiting.
func (e LogEntry) Health() bool { return e.URI == healthPath }

// ParseLogLine parses one line of an access log, without its newline.
func ParseLogLine(line string) (LogEntry, error) {
	ms, rest, ok1 := strings.Cut(line, " ")
	status, uri, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || uri == "" {
		return LogEntry{}, fmt.Errorf("fieldtest: access log line %q: want \"<ms> <status> <uri>\"", line)
	}
	t, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || t < 0 {
		return LogEntry{}, fmt.Errorf("fieldtest: access log line %q: bad time %q", line, ms)
	}
	code, err := strconv.Atoi(status)
	if err != nil || (code != -1 && (code < 100 || code > 999)) {
		return LogEntry{}, fmt.Errorf("fieldtest: access log line %q: bad status %q", line, status)
	}
	return LogEntry{At: time.UnixMilli(t), Status: code, URI: uri}, nil
}

// ReadAccessLog reads the access log at path, in the order of its lines.
// A line that does not parse is an error naming its number.
func ReadAccessLog(path string) ([]LogEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var entries []LogEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxLogLine)
	for n := 1; sc.Scan(); n++ {
		e, err := ParseLogLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// logWriter writes the access log of an in-process server, one write per
// line so that the file is complete whenever a handler has returned. It
// is safe for concurrent use.
type logWriter struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

func openLogWriter(path string) (*logWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &logWriter{f: f}, nil
}

// wrap returns h logging every answer after h has written it. A line that
// cannot be written is lost; the answer is not.
func (lw *logWriter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		line := fmt.Sprintf("%d %d %s\n", time.Now().UnixMilli(), sw.status, r.RequestURI)
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if !lw.closed {
			_, _ = lw.f.WriteString(line)
		}
	})
}

// Close closes the file; the lines of later answers are dropped.
func (lw *logWriter) Close() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return errors.New("fieldtest: access log closed twice")
	}
	lw.closed = true
	return lw.f.Close()
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

package fieldtest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// arrivalMark starts the line a server sends to an [ArrivalLog] for each
// request.
const arrivalMark = "throttle-arrival"

// maxBadLines bounds the malformed lines an ArrivalLog keeps to report.
const maxBadLines = 10

// Arrival is one request to a server's rate-limited page, as the server
// logged it.
type Arrival struct {
	// At is when the server took the request, by its own clock, to the
	// millisecond: nginx's $msec minus $request_time, HAProxy's date
	// when the request was tracked.
	At time.Time
	// Status is the status of the answer.
	Status int
	// Held is how long nginx held the request before it answered
	// ($request_time: a delay of limit_req's delay mode, and the
	// serving); 0 for HAProxy.
	Held time.Duration
	// Conn is nginx's serial number of the request's connection
	// ($connection); ConnArrival and ConnAnswer are the times from the
	// connection's accept to the request's arrival and to its answer
	// ($connection_time then), by nginx's monotonic clock, the one
	// limit_req reads. All are 0 for HAProxy.
	Conn                    uint64
	ConnArrival, ConnAnswer time.Duration
}

// ArrivalLog is a UDP syslog listener on 127.0.0.1 that collects the
// lines nginx and HAProxy send it when started with its Addr as
// NginxOptions.ArrivalLog or HAProxyOptions.ArrivalLog: one line a
// request to the rate-limited page. Give each server its own. It is
// safe for concurrent use, and closed when the test ends.
type ArrivalLog struct {
	conn *net.UDPConn
	done chan struct{} // closed when the reader has returned

	mu       sync.Mutex
	arrivals []Arrival
	bad      []string // malformed lines, at most maxBadLines
	nbad     int
}

// ListenArrivals starts an ArrivalLog for tb.
func ListenArrivals(tb testing.TB) *ArrivalLog {
	tb.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(localhost)})
	if err != nil {
		tb.Fatalf("fieldtest: arrival log: %v", err)
	}
	// A burst of lines must not overflow the socket's buffer while the
	// reader is descheduled.
	_ = conn.SetReadBuffer(4 << 20)
	l := &ArrivalLog{conn: conn, done: make(chan struct{})}
	go l.read()
	tb.Cleanup(func() {
		conn.Close()
		<-l.done
	})
	return l
}

// Addr returns the listener's address, host:port.
func (l *ArrivalLog) Addr() string { return l.conn.LocalAddr().String() }

func (l *ArrivalLog) read() {
	defer close(l.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := l.conn.Read(buf)
		if err != nil {
			return
		}
		l.add(string(buf[:n]))
	}
}

// add records the line of one datagram.
func (l *ArrivalLog) add(msg string) {
	a, keep, err := parseArrival(msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		if l.nbad++; len(l.bad) < maxBadLines {
			l.bad = append(l.bad, fmt.Sprintf("%q: %v", msg, err))
		}
	case keep:
		l.arrivals = append(l.arrivals, a)
	}
}

// Wait waits up to timeout until the log holds n arrivals, and returns
// them in the order they came. It fails if any line was malformed, or if
// fewer than n came in time.
func (l *ArrivalLog) Wait(n int, timeout time.Duration) ([]Arrival, error) {
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		got, nbad := len(l.arrivals), l.nbad
		out := slices.Clone(l.arrivals)
		bad := strings.Join(l.bad, "\n")
		l.mu.Unlock()
		switch {
		case nbad > 0:
			return out, fmt.Errorf("fieldtest: %d malformed arrival lines, first:\n%s", nbad, bad)
		case got >= n:
			return out, nil
		case time.Now().After(deadline):
			return out, fmt.Errorf("fieldtest: %d arrivals logged within %v, want %d", got, timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errNoMark = errors.New("no " + arrivalMark)

// parseArrival parses one syslog message: after its header,
//
//	throttle-arrival nginx <$msec> <$request_time> <$connection> <$connection_time> <$connection_time at the arrival> <$status> <$request_uri>
//	throttle-arrival haproxy <date, ms> <status>
//
// It returns keep false for a request not on the page (nginx's health
// checks; HAProxy's, whose date variable is never set: "-").
func parseArrival(msg string) (Arrival, bool, error) {
	i := strings.Index(msg, arrivalMark+" ")
	if i < 0 {
		return Arrival{}, false, errNoMark
	}
	f := strings.Fields(msg[i+len(arrivalMark):])
	switch {
	case len(f) == 8 && f[0] == "nginx":
		end, err1 := parseMillis(f[1])
		held, err2 := parseMillis(f[2])
		conn, err3 := strconv.ParseUint(f[3], 10, 64)
		ct, err4 := parseMillis(f[4])
		cta, err5 := parseMillis(f[5])
		status, err6 := strconv.Atoi(f[6])
		if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
			return Arrival{}, false, err
		}
		return Arrival{At: time.UnixMilli(end - held), Status: status, Held: time.Duration(held) * time.Millisecond,
			Conn: conn, ConnAnswer: time.Duration(ct) * time.Millisecond, ConnArrival: time.Duration(cta) * time.Millisecond}, f[7] == pagePath, nil
	case len(f) == 3 && f[0] == "haproxy":
		if f[1] == "-" {
			return Arrival{}, false, nil
		}
		at, err1 := strconv.ParseInt(f[1], 10, 64)
		status, err2 := strconv.Atoi(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return Arrival{}, false, err
		}
		return Arrival{At: time.UnixMilli(at), Status: status}, true, nil
	}
	return Arrival{}, false, fmt.Errorf("want nginx with 7 fields or haproxy with 2: %q", f)
}

// parseMillis parses nginx's seconds with exactly three decimals
// ("1795771044.393") as milliseconds.
func parseMillis(s string) (int64, error) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 3 {
		return 0, fmt.Errorf("%q: want seconds with 3 decimals", s)
	}
	return strconv.ParseInt(sec+frac, 10, 64)
}

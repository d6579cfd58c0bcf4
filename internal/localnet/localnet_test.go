package localnet

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// echo answers with the host and the request URI it saw, after 50ms.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	select {
	case <-time.After(50 * time.Millisecond):
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, r.Host+" "+r.RequestURI+" "+r.RemoteAddr)
})

func get(t *testing.T, rt http.RoundTripper, ctx context.Context, url string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestTransportInFakeTime: in a synctest bubble the handler's time is
// fake and exact; it sees the request as a server would; the trace hears
// of the connection and the first byte; other hosts are refused; a
// request whose context ends first gets the context's error.
func TestTransportInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := Transport(echo, "*.example")
		var conn, first time.Time
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn:              func(httptrace.GotConnInfo) { conn = time.Now() },
			GotFirstResponseByte: func() { first = time.Now() },
		})
		start := time.Now()
		body, err := get(t, rt, ctx, "http://a.example:8080/p?q=1")
		if err != nil {
			t.Fatal(err)
		}
		if want := "a.example:8080 /p?q=1 127.0.0.1:1"; body != want {
			t.Errorf("handler saw %q, want %q", body, want)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("round trip took %v, want 50ms", d)
		}
		if first.Sub(conn) != 50*time.Millisecond {
			t.Errorf("trace: connection at %v, first byte at %v", conn, first)
		}

		if _, err := get(t, rt, context.Background(), "http://example.com/"); err == nil || !strings.Contains(err.Error(), "not a simulated host") {
			t.Errorf("example.com: err %v, want a refusal", err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := get(t, rt, ctx, "http://b.example/"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a request that gave up: err %v, want the deadline", err)
		}
	})
}

// TestServe: Serve starts a loopback server for the hosts, and after
// InProcess calls the handler in process.
func TestServe(t *testing.T) {
	rt, stop := Serve(echo, "a.example")
	body, err := get(t, rt, context.Background(), "http://a.example/x")
	if err != nil || !strings.HasPrefix(body, "a.example /x 127.0.0.1:") {
		t.Errorf("over loopback: %q, %v", body, err)
	}
	if _, err := get(t, rt, context.Background(), "http://b.example/"); err == nil {
		t.Error("b.example was dialled")
	}
	stop()

	t.Run("InProcess", func(t *testing.T) {
		InProcess(t)
		rt, stop := Serve(echo, "a.example")
		defer stop()
		if _, ok := rt.(roundTripper); !ok {
			t.Fatalf("Serve after InProcess gave %T", rt)
		}
	})
	rt, stop = Serve(echo, "a.example")
	defer stop()
	if _, ok := rt.(*http.Transport); !ok {
		t.Errorf("Serve after the InProcess test ended gave %T", rt)
	}
}

package throttletest

import (
	"io"
	"net/http"
	"strings"
)

// RoundTripFunc is an http.RoundTripper made of a function: a fake server
// for tests, answering from a model instead of a socket. It is as safe
// for concurrent use as its function; calling a nil RoundTripFunc panics.
type RoundTripFunc func(req *http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Response returns a response to req with the given status, headers as
// alternating names and values, and body.
func Response(req *http.Request, status int, body string, header ...string) *http.Response {
	h := make(http.Header)
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	return &http.Response{
		Status:        http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

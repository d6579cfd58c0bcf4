// Package retry re-sends requests that got a 429 or 503 (or a transport
// error) through a throttle, so that each retry waits once: in the
// throttle.
//
// The throttle's Transport returns a 429 or 503 to its caller; it does not
// retry. What it does is gate the request's scope: after a 429 with
// Retry-After: 3, no request of that scope starts for 3 seconds, and
// backoff slows the scope's pace. A retry therefore needs no sleep of its
// own. Layer a Transport over the throttle's:
//
//	m, err := throttle.New(throttle.DefaultConfig())
//	client := &http.Client{Transport: &retry.Transport{
//		Next:     m.Transport(http.DefaultTransport),
//		Attempts: 3,
//	}}
//
// Each retry goes straight back to the throttle's Transport, which admits
// it when the scope's gate and pace allow. A retry layer that slept for
// Retry-After itself would gain nothing, since the gate already holds the
// scope until then, and would lose the retry's place in the scope's
// queue: the requests for that scope that arrive during the sleep would
// start first, each one a pace step before the retry.
package retry

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
)

// DefaultAttempts is the number of attempts in all (the first and two
// retries) of a Transport whose Attempts is zero or less.
const DefaultAttempts = 3

// maxDrain bounds what is read from a discarded response's body before it
// is closed: enough for the short body of a 429 or 503, so that the
// connection can be reused, and no more.
const maxDrain = 4 << 10

// errNoNext is what RoundTrip returns when Next is nil.
var errNoNext = errors.New("retry: Transport.Next is nil")

// Transport is an http.RoundTripper that re-sends a request whose answer
// Retry calls retryable, up to Attempts times in all, through Next. It
// never sleeps and never starts a goroutine: it is meant to be layered
// over a throttle's Transport (ThrottlingManager.Transport), which holds
// each attempt until the scope's gate (Retry-After) and pace admit it, so
// that the wait happens once, in the throttle. Over a RoundTripper that
// does not throttle, the attempts follow each other at once.
//
// Before each retry it drains (up to 4 KiB) and closes the body of the
// response it discards, which frees that response's throttle slot.
// When the attempts run out, the last answer is returned as it is: a 429
// comes back to the caller with its body unread.
//
// A request with a body is retried only if the body can be sent again:
// its GetBody is set (as http.NewRequest does for a bytes.Buffer,
// bytes.Reader or strings.Reader), and each retry sends a shallow copy of
// the request with a body from GetBody. A request with a body but no
// GetBody is sent once. Transport never modifies the request, and
// resp.Request of a response it returns is the caller's request.
//
// When the request's context ends, Transport stops: it starts no further
// attempt and returns what the attempt under way returned. An attempt
// waiting in the throttle returns the throttle's *throttle.WaitError,
// which wraps the context's error (errors.Is(err, context.Canceled)
// holds); the throttle returns it at once when the context's deadline
// falls before the scope's gate ends. An http.Client's Timeout therefore
// bounds all the attempts together, waits included.
//
// The zero value is not usable: Next must be set. A Transport is safe for
// concurrent use by multiple goroutines provided its fields are not
// changed once it is in use, and Next and Retry are safe for concurrent
// use (a throttle's Transport and DefaultRetry are).
type Transport struct {
	// Next sends each attempt: a throttle's Transport, or a RoundTripper
	// that leads to one. Required: with Next nil, RoundTrip returns an
	// error.
	Next http.RoundTripper

	// Attempts is the number of attempts in all, the first included:
	// 1 never retries. Zero or less means DefaultAttempts.
	Attempts int

	// Retry reports whether an attempt's answer, a response or a
	// transport error (exactly one of resp and err is non-nil), is worth
	// another attempt. It is called after each attempt but the last, and
	// not once the request's context has ended. It must not read or
	// close resp.Body. Nil means DefaultRetry.
	Retry func(resp *http.Response, err error) bool
}

var _ http.RoundTripper = (*Transport)(nil)

// DefaultRetry is the Retry of a Transport whose Retry is nil. It retries
// a 429 (Too Many Requests) or 503 (Service Unavailable) response, and a
// transport error, except:
//
//   - the end of a context (context.Canceled, context.DeadlineExceeded);
//   - the throttle's own refusals, which another attempt at once would
//     only repeat: an invalid request or scope (throttle.ErrNoHost and
//     the other request errors), an invalid configuration, a scope that
//     refuses (Config.MaxRefusal), too many waiting (Config.MaxWaiting),
//     a store that failed closed.
//
// No other status is retried: not 404, nor 500, nor 502 or 504 (add them
// with a Retry of your own). A transport error is retried whatever the
// method, as most retry libraries do, although a POST that failed in
// transit may have reached the server.
func DefaultRetry(resp *http.Response, err error) bool {
	if err != nil {
		for _, target := range notRetried {
			if errors.Is(err, target) {
				return false
			}
		}
		return true
	}
	return resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable)
}

// notRetried are the errors DefaultRetry does not retry.
var notRetried = []error{
	context.Canceled,
	context.DeadlineExceeded,
	throttle.ErrNilRequest,
	throttle.ErrNoHost,
	throttle.ErrInvalidHost,
	throttle.ErrNoScope,
	throttle.ErrEmptyScopeKey,
	throttle.ErrTooManyScopes,
	throttle.ErrNegativeCost,
	throttle.ErrInvalidConfig,
	throttle.ErrScopeRefusing,
	throttle.ErrTooManyWaiting,
	store.ErrUnavailable,
}

// RoundTrip implements http.RoundTripper: it sends req through Next, then
// again for as long as Retry says so and attempts remain.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Next == nil {
		if req != nil && req.Body != nil {
			req.Body.Close()
		}
		return nil, errNoNext
	}
	if req == nil {
		return t.Next.RoundTrip(req) // let Next report it
	}
	attempts := t.Attempts
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	retry := t.Retry
	if retry == nil {
		retry = DefaultRetry
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody && req.GetBody == nil {
		attempts = 1 // the body cannot be sent again
	}
	ctx := req.Context()
	sent := req
	for n := 1; ; n++ {
		resp, err := t.Next.RoundTrip(sent)
		if resp != nil && resp.Request == sent {
			resp.Request = req
		}
		if n >= attempts || ctx.Err() != nil || !retry(resp, err) {
			return resp, err
		}
		if hasBody {
			body, gerr := req.GetBody()
			if gerr != nil {
				return resp, err // keep the answer we have
			}
			cp := *req
			cp.Body = body
			sent = &cp
		}
		if resp != nil {
			discard(resp)
		}
	}
}

// discard drains a little of resp's body and closes it, which releases
// the response's throttle slot.
func discard(resp *http.Response) {
	if resp.Body == nil {
		return
	}
	io.CopyN(io.Discard, resp.Body, maxDrain)
	resp.Body.Close()
}

// CloseIdleConnections closes Next's idle connections when it has that
// method (as a throttle's Transport and *http.Transport do), so that
// http.Client.CloseIdleConnections reaches through the retries.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.Next.(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

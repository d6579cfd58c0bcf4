package throttleotel

import (
	"github.com/crawlerkit/throttle/hooks"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The names of the span events SpanEvents adds.
const (
	// AdmittedEventName marks the end of a request's wait in the
	// throttle, with WaitedKey (seconds) and ScopesKey.
	AdmittedEventName = "throttle.admitted"
	// ReleasedEventName marks the release of its permit, with StatusKey
	// (0 without a response).
	ReleasedEventName = "throttle.released"
)

// The attribute keys of the span events.
const (
	WaitedKey = attribute.Key("throttle.waited_s")
	ScopesKey = attribute.Key("throttle.scopes")
	StatusKey = attribute.Key("http.response.status_code")
)

// SpanEvents returns next with its Admitted and Released hooks wrapped so
// that each request's wait in the throttle shows on the request's span
// (trace.SpanFromContext of the event's Context, the request's context):
// an AdmittedEventName event when the permit is granted, with how long the
// request waited and its scopes, and a ReleasedEventName event when it is
// released, with the status. A request whose context holds no recording
// span costs one lookup; robots.txt fetches the manager makes itself are
// left out. next's own hooks are called after, unchanged:
//
//	cfg.Hooks = throttleotel.SpanEvents(cfg.Hooks)
//
// The returned hooks.Hooks is a plain value, safe for concurrent use as
// the manager calls it (span events are).
func SpanEvents(next hooks.Hooks) hooks.Hooks {
	admitted, released := next.Admitted, next.Released
	next.Admitted = func(ev hooks.Admitted) {
		if !ev.Robots && ev.Context != nil {
			if span := trace.SpanFromContext(ev.Context); span.IsRecording() {
				span.AddEvent(AdmittedEventName, trace.WithTimestamp(ev.At), trace.WithAttributes(
					WaitedKey.Float64(ev.Waited.Seconds()), ScopesKey.StringSlice(ev.Scopes)))
			}
		}
		if admitted != nil {
			admitted(ev)
		}
	}
	next.Released = func(ev hooks.Released) {
		if !ev.Robots && ev.Context != nil {
			if span := trace.SpanFromContext(ev.Context); span.IsRecording() {
				span.AddEvent(ReleasedEventName, trace.WithAttributes(StatusKey.Int(ev.Status)))
			}
		}
		if released != nil {
			released(ev)
		}
	}
	return next
}

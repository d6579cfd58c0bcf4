package throttleotel_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/hooks"
	throttleotel "github.com/crawlerkit/throttle/metrics/otel"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestSpanEvents: a request that waited 1 s for its host's turn shows the
// wait on its span: an admitted event with 1 s waited and its scope, then a
// released event with its status; the user's own hooks still run.
func TestSpanEvents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	clock := throttletest.NewClock(time.Unix(1_700_000_000, 0))
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Robots.Enabled = false
	cfg.Default.Jitter = throttle.Jitter{}
	var own int
	cfg.Hooks.Released = func(hooks.Released) { own++ }
	cfg.Hooks = throttleotel.SpanEvents(cfg.Hooks)
	m, err := throttle.New(cfg)
	require.NoError(t, err)

	get := func(ctx context.Context) *http.Request {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://a.example/", nil)
		require.NoError(t, err)
		return req
	}
	p, err := m.Acquire(context.Background(), get(context.Background())) // untraced: no span, no event
	require.NoError(t, err)
	p.Release(&http.Response{StatusCode: 200}, nil)

	ctx, span := tp.Tracer("test").Start(context.Background(), "fetch")
	done := make(chan *throttle.Permit)
	go func() {
		p, err := m.Acquire(ctx, get(ctx))
		require.NoError(t, err)
		done <- p
	}()
	clock.BlockUntilTimers(1) // waits for the host's Delay (1 s)
	clock.Advance(time.Second)
	p = <-done
	p.Release(&http.Response{StatusCode: 429}, nil)
	span.End()

	spans := rec.Ended()
	require.Len(t, spans, 1)
	evs := spans[0].Events()
	require.Len(t, evs, 2)
	require.Equal(t, throttleotel.AdmittedEventName, evs[0].Name)
	attrs := map[string]any{}
	for _, a := range evs[0].Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	require.Equal(t, 1.0, attrs[string(throttleotel.WaitedKey)])
	require.Equal(t, []string{"a.example"}, attrs[string(throttleotel.ScopesKey)])
	require.Equal(t, throttleotel.ReleasedEventName, evs[1].Name)
	require.Equal(t, int64(429), evs[1].Attributes[0].Value.AsInt64())
	require.Equal(t, 2, own, "the user's hook still runs, for both requests")
}

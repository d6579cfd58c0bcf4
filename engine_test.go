package throttle

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptTurn is a turn whose answers a test scripts: each ask returns the
// next answer, and the turn records when it was asked and woken.
type scriptTurn struct {
	answers   []scriptAnswer
	asked     []time.Time
	woken     int
	cancelErr error
	wakeC     chan struct{}
}

type scriptAnswer struct {
	admitted bool
	again    time.Time
	err      error
}

func (s *scriptTurn) ask() (bool, time.Time, error) {
	s.asked = append(s.asked, time.Now())
	a := s.answers[0]
	s.answers = s.answers[1:]
	return a.admitted, a.again, a.err
}

func (s *scriptTurn) wake() <-chan struct{} { return s.wakeC }
func (s *scriptTurn) woke()                 { s.woken++ }
func (s *scriptTurn) cancelled(err error) error {
	s.cancelErr = err
	return &WaitError{Err: err}
}

// TestWaitTurn checks the loop both engines wait in: it asks again at the
// time the last answer named, or when woken, and on neither only when
// woken; an error or an admission ends it; the end of the context leaves
// the turn with the turn's own error.
func TestWaitTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, plainConfig())
		t0 := time.Now()
		st := &scriptTurn{wakeC: make(chan struct{}, 1), answers: []scriptAnswer{
			{again: t0.Add(3 * time.Second)}, // asked again at 3 s
			{},                               // no time: only a wake-up asks again
			{admitted: true},
		}}
		go func() {
			time.Sleep(10 * time.Second)
			st.wakeC <- struct{}{}
		}()
		require.NoError(t, m.waitTurn(context.Background(), st))
		require.Len(t, st.asked, 3)
		assert.Equal(t, 3*time.Second, st.asked[1].Sub(t0), "asked again at the time named")
		assert.Equal(t, 10*time.Second, st.asked[2].Sub(t0), "then only when woken")
		assert.Equal(t, 2, st.woken)
		assert.Nil(t, st.cancelErr)

		boom := errors.New("boom")
		st = &scriptTurn{wakeC: make(chan struct{}, 1), answers: []scriptAnswer{{err: boom}}}
		assert.Same(t, boom, m.waitTurn(context.Background(), st), "an ask's error ends the wait as it is")

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		t1 := time.Now()
		st = &scriptTurn{wakeC: make(chan struct{}, 1), answers: []scriptAnswer{{again: t1.Add(time.Minute)}}}
		err := m.waitTurn(ctx, st)
		var we *WaitError
		require.ErrorAs(t, err, &we)
		assert.ErrorIs(t, st.cancelErr, context.DeadlineExceeded, "the turn left with the context's error")
		assert.Equal(t, 5*time.Second, time.Since(t1))
		assert.Zero(t, st.woken)
	})
}

// TestEngineAt checks which engine admits a request: the local one
// without a Store; with one, the Store's, but for the outage
// StoreFallbackLocal waits out on local state; and each permit goes back
// to the engine that admitted it.
func TestEngineAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, plainConfig())
		_, local := m.engineAt(time.Now()).(localEngine)
		assert.True(t, local, "no Store: local")
		p, err := m.Acquire(context.Background(), get(t, "http://example.com/"))
		require.NoError(t, err)
		assert.Nil(t, p.ext, "a local permit has no lease")
		p.Release(ok200, nil)

		fs := &faultyStore{Memory: store.NewMemory(nil)}
		m = storeManager(t, nil, fs, true, nil)
		_, shared := m.engineAt(time.Now()).(storeEngine)
		assert.True(t, shared, "a Store")
		p, err = m.Acquire(context.Background(), get(t, "http://a.test/"))
		require.NoError(t, err)
		require.NotNil(t, p.ext)
		assert.True(t, p.ext.shared, "admitted by the store")
		p.Release(ok200, nil)
		assert.Equal(t, int64(1), fs.releases.Load(), "released to the store")

		fs.fail.Store(true)
		p, err = m.Acquire(context.Background(), get(t, "http://b.test/"))
		require.NoError(t, err, "the store failed: the local engine took the request")
		assert.False(t, p.ext != nil && p.ext.shared)
		_, local = m.engineAt(time.Now()).(localEngine)
		assert.True(t, local, "local state until StoreRetry has passed")
		p.Release(ok200, nil)
		assert.Equal(t, int64(1), fs.releases.Load(), "a local permit is released locally")
		time.Sleep(m.cfg.StoreRetry)
		_, shared = m.engineAt(time.Now()).(storeEngine)
		assert.True(t, shared, "the store again after StoreRetry")
	})
}

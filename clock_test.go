package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRealClockTracksWallClock(t *testing.T) {
	c := newRealClock()
	before := time.Now()
	got := c.Now()
	after := time.Now()
	assert.False(t, got.Before(before.Add(-time.Millisecond)))
	assert.False(t, got.After(after.Add(time.Millisecond)))
	// An old base is replaced by a fresh wall-clock reading.
	old := time.Now().Add(-2 * rebaseAfter)
	c.base.Store(&old)
	got = c.Now()
	assert.WithinDuration(t, time.Now(), got, time.Second)
	assert.NotSame(t, &old, c.base.Load())
	tm := c.NewTimer(time.Hour)
	assert.True(t, tm.Stop())
	assert.False(t, tm.Reset(time.Hour))
	assert.True(t, tm.Stop())
}

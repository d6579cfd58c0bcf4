package throttle

import (
	"testing"

	"github.com/crawlerkit/throttle/internal/admission"
	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/require"
)

// TestReasons: Reason is one type for the module (store.Reason and the
// admission rules' reasons are it), so a Store's answer is the manager's
// reason of the same name as it is; each has its words, and a value past
// the list is "unknown".
func TestReasons(t *testing.T) {
	for _, c := range []struct {
		st   store.Reason
		r    Reason
		word string
	}{
		{store.ReasonNone, ReasonNone, "none"},
		{store.ReasonConcurrency, ReasonConcurrency, "concurrency"},
		{store.ReasonDelay, ReasonDelay, "delay"},
		{store.ReasonSlotDelay, ReasonSlotDelay, "slot delay"},
		{store.ReasonGate, ReasonGate, "server gate"},
		{store.ReasonQuota, ReasonQuota, "quota"},
		{store.ReasonQueue, ReasonQueue, "queue"},
	} {
		require.Equal(t, c.r, c.st, "the store's %v", c.st)
		require.Equal(t, c.word, c.r.String())
	}
	for r, word := range map[Reason]string{ReasonRobots: "robots", ReasonBackoff: "backoff",
		ReasonGlobal: "global concurrency", ReasonRampup: "rampup", ReasonAutoThrottle: "autothrottle"} {
		require.Equal(t, word, r.String())
	}
	require.Equal(t, admission.Quota, ReasonQuota, "the admission rules' reasons are the manager's")
	require.Equal(t, "unknown", (ReasonAutoThrottle + 1).String())
}

// TestDelayChangedReasons: the words hooks.DelayChanged.Reason is
// documented to take are the names of the reasons that can set a scope's
// delay (combineDelay's).
func TestDelayChangedReasons(t *testing.T) {
	for r, word := range map[Reason]string{ReasonDelay: "delay", ReasonRampup: "rampup", ReasonRobots: "robots",
		ReasonAutoThrottle: "autothrottle", ReasonBackoff: "backoff"} {
		require.Equal(t, word, r.String())
	}
}

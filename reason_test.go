package throttle

import (
	"testing"

	"github.com/crawlerkit/throttle/internal/admission"
	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/require"
)

// TestReasonsOfAdmissionAndStore: the admission rules' reasons are
// Reason's own numbers (the default scope converts them as they are), and
// each reason a Store answers with is the manager's reason of that name.
func TestReasonsOfAdmissionAndStore(t *testing.T) {
	for _, c := range []struct {
		adm admission.Reason
		st  store.Reason
		r   Reason
	}{
		{admission.None, store.ReasonNone, ReasonNone},
		{admission.Concurrency, store.ReasonConcurrency, ReasonConcurrency},
		{admission.Delay, store.ReasonDelay, ReasonDelay},
		{admission.SlotDelay, store.ReasonSlotDelay, ReasonSlotDelay},
		{admission.Gate, store.ReasonGate, ReasonGate},
		{admission.Quota, store.ReasonQuota, ReasonQuota},
	} {
		require.Equal(t, c.r, Reason(c.adm), "admission's %v", c.r)
		require.Equal(t, c.r, reasonOf(c.st), "the store's %v", c.st)
		require.Equal(t, c.r.String(), c.st.String())
	}
	require.Equal(t, ReasonQueue, reasonOf(store.ReasonQueue), "the store's queue")
	require.Equal(t, ReasonQueue.String(), store.ReasonQueue.String())
	require.Equal(t, ReasonNone, reasonOf(store.ReasonQueue+1), "a reason the store package does not list")
	require.Equal(t, "unknown", (store.ReasonQueue + 1).String())
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

package store

import (
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
)

// Plant puts a stranger's state into key's scope, for storetest's foreign
// cases (storetest.Foreign, field by field: no import of storetest,
// which imports this package). Garbage makes every value one no manager
// sends: negative numbers, times before the epoch.
func (ms *Memory) Plant(key string, lease, last, gate, quotaStart time.Time, quotaUsed int64,
	delay time.Duration, conc int, version int64, data []byte, turn time.Time, garbage bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	st := ms.scope(key, ms.clock.Now())
	if garbage {
		before := time.Unix(-1<<40, 0)
		lease, last, gate, quotaStart, turn = before, before, before, before, before
		quotaUsed, delay, conc, version, data = -1<<40, -time.Hour, -5, -7, []byte("\x00not json")
	}
	if !lease.IsZero() {
		st.leases["foreign"] = memLease{slot: -1, until: lease}
		st.expiring++
		st.adm.InFlight++
	}
	if !last.IsZero() {
		st.adm.Started, st.adm.LastStart = true, last
	}
	st.adm.Gate = gate
	if !quotaStart.IsZero() {
		st.adm.StartUncounted(quotaStart, &admission.Limits{Conc: 1}, 1, time.Minute, quotaUsed)
		st.adm.Finish(-1)
	}
	if delay != 0 || conc != 0 {
		st.hasEff, st.delay, st.conc = true, delay, conc
	}
	if version != 0 {
		st.version, st.data = version, data
	}
	if !turn.IsZero() {
		st.turn = memTurn{lease: "gone", since: turn, until: turn}
	}
}

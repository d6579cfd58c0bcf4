package throttle

import (
	"time"

	"github.com/crawlerkit/throttle/store"
)

// policy is the one interface between the coordinator and a scope's
// rules. Admission, release, the registry, stats, hooks, warnings, export
// and the Store path call a scope's policy through it and nothing else.
// One call is devirtualised, as a compiler would: the local release calls
// a default policy's end as its method endIn, which takes the Feedback by
// pointer where the interface's end, whose argument would escape, takes a
// copy (localEngine.release, permit.go). end is endIn on that copy, so
// what a policy does is what this interface says either way.
//
// Two types implement it. The default policy, *defaultScope, implements
// it in full. Any other ScopeManager, from a user's factory, is adapted to
// it by custom (custompolicy.go), whose answers say "unknown" where a
// ScopeManager has no way to tell: no Pace, no learned state to export,
// no limits for a Store. The registry adapts a ScopeManager once, when it
// makes the scope; the one test there is for this interface, not for the
// default type.
//
// The scope's lock is held for every call. No method sleeps, reads a
// clock or starts a goroutine.
type policy interface {
	// admit, begin, end, idleness and reconfigure are ScopeManager's Admit,
	// Start, Finish, Idle and SetConfig as the coordinator needs them:
	// begin fills the Ticket in place and end returns whether fb was a
	// backoff signal for the scope. robots marks the manager's own
	// robots.txt fetch, which the default policy counts apart (a slot and
	// the quota, but no start for the delay).
	admit(now time.Time, cost int64) Admission
	begin(t *Ticket, now time.Time, cost int64, robots bool)
	// admitLatest is admit that also returns the time a start admitted
	// at now takes (a policy whose clock never goes back takes an
	// earlier now as a stale reading), and whether startLatest may record
	// that start without working the time out again; false: begin.
	admitLatest(now time.Time, cost int64) (a Admission, latest time.Time, same bool)
	startLatest(t *Ticket, latest time.Time, raised bool, cost int64)
	// end takes fb by value: a pointer given to an interface method
	// escapes, and fb lives on the releasing caller's stack. t is the
	// Permit's own Ticket, on the heap already, which end does not
	// change. A policy that hands fb on to code that may change it (a
	// user's Finish) returns the changed Feedback, which the request's
	// later scopes get; the default policy changes nothing and returns
	// nil.
	end(now time.Time, t *Ticket, fb Feedback, robots bool) (signal bool, changed *Feedback)
	idleness(now time.Time) Idleness
	reconfigure(now time.Time, cfg ScopeConfig)

	// setRobotsDelay sets the delay robots.txt asks of the scope; 0
	// removes it.
	setRobotsDelay(d time.Duration)
	// holdUntil holds every start until at: the wait a key evicted from
	// the table had pending, a server gate when gate is set.
	holdUntil(now, at time.Time, gate bool)
	// quotaLeft returns what the window's quota has left, and false when
	// the scope has none or cannot tell.
	quotaLeft(now time.Time) (int64, bool)

	// snap returns what the release hooks compare before and after end,
	// and false when the policy cannot tell.
	snap() (policySnap, bool)
	// fillStats adds the policy's state to ss (the coordinator filled the
	// counts, the waiting reason and ReadyAt): the configured and
	// effective limits and the Pace, given the scope's last latency.
	fillStats(now time.Time, latency time.Duration, ss *ScopeStats)
	// configured returns the scope's Concurrency and whether rampup is
	// on, for the warning about settings that have no effect; false when
	// the policy's own rules may override them.
	configured() (conc int, rampup bool, ok bool)

	// learned returns the learned state to export, and false when there
	// is none worth saving; restore puts an imported one in place and
	// returns false when the policy takes none.
	learned() (learnedState, bool)
	restore(st *learnedState) bool

	// The Store path (shared.go): the limits to send with an admission,
	// the learning that reports what the store must apply, the learned
	// state the store returns, the reason a store's refusal is shown as,
	// and the version of the learned state held (0: none yet). New
	// refuses a Store with a custom ScopeManager, so only the default
	// policy answers these in earnest.
	sharedLimits(now time.Time, sc *store.Scope)
	sharedLearn(now time.Time, t Ticket, fb *Feedback, out *store.ReleaseScope, first bool) (signal bool)
	sharedImport(data []byte) error
	sharedWhy(r Reason) Reason
	version() int64
	setVersion(v int64)

	// takePanic returns a panic the policy kept since the last call, and
	// clears it: a user's ScopeManager that panics leaves no lock held
	// (custompolicy.go). The default policy never keeps one.
	takePanic() *ScopeManagerPanic
}

// policySnap is what the release hooks compare before and after end.
type policySnap struct {
	delay   time.Duration
	why     Reason
	conc    int
	gate    time.Time
	backoff time.Duration
	outage  bool
}

// Both implementations, checked at compile time.
var (
	_ policy = (*defaultScope)(nil)
	_ policy = (*custom)(nil)
)

// takePanic implements policy: the default policy keeps no panic.
func (s *defaultScope) takePanic() *ScopeManagerPanic { return nil }

// policyOf adapts the ScopeManager a factory made for the scope key to
// the coordinator's interface: the default policy is one already; any
// other is wrapped in custom, and guarded says so (its panics are kept, to
// be raised once the manager's locks are released).
func policyOf(mgr ScopeManager, key string) (_ policy, guarded bool) {
	if p, ok := mgr.(policy); ok {
		return p, false
	}
	return &custom{mgr: mgr, key: key}, true
}

package store

import (
	"context"
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
)

// A Store holds the state of scopes that several throttle.ThrottlingManagers
// share, typically one per worker process of a crawler fleet: admission
// state (slots held as leases, the last start, slot start times, quota
// counts, server gates) and learned state (each scope's policy state,
// opaque to the store, with the delay and concurrency it implies).
//
// Without a Store (throttle.Config.Store nil) a manager keeps all of this
// in its own memory, the fastest path for a single process. Memory shares
// state among managers of one process; the redisstore module shares it
// across processes and machines.
//
// The policies (AutoThrottle, backoff, rampup) run in the managers, on the
// state the store hands them: a Store only counts, compares times and keeps
// versions, so an implementation is a few atomic operations, like the Lua
// scripts of redisstore. Package storetest checks an implementation.
//
// An implementation must be safe for concurrent use: managers call it from
// many goroutines at once, with no lock held.
type Store interface {
	// Admit admits a request on all of its scopes at once, or on none:
	// when every scope has a free slot (among its first Concurrency
	// slots: the slots above a lowered Concurrency are not used), its
	// delay since the last start has passed (slot delay too), no server
	// gate is pending, the quota window has room and no waiter that came
	// first has its turn (see Turns), it records the start under
	// req.Lease and answers Admitted; otherwise it answers why and when
	// to ask again, and changes nothing but the scopes' turns. A store
	// that refuses a call because ctx's deadline has passed by its own
	// clock returns ErrPastDeadline, or an error wrapping it: the caller
	// gave up, the store did not fail.
	//
	// The state a store finds is bounded by each request's Scope (see
	// Bounds): whoever wrote it, no scope is held longer than those
	// bounds, nor admits more than MaxConcurrency at once.
	Admit(ctx context.Context, req *Request) (Answer, error)
	// Release ends a lease (an unknown or expired lease is no error)
	// and the lease's turn in each scope (a waiter that gave up),
	// applies gates and quota corrections, and stores learned state for
	// each scope whose Version matches the store's, or where the store
	// has none (version 0), as version max(stored, Version)+1: the others
	// are returned as conflicts, with the store's state, for the caller
	// to merge and send again with an empty Lease. A Version outside
	// [0, MaxVersion] is an error.
	Release(ctx context.Context, rel *Release) (ReleaseAnswer, error)
	// Watch calls fn with the key of every scope where a lease ends, or
	// where the waiter whose turn it was is admitted while others wait
	// behind it, in this process or another, until stop is called. fn
	// must not block.
	Watch(fn func(key string)) (stop func())
}

// Request asks a Store to admit one request. The zero value has no lease
// and no scopes. A plain value, but copies share the Scopes slice: don't
// change it while another goroutine reads it.
type Request struct {
	// Lease names the permit: unique, chosen by the caller, and the same
	// for every attempt of one caller (it names the caller's turn too).
	Lease  string
	Scopes []Scope
	// Waits says the caller waits for its turn when refused (Acquire);
	// false for a caller that only asks (TryAcquire), which never holds
	// others back.
	Waits bool
	// Since is when a waiting caller was first refused, in the store's
	// time (that answer's Now); zero on its first attempt. It orders the
	// waiters (see Turns).
	Since time.Time
}

// Turns: a Store serves the waiters of a scope first come, first served,
// whichever manager (process, machine) they wait in. Each scope keeps the
// turn of one waiter: the one that came first (Request.Since, then the
// Lease's order) among those its refusals held back in this scope (the
// refusing Scope of an Answer; a waiter held back by another of its
// scopes may be passed here, as within one manager). While that turn is
// live, a request the scope's rules would admit is refused with
// ReasonQueue unless it is that waiter's, and is told to ask again at the
// turn's end; the waiter's admission ends the turn, and the next refusal
// of a waiter gives the turn to the earliest of those that ask. A turn
// ends TurnGrace after the time its waiter's last refusal named (the
// earliest lease expiry, for a refusal waiting for a release): a waiter
// that asks again later than that loses one start to the next in line
// and keeps its place. A waiter that gives up ends its turn with a
// Release of its lease.
//
// So a waiter that asks again when told is admitted before every waiter
// that came after it: no request starves while a scope admits others.
// Managers that share a store must share its clock (Request.Since is
// the store's time).
const TurnGrace = time.Second

// MaxVersion is the largest learned-state version a store keeps: larger
// ones (a stranger's) read as none. Above it, a float64 (Redis's Lua
// numbers) no longer counts by one.
const MaxVersion = 1<<53 - 1

// DefaultMaxWait bounds the delays and gates a store applies to a Scope
// whose MaxWait is zero: Backoff.MaxDelay's default.
const DefaultMaxWait = 5 * time.Minute

// Scope is one scope of a Request: its key, the cost, and the limits as
// the caller's policy sees them. Concurrency and Delay are defaults: a
// store uses the shared values stored with the learned state when it has
// them, so every worker applies the latest learned delay at once. In the
// zero value Concurrency is 0: a store with no shared values for the key
// admits nothing in it. A plain value: copy it freely, but don't change it
// while another goroutine reads it.
type Scope struct {
	Key         string
	Cost        int64
	Concurrency int
	Delay       time.Duration
	// Jitter is the factor applied to the delay that follows this start.
	Jitter    float64
	SlotDelay time.Duration
	Quota     int64
	Window    time.Duration
	// Version is the version of learned state the caller holds.
	Version int64
	// Bounds: MaxWait is the longest wait the caller's policy can ask of
	// the scope (its longest delay, jitter included, or server gate;
	// zero: DefaultMaxWait), and MaxConcurrency the most permits it can
	// allow at once (zero: no bound). A store applies the state it finds
	// (written by a worker configured otherwise, an older version, a
	// stranger under the same keys, or a worker whose clock was ahead)
	// within them: a shared delay above max(MaxWait, Delay×Jitter) counts
	// as that, a shared concurrency above MaxConcurrency as that; a gate,
	// a previous start or a quota window that would hold the scope past
	// that bound from the first admission that finds it is cut to it; and
	// a lease is held no longer than the store's own lease bound (a
	// Memory's hold until released).
	MaxWait        time.Duration
	MaxConcurrency int
}

// WaitBound returns the longest a store may hold the scope for sc: its
// MaxWait (DefaultMaxWait when zero), or its own Delay scaled by its
// Jitter when that is longer.
func (sc *Scope) WaitBound() time.Duration {
	w := sc.MaxWait
	if w <= 0 {
		w = DefaultMaxWait
	}
	return max(w, admission.ScaleDuration(sc.Delay, max(sc.Jitter, 1)))
}

// Answer is a Store's answer to a Request. The zero Answer is a refusal
// with no time: the manager waits for a release (Watch) before asking
// again. A plain value, but copies share its slices: don't change them
// while another goroutine reads them.
type Answer struct {
	Admitted bool
	// Now is the store's time of the answer: the start time when admitted.
	Now time.Time
	// At is, when refused, the earliest time worth asking again; zero
	// means "at the next release" (Watch).
	At time.Time
	// Reason and Scope (an index into the request's Scopes) say what
	// refused the request. With ReasonConcurrency and ReasonQueue, At is
	// only a fallback: a release, or the admission of the waiter whose
	// turn it is, is announced to Watch.
	Reason Reason
	Scope  int
	// Tickets hold, when admitted, each scope's slot and quota window.
	Tickets []Ticket
	// Learned holds, for each scope, the store's learned state when its
	// version is newer than the request's (Data nil otherwise).
	Learned []Learned
}

// Reason is the admission rule that refused a Request. The zero value is
// ReasonNone. It is throttle.Reason itself (both name the module's one
// declaration, in internal/admission): the manager reads a Store's reason
// as it is, a ReasonDelay as the policy part that set the delay (such as
// throttle.ReasonBackoff). String returns it in words, e.g. "slot delay".
type Reason = admission.Reason

// The rules a Store applies, in the order Admit checks them.
const (
	ReasonNone        = admission.None        // nothing refused: admitted
	ReasonConcurrency = admission.Concurrency // every slot of the scope is taken
	ReasonDelay       = admission.Delay       // the scope's delay since its last start
	ReasonSlotDelay   = admission.SlotDelay   // the free slots' delay since their last start
	ReasonGate        = admission.Gate        // a server-given wait (ReleaseScope.Gate)
	ReasonQuota       = admission.Quota       // the window's quota is spent
	ReasonQueue       = admission.Queue       // a waiter that came first has its turn
)

// Ticket is what a Store recorded for one scope of an admitted request.
// The zero value is slot 0 and window 0, not "no slot" (-1). A plain
// value: copy it freely, but don't change it while another goroutine reads
// it.
type Ticket struct {
	Slot        int   // the slot taken, -1 without SlotDelay
	WindowIndex int64 // the quota window the cost was counted in
}

// Learned is a scope's learned state as a Store holds it. The zero value,
// version 0 with no Data, is no learned state. A plain value, but copies
// share Data: don't change it while another goroutine reads it.
type Learned struct {
	Version int64
	Data    []byte
}

// Release ends a lease and reports what was learned. The zero value ends
// no lease and changes nothing. A plain value, but copies share the Scopes
// slice: don't change it while another goroutine reads it.
type Release struct {
	// Lease is the admitted request's; empty to store learned state only
	// (the retry after a conflict).
	Lease  string
	Scopes []ReleaseScope
}

// ReleaseScope is one scope of a Release. With all other fields zero it
// only ends the lease in the scope Key: no gate, no quota correction
// (QuotaWindow 0), no learned state. A plain value, but copies share Data:
// don't change it while another goroutine reads it.
type ReleaseScope struct {
	Key    string
	Ticket Ticket
	// Gate, when not zero, holds every start until then (Retry-After).
	Gate time.Time
	// QuotaDelta corrects the cost counted in Ticket.Window (actual minus
	// admitted); QuotaFloor, when >= 0, raises the current window's
	// count to at least that (the server's remaining count).
	// QuotaWindow is the scope's quota window (zero: no quota).
	QuotaDelta  int64
	QuotaFloor  int64
	QuotaWindow time.Duration
	// Learned says Data, Delay and Concurrency are to be stored if the
	// store's version is still Version.
	Learned     bool
	Version     int64
	Data        []byte
	Delay       time.Duration
	Concurrency int
}

// ReleaseAnswer lists the scopes whose learned state was not stored
// because another worker stored a newer version first. The zero value has
// no conflicts: all the learned state was stored. A plain value, but copies
// share the Conflicts slice: don't change it while another goroutine reads
// it.
type ReleaseAnswer struct {
	Conflicts []Conflict
}

// Conflict is a scope's learned state as the store holds it after a
// conflicting Release. The zero value names the first scope with no
// learned state (version 0). A plain value: copy it freely, but don't
// change it while another goroutine reads it.
type Conflict struct {
	Scope   int // index into Release.Scopes
	Learned Learned
}

package admission

// Reason says why a request waits: the rule that holds its start back.
// It is declared here, once, for the whole module: the root package's
// throttle.Reason and package store's store.Reason are this type under
// their own names (aliases), so a reason crosses between the admission
// rules, the manager and a Store as it is, with no conversion. The first
// six are the rules Check applies; the others are the manager's and the
// scope policy's (Limits.GapWhy may hold any of them, which Check
// returns as it is). The zero value is None.
type Reason uint8

// The reasons, in throttle.Reason's order (the root package documents
// each as ReasonNone, ReasonConcurrency and so on).
const (
	None         Reason = iota // it may start now
	Concurrency                // every slot of the scope is taken
	Delay                      // the scope's delay since its last start
	SlotDelay                  // the free slots' delay since their last start
	Gate                       // a server-given wait (Retry-After, RateLimit)
	Quota                      // the window's quota is spent
	Robots                     // robots.txt Crawl-delay or Request-rate
	Backoff                    // the delay raised by backoff signals
	Global                     // Config.GlobalConcurrency is reached
	Queue                      // earlier callers wait for the same scope
	Rampup                     // rampup's rate: the fastest it has proven, or is probing
	AutoThrottle               // AutoThrottle's delay: latency / TargetConcurrency
)

var reasonNames = [...]string{"none", "concurrency", "delay", "slot delay", "server gate",
	"quota", "robots", "backoff", "global concurrency", "queue", "rampup", "autothrottle"}

// String returns the reason in words, e.g. "slot delay"; "unknown" for a
// value not listed.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

package throttle

import (
	"hash/maphash"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/crawlerkit/throttle/hooks"
)

// A ThrottlingManager decides when each request may start. It maps a
// request to its scopes, admits it when every scope admits it at the same
// instant, and routes the response's feedback to each scope's ScopeManager.
//
// A ThrottlingManager is safe for concurrent use by multiple goroutines.
// Waiting callers are served in arrival order per scope; waiting costs no
// goroutine beyond the caller's own and at most one timer per caller. A
// zero ThrottlingManager is not usable (Acquire and most other methods
// panic): make one with New.
type ThrottlingManager struct {
	cfg      Config
	clock    Clock
	log      *slog.Logger
	feedback FeedbackFunc
	factory  ScopeManagerFactory

	cfgMu sync.RWMutex // guards cfg.Scopes against SetScopeConfig
	// patterns are cfg.Scopes' glob keys, the most specific first (see
	// scopePatterns); guarded by cfgMu.
	patterns  []string
	seed      maphash.Seed
	shards    [numShards]shard
	global    globalGate
	waiting   atomic.Int64
	warned    atomic.Bool
	robotsTxt *robotsCache // nil when robots.txt handling is off
	shared    *shared      // nil without Config.Store

	guarded           atomic.Bool // some scope has a custom, guarded ScopeManager
	customFeedback    bool        // Config.Feedback is the user's: guard it
	warnedIneffective atomic.Bool
	warnedHold        atomic.Bool
	holds             holds // held permits, with Config.MaxHold
	hasPending        atomic.Bool
	pendingMu         sync.Mutex
	pending           []hooks.Warning // warnings found under locks, given out after
	flushing          bool            // guarded by pendingMu: flushWarnings hears of releases

	// sweepStep's turn: when it next looks at a shard (UnixNano, which
	// inlines where Before does not; compared by difference, so right
	// for any two times within 292 years even where UnixNano overflows),
	// and the shard it looked at last.
	sweepNext atomic.Int64
	sweepTurn atomic.Uint32

	// obs are the features that follow admission and release: MaxHold,
	// the hooks, the warnings, ReadyQueues, the series (observers.go).
	obs observers
	// series are the busiest scopes' recent answers, for Stats (series.go).
	series seriesTable
}

// New returns a ThrottlingManager for cfg, or a *ConfigError naming the
// first invalid field. It warns (once each, see Config.Logger and the
// Warning hook, hooks.Hooks.Warning) about settings that cannot take
// effect, such as a Delay shorter than SlotDelay/Concurrency.
func New(cfg Config) (*ThrottlingManager, error) {
	cfg.Scopes = maps.Clone(cfg.Scopes)
	for k, sc := range cfg.Scopes {
		sc.completeFrom(&cfg.Default) // from an invalid Default: validate names Default first
		cfg.Scopes[k] = sc
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &ThrottlingManager{
		cfg:      cfg,
		patterns: scopePatterns(cfg.Scopes),
		clock:    cfg.Clock,
		log:      cfg.Logger,
		feedback: cfg.Feedback,
		factory:  cfg.NewScopeManager,
		seed:     maphash.MakeSeed(),
	}
	if m.clock == nil {
		m.clock = newRealClock()
	} else {
		m.clock = newMonotonicClock(m.clock) // its time never goes back
	}
	m.sweepNext.Store(m.clock.Now().UnixNano())
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.feedback == nil {
		m.feedback = DefaultFeedback
	} else {
		m.customFeedback = true
	}
	if m.factory == nil {
		m.factory = NewDefaultScopeManager
	}
	m.global.limit = int64(cfg.GlobalConcurrency)
	for i := range m.shards {
		m.shards[i].m = make(map[string]*scope)
	}
	if cfg.Robots.Enabled {
		m.robotsTxt = newRobotsCache(m, cfg.Robots)
	}
	if cfg.Store != nil {
		m.shared = newShared(cfg.Store)
	}
	m.obs.subscribe(m)
	m.warnStatic()
	return m, nil
}

// Clock returns the manager's clock: Config.Clock, whose time it never lets
// go back (see Clock), or the real clock.
func (m *ThrottlingManager) Clock() Clock { return m.clock }

// SetScopeConfig replaces the configuration of the scope key at run time,
// as if it had been in Config.Scopes from the start: the scope becomes
// explicit, its learned state is kept where it still applies, and its
// waiters are re-evaluated at once.
func (m *ThrottlingManager) SetScopeConfig(key string, cfg ScopeConfig) error {
	if key == "" {
		return ErrEmptyScopeKey
	}
	cfg.completeFrom(&m.cfg.Default)
	if err := validateScopeEntry(key, &cfg); err != nil {
		return err
	}
	if err := m.storeTakes(&cfg, "Scopes["+strconv.Quote(key)+"]"); err != nil {
		return err
	}
	m.cfgMu.Lock()
	next := maps.Clone(m.cfg.Scopes)
	if next == nil {
		next = make(map[string]ScopeConfig)
	}
	next[key] = cfg
	m.cfg.Scopes = next
	if isScopePattern(key) {
		m.patterns = scopePatterns(next)
	}
	m.cfgMu.Unlock()

	sh := m.shardOf(key)
	sh.mu.RLock()
	s := sh.m[key]
	sh.mu.RUnlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.pol.reconfigure(m.clock.Now(), cfg)
	s.explicit = true
	wakeNeeding(s, s.queue.head)
	pv := s.pol.takePanic()
	s.mu.Unlock()
	if pv != nil {
		panic(pv)
	}
	return nil
}

// storeTakes refuses a scope configuration made at run time (field names
// it) that a Store cannot hold: one with a custom ScopeManager, whose
// limits the store cannot see. New refuses the static ones
// (Config.validate).
func (m *ThrottlingManager) storeTakes(cfg *ScopeConfig, field string) error {
	if m.shared != nil && cfg.NewManager != nil {
		return &ConfigError{Field: field + ".NewManager", Reason: "scopes in a Store use the default ScopeManager: NewManager must be nil"}
	}
	return nil
}

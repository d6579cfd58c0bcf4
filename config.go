package throttle

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/crawlerkit/throttle/store"
)

// Config holds the tunables of a ThrottlingManager. Start from
// DefaultConfig and change what you need: a field set to zero means zero
// (Delay 0 is no delay), never "the default". New validates it, refuses
// the zero Config (GlobalConcurrency must be >= 1, among others: its error
// says to start from DefaultConfig), and keeps
// its own copy, Scopes map included: change a scope after New with
// SetScopeConfig. A plain value: don't change it while another goroutine
// reads it.
type Config struct {
	// Default is the configuration of every scope that has no entry in
	// Scopes and that ScopeConfigFunc does not configure.
	Default ScopeConfig
	// Scopes configures scopes by key. An entry may name only the fields
	// it changes, as a literal: New takes from Default what the entry
	// left at a zero value it would refuse (Concurrency, Window, and
	// AutoThrottle, Backoff and Rampup when left entirely zero), and every
	// other zero means what it says: {Delay: 200 * time.Millisecond,
	// Concurrency: 2} is Default with those two changed and no jitter
	// (Jitter{}). To turn a sub-config off in an entry, start from its
	// default (b := DefaultConfig().Default.Backoff; b.Enabled = false).
	//
	// A key holding *, ? or [ is a glob pattern (path.Match syntax:
	// "*.example.com") for the scopes without an entry of their own, as
	// colly's DomainGlob; the longest matching pattern wins. A scope
	// configured here or by ScopeConfigFunc is "explicit": its settings
	// win over robots.txt's Crawl-delay.
	Scopes map[string]ScopeConfig
	// ScopeConfigFunc, if not nil, computes the configuration of scopes
	// that neither a key nor a pattern of Scopes configures (rules that a
	// glob cannot say). It gets the scope
	// key and a copy of Default; ok=false means "use Default". It is called
	// when a scope is first seen (again after the scope was forgotten for
	// idleness), may run concurrently (callers that see a new scope at
	// once may each call it for the same key, and all but one result are
	// dropped), and its result is validated then: an invalid one makes
	// Acquire fail with a *ConfigError.
	ScopeConfigFunc func(scope string, def ScopeConfig) (cfg ScopeConfig, ok bool)

	// GlobalConcurrency caps permits held at once across all scopes.
	// Default 16. Must be >= 1.
	GlobalConcurrency int

	// Scoper maps requests to scopes. Nil means HostScope.
	Scoper Scoper
	// Feedback turns responses into Feedback. Nil means DefaultFeedback.
	Feedback FeedbackFunc
	// NewScopeManager makes the ScopeManager of every scope whose
	// ScopeConfig.NewManager is nil. Nil means NewDefaultScopeManager.
	NewScopeManager ScopeManagerFactory

	// Clock is the time source. Nil means the real clock.
	Clock Clock
	// Logger receives warnings and, at Debug level, each adjustment.
	// Nil means slog.Default().
	Logger *slog.Logger
	// JitterSeed, when not zero, seeds each scope's random source from
	// the seed and the scope key, so jitter is reproducible in tests.
	// Zero means unseeded randomness. Default 0.
	JitterSeed uint64

	// IdleTimeout is how long a scope with no permits, no waiters and
	// nothing learned is kept before it is forgotten. Default 5m.
	// Forgetting is lazy, with no goroutine: an Acquire or TryAcquire may
	// sweep one of the 64 parts of the scope map, each part about every
	// IdleTimeout/4, so with calls at least every IdleTimeout/256 a scope
	// is gone within about 1.25 IdleTimeout (slower, one part per call).
	// A manager no one calls keeps its scopes until it is called again.
	IdleTimeout time.Duration
	// LearnedIdleTimeout is how long an idle scope that has learned state
	// (a raised delay, a backoff level, a rampup rate) is kept. Default 1h.
	// Must be >= IdleTimeout.
	LearnedIdleTimeout time.Duration

	// MaxScopes caps the scopes held at once, against link farms with
	// millions of hosts. Zero means no cap. Default 1,000,000.
	//
	// The cap is split evenly over the parts of the scope map (64, or
	// MaxScopes when fewer). Past a part's share, each new scope evicts
	// another of its part: the one that has gone longest without a start
	// or a release, approximately (CLOCK: the oldest, unless used since
	// it was last passed over), whatever its state. A running server
	// gate, delay gap or quota window does not keep a scope; a scope in
	// use does: with permits held, with callers waiting, or being
	// admitted by another goroutine at that instant. So the manager holds
	// at most MaxScopes scopes besides those that were in use when a
	// scope was last made in their part; the next scope made there evicts
	// them once they are idle. The work is constant per new scope,
	// whatever the table's size.
	//
	// An evicted scope keeps one thing: when its next request may start,
	// if that is later than now. That is the end of its server gate
	// (Retry-After, a RateLimit reset), or of the gap its delay asks after
	// its last start, or of its slot delay or of a quota window it has
	// spent. A request to the host before that time waits for it, as it
	// would have in the scope. Everything else is lost, as when a scope
	// is forgotten for idleness: its learned state (the AutoThrottle
	// delay, the backoff level and its recovery, the rampup rate), the
	// quota used in a window not yet spent, and its own counts in Stats
	// (the totals keep them). After that time the host starts again from
	// its configuration and its robots.txt delay. With a Store, the
	// store keeps what it shares and gives it back to the new scope.
	// A scope of another ScopeManager keeps the same time: its
	// ScopeManager, made anew, is wrapped so as to admit nothing before.
	//
	// Those times are kept in a table of fixed size per part, made when
	// the part first evicts: 4 records of 16 bytes per scope of its share
	// (64 bytes per scope of MaxScopes; 64 MB for the default cap once
	// every part evicts). A record goes when its host comes back or its
	// time has passed. It is lost early, and its host may then get a
	// request before its wait ends, only when a new record comes to its
	// bucket (4 records, chosen by the key's hash) while all four hold
	// waits still running and it ends the soonest of them: that takes
	// about 4*MaxScopes evicted hosts with waits running at once, or bad
	// luck near it. A link farm of 1,000 new hosts a second all answering
	// "Retry-After: 300", with MaxScopes 1,000, has 300,000: a host
	// re-seen 2 s after its answer is still held 99 % of the time, 5 s
	// after about half of the time, 30 s after not.
	MaxScopes int

	// DelayedWarnThreshold: the first time this many callers wait at once,
	// a warning is logged. Default 500. Zero turns the warning off.
	DelayedWarnThreshold int

	// Hooks are called on events, without locks held, to feed metrics
	// (package hooks: the events, and when and where hooks run). The
	// zero Hooks calls nothing.
	Hooks hooks.Hooks

	// MaxWaiting caps the callers blocked in Acquire at once: beyond it
	// Acquire fails at once with an error wrapping ErrTooManyWaiting.
	// Zero means no cap. Default 0.
	MaxWaiting int
	// MaxHold, when not zero, reclaims a permit held longer than this (a
	// response body that never ends, a caller that forgot Release): its
	// slots are released as a timeout, with one warning; the caller's
	// later Release does nothing. Zero (the default) holds a slot until
	// the caller releases it or, through the Transport, closes the body.
	MaxHold time.Duration
	// MaxRefusal, when not zero, gives up on scopes that refuse: once a
	// scope has answered nothing but backoff signals for longer than
	// this, a request that would wait for it fails at once with a
	// *WaitError whose Err is ErrScopeRefusing, naming the scope and when
	// it may be worth trying again. Default 0 (off).
	MaxRefusal time.Duration

	// Robots configures robots.txt fetching and its Crawl-delay. On by
	// default: see RobotsConfig.
	Robots RobotsConfig

	// Store, when not nil, holds the scopes' admission and learned state
	// shared with other managers (other worker processes with
	// redisstore). Nil keeps the state in this manager's memory. The
	// scopes of a manager with a Store use the default ScopeManager.
	Store store.Store
	// StoreFallbackLocal says what Acquire does when the Store fails.
	// False, the default, fails closed: Acquire and TryAcquire return a
	// *store.Error at once. True admits requests from the manager's own
	// in-memory state, as without a Store, with one warning per outage;
	// the store is tried again every StoreRetry and used as soon as it
	// answers. During the outage each process holds its limits alone: a
	// fleet of N may send N times the shared rate.
	StoreFallbackLocal bool
	// StoreRetry is how long StoreFallbackLocal keeps to local state
	// after a failure before trying the Store again. Default 1s.
	StoreRetry time.Duration
}

// ScopeConfig configures one scope. DefaultConfig().Default holds the
// defaults named on each field. A zero ScopeConfig is invalid as
// Config.Default (Concurrency must be >= 1) and as a ScopeConfigFunc
// result; as a Config.Scopes entry or a SetScopeConfig argument it means
// Default's Concurrency, Window, AutoThrottle, Backoff and Rampup, with no
// delay, no jitter and no quota. A plain value, but copies share the
// Backoff.Statuses slice: don't change it while another goroutine reads it.
type ScopeConfig struct {
	// Concurrency is how many permits the scope admits at once. Default 1.
	Concurrency int
	// Delay is the least time between two consecutive request starts in
	// the scope, before jitter. Default 1s.
	Delay time.Duration
	// SlotDelay is the least time between two starts in the same slot.
	// Default 0 (off). With Concurrency c, it caps the scope at c starts
	// per SlotDelay: a Delay shorter than SlotDelay/c has no effect (New
	// warns).
	SlotDelay time.Duration
	// Jitter randomises each start's Delay by a factor drawn once per
	// start from [1+Jitter.Min, 1+Jitter.Max]. Default ±50 %.
	Jitter Jitter

	// Quota caps the cost admitted per Window; 0 means no quota. Default 0.
	Quota int64
	// Window is the period over which quotas reset, backoff recovers by one
	// step and rampup counts backoff signals. Default 60s.
	Window time.Duration

	// AutoThrottle configures Scrapy's latency/N rule, never under Delay
	// (New warns when Delay is 1 s or more: AutoThrottle can then only
	// slow the scope down). Off by default.
	AutoThrottle AutoThrottleConfig
	// Backoff configures the reaction to backoff signals. On by default.
	Backoff BackoffConfig
	// Rampup configures probing for the fastest rate a server allows.
	// Off by default.
	Rampup RampupConfig

	// IgnoreRobotsTxt makes the scope ignore robots.txt Crawl-delay and
	// Request-rate. Default false.
	IgnoreRobotsTxt bool

	// NewManager, if not nil, makes this scope's ScopeManager instead of
	// Config.NewScopeManager.
	NewManager ScopeManagerFactory
}

// Jitter is a range of relative changes to a delay: a start's delay is
// multiplied by 1+u with u drawn uniformly from [Min, Max]. The mean is
// (Min+Max)/2, so a symmetric range keeps the configured delay on average.
// The zero value turns jitter off. Min must be >= -1 and Max >= Min. A
// plain value: copy it freely, but don't change it while another goroutine
// reads it.
type Jitter struct {
	Min, Max float64
}

// symmetricJitter returns the range [-f, +f], Jitter{Min: -f, Max: f}.
func symmetricJitter(f float64) Jitter { return Jitter{Min: -f, Max: f} }

// DefaultConfig returns the defaults named on each field of Config and
// ScopeConfig, and of the sub-configs: start a Config.Scopes entry's
// Backoff, AutoThrottle or Rampup, or a RobotsConfig, from
// DefaultConfig().Default.Backoff (.AutoThrottle, .Rampup) or
// DefaultConfig().Robots. Each call returns new values (a new
// Backoff.Statuses slice included).
func DefaultConfig() Config {
	return Config{
		Default:              defaultScopeConfig(),
		GlobalConcurrency:    16,
		IdleTimeout:          5 * time.Minute,
		LearnedIdleTimeout:   time.Hour,
		DelayedWarnThreshold: 500,
		MaxScopes:            1_000_000,
		Robots:               defaultRobotsConfig(),
		StoreRetry:           time.Second,
	}
}

// defaultScopeConfig returns the default configuration of one scope,
// DefaultConfig().Default.
func defaultScopeConfig() ScopeConfig {
	return ScopeConfig{
		Concurrency:  1,
		Delay:        time.Second,
		Jitter:       symmetricJitter(0.5),
		Window:       time.Minute,
		AutoThrottle: defaultAutoThrottleConfig(),
		Backoff:      defaultBackoffConfig(),
		Rampup:       defaultRampupConfig(),
	}
}

// validate checks the manager-wide fields and every ScopeConfig. Its
// error shows the value refused, and for a field left at zero that
// DefaultConfig sets (a Config literal, the zero Config) it says to start
// from DefaultConfig.
func (c *Config) validate() error {
	err := withValue(c.check(), "", *c)
	var ce *ConfigError
	if errors.As(err, &ce) && ce.Value != nil && reflect.ValueOf(ce.Value).IsZero() {
		if def, ok := fieldValue(DefaultConfig(), "", ce.Field); ok && !reflect.ValueOf(def).IsZero() {
			ce.hint = fmt.Sprintf("DefaultConfig() has %v: start from throttle.DefaultConfig() and change what you need", def)
		}
	}
	return err
}

// check is validate without the value and the hint.
func (c *Config) check() error {
	if c.GlobalConcurrency < 1 {
		return &ConfigError{Field: "GlobalConcurrency", Reason: "must be >= 1"}
	}
	if err := checkDuration("IdleTimeout", c.IdleTimeout); err != nil {
		return err
	}
	if err := checkDuration("LearnedIdleTimeout", c.LearnedIdleTimeout); err != nil {
		return err
	}
	if c.LearnedIdleTimeout < c.IdleTimeout {
		return &ConfigError{Field: "LearnedIdleTimeout", Reason: "must be >= IdleTimeout"}
	}
	if c.MaxScopes < 0 {
		return &ConfigError{Field: "MaxScopes", Reason: "must be >= 0"}
	}
	if c.DelayedWarnThreshold < 0 {
		return &ConfigError{Field: "DelayedWarnThreshold", Reason: "must be >= 0"}
	}
	if c.MaxWaiting < 0 {
		return &ConfigError{Field: "MaxWaiting", Reason: "must be >= 0"}
	}
	if err := checkDuration("MaxRefusal", c.MaxRefusal); err != nil {
		return err
	}
	if err := checkDuration("MaxHold", c.MaxHold); err != nil {
		return err
	}
	if err := c.Robots.validate(); err != nil {
		return err
	}
	if err := c.validateStore(); err != nil {
		return err
	}
	if err := c.Default.validate("Default"); err != nil {
		return err
	}
	for k, sc := range c.Scopes {
		if k == "" {
			return &ConfigError{Field: `Scopes[""]`, Reason: "scope key must not be empty"}
		}
		if err := validateScopeEntry(k, &sc); err != nil { // completed by New
			return err
		}
	}
	return nil
}

// validate checks one scope's configuration; prefix names it in errors,
// which show the value refused.
func (s *ScopeConfig) validate(prefix string) error {
	return withValue(s.check(prefix), prefix, *s)
}

// check is validate without the value.
func (s *ScopeConfig) check(prefix string) error {
	f := func(name string) string { return prefix + "." + name }
	if s.Concurrency < 1 {
		return &ConfigError{Field: f("Concurrency"), Reason: "must be >= 1"}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Delay", s.Delay}, {"SlotDelay", s.SlotDelay}} {
		if err := checkDuration(f(d.name), d.v); err != nil {
			return err
		}
	}
	if err := s.Jitter.validate(f("Jitter")); err != nil {
		return err
	}
	if s.Quota < 0 {
		return &ConfigError{Field: f("Quota"), Reason: "must be >= 0"}
	}
	if s.Window <= 0 {
		return &ConfigError{Field: f("Window"), Reason: "must be > 0"}
	}
	if err := s.AutoThrottle.validate(f("AutoThrottle")); err != nil {
		return err
	}
	if err := s.Backoff.validate(f("Backoff"), s.Delay); err != nil {
		return err
	}
	return s.Rampup.validate(f("Rampup"))
}

func (j Jitter) validate(field string) error {
	if err := checkFloat(field+".Min", j.Min); err != nil {
		return err
	}
	if err := checkFloat(field+".Max", j.Max); err != nil {
		return err
	}
	if j.Min < -1 {
		return &ConfigError{Field: field + ".Min", Reason: "must be >= -1"}
	}
	if j.Max < j.Min {
		return &ConfigError{Field: field + ".Max", Reason: "must be >= Min"}
	}
	if j.Max > 100 {
		return &ConfigError{Field: field + ".Max", Reason: "must be <= 100"}
	}
	return nil
}

func checkDuration(field string, d time.Duration) error {
	if d < 0 {
		return &ConfigError{Field: field, Reason: "must be >= 0"}
	}
	return nil
}

func checkFloat(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return &ConfigError{Field: field, Reason: "must be a finite number"}
	}
	return nil
}

func (c *Config) validateStore() error {
	if err := checkDuration("StoreRetry", c.StoreRetry); err != nil {
		return err
	}
	if c.Store == nil {
		return nil
	}
	custom := c.NewScopeManager != nil || c.Default.NewManager != nil
	for _, sc := range c.Scopes {
		custom = custom || sc.NewManager != nil
	}
	if custom {
		return &ConfigError{Field: "Store", Reason: "scopes in a Store use the default ScopeManager: NewScopeManager and ScopeConfig.NewManager must be nil"}
	}
	return nil
}

// withValue sets the Value of err, a *ConfigError without one, to the
// value of the field it names, read from v: the struct that prefix names
// in the error's Field ("" for a Config).
func withValue(err error, prefix string, v any) error {
	ce, ok := err.(*ConfigError)
	if !ok || ce.Value != nil {
		return err
	}
	if fv, ok := fieldValue(v, prefix, ce.Field); ok {
		ce.Value = fv
	}
	return err
}

// fieldValue returns the field that path names in v, a struct that
// prefix names in path ("" for none), when it holds a number, a bool, a
// string or a duration: `Default.Delay` in a Config, `Backoff.Factor` in a
// ScopeConfig with the prefix "Default". A path through a map (a Scopes
// key) names no field here.
func fieldValue(v any, prefix, path string) (any, bool) {
	if prefix != "" {
		var ok bool
		if path, ok = strings.CutPrefix(path, prefix+"."); !ok {
			return nil, false
		}
	}
	rv := reflect.ValueOf(v)
	for name := range strings.SplitSeq(path, ".") {
		if rv.Kind() != reflect.Struct {
			return nil, false
		}
		if rv = rv.FieldByName(name); !rv.IsValid() || !rv.CanInterface() {
			return nil, false
		}
	}
	switch rv.Kind() {
	case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return rv.Interface(), true
	}
	return nil, false
}

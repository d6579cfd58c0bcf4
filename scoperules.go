package throttle

// Config.Scopes entries as users write them: completed from Default, and
// keys that are glob patterns.

import (
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// completeFrom fills the parts of a Config.Scopes entry (or of a
// SetScopeConfig argument) that were left at a zero value New would
// refuse, from def: Concurrency, Window, and AutoThrottle, Backoff and
// Rampup when left entirely zero. So a literal with only the fields one
// cares about, {Delay: 200 * time.Millisecond, Concurrency: 2}, is the
// default scope with those two changed (colly's LimitRule habit), while
// every zero that means something stays what it says: Delay 0 (no
// delay), Jitter{} (no jitter), SlotDelay 0, Quota 0, IgnoreRobotsTxt
// false. To turn a sub-config off in an entry, start from its default:
// b := DefaultConfig().Default.Backoff; b.Enabled = false.
func (s *ScopeConfig) completeFrom(def *ScopeConfig) {
	if s.Concurrency == 0 {
		s.Concurrency = def.Concurrency
	}
	if s.Window == 0 {
		s.Window = def.Window
	}
	if reflect.ValueOf(s.AutoThrottle).IsZero() {
		s.AutoThrottle = def.AutoThrottle
	}
	if reflect.ValueOf(s.Backoff).IsZero() {
		s.Backoff = def.Backoff
		s.Backoff.Statuses = slices.Clone(def.Backoff.Statuses)
	}
	if reflect.ValueOf(s.Rampup).IsZero() {
		s.Rampup = def.Rampup
	}
}

// validateScopeEntry checks a completed Config.Scopes entry (or
// SetScopeConfig argument) and its key, naming the entry in errors.
func validateScopeEntry(key string, sc *ScopeConfig) error {
	name := "Scopes[" + strconv.Quote(key) + "]"
	if _, err := path.Match(key, ""); err != nil {
		return &ConfigError{Field: name, Reason: "bad glob pattern (path.Match syntax)"}
	}
	return sc.validate(name)
}

// isScopePattern reports whether a Config.Scopes key is a glob pattern
// (path.Match syntax: it holds *, ? or [) rather than one scope's key.
func isScopePattern(key string) bool { return strings.ContainsAny(key, "*?[") }

// scopePatterns returns the pattern keys of scopes, the most specific
// first: the longest, then in key order, so that "*.api.example.com"
// wins over "*.example.com" for "v1.api.example.com".
func scopePatterns(scopes map[string]ScopeConfig) []string {
	var ps []string
	for k := range scopes {
		if isScopePattern(k) {
			ps = append(ps, k)
		}
	}
	slices.SortFunc(ps, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return ps
}

// matchScopePattern returns the first of patterns that matches key.
func matchScopePattern(patterns []string, key string) (string, bool) {
	for _, p := range patterns {
		if ok, _ := path.Match(p, key); ok { // patterns were checked by New
			return p, true
		}
	}
	return "", false
}

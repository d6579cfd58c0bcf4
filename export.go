package throttle

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The learned-state file: versioned JSON, one record per scope that has
// learned something (an AutoThrottle delay, a backoff episode, a rampup
// level, a robots.txt delay).
//
//	{"format":"throttle-learned","version":1,"exported":"2026-11-22T05:00:00Z",
//	 "scopes":[{"key":"example.com","state":{"v":2,"b":{"d":4000000000,...}}},
//	           {"key64":"/w==","state":{...}}]}
//
// A key that is valid UTF-8 is written as "key", a JSON string, which
// holds it byte for byte. One that is not (a JSON string cannot hold it:
// encoding/json would write U+FFFD in its place) is written as "key64",
// its bytes in standard base64; a reader that knows only "key" refuses the
// file for the unknown field instead of renaming the scope.
const (
	exportFormat  = "throttle-learned"
	exportVersion = 1
	// maxImportSize bounds what Import reads: 256 MiB, about a million
	// scopes.
	maxImportSize = 256 << 20
)

type exportFile struct {
	Format   string        `json:"format"`
	Version  int           `json:"version"`
	Exported time.Time     `json:"exported"`
	Scopes   []exportScope `json:"scopes"`
}

// exportScope is one scope's record: its key in Key, or in KeyBytes when
// it is not valid UTF-8, never both.
type exportScope struct {
	Key      string       `json:"key,omitempty"`
	KeyBytes []byte       `json:"key64,omitempty"`
	State    learnedState `json:"state"`
}

// newExportScope returns the record of key's state st.
func newExportScope(key string, st learnedState) exportScope {
	if utf8.ValidString(key) {
		return exportScope{Key: key, State: st}
	}
	return exportScope{KeyBytes: []byte(key), State: st}
}

// key returns the record's scope key.
func (sc *exportScope) key() (string, error) {
	switch {
	case sc.Key != "" && len(sc.KeyBytes) > 0:
		return "", errors.New("both key and key64")
	case len(sc.KeyBytes) > 0:
		return string(sc.KeyBytes), nil
	case sc.Key == "":
		return "", errors.New("no key")
	}
	return sc.Key, nil
}

// maxImportSkew is how far in the future an imported time may be: the
// clocks of the exporting and importing machines may disagree.
const maxImportSkew = 24 * time.Hour

// Export writes the learned state of every scope that has learned
// something, as versioned JSON, for Import in a later run: a restarted
// crawler resumes with the delays it had learned instead of probing again.
// Scopes whose ScopeManager is not the default one are skipped. Scopes are
// written sorted by key, so two exports of the same state are identical.
func (m *ThrottlingManager) Export(w io.Writer) error {
	now := m.clock.Now()
	f := exportFile{Format: exportFormat, Version: exportVersion, Exported: now.UTC().Round(0)}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		for k, s := range sh.m {
			ds, ok := s.mgr.(*defaultScope)
			if !ok {
				continue
			}
			s.mu.Lock()
			if ds.learnedAnything() {
				f.Scopes = append(f.Scopes, newExportScope(k, ds.exportLearned()))
			}
			s.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(f.Scopes, func(a, b exportScope) int {
		ka, _ := a.key()
		kb, _ := b.key()
		return strings.Compare(ka, kb)
	})
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(&f); err != nil {
		return err
	}
	return bw.Flush()
}

// learnedAnything reports whether the scope holds learned state worth
// saving.
func (s *defaultScope) learnedAnything() bool {
	return s.auto.learned(&s.cfg) || s.backoff.learned() || s.rampup.learned()
}

// Import reads what Export wrote and gives each scope its learned state,
// creating scopes as needed; scopes not in the file keep theirs. Keys come
// back byte for byte. It returns how many scopes it restored.
//
// The whole file is read and checked first, and nothing is applied when
// any check fails: a corrupt, truncated or too large file (over 256 MiB,
// about a million scopes), one of another format or of a newer version,
// any invalid record, or more scopes than Config.MaxScopes holds, is
// refused with an error wrapping ErrImport; a scope whose configuration
// this manager cannot make (Config.ScopeConfigFunc returns an invalid
// one) with that *ConfigError. MaxScopes bounds each of the scope table's
// 64 shards to a 64th of it, so a file that nearly fills it may still
// overflow a shard, whose eviction then forgets scopes just restored:
// Import then returns how many scopes kept their state and an error
// wrapping ErrImport that says how many were lost.
//
// With a Store, learned state lives in the store: Import restores this
// manager's copy, which its next releases write back.
func (m *ThrottlingManager) Import(r io.Reader) (int, error) {
	f, keys, err := readExport(r, m.clock.Now())
	if err != nil {
		return 0, err
	}
	if limit := m.cfg.MaxScopes; limit > 0 && len(keys) > limit {
		return 0, fmt.Errorf("%w: %d scopes, more than MaxScopes (%d) holds", ErrImport, len(keys), limit)
	}
	now := m.clock.Now()
	// Every scope's configuration before any scope is made: a scope the
	// table lacks is configured when it is made, which may fail.
	for _, k := range keys {
		if m.hasScope(k) {
			continue
		}
		if _, _, err := m.scopeConfig(k); err != nil {
			return 0, err
		}
	}
	scopes := make([]*scope, len(keys))
	var made []*scope
	for i, k := range keys {
		had := m.hasScope(k)
		s, err := m.lookup(k, now)
		if err != nil {
			// ScopeConfigFunc changed its answer since the check above:
			// the scopes made here go again, cold as they came.
			m.forgetUnused(made)
			return 0, err
		}
		if !had {
			made = append(made, s)
		}
		scopes[i] = s
	}
	n := 0
	for i, s := range scopes {
		for {
			s.mu.Lock()
			if !s.dead {
				break
			}
			s.mu.Unlock() // forgotten meanwhile: its successor takes the state
			if s, err = m.lookup(keys[i], now); err != nil {
				return n, err
			}
			scopes[i] = s
		}
		if ds, ok := s.mgr.(*defaultScope); ok {
			// readExport checked the state: importLearned cannot fail.
			_ = ds.importLearned(&f.Scopes[i].State)
			s.lastUsed = now.UnixNano()
			wakeNeeding(s, s.queue.head)
			n++
		} else {
			scopes[i] = nil // a custom ScopeManager's: nothing restored
		}
		s.mu.Unlock()
	}
	// MaxScopes bounds each shard of the table: the scopes made later may
	// have evicted some restored earlier.
	lost := 0
	for _, s := range scopes {
		if s != nil {
			s.mu.Lock()
			if s.dead {
				lost++
			}
			s.mu.Unlock()
		}
	}
	if lost > 0 {
		return n - lost, fmt.Errorf("%w: %d of %d scopes forgotten as they were restored: MaxScopes (%d) holds fewer in some of the table's shards",
			ErrImport, lost, n, m.cfg.MaxScopes)
	}
	return n, nil
}

// readExport reads and checks a file Export wrote, at now: it returns the
// file and its records' keys, or an error wrapping ErrImport.
func readExport(r io.Reader, now time.Time) (*exportFile, []string, error) {
	lr := &io.LimitedReader{R: r, N: maxImportSize + 1}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	var f exportFile
	if err := dec.Decode(&f); err != nil {
		if lr.N <= 0 {
			return nil, nil, fmt.Errorf("%w: larger than %d bytes", ErrImport, maxImportSize)
		}
		return nil, nil, fmt.Errorf("%w: %v", ErrImport, err)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("%w: data after the JSON document", ErrImport)
	}
	switch {
	case f.Format != exportFormat:
		return nil, nil, fmt.Errorf("%w: format %q, want %q", ErrImport, f.Format, exportFormat)
	case f.Version > exportVersion:
		return nil, nil, fmt.Errorf("%w: version %d is newer than this library reads (%d)", ErrImport, f.Version, exportVersion)
	case f.Version < 1:
		return nil, nil, fmt.Errorf("%w: version %d", ErrImport, f.Version)
	}
	keys := make([]string, len(f.Scopes))
	seen := make(map[string]bool, len(f.Scopes))
	for i := range f.Scopes {
		sc := &f.Scopes[i]
		k, err := sc.key()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: scope %d: %v", ErrImport, i, err)
		}
		if seen[k] {
			return nil, nil, fmt.Errorf("%w: scope %q twice", ErrImport, k)
		}
		seen[k], keys[i] = true, k
		if err := sc.State.check(); err != nil {
			return nil, nil, fmt.Errorf("%w: scope %q: %v", ErrImport, k, err)
		}
		if t := sc.State.latest(); t > now.Add(maxImportSkew).UnixNano() {
			// A window or step in the future would hold the policy
			// back until then (a backoff ignoring signals for years).
			return nil, nil, fmt.Errorf("%w: scope %q: times after %v", ErrImport, k, now.Add(maxImportSkew))
		}
	}
	return &f, keys, nil
}

// hasScope reports whether the scope table holds key.
func (m *ThrottlingManager) hasScope(key string) bool {
	sh := m.shardOf(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[key] != nil
}

// forgetUnused forgets the scopes of ss that nothing uses yet.
func (m *ThrottlingManager) forgetUnused(ss []*scope) {
	for _, s := range ss {
		sh := m.shardOf(s.key)
		sh.mu.Lock()
		s.mu.Lock()
		if !s.dead && s.queue.n == 0 && s.counts.inFlight == 0 && sh.m[s.key] == s {
			sh.forget(s)
		}
		s.mu.Unlock()
		sh.mu.Unlock()
	}
}

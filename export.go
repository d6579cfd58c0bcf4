package throttle

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// The learned-state file: versioned JSON, one record per scope that has
// learned something (an AutoThrottle delay, a backoff episode, a rampup
// level, a robots.txt delay).
//
//	{"format":"throttle-learned","version":1,"exported":"2026-11-22T05:00:00Z",
//	 "scopes":[{"key":"example.com","state":{"v":2,"b":{"d":4000000000,...}}}]}
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

type exportScope struct {
	Key   string       `json:"key"`
	State learnedState `json:"state"`
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
				f.Scopes = append(f.Scopes, exportScope{Key: k, State: ds.exportLearned()})
			}
			s.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(f.Scopes, func(a, b exportScope) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
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
// creating scopes as needed; scopes not in the file keep theirs. The whole
// file is read and checked first: a corrupt, truncated or too large file
// (over 256 MiB, about a million scopes),
// one of another format or of a newer version, or any invalid record is
// refused with an error wrapping ErrImport, and nothing is applied. It
// returns how many scopes it restored. With a Store, learned state lives
// in the store: Import restores this manager's copy, which its next
// releases write back.
func (m *ThrottlingManager) Import(r io.Reader) (int, error) {
	lr := &io.LimitedReader{R: r, N: maxImportSize + 1}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	var f exportFile
	if err := dec.Decode(&f); err != nil {
		if lr.N <= 0 {
			return 0, fmt.Errorf("%w: larger than %d bytes", ErrImport, maxImportSize)
		}
		return 0, fmt.Errorf("%w: %v", ErrImport, err)
	}
	if dec.More() {
		return 0, fmt.Errorf("%w: data after the JSON document", ErrImport)
	}
	switch {
	case f.Format != exportFormat:
		return 0, fmt.Errorf("%w: format %q, want %q", ErrImport, f.Format, exportFormat)
	case f.Version > exportVersion:
		return 0, fmt.Errorf("%w: version %d is newer than this library reads (%d)", ErrImport, f.Version, exportVersion)
	case f.Version < 1:
		return 0, fmt.Errorf("%w: version %d", ErrImport, f.Version)
	}
	now := m.clock.Now()
	seen := make(map[string]bool, len(f.Scopes))
	for i := range f.Scopes {
		sc := &f.Scopes[i]
		if sc.Key == "" {
			return 0, fmt.Errorf("%w: scope %d has no key", ErrImport, i)
		}
		if seen[sc.Key] {
			return 0, fmt.Errorf("%w: scope %q twice", ErrImport, sc.Key)
		}
		seen[sc.Key] = true
		if err := sc.State.check(); err != nil {
			return 0, fmt.Errorf("%w: scope %q: %v", ErrImport, sc.Key, err)
		}
		if t := sc.State.latest(); t > now.Add(maxImportSkew).UnixNano() {
			// A window or step in the future would hold the policy
			// back until then (a backoff ignoring signals for years).
			return 0, fmt.Errorf("%w: scope %q: times after %v", ErrImport, sc.Key, now.Add(maxImportSkew))
		}
	}
	n := 0
	for i := range f.Scopes {
		sc := &f.Scopes[i]
		s, err := m.lookup(sc.Key, now)
		if err != nil {
			return n, err // a scope configuration error, not the file's
		}
		ds, ok := s.mgr.(*defaultScope)
		if !ok {
			continue
		}
		s.mu.Lock()
		// check passed above: importLearned cannot fail here.
		_ = ds.importLearned(&sc.State)
		s.lastUsed = now.UnixNano()
		wakeNeeding(s, s.queue.head)
		s.mu.Unlock()
		n++
	}
	return n, nil
}

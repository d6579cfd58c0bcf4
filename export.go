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
			s.mu.Lock()
			if st, ok := s.pol.learned(); ok {
				f.Scopes = append(f.Scopes, newExportScope(k, st))
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

// learned returns the scope's learned state, and false when it holds
// none worth saving.
func (s *defaultScope) learned() (learnedState, bool) {
	if !s.auto.learned(&s.cfg) && !s.backoff.learned() && !s.rampup.learned() {
		return learnedState{}, false
	}
	return s.exportLearned(), true
}

// restore puts an imported learned state in place. readExport checked
// it: importLearned cannot fail.
func (s *defaultScope) restore(st *learnedState) bool {
	_ = s.importLearned(st)
	return true
}

// Import reads what Export wrote and gives each scope its learned state,
// creating scopes as needed; scopes not in the file keep theirs. Keys come
// back byte for byte. It returns how many scopes it restored.
//
// The whole file is read and checked first, and nothing is applied when
// any check fails: a corrupt, truncated or too large file (over 256 MiB,
// or over 2^20 scopes), one of another format or of a newer version, any
// invalid record, a time more than a day ahead of the manager's clock, or
// more scopes than Config.MaxScopes, is refused with an error wrapping
// ErrImport; a scope whose configuration this manager cannot make
// (Config.ScopeConfigFunc returns an invalid one) with that *ConfigError.
// A file written by a machine whose clock ran ahead of this one's (by
// less than a day) has its times moved back together until none lies
// ahead, so no window waits for the other clock's time.
//
// MaxScopes bounds each of the scope table's 64 shards to a 64th of it,
// so a file that nearly fills it may still overflow a shard, whose
// eviction then forgets scopes just restored: Import then returns how
// many scopes kept their state and an error wrapping ErrImport that says
// how many were lost.
//
// With a Store, learned state lives in the store: Import restores this
// manager's copy, which its next releases write back.
func (m *ThrottlingManager) Import(r io.Reader) (int, error) {
	limit := maxImportScopes
	if m.cfg.MaxScopes > 0 {
		limit = min(limit, m.cfg.MaxScopes)
	}
	f, keys, err := readExport(r, m.clock.Now(), maxImportSize, limit)
	if err != nil {
		if limit == m.cfg.MaxScopes && errors.Is(err, errTooManyScopes) {
			err = fmt.Errorf("%w (MaxScopes)", err)
		}
		return 0, err
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
		if s.pol.restore(&f.Scopes[i].State) {
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

// errTooManyScopes is wrapped by the error about a file with more records
// than Import reads.
var errTooManyScopes = errors.New("more scopes than")

// maxImportScopes bounds the records Import reads, whatever MaxScopes:
// a record takes a few hundred bytes of memory once read, however few
// bytes of the file it took.
const maxImportScopes = 1 << 20

// readExport reads and checks a file Export wrote, of at most limit bytes
// and maxScopes records, at now: it returns the file and its records'
// keys, or an error wrapping ErrImport. It reads the records one at a
// time, each checked as it comes, so a file is refused at its first bad
// record, and what it holds in memory is what the records take.
func readExport(r io.Reader, now time.Time, limit int64, maxScopes int) (*exportFile, []string, error) {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	fail := func(err error) error {
		if lr.N <= 0 {
			return fmt.Errorf("%w: larger than %d bytes", ErrImport, limit)
		}
		return fmt.Errorf("%w: %v", ErrImport, err)
	}
	f := &exportFile{}
	var keys []string
	read := map[string]bool{}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, nil, fail(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fail(err)
		}
		name, _ := tok.(string)
		if read[name] {
			return nil, nil, fail(fmt.Errorf("field %q twice", name))
		}
		read[name] = true
		switch name {
		case "format":
			err = dec.Decode(&f.Format)
		case "version":
			err = dec.Decode(&f.Version)
		case "exported":
			err = dec.Decode(&f.Exported)
		case "scopes":
			if read["format"] && read["version"] {
				// What Export writes: a file of a newer version or
				// another format says so before its records are read.
				if err := f.checkHeader(); err != nil {
					return nil, nil, err
				}
			}
			if keys, err = f.readScopes(dec, now, maxScopes); err != nil {
				if errors.Is(err, ErrImport) {
					return nil, nil, err
				}
				return nil, nil, fail(err)
			}
		default:
			err = fmt.Errorf("unknown field %q", name)
		}
		if err != nil {
			return nil, nil, fail(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, nil, fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if lr.N <= 0 {
			return nil, nil, fail(err)
		}
		return nil, nil, fmt.Errorf("%w: data after the JSON document", ErrImport)
	}
	if err := f.checkHeader(); err != nil {
		return nil, nil, err
	}
	var latest int64
	for i := range f.Scopes {
		latest = max(latest, f.Scopes[i].State.latest())
	}
	if ahead := latest - now.UnixNano(); ahead > 0 {
		// The file's clock ran ahead of ours: a window or step in the
		// future would hold its policy back until then (a backoff that
		// does not recover for a day). Its times go back together, by
		// as much as the latest lies ahead.
		for i := range f.Scopes {
			f.Scopes[i].State.shift(ahead)
		}
	}
	return f, keys, nil
}

// checkHeader checks the file's format and version.
func (f *exportFile) checkHeader() error {
	switch {
	case f.Format != exportFormat:
		return fmt.Errorf("%w: format %q, want %q", ErrImport, f.Format, exportFormat)
	case f.Version > exportVersion:
		return fmt.Errorf("%w: version %d is newer than this library reads (%d)", ErrImport, f.Version, exportVersion)
	case f.Version < 1:
		return fmt.Errorf("%w: version %d", ErrImport, f.Version)
	}
	return nil
}

// readScopes reads the records of the scopes array into f, at most
// maxScopes, checking each, and returns their keys.
func (f *exportFile) readScopes(dec *json.Decoder, now time.Time, maxScopes int) ([]string, error) {
	tok, err := dec.Token()
	if err != nil || tok == nil { // null: no scopes
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("scopes: %v, want an array", tok)
	}
	var keys []string
	seen := map[string]bool{}
	for dec.More() {
		if len(f.Scopes) == maxScopes {
			return nil, fmt.Errorf("%w: %w %d", ErrImport, errTooManyScopes, maxScopes)
		}
		var sc exportScope
		if err := dec.Decode(&sc); err != nil {
			return nil, err
		}
		k, err := sc.key()
		if err != nil {
			return nil, fmt.Errorf("%w: scope %d: %v", ErrImport, len(keys), err)
		}
		if seen[k] {
			return nil, fmt.Errorf("%w: scope %q twice", ErrImport, k)
		}
		if err := sc.State.check(); err != nil {
			return nil, fmt.Errorf("%w: scope %q: %v", ErrImport, k, err)
		}
		if sc.State.latest() > now.Add(maxImportSkew).UnixNano() {
			return nil, fmt.Errorf("%w: scope %q: times after %v", ErrImport, k, now.Add(maxImportSkew))
		}
		seen[k] = true
		keys = append(keys, k)
		f.Scopes = append(f.Scopes, sc)
	}
	return keys, expectDelim(dec, ']')
}

// expectDelim reads the next token of dec, which must be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("%v, want %v", tok, d)
	}
	return nil
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

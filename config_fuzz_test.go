package throttle

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/store"
)

// fuzzReader turns fuzz bytes into config values: each value first reads a
// selector byte that keeps the default or picks zero, a small value, a
// negative one, an extreme or a raw bit pattern (NaN and infinities for
// floats). Past the end of the input every value keeps its default, so
// short inputs give mostly valid configurations and the target reads at
// most a fixed number of bytes, whatever the input's length.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) u64() uint64 {
	var buf [8]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

func (r *fuzzReader) dur(d *time.Duration) {
	switch r.byte() % 9 {
	case 0: // keep
	case 1:
		*d = 0
	case 2:
		*d = time.Duration(r.byte()) * 10 * time.Millisecond
	case 3:
		*d = time.Duration(r.byte()) * time.Second
	case 4:
		*d = -time.Duration(r.byte()) - 1
	case 5:
		*d = math.MaxInt64
	case 6:
		*d = math.MinInt64
	case 7:
		*d = time.Duration(r.u64())
	case 8:
		*d = time.Nanosecond
	}
}

func (r *fuzzReader) float(f *float64) {
	switch r.byte() % 10 {
	case 0: // keep
	case 1:
		*f = 0
	case 2:
		*f = float64(r.byte())/64 - 2 // -2 .. 2
	case 3:
		*f = math.NaN()
	case 4:
		*f = math.Inf(1)
	case 5:
		*f = math.Inf(-1)
	case 6:
		*f = math.Float64frombits(r.u64())
	case 7:
		*f = -1
	case 8:
		*f = 100 + float64(r.byte())/128 - 1 // around Jitter.Max's bound
	case 9:
		*f = math.SmallestNonzeroFloat64
	}
}

func (r *fuzzReader) int(i *int) {
	switch r.byte() % 8 {
	case 0: // keep
	case 1:
		*i = 0
	case 2:
		*i = int(r.byte()) - 8
	case 3:
		*i = math.MaxInt
	case 4:
		*i = math.MinInt
	case 5:
		*i = int(r.u64())
	case 6:
		*i = -1
	case 7:
		*i = 1
	}
}

func (r *fuzzReader) int64(i *int64) {
	v := int(*i)
	r.int(&v)
	*i = int64(v)
}

func (r *fuzzReader) bool(b *bool) {
	switch r.byte() % 3 {
	case 1:
		*b = false
	case 2:
		*b = true
	}
}

func (r *fuzzReader) jitter(j *Jitter) {
	r.float(&j.Min)
	r.float(&j.Max)
}

func (r *fuzzReader) scope(sc *ScopeConfig) {
	r.int(&sc.Concurrency)
	r.dur(&sc.Delay)
	r.dur(&sc.SlotDelay)
	r.jitter(&sc.Jitter)
	r.int64(&sc.Quota)
	r.dur(&sc.Window)
	r.bool(&sc.IgnoreRobotsTxt)
	a := &sc.AutoThrottle
	r.bool(&a.Enabled)
	r.dur(&a.StartDelay)
	r.dur(&a.MaxDelay)
	r.float(&a.TargetConcurrency)
	b := &sc.Backoff
	r.bool(&b.Enabled)
	if c := r.byte(); c%4 == 1 {
		b.Statuses = append(b.Statuses, int(binary.LittleEndian.Uint16([]byte{r.byte(), r.byte()})))
	} else if c%4 == 2 {
		b.Statuses = nil
	}
	r.float(&b.Factor)
	r.dur(&b.MinDelay)
	r.dur(&b.MaxDelay)
	r.jitter(&b.Jitter)
	r.float(&b.ConcurrencyFactor)
	r.dur(&b.OutageProbe)
	r.dur(&b.RedirectMaxDelay)
	p := &sc.Rampup
	r.bool(&p.Enabled)
	r.int(&p.MinSignals)
	r.int(&p.MaxSignals)
	r.float(&p.MaxRate)
	r.int(&p.MaxConcurrency)
}

// fuzzConfig builds a Config from fuzz bytes, starting from DefaultConfig.
func fuzzConfig(in []byte) Config {
	r := &fuzzReader{b: in}
	cfg := DefaultConfig()
	flags := r.byte()
	r.int(&cfg.GlobalConcurrency)
	r.dur(&cfg.IdleTimeout)
	r.dur(&cfg.LearnedIdleTimeout)
	r.int(&cfg.MaxScopes)
	r.int(&cfg.DelayedWarnThreshold)
	r.int(&cfg.MaxWaiting)
	r.dur(&cfg.MaxRefusal)
	r.dur(&cfg.StoreRetry)
	cfg.StoreFallbackLocal = r.byte()%2 == 1
	cfg.JitterSeed = uint64(r.byte())
	r.bool(&cfg.Robots.Enabled)
	r.dur(&cfg.Robots.MaxDelay)
	r.dur(&cfg.Robots.TTL)
	r.dur(&cfg.Robots.FetchTimeout)
	r.int(&cfg.Robots.MaxOrigins)
	r.scope(&cfg.Default)
	if flags&1 != 0 {
		// One explicit scope: the key "a.test", "" or one from the input.
		key := "a.test"
		switch r.byte() % 4 {
		case 1:
			key = ""
		case 2:
			key = string([]byte{r.byte(), r.byte()})
		}
		sc := defaultScopeConfig()
		r.scope(&sc)
		cfg.Scopes = map[string]ScopeConfig{key: sc}
	}
	if flags&2 != 0 {
		cfg.Store = store.NewMemory(nil)
	}
	if flags&4 != 0 {
		cfg.NewScopeManager = NewDefaultScopeManager
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// configField reports whether path (a ConfigError's Field) names a field
// of cfg, e.g. `Default.Backoff.Jitter.Min` or `Scopes["a.test"].Delay`.
func configField(cfg *Config, path string) bool {
	v := reflect.ValueOf(*cfg)
	if rest, ok := strings.CutPrefix(path, "Scopes["); ok {
		lit, err := strconv.QuotedPrefix(rest) // the key may hold ']'
		if err != nil {
			return false
		}
		key, _ := strconv.Unquote(lit)
		if _, ok := cfg.Scopes[key]; !ok {
			return false
		}
		rest, ok = strings.CutPrefix(rest[len(lit):], "]")
		if !ok {
			return false
		}
		if rest == "" {
			return true // the key itself
		}
		if path, ok = strings.CutPrefix(rest, "."); !ok {
			return false
		}
		v = reflect.ValueOf(cfg.Scopes[key])
	}
	for name := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return false
		}
		if v = v.FieldByName(name); !v.IsValid() {
			return false
		}
	}
	return true
}

// FuzzConfigValidate: New never panics; it either refuses the Config with a
// *ConfigError that names one of its fields, or returns a manager that
// admits a first request at once, and whose refusals, whatever the
// feedback, always say until when (nothing is held that a release could
// free), at a time after now.
func FuzzConfigValidate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1})                // GlobalConcurrency 0
	f.Add([]byte{0, 0, 4, 3})          // IdleTimeout negative
	f.Add(append(make([]byte, 16), 3)) // Default.Concurrency: MaxInt
	f.Add(append(make([]byte, 19), 3)) // Default.Jitter.Min NaN
	f.Add(append(make([]byte, 20), 4)) // Default.Jitter.Max +Inf
	emptyKey := make([]byte, 44)       // flags, 15 manager values, 27 of Default, the key
	emptyKey[0], emptyKey[43] = 1, 1
	f.Add(emptyKey)           // Scopes[""]
	f.Add([]byte{6, 0, 0, 0}) // Store with NewScopeManager
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := fuzzConfig(in)
		synctest.Test(t, func(t *testing.T) {
			m, err := New(cfg)
			if err != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("New: %v (%T), not a *ConfigError", err, err)
				}
				if ce.Reason == "" || !configField(&cfg, ce.Field) {
					t.Fatalf("New: %q names no field of Config", err)
				}
				return
			}
			key := "b.test"
			for k := range cfg.Scopes {
				if k != "" && (len(in) == 0 || in[len(in)-1]%2 == 0) {
					key = k // the explicit scope
				}
			}
			req, _ := http.NewRequest(http.MethodGet, "http://x.test/", nil)
			req = req.WithContext(WithScopeKeys(req.Context(), key))
			p, adm, err := m.TryAcquire(req)
			if err != nil || p == nil {
				t.Fatalf("a valid config's first request is refused: %v %+v", err, adm)
			}
			// A few rounds of feedback and admission with nothing held.
			fbs := []Feedback{
				{Status: 429, Backoff: true, Wait: time.Hour, HasWait: true},
				{Err: errors.New("timeout"), Timeout: true, Backoff: true},
				{Status: 200, Latency: time.Second, Quota: []QuotaUse{{Cost: 3, HasCost: true}}},
				{Status: 503},
				{Status: 200, Exhausted: true, Wait: 5 * time.Second, HasWait: true, Quota: []QuotaUse{{Remaining: 0, HasRemaining: true}}},
			}
			for i := 0; ; i++ {
				time.Sleep(time.Millisecond)
				p.ReleaseFeedback(fbs[(i+len(in))%len(fbs)])
				if i == 8 {
					break
				}
				for {
					now := time.Now()
					p, adm, err = m.TryAcquire(req)
					if errors.Is(err, ErrScopeRefusing) {
						return // MaxRefusal gave up on the scope after the signals
					}
					if err != nil {
						t.Fatalf("TryAcquire: %v", err)
					}
					if p != nil {
						break
					}
					if adm.At.IsZero() || !adm.At.After(now) {
						t.Fatalf("refused with nothing held: %+v at %v", adm, now)
					}
					if adm.At.Sub(now) > 24*time.Hour {
						return // a valid config may wait that long (Delay 290 years)
					}
					time.Sleep(adm.At.Sub(now))
				}
			}
			st := m.Stats()
			if st.InFlight != 0 || st.Waiting != 0 {
				t.Fatalf("after the releases: %+v", st)
			}
		})
	})
}

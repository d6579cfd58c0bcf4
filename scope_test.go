package throttle

import (
	"context"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJitterRangeAndSeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gaps := func(seed uint64) []time.Duration {
			cfg := DefaultConfig()
			cfg.Default.Delay = time.Second
			cfg.Default.SlotDelay = 0
			cfg.Default.Jitter = Jitter{Min: -0.1, Max: 0.3}
			cfg.JitterSeed = seed
			m := newManager(t, cfg)
			var out []time.Duration
			last := time.Now()
			for i := 0; i < 200; i++ {
				p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
				require.NoError(t, err)
				if i > 0 {
					out = append(out, time.Since(last))
				}
				last = time.Now()
				p.Release(ok200, nil)
			}
			return out
		}
		g1, g2, g3 := gaps(7), gaps(7), gaps(8)
		assert.Equal(t, g1, g2, "same seed, same jitter")
		assert.NotEqual(t, g1, g3)
		var sum time.Duration
		for _, g := range g1 {
			assert.GreaterOrEqual(t, g, 900*time.Millisecond)
			assert.LessOrEqual(t, g, 1300*time.Millisecond)
			sum += g
		}
		mean := sum / time.Duration(len(g1))
		assert.InDelta(t, float64(1100*time.Millisecond), float64(mean), float64(40*time.Millisecond),
			"asymmetric range -10%%..+30%%: mean is +10%%")
	})
}

// TestTicketFields: defaultScope.start sets a Ticket field by field; a new
// field must be set there too.
func TestTicketFields(t *testing.T) {
	assert.Equal(t, 4, reflect.TypeFor[Ticket]().NumField(), "set the new field in defaultScope.start")
	cfg := DefaultConfig().Default
	cfg.SlotDelay = 0
	d := NewDefaultScopeManager(ScopeParams{Key: "a", Config: cfg}).(*defaultScope)
	now := time.Now()
	tk := Ticket{Slot: 7, Cost: 9, WindowIndex: 3, Start: now.Add(-time.Hour)} // a used ticket
	d.start(&tk, now, 2)
	assert.Equal(t, Ticket{Slot: -1, Cost: 2, Start: now}, tk)
	assert.Equal(t, tk, d.Start(now, 2), "Start is start in place")
}

// TestScopeLayout keeps what an admission and a release of a default
// scope read in six cache lines (see defaultScope): a crawl over many
// hosts meets its scopes cold, and each line is a miss.
func TestScopeLayout(t *testing.T) {
	const (
		line   = 64
		class  = 704 // the size class, a whole number of lines
		header = 8   // the allocator's header before an object over 512 bytes
	)
	ty := reflect.TypeFor[defaultScope]()
	if size := ty.Size() + header; size > class {
		t.Fatalf("defaultScope takes %d bytes: past the %d-byte size class", size, class)
	}
	// off returns the offset in the allocation of a field path.
	off := func(path ...string) uintptr {
		o, typ := uintptr(header), ty
		for _, name := range path {
			f, ok := typ.FieldByName(name)
			if !ok {
				t.Fatalf("no field %v", path)
			}
			o, typ = o+f.Offset, f.Type
		}
		return o
	}
	end := func(path ...string) uintptr {
		o, typ := uintptr(header), ty
		for _, name := range path {
			f, _ := typ.FieldByName(name)
			o, typ = o+f.Offset, f.Type
		}
		return o + typ.Size()
	}
	for _, c := range []struct {
		first, last []string
	}{
		{[]string{"cfg", "Quota"}, []string{"cfg", "Backoff", "Enabled"}},
		{[]string{"lim"}, []string{"plainGap"}},
		{[]string{"adm", "LastStart"}, []string{"adm", "Quota", "Set"}},
		{[]string{"backoff", "winEnd"}, []string{"backoff", "isoOK"}},
		{[]string{"rampup"}, []string{"quota", "probe"}},
	} {
		if a, b := off(c.first...), end(c.last...)-1; a/line != b/line {
			t.Errorf("%v to %v span bytes %d to %d: two cache lines", c.first, c.last, a, b)
		}
	}
}

package throttle

import (
	"reflect"
	"testing"
)

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

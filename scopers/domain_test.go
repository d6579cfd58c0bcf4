package scopers

import (
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/scopekey"
)

func TestDomainLevels(t *testing.T) {
	tests := []struct {
		host string
		want []string
	}{
		{"a.b.example.co.uk", []string{"example.co.uk", "b.example.co.uk", "a.b.example.co.uk"}},
		{"www.example.com", []string{"example.com", "www.example.com"}},
		{"example.com", []string{"example.com"}},
		{"a.foo.blogspot.com", []string{"foo.blogspot.com", "a.foo.blogspot.com"}},
		{"foo.blogspot.com", []string{"foo.blogspot.com"}},
		{"blogspot.com", []string{"blogspot.com"}},
		{"x.y.user.github.io", []string{"user.github.io", "y.user.github.io", "x.y.user.github.io"}},
		{"co.uk", []string{"co.uk"}},
		{"com", []string{"com"}},
		{"localhost", []string{"localhost"}},
		{"192.0.2.1", []string{"192.0.2.1"}},
		{"2001:db8::1", []string{"2001:db8::1"}},
		{"", []string{""}},
		{"..", []string{".."}},
		{"a..b.example.com", []string{"a..b.example.com"}},
		{"a.example.com.", []string{"a.example.com."}},
	}
	for _, tt := range tests {
		if got := DomainLevels(tt.host); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DomainLevels(%q) = %q, want %q", tt.host, got, tt.want)
		}
	}
}

func TestDomainLevelsCap(t *testing.T) {
	// 40 labels under example.com: 41 levels in all, capped to 32.
	labels := make([]string, 40)
	for i := range labels {
		labels[i] = "l" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	host := strings.Join(labels, ".") + ".example.com"
	got := DomainLevels(host)
	if len(got) != scopekey.MaxPerRequest {
		t.Fatalf("len = %d, want %d: %q", len(got), scopekey.MaxPerRequest, got)
	}
	if got[0] != "example.com" {
		t.Errorf("got[0] = %q, want example.com", got[0])
	}
	if got[len(got)-1] != host {
		t.Errorf("last = %q, want the host", got[len(got)-1])
	}
	// The kept levels are the deepest ones, each one label under the next.
	for i := 2; i < len(got); i++ {
		if !strings.HasSuffix(got[i], "."+got[i-1]) || strings.Count(got[i], ".") != strings.Count(got[i-1], ".")+1 {
			t.Errorf("level %d %q is not one label under %q", i, got[i], got[i-1])
		}
	}
	if want := strings.Join(labels[30:], ".") + ".example.com"; got[1] != want {
		t.Errorf("got[1] = %q, want %q", got[1], want)
	}
	seen := map[string]bool{}
	for _, l := range got {
		if seen[l] {
			t.Errorf("duplicate level %q", l)
		}
		seen[l] = true
	}

	// Exactly 32 levels: nothing dropped.
	host = strings.Join(labels[:31], ".") + ".example.com"
	got = DomainLevels(host)
	if len(got) != 32 || got[0] != "example.com" || got[1] != labels[30]+".example.com" || got[31] != host {
		t.Errorf("32 levels: got %d levels %q", len(got), got)
	}
}

func TestDomainHierarchyNoHost(t *testing.T) {
	if _, err := DomainHierarchy(&http.Request{URL: &url.URL{Path: "/x"}}); !errors.Is(err, throttle.ErrNoHost) {
		t.Errorf("no host: err = %v", err)
	}
}

// FuzzDomainLevels: DomainLevels never panics and keeps its shape on any
// input, and on a normalised host runs from the registrable domain down to
// the host, each level one label under the one before.
func FuzzDomainLevels(f *testing.F) {
	for _, s := range []string{
		"", ".", "..", "a..b", "a.", "a...", "example.com", "EXAMPLE.COM.",
		"Bücher.example", "xn--bcher-kva.example.", "[2001:db8::1]:8080",
		"[2001:DB8::1]", "2001:db8::1", "192.0.2.1:80", "localhost", "co.uk",
		"foo.blogspot.com", "a.b.example.co.uk", "user.github.io", "[fe80::1%25en0]",
		"a_b.example", ":80", "[]", "[a:b]", "a：b", "［a", "[[a:b:c]", "[::1.]", "::0%.", "Ӏ", "ß.de", "xn--", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.a.b.c.d.e.f.g.example.com",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 4<<10 {
			in = in[:4<<10] // bounded work per input
		}
		if h := DomainLevels(in); len(h) == 0 || len(h) > scopekey.MaxPerRequest {
			t.Fatalf("DomainLevels(%q) = %q", in, h)
		}
		got, err := NormalizeHost(in)
		if err != nil {
			return
		}
		rd := RegistrableDomain(got)
		h := DomainLevels(got)
		if h[0] != rd || h[len(h)-1] != got {
			t.Fatalf("DomainLevels(%q) = %q, registrable domain %q", got, h, rd)
		}
		for i := 1; i < len(h); i++ {
			if !strings.HasSuffix(h[i], "."+h[i-1]) {
				t.Fatalf("DomainLevels(%q) = %q: %q not under %q", got, h, h[i], h[i-1])
			}
		}
	})
}

package throttle

import (
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestRegistrableDomain(t *testing.T) {
	tests := []struct{ host, want string }{
		{"example.com", "example.com"},
		{"www.example.com", "example.com"},
		{"a.b.example.co.uk", "example.co.uk"},
		{"example.co.uk", "example.co.uk"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"www.xn--bcher-kva.example", "xn--bcher-kva.example"},
		// Private suffixes are in the list x/net uses.
		{"foo.blogspot.com", "foo.blogspot.com"},
		{"a.foo.blogspot.com", "foo.blogspot.com"},
		{"user.github.io", "user.github.io"},
		{"x.user.github.io", "user.github.io"},
		{"bucket.s3.amazonaws.com", "bucket.s3.amazonaws.com"},
		// Wildcard rule *.ck with exception !www.ck.
		{"a.b.ck", "a.b.ck"},
		{"www.ck", "www.ck"},
		// No registrable domain: host unchanged.
		{"blogspot.com", "blogspot.com"},
		{"github.io", "github.io"},
		{"s3.amazonaws.com", "s3.amazonaws.com"},
		{"co.uk", "co.uk"},
		{"com", "com"},
		{"localhost", "localhost"},
		{"intranet", "intranet"},
		{"x.ck", "x.ck"},
		{"192.0.2.1", "192.0.2.1"},
		{"10.0.0.255", "10.0.0.255"},
		{"2001:db8::1", "2001:db8::1"},
		{"::ffff:192.0.2.1", "::ffff:192.0.2.1"},
		{"fe80::1%eth0", "fe80::1%eth0"},
		// Not normalised or malformed: unchanged, no panic.
		{"", ""},
		{".", "."},
		{"..", ".."},
		{"a..b", "a..b"},
		{"a..example.com", "a..example.com"},
		{"example.com.", "example.com."},
		{".example.com", ".example.com"},
		{"a:b.com", "a:b.com"},
	}
	for _, tt := range tests {
		if got := RegistrableDomain(tt.host); got != tt.want {
			t.Errorf("RegistrableDomain(%q) = %q, want %q", tt.host, got, tt.want)
		}
	}
}

func TestDomainHierarchy(t *testing.T) {
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
		if got := DomainHierarchy(tt.host); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DomainHierarchy(%q) = %q, want %q", tt.host, got, tt.want)
		}
	}
}

func TestDomainHierarchyCap(t *testing.T) {
	// 40 labels under example.com: 41 levels in all, capped to 32.
	labels := make([]string, 40)
	for i := range labels {
		labels[i] = "l" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	host := strings.Join(labels, ".") + ".example.com"
	got := DomainHierarchy(host)
	if len(got) != MaxScopesPerRequest {
		t.Fatalf("len = %d, want %d: %q", len(got), MaxScopesPerRequest, got)
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
	got = DomainHierarchy(host)
	if len(got) != 32 || got[0] != "example.com" || got[1] != labels[30]+".example.com" || got[31] != host {
		t.Errorf("32 levels: got %d levels %q", len(got), got)
	}
}

func TestRegistrableDomainScope(t *testing.T) {
	for _, tt := range []struct{ host, want string }{
		{"WWW.Example.CO.UK:8443", "example.co.uk"},
		{"www.Bücher.example", "xn--bcher-kva.example"},
		{"a.foo.blogspot.com.", "foo.blogspot.com"},
		{"[2001:DB8::1]:8080", "2001:db8::1"},
		{"localhost:3000", "localhost"},
	} {
		req := &http.Request{URL: &url.URL{Scheme: "http", Host: tt.host, Path: "/"}}
		got, err := RegistrableDomainScope(req)
		if err != nil || len(got) != 1 || got[0].Key != tt.want {
			t.Errorf("RegistrableDomainScope(%q) = %v, %v; want [%q]", tt.host, got, err, tt.want)
		}
	}
	if _, err := RegistrableDomainScope(nil); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil request: err = %v", err)
	}
	if _, err := DomainHierarchyScopes(&http.Request{URL: &url.URL{Path: "/x"}}); !errors.Is(err, ErrNoHost) {
		t.Errorf("no host: err = %v", err)
	}
}

func FuzzNormalizeHost(f *testing.F) {
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
			in = in[:4<<10] // bounded work per input; stretchHost goes past the caps
		}
		checkNormalizeHost(t, in)
		// Past the caps: a key is never longer than a host name can be,
		// however long the input (an IPv6 zone included).
		if in != "" {
			for _, long := range stretchHost(in) {
				if got, err := NormalizeHost(long); err == nil && len(got) > maxHostLen {
					t.Fatalf("NormalizeHost(%.80q... (%d bytes)) = %d bytes, more than %d", long, len(long), len(got), maxHostLen)
				}
			}
		}
	})
}

// stretchHost returns in repeated past NormalizeHost's input cap, and in
// with its middle byte repeated as far (a long label, a long IPv6 zone).
func stretchHost(in string) []string {
	n := 4*maxHostLen/len(in) + 2
	mid := len(in) / 2
	return []string{strings.Repeat(in, n), in[:mid] + strings.Repeat(in[mid:mid+1], 4*maxHostLen+2) + in[mid:]}
}

func checkNormalizeHost(t *testing.T, in string) {
	{
		// None of these may panic, whatever the input.
		_ = RegistrableDomain(in)
		if h := DomainHierarchy(in); len(h) == 0 || len(h) > MaxScopesPerRequest {
			t.Fatalf("DomainHierarchy(%q) = %q", in, h)
		}

		got, err := NormalizeHost(in)
		if err != nil {
			if !errors.Is(err, ErrNoHost) && !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("NormalizeHost(%q): unexpected error %v", in, err)
			}
			return
		}
		if got == "" || len(got) > maxHostLen {
			t.Fatalf("NormalizeHost(%q) = %q: empty or longer than %d bytes, no error", in, got, maxHostLen)
		}
		if got != strings.ToLower(got) {
			t.Fatalf("NormalizeHost(%q) = %q, not lower-case", in, got)
		}
		if strings.HasSuffix(got, ".") {
			t.Fatalf("NormalizeHost(%q) = %q, trailing dot", in, got)
		}
		again, err := NormalizeHost(got)
		if err != nil || again != got {
			t.Fatalf("NormalizeHost(%q) = %q, but NormalizeHost(%q) = %q, %v", in, got, got, again, err)
		}

		rd := RegistrableDomain(got)
		h := DomainHierarchy(got)
		if h[0] != rd || h[len(h)-1] != got {
			t.Fatalf("DomainHierarchy(%q) = %q, registrable domain %q", got, h, rd)
		}
		for i := 1; i < len(h); i++ {
			if !strings.HasSuffix(h[i], "."+h[i-1]) {
				t.Fatalf("DomainHierarchy(%q) = %q: %q not under %q", got, h, h[i], h[i-1])
			}
		}
	}
}

// TestNormalizeHostLongZone: an IPv6 literal is refused, like a name, when
// it is longer than a host name can be. netip.ParseAddr takes a zone of any
// length, so "[fe80::1%25" + 2000 letters + "]" used to give a 2010-byte
// scope key (found by FuzzNormalizeHost).
func TestNormalizeHostLongZone(t *testing.T) {
	got, err := NormalizeHost("[fe80::1%25en0]:8080")
	if err != nil || got != "fe80::1%25en0" {
		t.Errorf("short zone: %q, %v", got, err)
	}
	for _, in := range []string{
		"[fe80::1%25" + strings.Repeat("a", 2000) + "]",
		"fe80::1%" + strings.Repeat("a", maxHostLen),
		strings.Repeat("[fe80::1%25en0]", 70),
	} {
		if got, err := NormalizeHost(in); !errors.Is(err, ErrInvalidHost) {
			t.Errorf("NormalizeHost(%d bytes) = %d bytes, %v; want ErrInvalidHost", len(in), len(got), err)
		}
	}
}

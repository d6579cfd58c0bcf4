package throttle

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/crawlerkit/throttle/internal/scopekey"
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
		if got := scopekey.RegistrableDomain(tt.host); got != tt.want {
			t.Errorf("scopekey.RegistrableDomain(%q) = %q, want %q", tt.host, got, tt.want)
		}
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
				if got, err := normalizeHost(long); err == nil && len(got) > scopekey.MaxHostLen {
					t.Fatalf("normalizeHost(%.80q... (%d bytes)) = %d bytes, more than %d", long, len(long), len(got), scopekey.MaxHostLen)
				}
			}
		}
	})
}

// stretchHost returns in repeated past normalizeHost's input cap, and in
// with its middle byte repeated as far (a long label, a long IPv6 zone).
func stretchHost(in string) []string {
	n := 4*scopekey.MaxHostLen/len(in) + 2
	mid := len(in) / 2
	return []string{strings.Repeat(in, n), in[:mid] + strings.Repeat(in[mid:mid+1], 4*scopekey.MaxHostLen+2) + in[mid:]}
}

func checkNormalizeHost(t *testing.T, in string) {
	{
		// None of these may panic, whatever the input.
		_ = scopekey.RegistrableDomain(in)

		got, err := normalizeHost(in)
		if err != nil {
			if !errors.Is(err, ErrNoHost) && !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("normalizeHost(%q): unexpected error %v", in, err)
			}
			return
		}
		if got == "" || len(got) > scopekey.MaxHostLen {
			t.Fatalf("normalizeHost(%q) = %q: empty or longer than %d bytes, no error", in, got, scopekey.MaxHostLen)
		}
		if got != strings.ToLower(got) {
			t.Fatalf("normalizeHost(%q) = %q, not lower-case", in, got)
		}
		if strings.HasSuffix(got, ".") {
			t.Fatalf("normalizeHost(%q) = %q, trailing dot", in, got)
		}
		again, err := normalizeHost(got)
		if err != nil || again != got {
			t.Fatalf("normalizeHost(%q) = %q, but normalizeHost(%q) = %q, %v", in, got, got, again, err)
		}
	}
}

// TestNormalizeHostLongZone: an IPv6 literal is refused, like a name, when
// it is longer than a host name can be. netip.ParseAddr takes a zone of any
// length, so "[fe80::1%25" + 2000 letters + "]" used to give a 2010-byte
// scope key (found by FuzzNormalizeHost).
func TestNormalizeHostLongZone(t *testing.T) {
	got, err := normalizeHost("[fe80::1%25en0]:8080")
	if err != nil || got != "fe80::1%25en0" {
		t.Errorf("short zone: %q, %v", got, err)
	}
	for _, in := range []string{
		"[fe80::1%25" + strings.Repeat("a", 2000) + "]",
		"fe80::1%" + strings.Repeat("a", scopekey.MaxHostLen),
		strings.Repeat("[fe80::1%25en0]", 70),
	} {
		if got, err := normalizeHost(in); !errors.Is(err, ErrInvalidHost) {
			t.Errorf("normalizeHost(%d bytes) = %d bytes, %v; want ErrInvalidHost", len(in), len(got), err)
		}
	}
}

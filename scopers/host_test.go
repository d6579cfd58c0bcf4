package scopers

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/crawlerkit/throttle"
)

// TestHostKeysMatchRoot: RequestHost and RegistrableDomain give the keys of
// throttle.HostScope and throttle.RegistrableDomainScope, errors included.
func TestHostKeysMatchRoot(t *testing.T) {
	for _, host := range []string{
		"example.com", "WWW.Example.CO.UK:8443", "www.Bücher.example", "a.foo.blogspot.com.",
		"[2001:DB8::1]:8080", "localhost:3000", "", ":80", "[fe80::1%25en0]", "a...",
	} {
		req := &http.Request{URL: &url.URL{Scheme: "http", Host: host, Path: "/"}}
		want, wantErr := throttle.HostScope(req)
		got, err := RequestHost(req)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Errorf("RequestHost(%q) = %q, %v; HostScope's error %v", host, got, err, wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got != want[0].Key {
			t.Errorf("RequestHost(%q) = %q, HostScope %q", host, got, want[0].Key)
		}
		rd, _ := throttle.RegistrableDomainScope(req)
		if d := RegistrableDomain(got); d != rd[0].Key {
			t.Errorf("RegistrableDomain(%q) = %q, RegistrableDomainScope %q", got, d, rd[0].Key)
		}
	}
	if _, err := RequestHost(nil); !errors.Is(err, throttle.ErrNilRequest) {
		t.Errorf("RequestHost(nil) = %v, want ErrNilRequest", err)
	}
	if _, err := NormalizeHost(""); !errors.Is(err, throttle.ErrNoHost) {
		t.Errorf(`NormalizeHost("") = %v, want ErrNoHost`, err)
	}
	if _, err := NormalizeHost("a..."); !errors.Is(err, throttle.ErrInvalidHost) {
		t.Errorf(`NormalizeHost("a...") = %v, want ErrInvalidHost`, err)
	}
}

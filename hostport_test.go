package throttle

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHostPortScope(t *testing.T) {
	for _, c := range []struct{ url, key string }{
		{"http://127.0.0.1:8081/a", "127.0.0.1:8081"},
		{"http://127.0.0.1:8082/", "127.0.0.1:8082"},
		{"https://A.Example./x", "a.example:443"},
		{"https://a.example:443/", "a.example:443"},
		{"http://a.example/", "a.example:80"},
		{"HTTP://a.example/", "a.example:80"},
		{"wss://a.example/", "a.example:443"},
		{"http://[::1]:8080/", "[::1]:8080"},
		{"http://Bücher.example:8080/", "xn--bcher-kva.example:8080"},
		{"ftp://a.example/", "a.example"},
		{"http://a.example:08/", "a.example:8"},
	} {
		s, err := HostPortScope(get(t, c.url))
		require.NoError(t, err, c.url)
		assert.Equal(t, []Scope{{Key: c.key}}, s, c.url)
	}
	for _, bad := range []string{"http://a.example:0/", "http://a.example:65536/"} {
		req, err := http.NewRequest(http.MethodGet, bad, nil)
		if err != nil {
			continue // refused by url.Parse already
		}
		_, err = HostPortScope(req)
		assert.ErrorIs(t, err, ErrInvalidHost, bad)
	}
	_, err := HostPortScope(nil)
	assert.ErrorIs(t, err, ErrNilRequest)
}

// TestLocalServersOnePortEach is what a user did: three local servers on
// 127.0.0.1, one of which answers 429. With the default HostScope they are
// one scope, and the 429 holds the other two back; with HostPortScope each
// server keeps its own pace.
func TestLocalServersOnePortEach(t *testing.T) {
	urls := []string{"http://127.0.0.1:8081/", "http://127.0.0.1:8082/", "http://127.0.0.1:8083/"}
	run := func(scoper Scoper) (admitted int) {
		cfg := plainConfig()
		cfg.Default.Delay = 100 * time.Millisecond
		cfg.Scoper = scoper
		m := newManager(t, cfg)
		p, _, err := m.TryAcquire(get(t, urls[0]))
		require.NoError(t, err)
		require.NotNil(t, p)
		p.Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"30"}}}, nil)
		for _, u := range urls[1:] {
			if p, _, err := m.TryAcquire(get(t, u)); err == nil && p != nil {
				admitted++
				p.Release(&http.Response{StatusCode: 200}, nil)
			}
		}
		return admitted
	}
	assert.Equal(t, 0, run(nil), "HostScope: one scope for the three, gated by the 429's Retry-After")
	assert.Equal(t, 2, run(HostPortScope), "HostPortScope: the other two servers start at once")
}

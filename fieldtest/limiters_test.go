package fieldtest

import (
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNginxFor: a sim.Limiter's nginx configuration has its rate, burst,
// mode, status and Retry-After.
func TestNginxFor(t *testing.T) {
	for _, c := range []struct {
		l    sim.Limiter
		want []string
	}{
		{sim.Limiter{Kind: sim.KindNginx, Requests: 20, Period: time.Second, NoDelay: true},
			[]string{"rate=20r/s;", "limit_req zone=z nodelay;"}},
		{sim.Limiter{Kind: sim.KindNginx, Requests: 20, Period: time.Second, Burst: 5, NoDelay: true, Status: 429, RetryAfter: time.Second},
			[]string{"limit_req zone=z burst=5 nodelay;", "limit_req_status 429;", "error_page 429 @limited;", "add_header Retry-After 1 always;"}},
		{sim.Limiter{Kind: sim.KindNginx, Requests: 20, Period: time.Second, Burst: 5},
			[]string{"limit_req zone=z burst=5;"}},
		{sim.Limiter{Kind: sim.KindNginx, Requests: 1000, Period: time.Minute, Burst: 8, Delay: 3},
			[]string{"rate=1000r/m;", "limit_req zone=z burst=8 delay=3;"}},
	} {
		o, err := NginxFor(c.l)
		require.NoError(t, err)
		conf := o.nginxConf("/d", 8080)
		for _, w := range c.want {
			assert.Contains(t, conf, w, c.l.String())
		}
		assert.NotContains(t, conf, "throttle-arrival", "no arrival log unless asked")
		assert.InDelta(t, c.l.Rate(), o.Limit(), 1e-9)
	}
	o := NginxOptions{ArrivalLog: "127.0.0.1:9"}
	conf := o.nginxConf("/d", 8080)
	for _, w := range []string{"limit_req zone=z nodelay;", "access_log syslog:server=127.0.0.1:9,nohostname arrivals;",
		"set $throttle_arrival $connection_time;", "throttle-arrival nginx $msec"} {
		assert.Contains(t, conf, w)
	}
}

// TestHAProxyFor: a sim.Limiter's HAProxy configuration has its period,
// limit, status and Retry-After.
func TestHAProxyFor(t *testing.T) {
	o, err := HAProxyFor(sim.Limiter{Kind: sim.KindHAProxy, Requests: 300, Period: 1500 * time.Millisecond, Status: 403, RetryAfter: 2 * time.Second})
	require.NoError(t, err)
	cfg := o.haproxyCfg(8080)
	for _, w := range []string{"http_req_rate(1500ms)", "deny deny_status 403 hdr Retry-After 2 if { sc_http_req_rate(0) gt 300 }"} {
		assert.Contains(t, cfg, w)
	}
	assert.NotContains(t, cfg, "nbthread")
	o.ArrivalLog, o.Threads = "127.0.0.1:9", 1
	cfg = o.haproxyCfg(8080)
	for _, w := range []string{"nbthread 1", "log 127.0.0.1:9 format raw local0", "set-var(txn.arrival) date(0,ms)", "%[var(txn.arrival)] %ST"} {
		assert.Contains(t, cfg, w)
	}
	o, err = HAProxyFor(sim.Limiter{Kind: sim.KindHAProxy, Requests: 1, Period: time.Second})
	require.NoError(t, err)
	assert.Contains(t, o.haproxyCfg(8080), "deny deny_status 429 if")
}

// TestForRefuses: a limiter the field servers cannot run is an error.
func TestForRefuses(t *testing.T) {
	for _, l := range []sim.Limiter{
		{Kind: sim.KindGCRA, Requests: 1, Period: time.Second, Burst: 1},
		{Kind: sim.KindNginx, Requests: 1, Period: time.Second, Latency: time.Millisecond},
		{Kind: sim.KindNginx, Requests: 1, Period: time.Second, Stated: sim.StateIETF},
		{Kind: sim.KindNginx, Requests: 1, Period: 2 * time.Second},
	} {
		_, err := NginxFor(l)
		assert.Error(t, err, l.String())
	}
	_, err := HAProxyFor(sim.Limiter{Kind: sim.KindNginx, Requests: 1, Period: time.Second})
	assert.Error(t, err)
	_, err = HAProxyFor(sim.Limiter{Kind: sim.KindHAProxy, Requests: 1, Period: time.Second, Status: http.StatusOK})
	assert.Error(t, err)
}

package fieldtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/sim"
	"github.com/go-chi/httprate"
)

// EnableEnv is the environment variable that, set to "1", runs the field
// tests. They run in real time, so they are off by default.
const EnableEnv = "THROTTLE_FIELD"

// RequireEnv is the environment variable that, set to "1", runs the field
// tests and turns a missing nginx or haproxy binary into a test failure
// instead of a skip. CI sets it so that the field tests cannot silently
// stop running.
const RequireEnv = "THROTTLE_REQUIRE_FIELD"

// skipMsg is the message of SkipUnlessEnabled's skip.
const skipMsg = "field tests run in real time (~2 min): set " + EnableEnv + "=1"

const (
	readyTimeout = 10 * time.Second         // from starting a server to its first health answer
	readyPoll    = 20 * time.Millisecond    // between health checks
	stopTimeout  = 10 * time.Second         // from SIGTERM to exit, before SIGKILL
	portAttempts = 5                        // free ports tried per start
	logTail      = 4 << 10                  // bytes of a server's log quoted in errors
	healthPath   = "/healthz"               // answered by every server without rate limiting
	robotsPath   = "/robots.txt"            // answered 404 by nginx and HAProxy, behind their limiter
	pagePath     = "/"                      // the rate-limited page that a crawl fetches
	pageBody     = "field test page\n"      // the static file nginx serves
	localhost    = "127.0.0.1"              // every server listens here only
	addrInUse    = "Address already in use" // in the log of a server that could not bind
)

// SkipUnlessEnabled skips tb with the message "field tests run in real time
// (~2 min): set THROTTLE_FIELD=1" unless the environment variable
// [EnableEnv] or [RequireEnv] is "1".
func SkipUnlessEnabled(tb testing.TB) {
	tb.Helper()
	if os.Getenv(EnableEnv) != "1" && os.Getenv(RequireEnv) != "1" {
		tb.Skip(skipMsg)
	}
}

// lookBinary returns the path of the program name on PATH. When it is
// missing it skips tb, or fails it when [RequireEnv] is "1", with a
// message naming the Debian package pkg.
func lookBinary(tb testing.TB, name, pkg string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	msg := fmt.Sprintf("%s not found: install the Debian package %s (apt-get install -y %s) to run the field tests", name, pkg, pkg)
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

// NginxOptions configures the nginx server started by [StartNginx]: a
// static page behind limit_req with
//
//	limit_req_zone $binary_remote_addr zone=z:1m rate=<Rate>r/s;   (r/m with PerMinute)
//	limit_req zone=z burst=<Burst> nodelay;   (without nodelay with Delay, then delay=<DelayAfter>)
//
// so a client gets 1 + Burst requests at once, then Rate per second; the
// requests it refuses do not count. Every path but the health check's is
// limited: /robots.txt is a 404 (there is no such file), counted like any
// request.
type NginxOptions struct {
	// Rate is the limit in requests per second (limit_req_zone rate),
	// or per minute with PerMinute. Zero means 5.
	Rate      int
	PerMinute bool
	// Burst is limit_req's burst; 0 means none, nginx's default.
	Burst int
	// Delay is limit_req's delay mode: without nodelay, a request within
	// the burst is delayed to the rate instead of served at once.
	// DelayAfter is its delay=N: the first N of the burst go at once.
	Delay      bool
	DelayAfter int
	// Status is the status of refused requests (limit_req_status). Zero
	// means nginx's default, 503.
	Status int
	// RetryAfter, when not zero, adds "Retry-After: <RetryAfter>" (in
	// seconds) to refused requests, through an error_page to a named
	// location.
	RetryAfter int
	// AccessLog, when not empty, is the file where nginx logs every answer
	// in the access-log format that [ReadAccessLog] reads. Empty means
	// nginx's combined format in its temporary directory.
	AccessLog string
	// ArrivalLog, when not empty, is the address (host:port) of a UDP
	// syslog listener, an [ArrivalLog]'s, to which nginx sends a line
	// for every request: its times on the wall clock and on nginx's
	// monotonic one (by $connection_time: nginx 1.19.10 or later) and
	// its status.
	ArrivalLog string
}

// Limit returns the sustained limit of the server in requests per second.
func (o NginxOptions) Limit() float64 {
	o = o.withDefaults()
	if o.PerMinute {
		return float64(o.Rate) / 60
	}
	return float64(o.Rate)
}

func (o NginxOptions) withDefaults() NginxOptions {
	if o.Rate == 0 {
		o.Rate = 5
	}
	return o
}

// limitReq returns the limit_req directive of o.
func (o NginxOptions) limitReq() string {
	d := "limit_req zone=z"
	if o.Burst > 0 {
		d += fmt.Sprintf(" burst=%d", o.Burst)
	}
	switch {
	case !o.Delay:
		d += " nodelay"
	case o.DelayAfter > 0:
		d += fmt.Sprintf(" delay=%d", o.DelayAfter)
	}
	return d + ";"
}

// nginxConf returns the configuration of an nginx that keeps everything in
// dir and listens on port.
func (o NginxOptions) nginxConf(dir string, port int) string {
	o = o.withDefaults()
	var b strings.Builder
	if os.Geteuid() == 0 {
		// Workers would run as nobody and could not read the temporary
		// directory (mode 0700).
		b.WriteString("user root;\n")
	}
	unit := "r/s"
	if o.PerMinute {
		unit = "r/m"
	}
	format, arrivals := "", ""
	if o.ArrivalLog != "" {
		// $throttle_arrival is $connection_time when the request came:
		// the server's rewrite phase runs before limit_req's, and again
		// after the index module's redirect to index.html, which the
		// if skips. Declared in the server, this access_log replaces
		// the http block's: both are needed.
		format = fmt.Sprintf("  log_format arrivals '%s nginx $msec $request_time $connection $connection_time $throttle_arrival $status $request_uri';\n", arrivalMark)
		access := fmt.Sprintf("    access_log %s/access.log;\n", dir)
		if o.AccessLog != "" {
			access = fmt.Sprintf("    access_log %s field;\n", o.AccessLog)
		}
		arrivals = fmt.Sprintf("    uninitialized_variable_warn off;\n    if ($throttle_arrival = \"\") { set $throttle_arrival $connection_time; }\n%s    access_log syslog:server=%s,nohostname arrivals;\n", access, o.ArrivalLog)
	}
	fmt.Fprintf(&b, `worker_processes 1;
error_log %[1]s/error.log warn;
pid %[1]s/nginx.pid;
events { worker_connections 1024; }
http {
%[10]s%[8]s  client_body_temp_path %[1]s/tmp/body;
  proxy_temp_path %[1]s/tmp/proxy;
  fastcgi_temp_path %[1]s/tmp/fastcgi;
  uwsgi_temp_path %[1]s/tmp/uwsgi;
  scgi_temp_path %[1]s/tmp/scgi;
  keepalive_requests 1000000;
  limit_req_zone $binary_remote_addr zone=z:1m rate=%[3]d%[7]s;
  server {
    listen %[4]s:%[2]d;
    root %[1]s/www;
    log_not_found off; # /robots.txt: a 404, not an error
%[9]s    location = %[5]s { return 204; }
    location / {
      %[6]s
      limit_req_log_level info; # below error_log's level: refusals are in access.log only
`, dir, port, o.Rate, localhost, healthPath, o.limitReq(), unit, format, arrivals, o.accessLogConf(dir))
	status := o.Status
	if status != 0 {
		fmt.Fprintf(&b, "      limit_req_status %d;\n", status)
	} else {
		status = http.StatusServiceUnavailable
	}
	if o.RetryAfter != 0 {
		fmt.Fprintf(&b, `      error_page %[1]d @limited;
    }
    location @limited {
      add_header Retry-After %[2]d always;
      return %[1]d;
    }
`, status, o.RetryAfter)
	} else {
		b.WriteString("    }\n")
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// accessLogConf returns the access_log lines of the configuration.
func (o NginxOptions) accessLogConf(dir string) string {
	if o.AccessLog == "" {
		return fmt.Sprintf("  access_log %s/access.log;\n", dir)
	}
	return nginxAccessLog(o.AccessLog)
}

// StartNginx starts nginx (Debian package nginx) on a free port of
// 127.0.0.1 with the configuration of opts, in a temporary directory that
// holds its configuration, logs and the page, and returns the URL of the
// rate-limited page. The server is stopped when the test ends. A missing
// nginx skips the test, or fails it under [RequireEnv]=1.
func StartNginx(tb testing.TB, opts NginxOptions) string {
	tb.Helper()
	bin := lookBinary(tb, "nginx", "nginx")
	dir := tb.TempDir()
	for _, d := range []string{"www", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			tb.Fatalf("fieldtest: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "www", "index.html"), []byte(pageBody), 0o644); err != nil {
		tb.Fatalf("fieldtest: %v", err)
	}
	conf := filepath.Join(dir, "nginx.conf")
	return startServer(tb, "nginx", dir, []string{"error.log"}, func(port int) (*exec.Cmd, error) {
		if err := os.WriteFile(conf, []byte(opts.nginxConf(dir, port)), 0o644); err != nil {
			return nil, err
		}
		// -e: the log of the start, before the configuration is read
		// (Debian's default is /var/log/nginx/error.log).
		return exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"),
			"-g", "daemon off; master_process on;"), nil
	})
}

// HAProxyOptions configures the HAProxy server started by [StartHAProxy]:
// every request is tracked in a stick table and refused while the
// client's request rate is over Requests per Period:
//
//	stick-table type ip size 100k expire 30s store http_req_rate(<Period>)
//	http-request track-sc0 src
//	http-request deny deny_status <Status> if { sc_http_req_rate(0) gt <Requests> }
//	http-request return status 404 content-type text/plain string "no robots.txt" if { path /robots.txt }
//	http-request return status 200 content-type text/plain string ok
//
// Refused requests count too: a client that keeps knocking stays refused.
// Every path but the health check's is limited; /robots.txt is a 404, as
// on a site without one, and counts like any request.
type HAProxyOptions struct {
	// Requests is the number of requests allowed per Period. Zero means
	// 50.
	Requests int
	// Period is the period of http_req_rate, in whole milliseconds. Zero
	// means 10 s.
	Period time.Duration
	// Status is the status of refused requests. Zero means 429.
	Status int
	// AccessLog, when not empty, is the file where HAProxy logs every
	// answer (through its standard output) in the access-log format that
	// [ReadAccessLog] reads. Empty means no log. It cannot be set with
	// ArrivalLog, whose log lines replace it.
	AccessLog string
	// RetryAfter, when not zero, adds "Retry-After: <RetryAfter>" (in
	// seconds) to refused requests (the deny's hdr).
	RetryAfter int
	// ArrivalLog, when not empty, is the address (host:port) of a UDP
	// syslog listener, an [ArrivalLog]'s, to which HAProxy sends a line
	// for every request on the page: the time it was tracked and its
	// status.
	ArrivalLog string
	// Threads is nbthread; 0 means HAProxy's default, a thread per CPU.
	// With one thread the time logged for ArrivalLog is the time the
	// stick table's counter read; with several, a thread may log its
	// own clock while the counter reads a later one of another thread.
	Threads int
}

// Limit returns the sustained limit of the server in requests per second.
func (o HAProxyOptions) Limit() float64 {
	o = o.withDefaults()
	return float64(o.Requests) / o.Period.Seconds()
}

func (o HAProxyOptions) withDefaults() HAProxyOptions {
	if o.Requests == 0 {
		o.Requests = 50
	}
	if o.Period == 0 {
		o.Period = 10 * time.Second
	}
	if o.Status == 0 {
		o.Status = http.StatusTooManyRequests
	}
	return o
}

// haproxyCfg returns the configuration of an HAProxy listening on port.
func (o HAProxyOptions) haproxyCfg(port int) string {
	o = o.withDefaults()
	var logs, mark, hdr string
	if o.ArrivalLog != "" {
		// date is the time of the pass that tracked the request, to
		// the millisecond of HAProxy's clock.
		logs = fmt.Sprintf("  log %s format raw local0\n  log-format \"%s haproxy %%[var(txn.arrival)] %%ST\"\n", o.ArrivalLog, arrivalMark)
		mark = "  http-request set-var(txn.arrival) date(0,ms)\n"
	}
	if o.RetryAfter != 0 {
		hdr = fmt.Sprintf(" hdr Retry-After %d", o.RetryAfter)
	}
	global := "  maxconn 1000\n"
	if o.Threads > 0 {
		global += fmt.Sprintf("  nbthread %d\n", o.Threads)
	}
	return fmt.Sprintf(`global
%[10]s%[11]sdefaults
  mode http
%[12]s  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout http-keep-alive 30s
frontend fe
  bind %[1]s:%[2]d
%[7]s  http-request return status 200 content-type text/plain string ok if { path %[3]s }
  stick-table type ip size 100k expire 30s store http_req_rate(%[4]dms)
  http-request track-sc0 src
%[8]s  http-request deny deny_status %[5]d%[9]s if { sc_http_req_rate(0) gt %[6]d }
  http-request return status 404 content-type text/plain string "no robots.txt" if { path %[13]s }
  http-request return status 200 content-type text/plain string ok
`, localhost, port, healthPath, o.Period.Milliseconds(), o.Status, o.Requests, logs, mark, hdr, global, o.logGlobal(), o.logDefaults(), robotsPath)
}

// logGlobal and logDefaults return the log lines of the global and
// defaults sections: HAProxy logs to its standard output, which
// StartHAProxy points to AccessLog.
func (o HAProxyOptions) logGlobal() string {
	if o.AccessLog == "" {
		return ""
	}
	return "  log stdout format raw local0\n"
}

func (o HAProxyOptions) logDefaults() string {
	if o.AccessLog == "" {
		return ""
	}
	return "  log global\n  option dontlognull\n  log-format \"" + haproxyLogFormat + "\"\n"
}

// StartHAProxy starts HAProxy (Debian package haproxy) in the foreground
// on a free port of 127.0.0.1 with the configuration of opts and returns
// the URL of the rate-limited page. The server is stopped when the test
// ends. A missing haproxy skips the test, or fails it under
// [RequireEnv]=1.
func StartHAProxy(tb testing.TB, opts HAProxyOptions) string {
	tb.Helper()
	bin := lookBinary(tb, "haproxy", "haproxy")
	if opts.AccessLog != "" && opts.ArrivalLog != "" {
		tb.Fatalf("fieldtest: HAProxyOptions: AccessLog and ArrivalLog cannot both be set")
	}
	dir := tb.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	var accessLog *os.File
	if opts.AccessLog != "" {
		f, err := os.OpenFile(opts.AccessLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			tb.Fatalf("fieldtest: %v", err)
		}
		accessLog = f
		tb.Cleanup(func() { _ = f.Close() }) // after the server stops: the cleanups run last first
	}
	return startServer(tb, "haproxy", dir, nil, func(port int) (*exec.Cmd, error) {
		if err := os.WriteFile(cfg, []byte(opts.haproxyCfg(port)), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "-f", cfg, "-db")
		if accessLog != nil {
			cmd.Stdout = accessLog
		}
		return cmd, nil
	})
}

// NginxFor returns the options of the nginx that runs the limiter l
// describes, the real server of the model l.NewServer() builds (package
// internal/sim). l must be a valid nginx Limiter without Latency (the
// server answers at once) or Stated (nginx states no limit).
func NginxFor(l sim.Limiter) (NginxOptions, error) {
	if err := forServer(l, sim.KindNginx); err != nil {
		return NginxOptions{}, err
	}
	return NginxOptions{
		Rate: l.Requests, PerMinute: l.Period == time.Minute, Burst: l.Burst,
		Delay: !l.NoDelay, DelayAfter: l.Delay,
		Status: l.Status, RetryAfter: int(l.RetryAfter / time.Second),
	}, nil
}

// HAProxyFor returns the options of the HAProxy that runs the limiter l
// describes, the real server of the model l.NewServer() builds (package
// internal/sim). l must be a valid haproxy Limiter without Latency or
// Stated.
func HAProxyFor(l sim.Limiter) (HAProxyOptions, error) {
	if err := forServer(l, sim.KindHAProxy); err != nil {
		return HAProxyOptions{}, err
	}
	return HAProxyOptions{Requests: l.Requests, Period: l.Period, Status: l.Status, RetryAfter: int(l.RetryAfter / time.Second)}, nil
}

// forServer reports whether a real server of kind can run l.
func forServer(l sim.Limiter, kind sim.LimiterKind) error {
	switch {
	case l.Kind != kind:
		return fmt.Errorf("fieldtest: limiter %v is not %s", l, kind)
	case l.Latency != 0 || l.Stated != sim.StateNone:
		return fmt.Errorf("fieldtest: limiter %v: the field servers answer at once and state no limit", l)
	}
	return l.Validate()
}

// HTTPRateOptions configures the server started by [StartHTTPRate]:
// github.com/go-chi/httprate's sliding-window limiter keyed by the
// client's IP, Requests per Window, in front of a handler that answers
// "ok". Refused requests do not count.
type HTTPRateOptions struct {
	// Requests is the number of requests allowed per Window. Zero means
	// 10.
	Requests int
	// Window is the length of httprate's window. Zero means 1 s.
	Window time.Duration
	// AccessLog, when not empty, is the file where the server logs every
	// answer, the refused ones included, in the access-log format that
	// [ReadAccessLog] reads. Empty means no log.
	AccessLog string
}

// Limit returns the sustained limit of the server in requests per second.
func (o HTTPRateOptions) Limit() float64 {
	o = o.withDefaults()
	return float64(o.Requests) / o.Window.Seconds()
}

func (o HTTPRateOptions) withDefaults() HTTPRateOptions {
	if o.Requests == 0 {
		o.Requests = 10
	}
	if o.Window == 0 {
		o.Window = time.Second
	}
	return o
}

// keyByRemoteIP is httprate's deprecated KeyByIP: the client's IP from
// RemoteAddr, as a server exposed directly to clients keys it.
func keyByRemoteIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(host), nil
}

// StartHTTPRate starts, in this process, a net/http server on a free port
// of 127.0.0.1 limited by github.com/go-chi/httprate as opts says, and
// returns the URL of the rate-limited page. It answers with
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (a Unix
// time) on every response, and Retry-After (the window in seconds) on a
// 429. The server is closed when the test ends.
func StartHTTPRate(tb testing.TB, opts HTTPRateOptions) string {
	tb.Helper()
	opts = opts.withDefaults()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
	})
	mux := http.NewServeMux()
	mux.Handle(pagePath, httprate.LimitBy(opts.Requests, opts.Window, keyByRemoteIP)(ok))
	var handler http.Handler = mux
	if opts.AccessLog != "" {
		lw, err := openLogWriter(opts.AccessLog)
		if err != nil {
			tb.Fatalf("fieldtest: %v", err)
		}
		tb.Cleanup(func() { _ = lw.Close() }) // after the server closes: the cleanups run last first
		handler = lw.wrap(mux)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(localhost, "0"))
	if err != nil {
		tb.Fatalf("fieldtest: %v", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	tb.Cleanup(func() {
		if err := srv.Close(); err != nil {
			tb.Errorf("fieldtest: close httprate server: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("fieldtest: httprate server: %v", err)
		}
	})
	return "http://" + l.Addr().String() + pagePath
}

// server is a child process started by startServer.
type server struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when Wait returned
	waitErr error         // Wait's result; read after exited is closed
	logs    []string      // files whose tails are quoted: the output first
}

// startServer starts the child process that mk makes for a free port of
// 127.0.0.1, with its standard output and error in dir/output.log, and
// returns the URL of its page once it answers its health check. A start
// that fails because the port was taken meanwhile is retried on another
// port. The process runs in its own process group and is stopped when the
// test ends (SIGTERM, then SIGKILL to the group after stopTimeout); if the
// test failed, the tails of its logs (output.log and the extra files
// logs, relative to dir) are logged.
func startServer(tb testing.TB, name, dir string, logs []string, mk func(port int) (*exec.Cmd, error)) string {
	tb.Helper()
	paths := []string{filepath.Join(dir, "output.log")}
	for _, l := range logs {
		paths = append(paths, filepath.Join(dir, l))
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("fieldtest: %v", err)
		}
		cmd, err := mk(port)
		if err != nil {
			tb.Fatalf("fieldtest: %s: %v", name, err)
		}
		s := &server{name: name, cmd: cmd, exited: make(chan struct{}), logs: paths}
		base := "http://" + net.JoinHostPort(localhost, strconv.Itoa(port))
		err = s.start(dir, base+healthPath)
		if err == nil {
			tb.Cleanup(func() {
				if tb.Failed() {
					tb.Logf("fieldtest: logs of %s at %s (tails):\n%s", name, base, s.tails())
				}
				if err := s.stop(); err != nil {
					tb.Errorf("fieldtest: %v", err)
				}
			})
			return base + pagePath
		}
		if attempt == portAttempts || !errors.Is(err, errPortInUse) {
			tb.Fatalf("fieldtest: %v\n%s", err, s.tails())
		}
	}
}

var errPortInUse = errors.New("port in use")

// start starts the process and waits until a GET of health answers 2xx.
// On failure no process is left.
func (s *server) start(dir, health string) error {
	out, err := os.OpenFile(s.logs[0], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its copy
	s.cmd.Dir = dir
	if s.cmd.Stdout == nil { // else the caller's (HAProxy's access log)
		s.cmd.Stdout = out
	}
	s.cmd.Stderr = out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-s.exited:
			err := fmt.Errorf("%s exited before it was ready (%v)", s.name, s.waitErr)
			if strings.Contains(s.tails(), addrInUse) {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return err
		default:
		}
		if resp, err := client.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("%s not ready in %v; killed it", s.name, readyTimeout)
		}
		select { // poll again, or see the exit at once
		case <-s.exited:
		case <-time.After(readyPoll):
		}
	}
}

// stop sends SIGTERM, and SIGKILL to the process group if the process has
// not exited within stopTimeout, and waits for it.
func (s *server) stop() error {
	select {
	case <-s.exited:
		return fmt.Errorf("%s exited during the test (%v)", s.name, s.waitErr)
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", s.name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	select {
	case <-s.exited:
		return nil
	case <-ctx.Done():
	}
	s.kill()
	return fmt.Errorf("%s did not exit within %v of SIGTERM; killed it", s.name, stopTimeout)
}

// kill sends SIGKILL to the process group (nginx's workers included) and
// waits for the process.
func (s *server) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// tails returns the last logTail bytes of each of the server's logs that
// is not empty.
func (s *server) tails() string {
	var b strings.Builder
	for _, p := range s.logs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > logTail {
			data = data[len(data)-logTail:]
		}
		fmt.Fprintf(&b, "--- %s\n%s", filepath.Base(p), data)
	}
	if b.Len() == 0 {
		return "(empty)\n"
	}
	return b.String()
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(localhost, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

package fieldtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The peers comparison (TestPeers): real crawlers beside the throttle on
// the field suite's limiters, each client against its own server, every
// answer counted from the server's access log. scripts/peers.sh runs it;
// the package doc says what it prints.
const (
	// peersEnv, set to "1", runs TestPeers. THROTTLE_FIELD does not:
	// the comparison takes half an hour at its default duration.
	peersEnv = "THROTTLE_PEERS"
	// peersDurationEnv names the duration of each run, a Go duration.
	peersDurationEnv = "THROTTLE_PEERS_DURATION"
	// peersClientsEnv names the clients to run, comma-separated; empty
	// runs them all.
	peersClientsEnv = "THROTTLE_PEERS_CLIENTS"
	// peersTableEnv names a file that receives the Markdown table.
	peersTableEnv = "THROTTLE_PEERS_TABLE"

	peersDuration    = 3 * time.Minute
	peersMinDuration = 30 * time.Second
	peersMaxDuration = 30 * time.Minute
	// peersWarmup is the first minute of a client's run: the refusals
	// per minute are counted after it, and the time to 90 % is taken on
	// the 2xx rate over a trailing window of its length. A run shorter
	// than 3 minutes uses a third of the run instead.
	peersWarmup = time.Minute
	// peersReach is the fraction of the limit whose first arrival the
	// table gives.
	peersReach = 0.9
	// peersGrace is how long a client process may take to exit after
	// its run, before it is killed.
	peersGrace = 20 * time.Second
	// peersSetup bounds each limiter's start and its figures, for the
	// check of the test's deadline.
	peersSetup = 30 * time.Second
	// npmTimeout bounds the installation of Crawlee.
	npmTimeout = 10 * time.Minute
)

// peerLimiters are the field suite's limiters and the shapes of issue 21
// that it lacks.
var peerLimiters = slices.Concat(fieldCases, []fieldCase{
	// Counting refused requests over 1 s: 5 per 1 s.
	haproxyCase("haproxy-1s", HAProxyOptions{Requests: 5, Period: time.Second, Status: http.StatusTooManyRequests}),
	// A burst, and a Retry-After of a few seconds.
	nginxCase("nginx-burst-retry-after-3", NginxOptions{Rate: 5, Burst: 10, Status: http.StatusTooManyRequests, RetryAfter: 3}),
	// Below 1 req/s, counting refused requests: 5 per 10 s.
	haproxyCase("haproxy-0.5", HAProxyOptions{Requests: 5, Period: 10 * time.Second, Status: http.StatusTooManyRequests}),
})

// peerRun runs one client's crawl of url for d, with dir for its files,
// and returns the number of answers it counted itself (2xx, and 429 or
// 503), or -1, -1 when it does not count them.
type peerRun func(ctx context.Context, url string, d time.Duration, dir string) (ok, refused int, err error)

// peerClient is one crawler of the comparison.
type peerClient struct {
	name string
	// prepare readies the client once for every run; it returns a
	// non-empty reason when the client cannot run here.
	prepare func(t *testing.T) (run peerRun, skip string)
}

var peerClients = []peerClient{
	{"throttle", prepareThrottle},
	{"scrapy", prepareScrapy},
	{"crawlee", prepareCrawlee},
	{"colly", prepareColly},
}

// TestPeers runs, for each limiter in turn, every client against its own
// instance of that limiter at once, for THROTTLE_PEERS_DURATION (default
// 3 minutes), and prints one Markdown table of their figures from the
// servers' access logs. It checks that the access log counts the
// throttle's answers as the throttle's crawl does. It runs only with
// THROTTLE_PEERS=1.
func TestPeers(t *testing.T) {
	if os.Getenv(peersEnv) != "1" {
		t.Skip("the peers comparison runs real crawlers for ~30 min: set " + peersEnv + "=1, or run scripts/peers.sh")
	}
	d := peersRunDuration(t)
	clients, notes := preparePeers(t)
	rows := make([]peerRow, 0, len(peerLimiters)*len(clients))
	for _, lim := range peerLimiters { // one after the other: t.Run returns when lim is done
		t.Run(lim.name, func(t *testing.T) {
			if lim.bin != "" {
				if _, err := exec.LookPath(lim.bin); err != nil {
					note := fmt.Sprintf("%s skipped: %s not found (apt-get install -y %s)", lim.name, lim.bin, lim.bin)
					notes = append(notes, note)
					t.Skip(note)
				}
			}
			if deadline, ok := t.Deadline(); ok && time.Until(deadline) < d+peersGrace+peersSetup {
				t.Fatalf("the test's deadline is too close for a run of %v: pass -timeout %v or more (%d limiters)",
					d, (time.Duration(len(peerLimiters))*(d+peersGrace+peersSetup) + npmTimeout).Round(time.Minute), len(peerLimiters))
			}
			for _, r := range runLimiter(t, lim, clients, d) {
				rows = append(rows, r)
				if r.note != "" {
					notes = append(notes, fmt.Sprintf("%s, %s: %s", r.limiter, r.client, r.note))
				}
			}
		})
	}
	table := peersTable(rows, notes, d, time.Now())
	t.Logf("\n%s", table)
	if path := os.Getenv(peersTableEnv); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(table), 0o644))
	}
}

// peersRunDuration returns the duration of each run: peersDuration or
// THROTTLE_PEERS_DURATION.
func peersRunDuration(t *testing.T) time.Duration {
	v := os.Getenv(peersDurationEnv)
	if v == "" {
		return peersDuration
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < peersMinDuration || d > peersMaxDuration {
		t.Fatalf("%s=%q: want a duration in [%v, %v]", peersDurationEnv, v, peersMinDuration, peersMaxDuration)
	}
	return d
}

// namedRun is a prepared client.
type namedRun struct {
	name string
	run  peerRun
}

// preparePeers readies the clients that THROTTLE_PEERS_CLIENTS names, and
// returns them with a note for each that cannot run.
func preparePeers(t *testing.T) ([]namedRun, []string) {
	want := map[string]bool{}
	if v := os.Getenv(peersClientsEnv); v != "" {
		for name := range strings.SplitSeq(v, ",") {
			want[strings.TrimSpace(name)] = true
		}
		for name := range want {
			if !slices.ContainsFunc(peerClients, func(c peerClient) bool { return c.name == name }) {
				t.Fatalf("%s: unknown client %q", peersClientsEnv, name)
			}
		}
	}
	var runs []namedRun
	var notes []string
	for _, c := range peerClients {
		if len(want) > 0 && !want[c.name] {
			continue
		}
		run, skip := c.prepare(t)
		if skip != "" {
			note := fmt.Sprintf("%s skipped: %s", c.name, skip)
			t.Log(note)
			notes = append(notes, note)
			continue
		}
		runs = append(runs, namedRun{c.name, run})
	}
	if len(runs) == 0 {
		t.Fatalf("no client can run: %s", strings.Join(notes, "; "))
	}
	return runs, notes
}

// runLimiter starts one server of lim per client, runs the clients at
// once for d, and returns their rows.
func runLimiter(t *testing.T, lim fieldCase, clients []namedRun, d time.Duration) []peerRow {
	type result struct {
		ok, refused int
		err         error
	}
	urls := make([]string, len(clients))
	logs := make([]string, len(clients))
	dirs := make([]string, len(clients))
	for i, c := range clients {
		dirs[i] = t.TempDir()
		logs[i] = filepath.Join(dirs[i], "access.log")
		urls[i] = lim.start(t, logs[i])
		t.Logf("%s: %s crawls %s", lim.name, c.name, urls[i])
	}
	results := make([]result, len(clients))
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			r := &results[i]
			r.ok, r.refused, r.err = c.run(t.Context(), urls[i], d, dirs[i])
		})
	}
	wg.Wait()
	load := loadAverage()

	rows := make([]peerRow, len(clients))
	for i, c := range clients {
		row := peerRow{limiter: lim.name, client: c.name, limit: lim.limit, load: load}
		entries, err := ReadAccessLog(logs[i])
		if err != nil {
			t.Errorf("%s, %s: %v", lim.name, c.name, err)
			row.note = err.Error()
		} else {
			row.peerFigures = figures(entries, t0, d, lim.limit)
		}
		if r := results[i]; r.err != nil {
			if errors.Is(r.err, errKilledAfterRun) {
				t.Logf("%s, %s: %v", lim.name, c.name, r.err)
			} else {
				t.Errorf("%s, %s: %v", lim.name, c.name, r.err)
			}
			row.note = firstLine(r.err.Error())
		} else if r.ok >= 0 && err == nil {
			checkLogCounts(t, lim.name+", "+c.name, entries, r.ok, r.refused)
		}
		t.Logf("%s, %s: %s", lim.name, c.name, row.peerFigures)
		rows[i] = row
	}
	return rows
}

// checkLogCounts checks that the access log has the 2xx and the refusals
// that the client counted itself, but for the requests in flight at the
// end (which the client cancelled, or whose answer it dropped).
func checkLogCounts(t *testing.T, what string, entries []LogEntry, ok, refused int) {
	var logOK, logRefused int
	for _, e := range entries {
		switch {
		case e.Health():
		case e.Status/100 == 2:
			logOK++
		case isSignal(e.Status):
			logRefused++
		}
	}
	t.Logf("%s: the client counted %d 2xx and %d refusals, the access log %d and %d", what, ok, refused, logOK, logRefused)
	assert.InDelta(t, ok, logOK, workers, "%s: 2xx in the client and the access log", what)
	assert.InDelta(t, refused, logRefused, workers, "%s: refusals in the client and the access log", what)
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// prepareThrottle runs the README's recipe for an API whose limit you do
// not know (APIConfig), 16 goroutines through the Transport, in this
// process, as TestField does.
func prepareThrottle(t *testing.T) (peerRun, string) {
	return func(ctx context.Context, url string, d time.Duration, _ string) (int, int, error) {
		cfg := APIConfig()
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
		m, err := throttle.New(cfg)
		if err != nil {
			return 0, 0, err
		}
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = workers
		defer base.CloseIdleConnections()
		samples := Crawl(ctx, &http.Client{Transport: m.Transport(base)}, url, workers, d)
		s := SummarizeUntil(samples, 1, d)
		if s.Errors > 0 {
			return s.OK, s.Signals, fmt.Errorf("%d transport errors, the first: %v", s.Errors, s.FirstErrors[0])
		}
		return s.OK, s.Signals, nil
	}, ""
}

// prepareScrapy runs peers/scrapy_peer.py with Debian's scrapy.
func prepareScrapy(*testing.T) (peerRun, string) {
	bin, err := exec.LookPath("scrapy")
	if err != nil {
		return nil, "scrapy not found (apt-get install -y python3-scrapy)"
	}
	spider, err := filepath.Abs(filepath.Join("peers", "scrapy_peer.py"))
	if err != nil {
		return nil, err.Error()
	}
	return func(ctx context.Context, url string, d time.Duration, dir string) (int, int, error) {
		// LOG_LEVEL INFO: at DEBUG, Scrapy's default, it logs every answer.
		return -1, -1, runPeerProcess(ctx, "scrapy", dir, d, nil, bin, "runspider", spider,
			"-a", "url="+url, "-s", "CLOSESPIDER_TIMEOUT="+strconv.Itoa(int(d.Seconds())), "-s", "LOG_LEVEL=INFO")
	}, ""
}

// prepareCrawlee installs the Crawlee of peers/package.json (once, in the
// user's cache directory) and runs peers/crawlee_peer.cjs with Node.
func prepareCrawlee(t *testing.T) (peerRun, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "node not found (apt-get install -y nodejs npm)"
	}
	modules, skip := installCrawlee(t)
	if skip != "" {
		return nil, skip
	}
	script, err := filepath.Abs(filepath.Join("peers", "crawlee_peer.cjs"))
	if err != nil {
		return nil, err.Error()
	}
	return func(ctx context.Context, url string, d time.Duration, dir string) (int, int, error) {
		env := []string{"NODE_PATH=" + modules, "CRAWLEE_STORAGE_DIR=" + filepath.Join(dir, "storage")}
		return -1, -1, runPeerProcess(ctx, "crawlee", dir, d, env, node, script, url, strconv.Itoa(int(d.Seconds())))
	}, ""
}

// installCrawlee installs peers/package.json's dependencies with npm into
// <user cache>/throttle-peers/crawlee-<version>, unless they are there
// already, and returns its node_modules directory.
func installCrawlee(t *testing.T) (string, string) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "npm not found (apt-get install -y npm)"
	}
	manifest, err := os.ReadFile(filepath.Join("peers", "package.json"))
	if err != nil {
		return "", err.Error()
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(manifest, &pkg); err != nil || pkg.Dependencies["crawlee"] == "" {
		return "", fmt.Sprintf("peers/package.json names no crawlee version (%v)", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err.Error()
	}
	dir := filepath.Join(cache, "throttle-peers", "crawlee-"+pkg.Dependencies["crawlee"])
	modules := filepath.Join(dir, "node_modules")
	if old, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil && string(old) == string(manifest) {
		if _, err := os.Stat(filepath.Join(modules, "crawlee", "package.json")); err == nil {
			return modules, ""
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err.Error()
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), manifest, 0o644); err != nil {
		return "", err.Error()
	}
	t.Logf("installing crawlee %s into %s", pkg.Dependencies["crawlee"], dir)
	ctx, cancel := context.WithTimeout(t.Context(), npmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-package-lock", "--omit=dev")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("npm install in %s: %v: %s", dir, err, tail(out))
	}
	return modules, ""
}

// prepareColly builds peers/colly.
func prepareColly(t *testing.T) (peerRun, string) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, "go not found"
	}
	bin := filepath.Join(t.TempDir(), "colly")
	if out, err := exec.Command(goBin, "build", "-o", bin, "./peers/colly").CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("go build ./peers/colly: %v: %s", err, tail(out))
	}
	return func(ctx context.Context, url string, d time.Duration, dir string) (int, int, error) {
		return -1, -1, runPeerProcess(ctx, "colly", dir, d, nil, bin, "-url", url, "-duration", d.String())
	}, ""
}

// runPeerProcess runs the client argv with its output in dir/<name>.log
// and the extra environment env. The client stops by itself after d; one
// still running peersGrace later is killed, with its process group, and
// the error wraps errKilledAfterRun (Scrapy, closing, waits for the
// requests that AutoThrottle delays, up to a minute each). A failed exit
// is an error too.
func runPeerProcess(ctx context.Context, name, dir string, d time.Duration, env []string, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, d+peersGrace)
	defer cancel()
	logPath := filepath.Join(dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		// Whatever the client left in its group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%v)", errKilledAfterRun, err)
	}
	if err != nil {
		data, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s: %w\n%s", name, err, tail(data))
	}
	return nil
}

// errKilledAfterRun is the error of a client killed because it was still
// running peersGrace after its run. Its figures stand: they count the
// answers of the run only.
var errKilledAfterRun = fmt.Errorf("still running %v after its run: killed", peersGrace)

// tail returns the last logTail bytes of out.
func tail(out []byte) string {
	if len(out) > logTail {
		out = out[len(out)-logTail:]
	}
	return string(out)
}

// peerFigures are the figures of one client's run, from its server's
// access log.
type peerFigures struct {
	// Share is the 2xx rate over the last third of the run, as a
	// fraction of the limit.
	Share float64
	// RefusalsPerMin are the 429 and 503 answers per minute after the
	// client's warm-up: the first minute after its first request (a third
	// of the run, for a run shorter than 3 minutes).
	RefusalsPerMin float64
	// Reach is the time from the client's first request to the first
	// time at which its 2xx rate over the trailing warm-up window was at
	// least peersReach of the limit; Reached is false if it never was.
	Reach   time.Duration
	Reached bool
	// Requests counts the requests of the run (any answer).
	Requests int
}

// figures computes the figures of a run of d that started at t0 against a
// limit of limit requests per second, from the entries of its access log.
// Health checks, and answers before t0 or after t0+d, do not count.
func figures(entries []LogEntry, t0 time.Time, d time.Duration, limit float64) peerFigures {
	end := t0.Add(d)
	var run []LogEntry
	for _, e := range entries {
		if !e.Health() && !e.At.Before(t0) && !e.At.After(end) {
			run = append(run, e)
		}
	}
	// The server may write its lines out of order (HAProxy's threads).
	slices.SortStableFunc(run, func(a, b LogEntry) int { return a.At.Compare(b.At) })
	f := peerFigures{Requests: len(run)}
	if len(run) == 0 {
		return f
	}
	warm := peersWarmupOf(d)
	first := run[0].At
	lastThird := end.Add(-d / 3)
	var shareOK, refusals int
	var okTimes []time.Time
	for _, e := range run {
		if e.Status/100 == 2 {
			okTimes = append(okTimes, e.At)
			if e.At.After(lastThird) {
				shareOK++
			}
		}
		if isSignal(e.Status) && e.At.After(first.Add(warm)) {
			refusals++
		}
	}
	f.Share = float64(shareOK) / (d / 3).Seconds() / limit
	if after := end.Sub(first.Add(warm)); after > 0 {
		f.RefusalsPerMin = float64(refusals) / after.Minutes()
	}
	need := peersReach * limit * warm.Seconds()
	for i, j := 0, 0; i < len(okTimes); i++ {
		for !okTimes[j].After(okTimes[i].Add(-warm)) {
			j++
		}
		if float64(i-j+1) >= need {
			f.Reach, f.Reached = okTimes[i].Sub(first), true
			break
		}
	}
	return f
}

// peersWarmupOf returns the warm-up of a run of d: peersWarmup, or a third
// of a run shorter than 3 minutes.
func peersWarmupOf(d time.Duration) time.Duration { return min(peersWarmup, d/3) }

func (f peerFigures) String() string {
	reach := "never"
	if f.Reached {
		reach = fmt.Sprintf("%.0f s", f.Reach.Seconds())
	}
	return fmt.Sprintf("share %.0f %%, %s refusals/min, %d %% of the limit after %s, %d requests",
		100*f.Share, formatRate(f.RefusalsPerMin), int(100*peersReach), reach, f.Requests)
}

// peerRow is one line of the table.
type peerRow struct {
	limiter, client string
	limit           float64
	peerFigures
	note string  // what went wrong, if anything
	load float64 // the machine's load average over 1 minute at the run's end; 0 if unknown
}

// loadAverage returns the machine's load average over the last minute, or
// 0 where /proc/loadavg cannot tell.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(data), " ")
	load, err := strconv.ParseFloat(first, 64)
	if err != nil {
		return 0
	}
	return load
}

// peersTable returns the Markdown table of rows, with a header that
// states how the figures were taken, the limiters' shapes and the notes.
func peersTable(rows []peerRow, notes []string, d time.Duration, now time.Time) string {
	warm := peersWarmupOf(d)
	var b strings.Builder
	fmt.Fprintf(&b, "Peers beside throttle: %v per run, %s. Each client crawls its own server; the figures come from the servers' access logs.\n",
		d, now.Format("2006-01-02"))
	fmt.Fprintf(&b, "Share: 2xx rate over the last third of the run / the limit. Refusals (429, 503) per minute after each client's first %v. ", warm)
	fmt.Fprintf(&b, "Time to %d %%: from the client's first request to the first time its 2xx rate over the trailing %v was %d %% of the limit.\n",
		int(100*peersReach), warm, int(100*peersReach))
	var loads []float64
	for _, r := range rows {
		if r.load > 0 {
			loads = append(loads, r.load)
		}
	}
	if len(loads) > 0 {
		fmt.Fprintf(&b, "The machine: %d CPUs, a load average (1 min) of %.1f-%.1f at the runs' ends.\n",
			runtime.NumCPU(), slices.Min(loads), slices.Max(loads))
	}
	b.WriteString("\n")
	b.WriteString("| limiter | limit | client | share of the limit | refusals/min | time to 90 % | requests |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.note != "" && r.Requests == 0 {
			fmt.Fprintf(&b, "| %s | %s r/s | %s | – | – | – | – |\n", r.limiter, formatLimit(r.limit), r.client)
			continue
		}
		reach := "never"
		if r.Reached {
			reach = fmt.Sprintf("%.0f s", r.Reach.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s r/s | %s | %.0f %% | %s | %s | %d |\n",
			r.limiter, formatLimit(r.limit), r.client, 100*r.Share, formatRate(r.RefusalsPerMin), reach, r.Requests)
	}
	b.WriteString("\nLimiters (each keyed by the client's IP; one instance per client):\n\n")
	for _, l := range peerLimiters {
		if slices.ContainsFunc(rows, func(r peerRow) bool { return r.limiter == l.name }) {
			fmt.Fprintf(&b, "- %s: %s\n", l.name, l.shape)
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// formatLimit returns a limit in requests per second without trailing
// zeros.
func formatLimit(limit float64) string { return strconv.FormatFloat(limit, 'f', -1, 64) }

// formatRate returns a rate per minute with one decimal below 100, and
// whole with thousands separators from 100 on.
func formatRate(r float64) string {
	if r < 100 {
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	s := strconv.FormatInt(int64(math.Round(r)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// TestPeerFigures checks the figures on a made-up run of 180 s against a
// limit of 5 req/s: a client whose first request comes at 2 s, 1 2xx/s
// until 32 s, then 5/s, with a 429 every 10 s throughout; health checks
// and answers outside the run are left out.
func TestPeerFigures(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	entries := []LogEntry{
		{At: at(-500), Status: 200, URI: "/"},        // before the run
		{At: at(-100), Status: 204, URI: "/healthz"}, // health check
	}
	for ms := 2000; ms < 180_000; ms += 10 {
		switch {
		case ms < 32_000 && (ms-2000)%1000 == 0, ms >= 32_000 && ms%200 == 0:
			entries = append(entries, LogEntry{At: at(ms), Status: 200, URI: "/"})
		}
		if ms%10_000 == 5000 {
			entries = append(entries, LogEntry{At: at(ms), Status: 429, URI: "/"})
		}
	}
	entries = append(entries, LogEntry{At: at(180_500), Status: 200, URI: "/"}) // after the run
	// Out of order, as HAProxy may write them.
	entries[10], entries[11] = entries[11], entries[10]

	f := figures(entries, t0, 180*time.Second, 5)

	// 2xx: 30 at 1/s over [2 s, 32 s), then 5/s over [32 s, 180 s): 740.
	// 429s: at 5 s, 15 s, ..., 175 s: 18.
	assert.Equal(t, 30+740+18, f.Requests)
	// The last third, (120 s, 180 s]: 5/s but for the 2xx at 120 s.
	assert.InDelta(t, (300.0-1)/60/5, f.Share, 1e-9)
	// After 62 s: 429s at 65 s, ..., 175 s, 12 of them, over 118 s.
	assert.InDelta(t, 12/(118.0/60), f.RefusalsPerMin, 1e-9)
	// 90 % of 5/s over 60 s is 270 2xx. From t = 62 s on, the window
	// (t-60 s, t] holds the 1/s answers at 25 s, ..., 31 s (7, while
	// t < 85 s) and the 5/s ones from 32 s: 7 + 263 = 270 at t = 84.4 s,
	// 82.4 s after the first request; 269 at 84.2 s.
	require.True(t, f.Reached)
	assert.Equal(t, 82400*time.Millisecond, f.Reach)

	// A 60 s run: a warm-up of 20 s.
	short := figures(entries, t0, 60*time.Second, 5)
	assert.InDelta(t, 100.0/20/5, short.Share, 1e-9)           // (40 s, 60 s]: 5/s
	assert.InDelta(t, 4/(38.0/60), short.RefusalsPerMin, 1e-9) // 25 s, ..., 55 s over (22 s, 60 s]

	// No answer at all.
	assert.Equal(t, peerFigures{}, figures(nil, t0, time.Minute, 5))
}

// TestPeerTable checks the table's layout on two rows, one of a client
// that failed.
func TestPeerTable(t *testing.T) {
	rows := []peerRow{
		{limiter: "nginx-429", client: "throttle", limit: 5, load: 2.5, peerFigures: peerFigures{Share: 0.974, RefusalsPerMin: 1, Reach: 48 * time.Second, Reached: true, Requests: 812}},
		{limiter: "nginx-429", client: "colly", limit: 5, load: 19.25, peerFigures: peerFigures{Share: 1, RefusalsPerMin: 241234.4, Requests: 723000}},
		{limiter: "haproxy-0.5", client: "scrapy", limit: 0.5, note: "scrapy: exit status 1"},
	}
	table := peersTable(rows, []string{"crawlee skipped: node not found"}, 3*time.Minute, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	assert.NotContains(t, table, "- httprate:", "a limiter without rows")
	for _, want := range []string{
		"3m0s per run, 2026-01-02",
		"after each client's first 1m0s",
		"a load average (1 min) of 2.5-19.2 at the runs' ends",
		"| nginx-429 | 5 r/s | throttle | 97 % | 1.0 | 48 s | 812 |\n",
		"| nginx-429 | 5 r/s | colly | 100 % | 241,234 | never | 723000 |\n",
		"| haproxy-0.5 | 0.5 r/s | scrapy | – | – | – | – |\n",
		"- haproxy-0.5: HAProxy http_req_rate(10s) over 5",
		"- nginx-429: nginx limit_req rate=5r/s burst=5 nodelay",
		"- crawlee skipped: node not found\n",
	} {
		assert.Contains(t, table, want)
	}
}

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// client returns a go-redis client for s that honours context deadlines
// and does not retry, closed when the test ends.
func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DisableIdentity:       true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ctx returns a context that ends after d or with the test.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// isTimeout reports whether err is a deadline or network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func TestStartPingSetGet(t *testing.T) {
	s := Start(t)
	host, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, "0", port)
	assert.NotZero(t, s.PID())

	c := client(t, s)
	require.NoError(t, c.Ping(ctx(t, 5*time.Second)).Err())
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "v", 0).Err())
	got, err := c.Get(ctx(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	// The configuration asked for.
	cfg, err := c.ConfigGet(ctx(t, 5*time.Second), "*").Result()
	require.NoError(t, err)
	assert.Equal(t, "", cfg["save"])
	assert.Equal(t, "no", cfg["appendonly"])
	assert.Equal(t, "yes", cfg["protected-mode"])
	assert.Equal(t, "127.0.0.1", cfg["bind"])
	assert.Equal(t, "no", cfg["daemonize"])
	assert.Equal(t, "", cfg["requirepass"])
	assert.Equal(t, s.dir, cfg["dir"])

	// The log goes to redis.log in the directory too.
	log, err := os.ReadFile(filepath.Join(s.dir, logName))
	require.NoError(t, err)
	assert.Contains(t, string(log), readyLine)
	assert.Contains(t, s.log.tail(logTail), readyLine)
}

func TestPauseTimesOutThenResumeAnswers(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "v", 0).Err())

	require.NoError(t, s.Pause())
	require.NoError(t, s.Pause(), "pausing twice is fine")
	// The client's own read timeout is a minute: only the context's
	// deadline ends the GET before that (the bound tells the two apart,
	// however loaded the machine).
	slow := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DisableIdentity: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = slow.Close() })
	start := time.Now()
	err := slow.Get(ctx(t, 200*time.Millisecond), "k").Err()
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.True(t, isTimeout(err), "want a timeout, got %T %v", err, err)
	assert.Less(t, elapsed, 30*time.Second, "the context deadline ends the GET, not the read timeout")

	// A new connection is accepted by the kernel but not answered either.
	fresh := client(t, s)
	err = fresh.Ping(ctx(t, 200*time.Millisecond)).Err()
	assert.True(t, isTimeout(err), "want a timeout, got %T %v", err, err)

	require.NoError(t, s.Resume())
	require.NoError(t, s.Resume(), "resuming twice is fine")
	got, err := c.Get(ctx(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}

func TestRestartWithoutDataLosesKeys(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	addr, pid := s.Addr(), s.PID()
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "v", 0).Err())

	require.NoError(t, s.Restart(false))
	assert.Equal(t, addr, s.Addr())
	assert.NotEqual(t, pid, s.PID())
	err := c.Get(ctx(t, 5*time.Second), "k").Err()
	assert.ErrorIs(t, err, redis.Nil)
}

func TestRestartKeepingDataKeepsKeys(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	addr, pid := s.Addr(), s.PID()
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "v", 0).Err())

	require.NoError(t, s.Restart(true))
	assert.Equal(t, addr, s.Addr())
	assert.NotEqual(t, pid, s.PID())
	got, err := c.Get(ctx(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	// Restart(false) then forgets the snapshot too.
	require.NoError(t, s.Restart(false))
	assert.ErrorIs(t, c.Get(ctx(t, 5*time.Second), "k").Err(), redis.Nil)
}

func TestRestartWhilePaused(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "v", 0).Err())
	require.NoError(t, s.Pause())
	require.NoError(t, s.Restart(true))
	got, err := c.Get(ctx(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}

func TestKillThenRestart(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	addr := s.Addr()
	require.NoError(t, c.Ping(ctx(t, 5*time.Second)).Err())

	require.NoError(t, s.Kill())
	assert.Zero(t, s.PID())
	err := c.Ping(ctx(t, 5*time.Second)).Err()
	require.Error(t, err, "PING after Kill")
	assert.False(t, isTimeout(err), "a killed server refuses rather than hangs: %v", err)
	assert.Error(t, s.Kill(), "nothing to kill")
	assert.Error(t, s.Pause(), "nothing to pause")

	require.NoError(t, s.Restart(false))
	assert.Equal(t, addr, s.Addr())
	assert.NotZero(t, s.PID())
	require.NoError(t, c.Ping(ctx(t, 5*time.Second)).Err())
}

func TestKillLosesDataSinceTheLastSnapshot(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "saved", 0).Err())
	require.NoError(t, s.Restart(true)) // snapshot with k=saved
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "lost", 0).Err())

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(true))
	got, err := c.Get(ctx(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "saved", got)
}

func TestKillWhilePaused(t *testing.T) {
	s := Start(t)
	require.NoError(t, s.Pause())
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(false))
	require.NoError(t, client(t, s).Ping(ctx(t, 5*time.Second)).Err())
}

func TestTwoServersAtOnce(t *testing.T) {
	a, b := Start(t), Start(t)
	assert.NotEqual(t, a.Addr(), b.Addr())
	assert.NotEqual(t, a.dir, b.dir)
	ca, cb := client(t, a), client(t, b)
	require.NoError(t, ca.Set(ctx(t, 5*time.Second), "k", "a", 0).Err())
	assert.ErrorIs(t, cb.Get(ctx(t, 5*time.Second), "k").Err(), redis.Nil)
}

func TestOptionsArgs(t *testing.T) {
	if !Available() {
		t.Skip(notFoundMsg)
	}
	s, err := StartServer(Options{Args: []string{"--maxmemory", "10mb", "--port", "1"}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Stop()) })
	assert.NotEqual(t, "127.0.0.1:1", s.Addr(), "the Server's own --port wins")
	got, err := client(t, s).ConfigGet(ctx(t, 5*time.Second), "maxmemory").Result()
	require.NoError(t, err)
	assert.Equal(t, "10485760", got["maxmemory"])
}

func TestStartServerFailureQuotesTheLog(t *testing.T) {
	if !Available() {
		t.Skip(notFoundMsg)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	s, err := StartServer(Options{Args: []string{"--no-such-directive", "x"}})
	require.Error(t, err)
	assert.Nil(t, s)
	assert.Contains(t, err.Error(), "exited before it was ready")
	assert.Contains(t, err.Error(), "Bad directive")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the temporary directory is removed")
}

func TestPortInUseIsRecognised(t *testing.T) {
	if !Available() {
		t.Skip(notFoundMsg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	s, err := StartServer(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Stop()) })

	// Another process takes the port while the server is down.
	require.NoError(t, s.Kill())
	s.port = l.Addr().(*net.TCPAddr).Port
	err = s.Restart(false)
	require.ErrorIs(t, err, errPortInUse)
	assert.Contains(t, err.Error(), portInUse)
	assert.Zero(t, s.PID(), "the server stays down")
}

func TestStopIsIdempotentAndRemovesTheDirectory(t *testing.T) {
	if !Available() {
		t.Skip(notFoundMsg)
	}
	s, err := StartServer(Options{})
	require.NoError(t, err)
	require.NoError(t, s.Pause())
	require.NoError(t, s.Stop(), "Stop resumes a paused server and stops it gracefully (killed after stopTimeout, it errs)")
	assert.NoDirExists(t, s.dir)
	assert.Zero(t, s.PID())
	require.NoError(t, s.Stop())

	assert.ErrorIs(t, s.Pause(), errStopped)
	assert.ErrorIs(t, s.Resume(), errStopped)
	assert.ErrorIs(t, s.Kill(), errStopped)
	assert.ErrorIs(t, s.Restart(false), errStopped)
	assert.Contains(t, s.log.tail(logTail), "Redis is now ready to exit", "a graceful shutdown")
}

func TestStartStopsWhenTheTestEnds(t *testing.T) {
	var s *Server
	require.True(t, t.Run("sub", func(t *testing.T) { s = Start(t) }))
	if s == nil { // skipped
		t.Skip(notFoundMsg)
	}
	assert.Zero(t, s.PID())
	assert.NoDirExists(t, s.dir)
	_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	assert.Error(t, err, "nothing listens any more")
}

func TestNoGoroutineLeftAfterStop(t *testing.T) {
	if !Available() {
		t.Skip(notFoundMsg)
	}
	before := runtime.NumGoroutine()

	s, err := StartServer(Options{})
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
	require.NoError(t, c.Set(ctx(t, 5*time.Second), "k", "v", 0).Err())
	require.NoError(t, s.Pause())
	assert.Error(t, c.Get(ctx(t, 100*time.Millisecond), "k").Err())
	require.NoError(t, s.Resume())
	require.NoError(t, s.Restart(true))
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(false))
	require.NoError(t, c.Ping(ctx(t, 5*time.Second)).Err())
	require.NoError(t, c.Close())
	require.NoError(t, s.Stop())

	// Goroutines that have just closed their channels may still be on
	// their way out: give them a bounded moment.
	for i := 0; i < 1000 && runtime.NumGoroutine() > before; i++ {
		runtime.Gosched()
		if i >= 100 {
			time.Sleep(time.Millisecond)
		}
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Stop:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// fakeTB records Start's Skip or Fatal. Both end the goroutine, as the
// real ones do.
type fakeTB struct {
	testing.TB
	skipped, fatal string
	cleanups       int
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Cleanup(func())                 { f.cleanups++ }
func (f *fakeTB) Skip(args ...any)               { f.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (f *fakeTB) Fatal(args ...any)              { f.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (f *fakeTB) Fatalf(format string, a ...any) { f.Fatal(fmt.Sprintf(format, a...)) }

// startFake runs Start(f) in a goroutine of its own and waits for it.
func startFake(f *fakeTB) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(f)
	}()
	<-done
}

func TestStartWithoutTheBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	require.False(t, Available())

	t.Run("skips", func(t *testing.T) {
		t.Setenv(RequireEnv, "")
		f := &fakeTB{}
		startFake(f)
		assert.Equal(t, notFoundMsg, f.skipped)
		assert.True(t, strings.HasPrefix(f.skipped, "redis-server not found: install the Debian package redis-server"))
		assert.Empty(t, f.fatal)
		assert.Zero(t, f.cleanups)
	})
	t.Run("fails when required", func(t *testing.T) {
		t.Setenv(RequireEnv, "1")
		f := &fakeTB{}
		startFake(f)
		assert.Equal(t, notFoundMsg, f.fatal)
		assert.Empty(t, f.skipped)
	})
	t.Run("StartServer", func(t *testing.T) {
		s, err := StartServer(Options{})
		assert.Nil(t, s)
		require.ErrorIs(t, err, exec.ErrNotFound)
		assert.Contains(t, err.Error(), notFoundMsg)
	})
}

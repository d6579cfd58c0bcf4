// Package redistest starts throwaway real redis-server processes for tests
// and demos.
//
// Each [Server] is a redis-server child process listening only on
// 127.0.0.1 on a free port, with no password, no persistence of its own
// (--save "", --appendonly no) and a fresh temporary directory that Stop
// removes. The binary is found on PATH with exec.LookPath("redis-server");
// on Debian and Ubuntu it comes with the package redis-server.
//
// Tests call [Start], which skips the test when redis-server is missing
// (or fails it when the environment variable named by [RequireEnv] is "1",
// as CI sets it) and stops the server when the test ends. Programs call
// [StartServer] and [Server.Stop].
//
// Besides starting and stopping, a Server can be made to misbehave the way
// a real Redis does: [Server.Pause] freezes the process (connections stay
// open, nothing answers), [Server.Kill] crashes it, and [Server.Restart]
// brings it back on the same address, with or without its data.
//
// Readiness is read from the server's own log, not polled: redis-server
// logs to its standard output, which the Server reads until the line
// "Ready to accept connections", and keeps reading afterwards into
// redis.log in the server's directory and a bounded in-memory tail that
// errors quote.
//
// The package needs a Unix system (it stops and continues the process
// with SIGSTOP and SIGCONT).
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the name of the environment variable that turns the skip of
// [Start] into a failure: when it is "1" and redis-server is not installed,
// Start fails the test instead of skipping it. CI sets it so that the Redis
// tests cannot silently stop running.
const RequireEnv = "THROTTLE_REQUIRE_REDIS"

const (
	// binary is the name of the program looked up on PATH.
	binary = "redis-server"
	// notFoundMsg is the message of Start's skip or failure, and of
	// StartServer's error, when the binary is missing.
	notFoundMsg = "redis-server not found: install the Debian package redis-server (apt-get install -y redis-server) to run the Redis tests"
	// readyLine is what redis-server logs once it accepts connections.
	readyLine = "Ready to accept connections"
	// portInUse is in the log of a server that could not bind its port.
	portInUse = "Address already in use"
	// logName is the file in the server's directory that receives its log.
	logName = "redis.log"
	// rdbName is the RDB file, in the server's directory, that
	// Restart(true) writes and the next start loads.
	rdbName = "dump.rdb"

	readyTimeout = 10 * time.Second // from starting the process to the ready line
	stopTimeout  = 10 * time.Second // from SIGTERM to exit, before SIGKILL
	saveTimeout  = 30 * time.Second // for SAVE in Restart(true)
	portAttempts = 5                // free ports tried by StartServer
	logKeep      = 64 << 10         // bytes of log kept in memory
	logTail      = 4 << 10          // bytes of log quoted in errors
)

// Options configures a server started by [StartServer]. The zero value is
// fine.
type Options struct {
	// Args are extra redis-server arguments, such as
	// []string{"--maxmemory", "10mb"}. They come after the defaults
	// (--save "", --appendonly no, --protected-mode yes), so they can
	// change those, but before the arguments that the Server relies on
	// (--port, --bind, --dir, --dbfilename, --logfile, --daemonize), which
	// always win. A --loglevel of warning or nothing would hide the line
	// the Server waits for, so that start would time out.
	Args []string
}

// Server is a running (or stopped) redis-server child process. Its methods
// are safe for concurrent use; each holds the Server until it is done, so a
// Restart and a Pause do not interleave.
type Server struct {
	bin  string
	dir  string // temporary directory created by StartServer, removed by Stop
	port int
	args []string // Options.Args
	log  tailBuffer

	mu      sync.Mutex
	p       *process // nil while no process runs (after Kill, a failed Restart or Stop)
	paused  bool
	stopped bool
}

// process is one run of redis-server and the two goroutines that watch it.
type process struct {
	cmd      *exec.Cmd
	ready    chan struct{} // closed when the ready line was read
	readDone chan struct{} // closed when the output reader ended (at EOF)
	exited   chan struct{} // closed when Wait returned
	waitErr  error         // Wait's result; read after exited is closed
}

// Available reports whether the redis-server binary is on PATH.
func Available() bool {
	_, err := exec.LookPath(binary)
	return err == nil
}

// Start starts a server for the test tb and stops it when the test ends
// (through tb.Cleanup). When redis-server is not installed it skips the
// test, unless the environment variable [RequireEnv] is "1", in which case
// it fails the test; either way with a message that tells how to install
// it. Any other failure to start fails the test. If the test has failed by
// the time it ends, the tail of the server's log is logged.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if !Available() {
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatal(notFoundMsg)
		}
		tb.Skip(notFoundMsg)
	}
	s, err := StartServer(Options{})
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("redistest: log of redis-server at %s (tail):\n%s", s.Addr(), s.log.tail(logTail))
		}
		if err := s.Stop(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return s
}

// StartServer starts a redis-server on a free port of 127.0.0.1 in a new
// temporary directory and returns once it accepts connections. It is meant
// for programs such as demos; tests should use [Start]. The caller must
// call [Server.Stop].
//
// When redis-server is not installed the error wraps exec.ErrNotFound. If
// the server does not get ready within 10 seconds, or exits first, the
// error quotes the end of its log. A port that another process takes
// between being found free and being bound is retried with another port a
// few times.
func StartServer(opts Options) (*Server, error) {
	bin, err := exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", notFoundMsg, err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{bin: bin, dir: dir, args: append([]string(nil), opts.Args...)}
	for attempt := 1; ; attempt++ {
		s.port, err = freePort()
		if err == nil {
			s.p, err = s.startProcess()
		}
		if err == nil {
			return s, nil
		}
		if attempt == portAttempts || !errors.Is(err, errPortInUse) {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
	}
}

// Addr returns the address the server listens on, "127.0.0.1:port". It
// stays the same across Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// PID returns the process id of the running redis-server, or 0 when none
// runs (after Kill or Stop).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.cmd.Process.Pid
}

// Pause freezes the server with SIGSTOP: it keeps its connections and the
// kernel still accepts new ones, but nothing is read or answered until
// Resume, so clients see timeouts rather than errors. Pausing a paused
// server does nothing.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.running(); err != nil {
		return err
	}
	if err := s.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redistest: pause: %w", err)
	}
	s.paused = true
	return nil
}

// Resume lets a paused server go on with SIGCONT; what clients sent in the
// meantime is then read and answered. Resuming a server that is not paused
// does nothing.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.running(); err != nil {
		return err
	}
	return s.resume()
}

// Restart stops the server and starts it again on the same address and
// directory, resuming it first if it is paused. With keepData false the
// data is lost: the new server starts empty. With keepData true the server
// first writes its data to disk with SAVE and the new one loads it; after
// Kill, when there is nothing left to save, it loads whatever an earlier
// Restart(true) saved, like a Redis that crashed after its last snapshot.
//
// Restart also starts a server that is down after Kill or a failed
// Restart. If another process has taken the port meanwhile, Restart fails
// and the server stays down. Restart after Stop is an error.
func (s *Server) Restart(keepData bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errStopped
	}
	if s.p != nil {
		if err := s.resume(); err != nil {
			return err
		}
		if keepData {
			if err := s.save(); err != nil {
				return err
			}
		}
		p := s.p
		s.p = nil
		if err := s.stopProcess(p); err != nil {
			return err
		}
	}
	if !keepData {
		if err := s.clearData(); err != nil {
			return err
		}
	}
	p, err := s.startProcess()
	if err != nil {
		return err
	}
	s.p = p
	return nil
}

// Kill crashes the server with SIGKILL and waits for the process to end;
// the data it held in memory is lost. Restart brings it back; until then
// connections are refused.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.running(); err != nil {
		return err
	}
	p := s.p
	s.p, s.paused = nil, false
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: kill: %w", err)
	}
	p.wait()
	return nil
}

// Stop shuts the server down gracefully (SIGTERM, after resuming it if it
// is paused; SIGKILL if it has not exited 10 seconds later), waits for the
// process and the goroutines watching it to end, and removes the temporary
// directory that StartServer created. It removes nothing else. Stopping a
// stopped server does nothing and returns nil.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	if s.p != nil {
		if err := s.resume(); err != nil {
			errs = append(errs, err)
		}
		p := s.p
		s.p = nil
		errs = append(errs, s.stopProcess(p))
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("redistest: %w", err))
	}
	return errors.Join(errs...)
}

var (
	errStopped    = errors.New("redistest: server stopped")
	errNotRunning = errors.New("redistest: server not running (killed, or a restart failed): Restart it first")
	errPortInUse  = errors.New("redistest: port in use")
)

// running returns nil if a process runs. The caller holds s.mu.
func (s *Server) running() error {
	switch {
	case s.stopped:
		return errStopped
	case s.p == nil:
		return errNotRunning
	}
	return nil
}

// resume sends SIGCONT if the server is paused. The caller holds s.mu and
// s.p is not nil.
func (s *Server) resume() error {
	if !s.paused {
		return nil
	}
	if err := s.p.cmd.Process.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: resume: %w", err)
	}
	s.paused = false
	return nil
}

// save makes the running server write its data to the RDB file. The caller
// holds s.mu.
func (s *Server) save() error {
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
	defer cancel()
	if err := c.Save(ctx).Err(); err != nil {
		return fmt.Errorf("redistest: SAVE before restart: %w\n%s", err, s.log.tail(logTail))
	}
	return nil
}

// clearData removes everything in the server's directory but its log, so
// that the next start has no data to load. The caller holds s.mu.
func (s *Server) clearData() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	for _, e := range entries {
		if e.Name() == logName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
	}
	return nil
}

// startProcess starts redis-server on s.port and waits until it is ready.
// On failure no process or goroutine of it is left, and the error quotes
// the log; it wraps errPortInUse if the port could not be bound.
func (s *Server) startProcess() (*process, error) {
	args := []string{"--save", "", "--appendonly", "no", "--protected-mode", "yes"}
	args = append(args, s.args...)
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--dbfilename", rdbName,
		"--logfile", "",
		"--daemonize", "no",
	)
	logFile, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close() // the child has its copy; EOF comes when it exits
	if err != nil {
		r.Close()
		logFile.Close()
		return nil, fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	p := &process{
		cmd:      cmd,
		ready:    make(chan struct{}),
		readDone: make(chan struct{}),
		exited:   make(chan struct{}),
	}
	s.log.mark(fmt.Sprintf("--- redistest: started %s on port %d, pid %d\n", s.bin, s.port, cmd.Process.Pid))
	go p.read(r, logFile, &s.log)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		<-p.readDone
		err = fmt.Errorf("redistest: redis-server exited before it was ready (%v)", p.waitErr)
		if bytes.Contains(s.log.since(), []byte(portInUse)) {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
	case <-timer.C:
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return nil, fmt.Errorf("redistest: kill redis-server that was not ready in %v: %w", readyTimeout, err)
		}
		p.wait()
		err = fmt.Errorf("redistest: redis-server not ready in %v; killed it", readyTimeout)
	}
	return nil, fmt.Errorf("%w; its log:\n%s", err, s.log.tail(logTail))
}

// stopProcess ends p gracefully: SIGTERM, then SIGKILL if it has not
// exited within stopTimeout. It returns once p and its goroutines have
// ended. The process must not be stopped by SIGSTOP.
func (s *Server) stopProcess(p *process) error {
	select {
	case <-p.exited: // it ended on its own
		p.wait()
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: stop: %w", err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		p.wait()
		return nil
	case <-timer.C:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: stop: %w", err)
	}
	p.wait()
	return fmt.Errorf("redistest: redis-server did not exit within %v of SIGTERM; killed it\n%s", stopTimeout, s.log.tail(logTail))
}

// wait returns once the process has exited and its output reader has
// ended.
func (p *process) wait() {
	<-p.exited
	<-p.readDone
}

// read copies the server's output to logFile and log until EOF, and closes
// p.ready at the ready line. It closes r and logFile, then p.readDone.
func (p *process) read(r, logFile *os.File, log *tailBuffer) {
	defer close(p.readDone)
	defer r.Close()
	defer logFile.Close()
	br := bufio.NewReader(r)
	ready, whole := false, true // whole: the chunk read starts a line
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			_, _ = logFile.Write(chunk) // the in-memory log still has it
			log.write(chunk)
			if !ready && whole && bytes.Contains(chunk, []byte(readyLine)) {
				ready = true
				close(p.ready)
			}
		}
		switch {
		case err == nil:
			whole = true
		case errors.Is(err, bufio.ErrBufferFull):
			whole = false
		default:
			return
		}
	}
}

// tailBuffer keeps the last logKeep bytes or so written to it. It is safe
// for concurrent use.
type tailBuffer struct {
	mu    sync.Mutex
	b     []byte
	start int // offset in b where the current process's output begins (0 once dropped)
}

// write appends p, dropping the oldest bytes beyond logKeep.
func (t *tailBuffer) write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*logKeep {
		drop := len(t.b) - logKeep
		t.b = append(t.b[:0], t.b[drop:]...)
		t.start -= drop
		if t.start < 0 {
			t.start = 0
		}
	}
}

// mark writes a note that a new process starts and remembers where, for
// since.
func (t *tailBuffer) mark(note string) {
	t.write([]byte(note))
	t.mu.Lock()
	t.start = len(t.b) - len(note)
	t.mu.Unlock()
}

// since returns a copy of what was written since the last mark.
func (t *tailBuffer) since() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.b[t.start:])
}

// tail returns the last n bytes or so, from the start of a line.
func (t *tailBuffer) tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	return port, nil
}

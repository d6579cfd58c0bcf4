package redistest

// A Redis Cluster for tests: six redis-server processes (three masters,
// one replica each) made into a cluster by redis-cli --cluster create, and
// a master that can be killed while its replica takes over.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// cliBinary creates the cluster (redis-cli --cluster create).
	cliBinary = "redis-cli"
	// cliNotFoundMsg is the message of StartCluster's skip or failure,
	// and of StartClusterServers' error, when redis-cli is missing.
	cliNotFoundMsg = "redis-cli not found: install the Debian package redis-tools (apt-get install -y redis-tools) to run the Redis Cluster tests"

	clusterNodes    = 6 // three masters, one replica each
	clusterMasters  = 3
	clusterSlots    = 16384
	nodeConfName    = "nodes.conf" // each node's cluster state, in its directory
	createTimeout   = 30 * time.Second
	failoverTimeout = 30 * time.Second // from the kill to a healthy cluster, plus five node timeouts
	pollEvery       = 20 * time.Millisecond
	queryTimeout    = time.Second // one query of the harness to one node
)

// DefaultNodeTimeout is the cluster-node-timeout of a [Cluster] started with
// a zero [ClusterOptions.NodeTimeout]: short, so that a failover takes a
// second or two instead of Redis's default 15 s and more.
const DefaultNodeTimeout = time.Second

// ClusterOptions configures a cluster started by [StartCluster] or
// [StartClusterServers]. The zero value is fine.
type ClusterOptions struct {
	// NodeTimeout is every node's cluster-node-timeout: how long a master
	// may stay silent before the others mark it failed and one of its
	// replicas takes its slots over. Zero means DefaultNodeTimeout.
	NodeTimeout time.Duration
	// Args are extra redis-server arguments for every node, as
	// Options.Args; they come after --repl-diskless-sync-delay 0 (a
	// replica's first sync starts at once), so they can change it. The
	// cluster's own arguments (--cluster-enabled,
	// --cluster-config-file, --cluster-node-timeout, --cluster-port,
	// --shutdown-timeout) come after them and win.
	Args []string
}

// Cluster is a running Redis Cluster of six redis-server child processes
// (see [Server]), each on free ports of 127.0.0.1 (its own and its cluster
// bus port) in a temporary directory of its own: three masters sharing the
// 16384 hash slots and one replica of each. It needs Redis 7.0 or later
// (for --cluster-port) and redis-cli.
//
// Its methods are safe for concurrent use. They query the nodes that are
// running; a node paused with [Server.Pause] (through [Cluster.Node])
// answers nothing, so a method that needs it waits for it until its
// deadline.
type Cluster struct {
	cli         string
	nodeTimeout time.Duration
	nodes       []*Server                // in the order given to redis-cli
	admin       map[string]*redis.Client // one per node, for the harness's queries

	mu      sync.Mutex
	known   []slotRange // the slot map after the last wait for a healthy cluster
	stopped bool
}

// slotRange is one range of hash slots, its master and its replicas
// (sorted), as a node reports them (see slotMap).
type slotRange struct {
	start, end int
	master     string
	replicas   []string
}

func (r slotRange) String() string {
	return fmt.Sprintf("%d-%d %s %v", r.start, r.end, r.master, r.replicas)
}

// ClusterAvailable reports whether redis-server and redis-cli are on PATH.
func ClusterAvailable() bool {
	_, errServer := exec.LookPath(binary)
	_, errCLI := exec.LookPath(cliBinary)
	return errServer == nil && errCLI == nil
}

// StartCluster starts a cluster for the test tb and stops it when the test
// ends (through tb.Cleanup), as [Start] does a server: when redis-server
// or redis-cli is not installed it skips the test, unless the environment
// variable [RequireEnv] is "1", in which case it fails it; either way
// with a message that tells how to install the missing program. Any other
// failure to start fails the test. If the test has failed by the time it
// ends, the tail of every node's log is logged.
func StartCluster(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	need(tb, Available(), notFoundMsg)
	_, err := exec.LookPath(cliBinary)
	need(tb, err == nil, cliNotFoundMsg)
	c, err := StartClusterServers(opts)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, s := range c.nodes {
				tb.Logf("redistest: log of cluster node %s (tail):\n%s", s.Addr(), s.log.tail(logTail))
			}
		}
		if err := c.Stop(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return c
}

// need skips tb with msg when ok is false, or fails it when the
// environment variable RequireEnv is "1": the convention of Start.
func need(tb testing.TB, ok bool, msg string) {
	tb.Helper()
	if ok {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// StartClusterServers starts six nodes, makes them a cluster with
// redis-cli --cluster create (three masters, one replica each) and returns
// once every node reports cluster_state:ok, all agree on the slot map and
// every replica's link to its master is up. It is meant for programs;
// tests should use [StartCluster]. The caller must call [Cluster.Stop].
//
// When redis-server or redis-cli is not installed the error wraps
// exec.ErrNotFound. Every step is bounded (30 s to create the cluster and
// see it healthy); on failure every node started is stopped and the error
// quotes what went wrong (redis-cli's output, the ends of the nodes' logs).
func StartClusterServers(opts ClusterOptions) (*Cluster, error) {
	if _, err := exec.LookPath(binary); err != nil {
		return nil, fmt.Errorf("%s: %w", notFoundMsg, err)
	}
	cli, err := exec.LookPath(cliBinary)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cliNotFoundMsg, err)
	}
	switch {
	case opts.NodeTimeout == 0:
		opts.NodeTimeout = DefaultNodeTimeout
	case opts.NodeTimeout < time.Millisecond:
		return nil, fmt.Errorf("redistest: ClusterOptions.NodeTimeout %v: want at least 1ms", opts.NodeTimeout)
	}
	c := &Cluster{cli: cli, nodeTimeout: opts.NodeTimeout, admin: make(map[string]*redis.Client)}
	fail := func(err error) (*Cluster, error) {
		var tails strings.Builder
		for _, s := range c.nodes {
			fmt.Fprintf(&tails, "\n--- node %s:\n%s", s.Addr(), s.log.tail(logTail/4))
		}
		return nil, errors.Join(fmt.Errorf("%w%s", err, tails.String()), c.Stop())
	}
	for range clusterNodes {
		s, err := startClusterNode(opts)
		if err != nil {
			return fail(err)
		}
		c.nodes = append(c.nodes, s)
		c.admin[s.Addr()] = redis.NewClient(&redis.Options{
			Addr:                  s.Addr(),
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialTimeout:           queryTimeout,
			DisableIdentity:       true,
			PoolSize:              2,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	if err := c.create(ctx); err != nil {
		return fail(err)
	}
	if _, err := c.waitHealthy(ctx, true, nil); err != nil {
		return fail(fmt.Errorf("redistest: the new cluster: %w", err))
	}
	return c, nil
}

// startClusterNode starts one node with a cluster bus port of its own,
// trying other ports when one is taken.
func startClusterNode(opts ClusterOptions) (*Server, error) {
	for attempt := 1; ; attempt++ {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		// A replica's first sync starts at once, not after the default
		// 5 s that a master waits for more replicas.
		args := append([]string{"--repl-diskless-sync-delay", "0"}, opts.Args...)
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", nodeConfName,
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			// A master being stopped does not wait for its replicas.
			"--shutdown-timeout", "0",
		)
		s, err := StartServer(Options{Args: args})
		if err == nil {
			return s, nil
		}
		if attempt == portAttempts || !errors.Is(err, errPortInUse) {
			return nil, err
		}
	}
}

// create runs redis-cli --cluster create on the nodes.
func (c *Cluster) create(ctx context.Context) error {
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.CommandContext(ctx, c.cli, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("All 16384 slots covered")) {
		return fmt.Errorf("redistest: %s --cluster create: %v; its output:\n%s", c.cli, err, out)
	}
	return nil
}

// Addrs returns the addresses of the six nodes, "127.0.0.1:port", killed
// ones included: the seed addresses for redis.NewClusterClient.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Node returns the node at addr, nil if there is none: to pause, resume or
// kill it, or read its PID. A master killed this way is replaced as
// [Cluster.KillMaster] replaces it; [Cluster.WaitFailover] waits for that.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// Masters returns the addresses of the masters, in the order of their
// first slots, as a running node sees the cluster now.
func (c *Cluster) Masters() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ranges, err := c.slotMap(ctx, "")
	if err != nil {
		return nil, err
	}
	var masters []string
	for _, r := range ranges {
		if !slices.Contains(masters, r.master) {
			masters = append(masters, r.master)
		}
	}
	return masters, nil
}

// Slot returns key's hash slot (CLUSTER KEYSLOT on a running node).
func (c *Cluster) Slot(key string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	addr, err := c.anyLive()
	if err != nil {
		return 0, err
	}
	slot, err := c.admin[addr].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT on %s: %w", addr, err)
	}
	return int(slot), nil
}

// MasterOf returns the address of the master that owns key's hash slot,
// as a running node sees the cluster now.
func (c *Cluster) MasterOf(key string) (string, error) {
	slot, err := c.Slot(key)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ranges, err := c.slotMap(ctx, "")
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if r.start <= slot && slot <= r.end {
			return r.master, nil
		}
	}
	return "", fmt.Errorf("redistest: slot %d of %q has no master", slot, key)
}

// ReplicasOf returns the addresses of master's replicas (not failed), as
// a running node sees the cluster now.
func (c *Cluster) ReplicasOf(master string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	ranges, err := c.slotMap(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		if r.master == master {
			return r.replicas, nil
		}
	}
	return nil, fmt.Errorf("redistest: %s is no master", master)
}

// KillMaster crashes the master at addr with SIGKILL and waits, as
// [Cluster.WaitFailover], until one of its replicas has taken its slots
// over and the cluster is healthy again; it returns that replica's
// address. Its data is what the replica had received: asynchronous
// replication may have lost the master's last writes. A master without a
// running replica (one promoted by an earlier failover) is not killed:
// that is an error.
func (c *Cluster) KillMaster(addr string) (promoted string, err error) {
	masters, err := c.Masters()
	if err != nil {
		return "", err
	}
	if !slices.Contains(masters, addr) {
		return "", fmt.Errorf("redistest: %s is not a master (the masters: %v)", addr, masters)
	}
	replicas, err := c.ReplicasOf(addr)
	if err != nil {
		return "", err
	}
	if len(replicas) == 0 {
		return "", fmt.Errorf("redistest: master %s has no replica to take over", addr)
	}
	if err := c.Node(addr).Kill(); err != nil {
		return "", err
	}
	return c.WaitFailover(addr)
}

// WaitFailover waits until the slots of dead, a master that was killed
// (with [Cluster.KillMaster], or with Kill on its [Cluster.Node]), belong
// to one of its replicas, and the cluster is healthy again: every running
// node reports cluster_state:ok and all agree on the slot map, in which no
// stopped node is a master. It returns the new master's address. It gives
// up after 30 s plus five node timeouts (the failover takes about a node
// timeout and one to two seconds).
func (c *Cluster) WaitFailover(dead string) (promoted string, err error) {
	c.mu.Lock()
	var before []slotRange // dead's
	for _, r := range c.known {
		if r.master == dead {
			before = append(before, r)
		}
	}
	c.mu.Unlock()
	if len(before) == 0 {
		return "", fmt.Errorf("redistest: %s was no master", dead)
	}
	if s := c.Node(dead); s == nil || s.PID() != 0 {
		return "", fmt.Errorf("redistest: %s is still running", dead)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout+5*c.nodeTimeout)
	defer cancel()
	_, err = c.waitHealthy(ctx, false, func(ranges []slotRange) error {
		promoted = ""
		for _, b := range before {
			i := slices.IndexFunc(ranges, func(r slotRange) bool { return r.start == b.start && r.end == b.end })
			switch {
			case i < 0:
				return fmt.Errorf("slots %d-%d, %s's, are no longer one range: %v", b.start, b.end, dead, ranges)
			case !slices.Contains(b.replicas, ranges[i].master):
				return fmt.Errorf("slots %d-%d are %s's, not one of %s's replicas %v", b.start, b.end, ranges[i].master, dead, b.replicas)
			case promoted != "" && promoted != ranges[i].master:
				return fmt.Errorf("%s's slots went to %s and %s", dead, promoted, ranges[i].master)
			}
			promoted = ranges[i].master
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("redistest: failover of %s: %w", dead, err)
	}
	return promoted, nil
}

// Stop stops every node (see [Server.Stop]), at once, and waits for them.
// Stopping a stopped cluster does nothing and returns nil.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, s := range c.nodes {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	for _, a := range c.admin {
		_ = a.Close()
	}
	return errors.Join(errs...)
}

// live returns the addresses of the nodes that run.
func (c *Cluster) live() []string {
	var addrs []string
	for _, s := range c.nodes {
		if s.PID() != 0 {
			addrs = append(addrs, s.Addr())
		}
	}
	return addrs
}

func (c *Cluster) anyLive() (string, error) {
	live := c.live()
	if len(live) == 0 {
		return "", errors.New("redistest: no cluster node runs")
	}
	return live[0], nil
}

// slotMap returns the slot map as the node at addr (any running node if
// empty) sees it, sorted by slot: the ranges and their masters from
// CLUSTER SLOTS (what clients load), the replicas from CLUSTER NODES
// (Redis 7.0 caches CLUSTER SLOTS and adds new replicas to it late).
func (c *Cluster) slotMap(ctx context.Context, addr string) ([]slotRange, error) {
	if addr == "" {
		var err error
		if addr, err = c.anyLive(); err != nil {
			return nil, err
		}
	}
	//lint:ignore SA1019 CLUSTER SLOTS is what go-redis's ClusterClient loads: the harness sees the map clients see.
	slots, err := c.admin[addr].ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER SLOTS on %s: %w", addr, err)
	}
	nodes, err := c.admin[addr].ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", addr, err)
	}
	// Lines: <id> <ip:port@bus> <flags> <master id or -> ...
	addrOf := map[string]string{}
	type replica struct{ addr, master string }
	var reps []replica
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		addrOf[f[0]] = a
		flags := strings.Split(f[2], ",")
		if slices.Contains(flags, "slave") && !slices.ContainsFunc(flags, func(fl string) bool {
			return strings.HasPrefix(fl, "fail") || fl == "handshake" || fl == "noaddr"
		}) {
			reps = append(reps, replica{a, f[3]})
		}
	}
	ranges := make([]slotRange, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			return nil, fmt.Errorf("redistest: CLUSTER SLOTS on %s: slots %d-%d without a node", addr, s.Start, s.End)
		}
		r := slotRange{start: int(s.Start), end: int(s.End), master: s.Nodes[0].Addr}
		for _, rep := range reps {
			if addrOf[rep.master] == r.master {
				r.replicas = append(r.replicas, rep.addr)
			}
		}
		slices.Sort(r.replicas)
		ranges = append(ranges, r)
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return a.start - b.start })
	return ranges, nil
}

// waitHealthy polls the running nodes until the cluster is healthy: every
// one reports cluster_state:ok, all report the same slot map, covering
// every slot, with clusterMasters masters that all run, and extra (when
// not nil) accepts it; with replicas, every master also has a running
// replica whose link to it is up. It returns that slot map and keeps it
// as the known one.
func (c *Cluster) waitHealthy(ctx context.Context, replicas bool, extra func([]slotRange) error) ([]slotRange, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		ranges, err := c.healthy(qctx, replicas)
		cancel()
		if err == nil && extra != nil {
			err = extra(ranges)
		}
		if err == nil {
			c.mu.Lock()
			c.known = ranges
			c.mu.Unlock()
			return ranges, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not healthy in time: %w", err)
		case <-tick.C:
		}
	}
}

// healthy checks the cluster once (see waitHealthy).
func (c *Cluster) healthy(ctx context.Context, replicas bool) ([]slotRange, error) {
	live := c.live()
	if len(live) == 0 {
		return nil, errors.New("no node runs")
	}
	var ranges []slotRange
	for _, addr := range live {
		info, err := c.admin[addr].ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return nil, fmt.Errorf("%s: cluster_state is not ok", addr)
		}
		r, err := c.slotMap(ctx, addr)
		if err != nil {
			return nil, err
		}
		if ranges == nil {
			ranges = r
		} else if !slices.EqualFunc(ranges, r, func(a, b slotRange) bool { return a.String() == b.String() }) {
			return nil, fmt.Errorf("%s and %s disagree on the slots: %v, %v", live[0], addr, ranges, r)
		}
	}
	next := 0
	var masters []string
	for _, r := range ranges {
		if r.start != next {
			return nil, fmt.Errorf("slots %d-%d have no master", next, r.start-1)
		}
		next = r.end + 1
		if s := c.Node(r.master); s == nil || s.PID() == 0 {
			return nil, fmt.Errorf("slots %d-%d: master %s does not run", r.start, r.end, r.master)
		}
		if !slices.Contains(masters, r.master) {
			masters = append(masters, r.master)
		}
		if !replicas {
			continue
		}
		if len(r.replicas) == 0 {
			return nil, fmt.Errorf("slots %d-%d: master %s has no replica", r.start, r.end, r.master)
		}
		for _, rep := range r.replicas {
			a := c.admin[rep]
			if a == nil {
				return nil, fmt.Errorf("replica %s is no node of the cluster", rep)
			}
			info, err := a.Info(ctx, "replication").Result()
			if err != nil {
				return nil, fmt.Errorf("INFO replication on %s: %w", rep, err)
			}
			if !strings.Contains(info, "master_link_status:up") {
				return nil, fmt.Errorf("replica %s: its link to %s is not up", rep, r.master)
			}
		}
	}
	if next != clusterSlots {
		return nil, fmt.Errorf("slots %d-%d have no master", next, clusterSlots-1)
	}
	if len(masters) != clusterMasters {
		return nil, fmt.Errorf("%d masters, want %d: %v", len(masters), clusterMasters, ranges)
	}
	return ranges, nil
}

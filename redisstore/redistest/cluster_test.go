package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nodeClient returns a plain client of the node at addr, closed when the
// test ends.
func nodeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keyOn returns a key whose slot the master at addr owns.
func keyOn(t *testing.T, c *Cluster, addr string) string {
	t.Helper()
	for i := range 1000 {
		k := "k" + strconv.Itoa(i)
		m, err := c.MasterOf(k)
		require.NoError(t, err)
		if m == addr {
			return k
		}
	}
	t.Fatalf("no key of 1000 on %s", addr)
	return ""
}

// TestClusterStartsHealthy: six nodes, three masters owning all slots, one
// running replica each; a key lives on the master MasterOf names (it
// answers it; another master redirects with MOVED), and a cluster client
// reaches keys on every master.
func TestClusterStartsHealthy(t *testing.T) {
	t.Parallel() // waits, mostly
	start := time.Now()
	c := StartCluster(t, ClusterOptions{})
	t.Logf("cluster of %d nodes healthy in %v", len(c.Addrs()), time.Since(start).Round(time.Millisecond))

	addrs := c.Addrs()
	require.Len(t, addrs, 6)
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(addrs))), 6, "six distinct addresses")
	for _, a := range addrs {
		require.True(t, strings.HasPrefix(a, "127.0.0.1:"), a)
		require.NotZero(t, c.Node(a).PID())
		info, err := nodeClient(t, a).ClusterInfo(ctx(t, 5*time.Second)).Result()
		require.NoError(t, err)
		require.Contains(t, info, "cluster_state:ok")
		require.Contains(t, info, "cluster_known_nodes:6")
	}
	require.Nil(t, c.Node("127.0.0.1:1"))

	masters, err := c.Masters()
	require.NoError(t, err)
	require.Len(t, masters, 3)
	var replicas []string
	for _, m := range masters {
		rs, err := c.ReplicasOf(m)
		require.NoError(t, err)
		require.Len(t, rs, 1, "one replica of %s", m)
		require.NotContains(t, masters, rs[0])
		replicas = append(replicas, rs...)
		role, err := nodeClient(t, rs[0]).Do(ctx(t, 5*time.Second), "ROLE").Slice()
		require.NoError(t, err)
		require.Equal(t, "slave", role[0])
		require.Equal(t, "connected", role[3], "the replica's link to %s", m)
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(replicas))), 3)
	_, err = c.ReplicasOf(replicas[0])
	require.Error(t, err, "a replica has no replicas")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DisableIdentity: true})
	t.Cleanup(func() { _ = cc.Close() })
	for i, m := range masters {
		k := keyOn(t, c, m)
		require.NoError(t, cc.Set(ctx(t, 5*time.Second), k, "v"+strconv.Itoa(i), 0).Err())
		got, err := nodeClient(t, m).Get(ctx(t, 5*time.Second), k).Result()
		require.NoError(t, err, "the master %s holds %s", m, k)
		require.Equal(t, "v"+strconv.Itoa(i), got)
		slot, err := c.Slot(k)
		require.NoError(t, err)
		other := masters[(i+1)%len(masters)]
		err = nodeClient(t, other).Get(ctx(t, 5*time.Second), k).Err()
		require.ErrorContains(t, err, "MOVED "+strconv.Itoa(slot)+" "+m, "another master redirects to %s", m)
	}
}

// TestClusterKillMaster: KillMaster kills a master with SIGKILL and returns
// once its replica owns its slots and every node says cluster_state:ok; a
// key written (and replicated, WAIT) before the kill is on the new
// master; the other masters are unchanged; killing a node that is no
// master is an error.
func TestClusterKillMaster(t *testing.T) {
	t.Parallel() // waits, mostly
	c := StartCluster(t, ClusterOptions{})
	masters, err := c.Masters()
	require.NoError(t, err)
	victim := masters[1]
	replicas, err := c.ReplicasOf(victim)
	require.NoError(t, err)
	_, err = c.KillMaster(replicas[0])
	require.ErrorContains(t, err, "is not a master")
	_, err = c.WaitFailover(victim)
	require.ErrorContains(t, err, "still running")

	k := keyOn(t, c, victim)
	direct := nodeClient(t, victim)
	require.NoError(t, direct.Set(ctx(t, 5*time.Second), k, "kept", 0).Err())
	n, err := direct.Do(ctx(t, 5*time.Second), "WAIT", 1, 5000).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the replica acknowledged the write")

	start := time.Now()
	promoted, err := c.KillMaster(victim)
	took := time.Since(start)
	require.NoError(t, err)
	t.Logf("failover of %s to %s took %v (cluster-node-timeout %v)", victim, promoted, took.Round(time.Millisecond), DefaultNodeTimeout)
	require.Equal(t, replicas[0], promoted)
	require.Zero(t, c.Node(victim).PID())

	after, err := c.Masters()
	require.NoError(t, err)
	require.Len(t, after, 3)
	require.NotContains(t, after, victim)
	require.Contains(t, after, promoted)
	for _, m := range masters {
		if m != victim {
			require.Contains(t, after, m)
		}
	}
	owner, err := c.MasterOf(k)
	require.NoError(t, err)
	require.Equal(t, promoted, owner)
	got, err := nodeClient(t, promoted).Get(ctx(t, 5*time.Second), k).Result()
	require.NoError(t, err)
	require.Equal(t, "kept", got)
	for _, a := range c.Addrs() {
		if a == victim {
			continue
		}
		info, err := nodeClient(t, a).ClusterInfo(ctx(t, 5*time.Second)).Result()
		require.NoError(t, err)
		require.Contains(t, info, "cluster_state:ok", a)
	}

	_, err = c.KillMaster(victim)
	require.ErrorContains(t, err, "is not a master", "a dead node")
	_, err = c.KillMaster(promoted)
	require.ErrorContains(t, err, "has no replica", "the promoted replica has none")
	require.NotZero(t, c.Node(promoted).PID(), "and is not killed")
	// A second failover, of another master: the cluster has a replica
	// for each of the two others.
	second := after[slices.IndexFunc(after, func(a string) bool { return a != promoted })]
	p2, err := c.KillMaster(second)
	require.NoError(t, err)
	require.NotEqual(t, second, p2)
}

// TestClusterStopsWhenTheTestEnds: the nodes are stopped and their
// directories removed when the test that started them ends.
func TestClusterStopsWhenTheTestEnds(t *testing.T) {
	var c *Cluster
	require.True(t, t.Run("sub", func(t *testing.T) { c = StartCluster(t, ClusterOptions{}) }))
	if c == nil { // skipped
		t.Skip(notFoundMsg)
	}
	for _, s := range c.nodes {
		assert.Zero(t, s.PID())
		assert.NoDirExists(t, s.dir)
	}
	require.NoError(t, c.Stop(), "stopping twice is fine")
}

func TestClusterNoGoroutineLeftAfterStop(t *testing.T) {
	if !ClusterAvailable() {
		t.Skip(cliNotFoundMsg)
	}
	before := runtime.NumGoroutine()
	c, err := StartClusterServers(ClusterOptions{})
	require.NoError(t, err)
	masters, err := c.Masters()
	require.NoError(t, err)
	_, err = c.KillMaster(masters[0])
	require.NoError(t, err)
	require.NoError(t, c.Stop())
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

func TestClusterOptionsNodeTimeout(t *testing.T) {
	if !ClusterAvailable() {
		t.Skip(cliNotFoundMsg)
	}
	t.Parallel() // waits, mostly
	_, err := StartClusterServers(ClusterOptions{NodeTimeout: time.Microsecond})
	require.ErrorContains(t, err, "NodeTimeout")
	c := StartCluster(t, ClusterOptions{NodeTimeout: 1500 * time.Millisecond, Args: []string{"--maxmemory", "10mb"}})
	for _, a := range c.Addrs() {
		got, err := nodeClient(t, a).ConfigGet(ctx(t, 5*time.Second), "*").Result()
		require.NoError(t, err)
		require.Equal(t, "1500", got["cluster-node-timeout"], a)
		require.Equal(t, "10485760", got["maxmemory"], a)
	}
}

// startClusterFake runs StartCluster(f) in a goroutine of its own and
// waits for it.
func startClusterFake(f *fakeTB) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartCluster(f, ClusterOptions{})
	}()
	<-done
}

func TestStartClusterWithoutTheBinaries(t *testing.T) {
	onlyServer := t.TempDir()
	if bin, err := exec.LookPath(binary); err == nil {
		require.NoError(t, os.Symlink(bin, filepath.Join(onlyServer, binary)))
	}
	for _, tc := range []struct {
		name, path, msg string
	}{
		{"no redis-server", t.TempDir(), notFoundMsg},
		{"no redis-cli", onlyServer, cliNotFoundMsg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.msg == cliNotFoundMsg && !Available() {
				t.Skip(notFoundMsg)
			}
			t.Setenv("PATH", tc.path)
			require.False(t, ClusterAvailable())

			t.Setenv(RequireEnv, "")
			f := &fakeTB{}
			startClusterFake(f)
			assert.Equal(t, tc.msg, f.skipped)
			assert.Empty(t, f.fatal)
			assert.Zero(t, f.cleanups)

			t.Setenv(RequireEnv, "1")
			f = &fakeTB{}
			startClusterFake(f)
			assert.Equal(t, tc.msg, f.fatal)
			assert.Empty(t, f.skipped)

			c, err := StartClusterServers(ClusterOptions{})
			assert.Nil(t, c)
			require.ErrorIs(t, err, exec.ErrNotFound)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	assert.True(t, strings.HasPrefix(cliNotFoundMsg, "redis-cli not found: install the Debian package redis-tools"))
}

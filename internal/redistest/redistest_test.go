package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestMiniredisPing(t *testing.T) {
	t.Parallel()
	mr, c := redistest.Miniredis(t)
	require.NotNil(t, mr)
	got, err := c.Do(ctx(t), c.B().Ping().Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "PONG", got)

	key := redistest.Prefix(t) + ":k"
	require.NoError(t, c.Do(ctx(t), c.B().Set().Key(key).Value("v").Build()).Error())
	v, err := mr.Get(key)
	require.NoError(t, err)
	assert.Equal(t, "v", v)
}

func TestServerPingSetGet(t *testing.T) {
	t.Parallel()
	c := redistest.Server(t)
	got, err := c.Do(ctx(t), c.B().Ping().Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "PONG", got)

	key := redistest.Prefix(t) + ":greeting"
	require.NoError(t, c.Do(ctx(t), c.B().Set().Key(key).Value("hello").Ex(time.Minute).Build()).Error())
	v, err := c.Do(ctx(t), c.B().Get().Key(key).Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "hello", v)
	require.NoError(t, c.Do(ctx(t), c.B().Del().Key(key).Build()).Error())
}

func TestServerAddrShared(t *testing.T) {
	t.Parallel()
	// Parallel callers must all get the same single shared server.
	addrs := make(chan string, 4)
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			addrs <- redistest.ServerAddr(t)
		})
	}
	t.Cleanup(func() {
		close(addrs)
		first := ""
		for a := range addrs {
			if first == "" {
				first = a
			}
			assert.Equal(t, first, a)
		}
	})
}

func TestClusterSpreadsKeys(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	assert.Equal(t, rueidis.ClientModeCluster, c.Mode())
	prefix := redistest.Prefix(t)

	const n = 50
	keys := make([]string, n)
	slots := map[int64]bool{}
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:{tag%d}", prefix, i)
		require.NoError(t, c.Do(ctx(t), c.B().Set().Key(keys[i]).Value(fmt.Sprint(i)).Ex(time.Minute).Build()).Error())
	}
	t.Cleanup(func() {
		for _, k := range keys {
			_ = c.Do(context.Background(), c.B().Del().Key(k).Build()).Error()
		}
	})

	// Connect to each seed node on its own and count the keys it holds.
	perNode := map[string]int{}
	total := 0
	for _, addr := range redistest.ClusterAddrs(t) {
		node, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{addr},
			ForceSingleClient: true,
			DisableCache:      true,
		})
		require.NoError(t, err)
		t.Cleanup(node.Close)
		for _, k := range keys {
			slot, err := node.Do(ctx(t), node.B().ClusterKeyslot().Key(k).Build()).AsInt64()
			require.NoError(t, err)
			slots[slot] = true
		}
		var cursor uint64
		for {
			e, err := node.Do(ctx(t), node.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			perNode[addr] += len(e.Elements)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
		total += perNode[addr]
	}
	t.Logf("keys per node: %v, distinct slots: %d", perNode, len(slots))
	assert.Equal(t, n, total, "every key lives on exactly one seed node")
	used := 0
	for _, cnt := range perNode {
		if cnt > 0 {
			used++
		}
	}
	assert.GreaterOrEqual(t, used, 2, "keys landed on at least two nodes")
	assert.Greater(t, len(slots), 1)
}

func TestSpawnStop(t *testing.T) {
	t.Parallel()
	addr, stop := redistest.Spawn(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx(t), c.B().Ping().Build()).Error())
	c.Close()

	stop()
	stop() // idempotent

	c2, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err == nil {
		defer c2.Close()
		err = c2.Do(ctx(t), c2.B().Ping().Build()).Error()
	}
	require.Error(t, err, "server at %s should be gone", addr)
}

func TestSpawnServerRestart(t *testing.T) {
	t.Parallel()
	in := redistest.SpawnServer(t, "--maxmemory", "10mb")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cfg, err := c.Do(ctx(t), c.B().ConfigGet().Parameter("maxmemory").Build()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "10485760", cfg["maxmemory"], "extra args are applied")

	in.Stop()
	require.Error(t, c.Do(ctx(t), c.B().Ping().Build()).Error())
	in.Restart()
	require.Eventually(t, func() bool {
		return c.Do(ctx(t), c.B().Ping().Build()).Error() == nil
	}, 5*time.Second, 20*time.Millisecond, "client reconnects to the restarted server")
}

func TestPrefixUnique(t *testing.T) {
	t.Parallel()
	a, b := redistest.Prefix(t), redistest.Prefix(t)
	assert.NotEqual(t, a, b)
	for _, p := range []string{a, b} {
		assert.True(t, strings.HasPrefix(p, "TestPrefixUnique-"), p)
		assert.NotContains(t, p, "{")
		assert.NotContains(t, p, "}")
	}
	t.Run("odd name/{x} y", func(t *testing.T) {
		p := redistest.Prefix(t)
		for _, r := range p {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
			assert.True(t, ok, "unexpected %q in %q", r, p)
		}
	})
}

func TestRequireReal(t *testing.T) {
	t.Setenv("CI", "true")
	assert.True(t, redistest.RequireReal())
	t.Setenv("CI", "")
	assert.False(t, redistest.RequireReal())
}

func TestSpawnServerWithPassword(t *testing.T) {
	in := redistest.SpawnServer(t, "--requirepass", "secret")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, Password: "secret", ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Do(ctx(t), c.B().Ping().Build()).Error())
}

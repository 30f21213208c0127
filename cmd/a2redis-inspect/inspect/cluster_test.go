package inspect

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

func TestClusterSessions(t *testing.T) {
	t.Parallel()
	addrs := redistest.ClusterAddrs(t)
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "redis://" + a
	}
	e := newEnv(t, redistest.Cluster(t), urls...)
	const n = 40
	var want []string
	for i := range n {
		s := fmt.Sprintf("sess-%02d", i)
		want = append(want, s)
		_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}

	// The sessions spread over every master.
	head, tail := logKeyShape(e.cli.prefix)
	perNode := map[string]int{}
	for addr, node := range e.client.Nodes() {
		var cursor uint64
		for {
			entry, err := node.Do(e.ctx, node.B().Scan().Cursor(cursor).Match(keys.EscapeGlob(head)+"*"+keys.EscapeGlob(tail)).Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			perNode[addr] += len(entry.Elements)
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	require.Len(t, perNode, 3)
	for addr, count := range perNode {
		require.Positive(t, count, "node %s holds no session: the test proves nothing", addr)
	}

	list := func(c *cli, args ...string) []string {
		var doc sessionsDoc
		parseJSON(t, c.run(t, "", append([]string{"sessions", "--json"}, args...)...).ok(t), &doc)
		var names []string
		for _, s := range doc.Sessions {
			names = append(names, s.Session)
			assert.Equal(t, int64(1), s.Head)
			assert.Equal(t, int64(1), s.Runnable)
		}
		sort.Strings(names)
		return names
	}
	assert.Equal(t, want, list(e.cli), "seeds given as a comma-separated list")
	repeated := &cli{prefix: e.cli.prefix}
	var args []string
	for _, u := range urls {
		args = append(args, "--url", u)
	}
	var doc sessionsDoc
	parseJSON(t, repeated.runRaw(t, t.Context(), "", append(append(args, "--prefix", e.cli.prefix, "--json"), "sessions")...).ok(t), &doc)
	assert.Len(t, doc.Sessions, n, "seeds given as repeated --url")
	single := &cli{url: urls[1], prefix: e.cli.prefix}
	assert.Equal(t, want, list(single), "one seed finds the whole cluster")
	assert.Equal(t, want[10:20], list(single, "--match", "sess-1*"))
	assert.Len(t, list(single, "--limit", "5"), 5)

	var info infoDoc
	parseJSON(t, single.run(t, "", "info", "--json").ok(t), &info)
	assert.Equal(t, "cluster", info.Mode, "a single URL on a cluster node picks cluster mode")
	require.Len(t, info.Nodes, 3)
	for _, node := range info.Nodes {
		assert.Equal(t, "master", node.Role)
		assert.Empty(t, node.Error)
	}
	assert.Equal(t, lockingNo, info.KeyLocking)
	assert.Contains(t, single.run(t, "", "info").ok(t), "mode         cluster (3 nodes)")

	// Session commands route by slot.
	rows := parseTable(t, e.cli.run(t, "", "cursors", "sess-07").ok(t))
	require.Len(t, rows, 1)
	assert.Equal(t, "ready", rows[0]["STATE"])
	assert.True(t, strings.HasPrefix(e.cli.run(t, "", "log", "sess-33").ok(t), "INDEX"))
}

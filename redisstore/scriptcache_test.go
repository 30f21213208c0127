package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// scriptSHAs maps the SHA1 of every store script (as Redis and Valkey run
// them: without the key-locking shebang) to its name.
func scriptSHAs() map[string]string {
	out := map[string]string{}
	for name, s := range scripts.All() {
		sum := sha1.Sum([]byte(s.Source))
		out[hex.EncodeToString(sum[:])] = name
	}
	return out
}

// loadedScripts returns the names of the store scripts node holds (SCRIPT
// EXISTS), sorted.
func loadedScripts(ctx context.Context, t *testing.T, node rueidis.Client) []string {
	t.Helper()
	shas := scriptSHAs()
	list := make([]string, 0, len(shas))
	for sha := range shas {
		list = append(list, sha)
	}
	exists, err := node.Do(ctx, node.B().ScriptExists().Sha1(list...).Build()).AsIntSlice()
	require.NoError(t, err)
	var names []string
	for i, e := range exists {
		if e == 1 {
			names = append(names, shas[list[i]])
		}
	}
	sort.Strings(names)
	return names
}

// infoField returns a numeric field of INFO section, and whether the server
// reports it.
func infoField(ctx context.Context, t *testing.T, c rueidis.Client, section, field string) (int64, bool) {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section(section).Build()).ToString()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "%s %q", field, v)
			return n, true
		}
	}
	return 0, false
}

// noscripts returns how many NOSCRIPT replies the server sent since its
// last CONFIG RESETSTAT.
func noscripts(ctx context.Context, t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("errorstats").Build()).ToString()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// storeWork appends, claims and completes on n sessions: every hot script
// runs at least once.
func storeWork(ctx context.Context, t *testing.T, s *redisstore.Store, round, n int) {
	t.Helper()
	for i := range n {
		session := fmt.Sprintf("s%d", i)
		_, err := s.Append(ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		_, err = s.Append(ctx, session, []a2redis.Event{{Type: "t"}, {Type: "u", Targets: []a2redis.Target{{Consumer: "c", Lane: "l"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		claimed, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, claimed.Heads, "round %d session %s", round, session)
		for _, h := range claimed.Heads {
			r, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts})
			require.NoError(t, err)
			require.Equal(t, redisstore.Completed, r.Outcome)
		}
	}
}

// floodScriptCache runs n distinct scripts by EVAL on node (what an
// application's own EVAL traffic does to the cache).
func floodScriptCache(ctx context.Context, t *testing.T, node rueidis.Client, n int) {
	t.Helper()
	cmds := make(rueidis.Commands, 0, n)
	for i := range n {
		cmds = append(cmds, node.B().Eval().Script(fmt.Sprintf("return %d -- flood", i)).Numkeys(0).Build())
	}
	for _, r := range node.DoMulti(ctx, cmds...) {
		require.NoError(t, r.Error())
	}
}

// The store's scripts are loaded by SCRIPT LOAD, so a server that evicts
// scripts EVAL loaded past 500 (Redis 7.4, Valkey 8) keeps them: after
// 1,000 other scripts went through EVAL, the store's calls still run by
// EVALSHA, its scripts all still exist, no call met NOSCRIPT, and the
// server ran no EVAL but the flood's. A control script run the rueidis
// default way (EVAL after NOSCRIPT) is evicted on such a server.
func TestScriptsSurviveTheScriptCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := redistest.SpawnServer(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t)})
	require.NoError(t, err)
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())

	storeWork(ctx, t, s, 1, 3)
	before := loadedScripts(ctx, t, client)
	require.GreaterOrEqual(t, len(before), 4, "the store's scripts are loaded: %v", before)
	control := rueidis.NewLuaScript("return 'control'")
	require.NoError(t, control.Exec(ctx, client, nil, nil).Error())
	controlSHA := sha1.Sum([]byte("return 'control'"))
	calls, err := redistest.CommandCalls(ctx, client)
	require.NoError(t, err)
	require.Equal(t, int64(1), calls["eval"], "only the control script went by EVAL: %v", calls)
	require.Equal(t, int64(0), calls["script|load"]-int64(len(before)), "one SCRIPT LOAD per store script used")
	missesBefore := noscripts(ctx, t, client)

	const flood = 1000
	floodScriptCache(ctx, t, client, flood)
	evicted, evicts := infoField(ctx, t, client, "stats", "evicted_scripts")
	if evicts {
		require.GreaterOrEqual(t, evicted, int64(flood+1-500), "the server evicted EVAL-loaded scripts")
		exists, err := client.Do(ctx, client.B().ScriptExists().Sha1(hex.EncodeToString(controlSHA[:])).Build()).AsIntSlice()
		require.NoError(t, err)
		assert.Equal(t, []int64{0}, exists, "the control script, loaded by EVAL, was evicted")
	} else {
		t.Logf("this server does not evict scripts (no evicted_scripts in INFO stats); the calls are still checked")
	}
	assert.Equal(t, before, loadedScripts(ctx, t, client), "every store script survived the flood")

	storeWork(ctx, t, s, 2, 3)
	after, err := redistest.CommandCalls(ctx, client)
	require.NoError(t, err)
	assert.Equal(t, int64(1+flood), after["eval"], "the store sent no EVAL: %v", after)
	assert.Equal(t, calls["script|load"], after["script|load"], "nothing had to be loaded again")
	assert.Greater(t, after["evalsha"], calls["evalsha"]+20, "the store's calls ran by EVALSHA")
	assert.Equal(t, missesBefore, noscripts(ctx, t, client), "no store call met NOSCRIPT after the flood")
	assert.Equal(t, before, loadedScripts(ctx, t, client))
}

// On a cluster the scripts are loaded on every master, survive a flood of
// every master's cache, and a replica promoted by a failover (a node the
// scripts were not loaded on) is loaded by SCRIPT LOAD on its first
// NOSCRIPT: the store sends no EVAL there either.
func TestScriptsLoadedOnEveryClusterNode(t *testing.T) {
	redistest.Chaos(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	client := c.Client(t)
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t)})
	require.NoError(t, err)
	// Sessions on every master.
	storeWork(ctx, t, s, 1, 12)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	perNode := map[string][]string{}
	for _, m := range masters {
		node := client.Nodes()[m]
		require.NotNil(t, node, "the client knows master %s", m)
		perNode[m] = loadedScripts(ctx, t, node)
		assert.GreaterOrEqual(t, len(perNode[m]), 4, "master %s holds the store's scripts", m)
		require.NoError(t, node.Do(ctx, node.B().ConfigResetstat().Build()).Error())
		floodScriptCache(ctx, t, node, 1000)
	}
	storeWork(ctx, t, s, 2, 12)
	for _, m := range masters {
		node := client.Nodes()[m]
		calls, err := redistest.CommandCalls(ctx, node)
		require.NoError(t, err)
		assert.Equal(t, int64(1000), calls["eval"], "master %s: the store sent no EVAL: %v", m, calls)
		assert.Zero(t, calls["script|load"], "master %s: nothing loaded again", m)
		assert.Positive(t, calls["evalsha"], "master %s ran the store's calls by EVALSHA", m)
		assert.Zero(t, noscripts(ctx, t, node), "master %s: no NOSCRIPT", m)
		assert.Equal(t, perNode[m], loadedScripts(ctx, t, node), "master %s: its scripts survived", m)
	}

	// A replica takes over. Until the client's view of the cluster lists
	// it (rueidis refreshes it after the first redirect), a SCRIPT LOAD
	// sent for the slot may still reach the old master, and the call falls
	// back to EVAL; once the view is right, a NOSCRIPT there (the flood
	// evicted what EVAL loaded) is loaded by SCRIPT LOAD for good.
	replicas, err := c.ReplicasOf(ctx, masters[0])
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	promoted := replicas[0]
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{promoted}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer rc.Close()
	require.NoError(t, c.Failover(ctx, promoted, redistest.FailoverGraceful))
	require.Eventually(t, func() bool {
		storeWork(ctx, t, s, 3, 12)
		_, listed := client.Nodes()[promoted]
		return listed
	}, time.Minute, 100*time.Millisecond, "the client's view lists the promoted master")
	floodScriptCache(ctx, t, rc, 1000)
	storeWork(ctx, t, s, 4, 12)
	require.NoError(t, rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error())
	storeWork(ctx, t, s, 5, 12)
	calls, err := redistest.CommandCalls(ctx, rc)
	require.NoError(t, err)
	assert.Zero(t, calls["eval"], "the promoted master ran no EVAL: %v", calls)
	assert.Zero(t, calls["script|load"], "nothing loaded again")
	assert.Positive(t, calls["evalsha"], "the promoted master ran the store's calls by EVALSHA")
	assert.Zero(t, noscripts(ctx, t, rc), "no NOSCRIPT")
	assert.GreaterOrEqual(t, len(loadedScripts(ctx, t, rc)), 4)
}

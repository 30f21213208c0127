package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
)

// A private cluster: KeySlot agrees with the server, MigrateSlot moves a
// slot's keys (they stay readable through the cluster client) and reports a
// key already on the importing node as BUSYKEY, and Reshard moves slots with
// redis-cli.
func TestSpawnClusterMovesSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	cl := redistest.SpawnCluster(t)
	c := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.Len(t, cl.Addrs(), 3)
	require.Len(t, cl.NodeIDs(), 3)

	prefix := redistest.Prefix(t)
	for i := range 20 {
		key := fmt.Sprintf("%s:{t%d}:k", prefix, i)
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int(slot), redistest.KeySlot(key), key)
	}
	assert.Equal(t, redistest.KeySlot("plain"), redistest.KeySlot("x{plain}y"))
	assert.Equal(t, redistest.KeySlot("{}a"), redistest.KeySlot("{}a"), "an empty tag hashes the whole key")

	// Ten keys of one slot, moved one by one.
	tag := prefix + "-m"
	slot := redistest.KeySlot("{" + tag + "}")
	for i := range 10 {
		require.NoError(t, c.Do(ctx, c.B().Set().Key(fmt.Sprintf("{%s}:%d", tag, i)).Value(fmt.Sprint(i)).Build()).Error())
	}
	from, err := cl.Owner(ctx, slot)
	require.NoError(t, err)
	to := cl.Addrs()[0]
	if to == from {
		to = cl.Addrs()[1]
	}
	moved := 0
	st, err := cl.MigrateSlot(ctx, slot, to, redistest.MigrateOptions{Pause: time.Millisecond, OnKey: func(string) { moved++ }})
	require.NoError(t, err)
	assert.Equal(t, redistest.MigrateStats{From: from, To: to, Keys: 10, Rounds: 1}, st)
	assert.Equal(t, 10, moved)
	owner, err := cl.Owner(ctx, slot)
	require.NoError(t, err)
	assert.Equal(t, to, owner)
	for i := range 10 {
		v, err := c.Do(ctx, c.B().Get().Key(fmt.Sprintf("{%s}:%d", tag, i)).Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(i), v)
	}
	_, err = cl.MigrateSlot(ctx, slot, to, redistest.MigrateOptions{})
	require.Error(t, err, "the slot already is there")

	// A key created on the importing node while the source still has it.
	node := func(addr string) rueidis.Client {
		n, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(n.Close)
		return n
	}
	back := node(from)
	require.NoError(t, back.Do(ctx, back.B().Arbitrary("CLUSTER", "SETSLOT").Args(fmt.Sprint(slot), "IMPORTING", cl.NodeID(to)).Build()).Error())
	for _, r := range back.DoMulti(ctx, back.B().Asking().Build(), back.B().Set().Key(fmt.Sprintf("{%s}:3", tag)).Value("twin").Build()) {
		require.NoError(t, r.Error())
	}
	_, err = cl.MigrateSlot(ctx, slot, from, redistest.MigrateOptions{})
	require.True(t, errors.Is(err, redistest.ErrBusyKey), "got %v", err)
	open, err := cl.OpenSlots(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int{slot}, open, "the failed move leaves its slot open")
	// Close the slot again: drop the twin, both nodes stable.
	for _, r := range back.DoMulti(ctx, back.B().Asking().Build(), back.B().Del().Key(fmt.Sprintf("{%s}:3", tag)).Build()) {
		require.NoError(t, r.Error())
	}
	for _, n := range []rueidis.Client{back, node(to)} {
		require.NoError(t, n.Do(ctx, n.B().Arbitrary("CLUSTER", "SETSLOT").Args(fmt.Sprint(slot), "STABLE").Build()).Error())
	}

	open, err = cl.OpenSlots(ctx)
	require.NoError(t, err)
	assert.Empty(t, open)

	// redis-cli moves 50 slots of another node.
	ids := cl.NodeIDs()
	before, err := cl.SlotsOf(ctx, ids[2])
	require.NoError(t, err)
	require.NoError(t, cl.Reshard(ctx, ids[2], ids[1], 50))
	after, err := cl.SlotsOf(ctx, ids[2])
	require.NoError(t, err)
	assert.Len(t, after, len(before)-50)
	for _, s := range before[:50] {
		owner, err := cl.Owner(ctx, s)
		require.NoError(t, err)
		assert.Equal(t, cl.AddrOf(ids[1]), owner, "slot %d", s)
	}
}

// A private cluster with a replica per master: the roles as the nodes
// report them, a slot move, failovers (graceful, FORCE, TAKEOVER: the keys
// stay readable, the roles switch), then a killed master whose replica
// takes over on its own, and the killed node restarted as the new master's
// replica.
func TestSpawnClusterWithReplicasFailsOver(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 1500 * time.Millisecond})
	c := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.Len(t, cl.Addrs(), 6)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	replicas, err := cl.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	require.Len(t, replicas, 3)
	replicaOf := map[string]string{}
	for _, m := range masters {
		rs, err := cl.ReplicasOf(ctx, m)
		require.NoError(t, err)
		require.Len(t, rs, 1, "replicas of %s", m)
		replicaOf[m] = rs[0]
	}

	prefix := redistest.Prefix(t)
	key := func(i int) string { return fmt.Sprintf("%s:{t%d}:k", prefix, i) }
	for i := range 30 {
		require.NoError(t, c.Do(ctx, c.B().Set().Key(key(i)).Value(fmt.Sprint(i)).Build()).Error())
	}
	readAll := func() {
		t.Helper()
		for i := range 30 {
			v, err := c.Do(ctx, c.B().Get().Key(key(i)).Build()).ToString()
			require.NoError(t, err, key(i))
			assert.Equal(t, fmt.Sprint(i), v)
		}
	}

	// A slot move with replicas about (they take no SETSLOT).
	moved := redistest.KeySlot(key(1))
	from, err := cl.Owner(ctx, moved)
	require.NoError(t, err)
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	_, err = cl.MigrateSlot(ctx, moved, to, redistest.MigrateOptions{})
	require.NoError(t, err)
	owner, err := cl.Owner(ctx, moved)
	require.NoError(t, err)
	assert.Equal(t, to, owner)
	readAll()

	slot := redistest.KeySlot(key(0))
	m, err := cl.Owner(ctx, slot)
	require.NoError(t, err)
	r := replicaOf[m]
	require.NoError(t, cl.Failover(ctx, r, redistest.FailoverGraceful))
	owner, err = cl.Owner(ctx, slot)
	require.NoError(t, err)
	assert.Equal(t, r, owner)
	back, err := cl.ReplicasOf(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, []string{m}, back, "the old master follows the new one")
	readAll()
	require.Error(t, cl.Failover(ctx, r, redistest.FailoverGraceful), "a master cannot fail over")
	// Back by force, over again by takeover.
	for _, step := range []struct {
		to   string
		mode redistest.FailoverMode
	}{{m, redistest.FailoverForce}, {r, redistest.FailoverTakeover}} {
		require.NoError(t, cl.Failover(ctx, step.to, step.mode), "%q", step.mode)
		owner, err = cl.Owner(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, step.to, owner, "%q", step.mode)
		readAll()
	}

	// A crash of r: m takes over after the node timeout.
	require.NoError(t, cl.Kill(r))
	require.ErrorIs(t, cl.Kill(r), redistest.ErrKilled)
	require.NoError(t, cl.WaitPromoted(ctx, m))
	owner, err = cl.Owner(ctx, slot)
	require.NoError(t, err)
	assert.Equal(t, m, owner)
	masters, err = cl.Masters(ctx)
	require.NoError(t, err)
	assert.Len(t, masters, 3)
	assert.Contains(t, masters, m)
	nodes, err := cl.Nodes(ctx)
	require.NoError(t, err)
	assert.Len(t, nodes, 5, "the killed node is left out")
	readAll()

	// A slot no node serves (as Redis 7.0 once left one after a promotion
	// under load): every live node forgets it, and Restart covers it again
	// with redis-cli --cluster fix, on the node holding its keys.
	lost := redistest.KeySlot(key(5))
	holder, err := cl.Owner(ctx, lost)
	require.NoError(t, err)
	for _, addr := range cl.Addrs() {
		if addr == r {
			continue // killed
		}
		require.NoError(t, rawDelSlot(ctx, addr, lost), addr)
	}

	// Back, empty, r follows the master that took its slots.
	require.NoError(t, cl.Restart(ctx, r))
	owner, err = cl.Owner(ctx, lost)
	require.NoError(t, err)
	assert.Equal(t, holder, owner, "the uncovered slot went back to the node with its keys")
	back, err = cl.ReplicasOf(ctx, m)
	require.NoError(t, err)
	assert.Equal(t, []string{r}, back)
	nodes, err = cl.Nodes(ctx)
	require.NoError(t, err)
	assert.Len(t, nodes, 6)
	readAll()
}

// rawDelSlot runs CLUSTER DELSLOTS slot on the node at addr.
func rawDelSlot(ctx context.Context, addr string, slot int) error {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(ctx, c.B().Arbitrary("CLUSTER", "DELSLOTS").Args(fmt.Sprint(slot)).Build()).Error()
}

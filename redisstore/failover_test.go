package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// The store while Redis Cluster masters fail over under live traffic: the
// workload of the slot-migration tests (migRig) on a cluster with a replica
// per master, while replicas take over. A graceful failover (the master
// stops taking writes until its replica has caught up) may lose nothing; a
// crashed master's replica takes over without that, so only the writes the
// store acknowledged after Durability's WAIT must survive.

// TestClusterFailoverUnderLoad fails each master over to its replica with a
// graceful CLUSTER FAILOVER, one after the other, then each back again (six
// failovers), while the workload runs.
func TestClusterFailoverUnderLoad(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	// Each failover waits until every node knows the new roles, which the
	// cluster bus gossips the faster the smaller the node timeout; 3s still
	// keeps a busy machine from having a slow node failed over by mistake.
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 3 * time.Second})
	sessions := make([]string, 16)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("fo-%02d", i)
	}
	r := newMigRig(t, cl, sessions)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pairs := foPairs(t, ctx, cl, masters)
	statsBefore, err := cl.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var failovers, switched atomic.Int64
	r.run(func(ctx context.Context) {
		time.Sleep(500 * time.Millisecond) // let the sessions fill first
		for round := range 2 {
			for _, m := range masters {
				from, to := m, pairs[m]
				if round == 1 {
					from, to = to, from
				}
				done := r.markMoving(ctx, from)
				err := cl.Failover(ctx, to, redistest.FailoverGraceful)
				done()
				if err != nil {
					r.noteMigrateError(err)
					continue
				}
				failovers.Add(1)
				if foRoleIs(ctx, cl, to, true) && foRoleIs(ctx, cl, from, false) {
					switched.Add(1)
				}
				time.Sleep(300 * time.Millisecond)
			}
		}
	})

	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	after, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	statsAfter, err := cl.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.report(fmt.Sprintf("failovers=%d of 6 roles switched=%d", failovers.Load(), switched.Load()))
	r.logFailoverCounts(statsBefore, statsAfter)
	if failovers.Load() != 6 || switched.Load() != 6 {
		t.Errorf("%d of 6 failovers done, %d switched the roles: the failovers did not happen", failovers.Load(), switched.Load())
	}
	if statsAfter["MOVED"] <= statsBefore["MOVED"] {
		t.Errorf("no node redirected a command (MOVED): the failovers met no traffic")
	}
	slices.Sort(after)
	slices.Sort(masters)
	if !slices.Equal(after, masters) {
		t.Errorf("masters after failing over and back: %v, want the first ones %v", after, masters)
	}
}

// TestClusterKilledMasterDurable kills a master (SIGKILL: nothing handed
// over) while the workload runs on a store whose writes wait for a replica
// (Durability{Replicas: 1}); its replica takes over after the node timeout
// (1.5s), and 2.5s later the killed node is restarted (empty) and
// rejoins as the new master's replica. Every write the store acknowledged
// must survive; a write reported ErrNotReplicated may be gone, and is
// counted apart (the workload sends it again with the same ids until it is
// acknowledged, which the new master alone cannot do).
func TestClusterKilledMasterDurable(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 1500 * time.Millisecond})
	sessions := make([]string, 16)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("fo-%02d", i)
	}
	r := newMigRig(t, cl, sessions, func(cfg *redisstore.Config) {
		cfg.Durability = redisstore.Durability{Replicas: 1}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pairs := foPairs(t, ctx, cl, masters)
	// The master with the most sessions dies.
	victim, most := "", -1
	for _, m := range masters {
		n := 0
		for _, s := range sessions {
			if owner, err := cl.Owner(ctx, r.slotOf[s]); err == nil && owner == m {
				n++
			}
		}
		if n > most {
			victim, most = m, n
		}
	}
	heir := pairs[victim]
	statsBefore, err := cl.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var promoted, rejoined atomic.Bool
	var took time.Duration
	r.run(func(ctx context.Context) {
		time.Sleep(time.Second)
		done := r.markMoving(ctx, victim)
		start := time.Now()
		if err := cl.Kill(victim); err != nil {
			done()
			r.noteMigrateError(err)
			return
		}
		err := cl.WaitPromoted(ctx, heir)
		took = time.Since(start)
		done()
		if err != nil {
			r.noteMigrateError(err)
			return
		}
		promoted.Store(foRoleIs(ctx, cl, heir, true))
		// Alone, the new master cannot have writes acknowledged: its
		// sessions' writes fail with ErrNotReplicated until the killed
		// node is back as its replica.
		time.Sleep(2500 * time.Millisecond)
		if err := cl.Restart(ctx, victim); err != nil {
			r.noteMigrateError(err)
			return
		}
		rejoined.Store(foRoleIs(ctx, cl, victim, false))
		time.Sleep(2 * time.Second) // traffic on the new pair
	})

	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	statsAfter, err := cl.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.report(fmt.Sprintf("killed master with %d sessions, replica promoted=%v in %v, killed node back as a replica=%v | not replicated: reported=%d, appends sent again replayed=%d, stored afresh=%d | repair passes cut after %v: %d",
		most, promoted.Load(), took.Round(time.Millisecond), rejoined.Load(), r.notReplicated.Load(), r.notReplicatedReplayed.Load(), r.notReplicatedLost.Load(), migRepairPass, r.repairsCut.Load()))
	r.logFailoverCounts(statsBefore, statsAfter)
	if !promoted.Load() || !rejoined.Load() {
		t.Errorf("the replica %s of the killed master %s took over: %v; the killed node came back as a replica: %v", heir, victim, promoted.Load(), rejoined.Load())
	}
	if most == 0 || r.client.ConnErrs.Load()+r.client.ClusterDown.Load() == 0 {
		t.Errorf("%d sessions lived on the killed master, the store's client saw %d failed connections and %d CLUSTERDOWN: the test proved nothing",
			most, r.client.ConnErrs.Load(), r.client.ClusterDown.Load())
	}
}

// foPairs maps each master to its one replica.
func foPairs(t *testing.T, ctx context.Context, cl *redistest.ClusterInstance, masters []string) map[string]string {
	t.Helper()
	if len(masters) != 3 {
		t.Fatalf("masters %v, want 3", masters)
	}
	pairs := map[string]string{}
	for _, m := range masters {
		rs, err := cl.ReplicasOf(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 {
			t.Fatalf("replicas of %s: %v, want one", m, rs)
		}
		pairs[m] = rs[0]
	}
	return pairs
}

// foRoleIs reports whether the node at addr reports itself a master
// serving slots (master true) or a replica.
func foRoleIs(ctx context.Context, cl *redistest.ClusterInstance, addr string, master bool) bool {
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.Addr == addr {
			return n.Master == master && (n.Slots > 0) == master
		}
	}
	return false
}

// markMoving marks the slots the master at addr serves as being moved (for
// the overlap count) until the returned function is called.
func (r *migRig) markMoving(ctx context.Context, addr string) func() {
	slots, err := r.cl.SlotsOf(ctx, r.cl.NodeID(addr))
	if err != nil {
		r.t.Logf("slots of %s: %v", addr, err)
	}
	for _, s := range slots {
		r.moving[s].Add(1)
	}
	return func() {
		for _, s := range slots {
			r.moving[s].Add(-1)
		}
	}
}

// logFailoverCounts logs the refusals the store's client got that the
// migration report leaves out, the other error replies and failed
// connections it saw, and what the nodes replied with errors meanwhile
// (INFO errorstats: redirections rueidis followed on its own included).
func (r *migRig) logFailoverCounts(before, after map[string]int64) {
	c := r.client
	r.t.Logf("refusals the store got: READONLY=%d MASTERDOWN=%d LOADING=%d; failed connections=%d",
		c.ReadOnly.Load(), c.MasterDown.Load(), c.Loading.Load(), c.ConnErrs.Load())
	if others := c.OtherReplies(); len(others) > 0 {
		if len(others) > 12 {
			others = others[:12]
		}
		r.t.Logf("other errors the store's client got:\n  %s", strings.Join(others, "\n  "))
	}
	var names []string
	for name := range after {
		if after[name] > before[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", name, after[name]-before[name]))
	}
	r.t.Logf("error replies of the live nodes meanwhile (INFO errorstats): %s", strings.Join(parts, " "))
}

// With Durability on, a write whose slot moved to another master since the
// client last read the slot map is redirected (MOVED) to the new owner;
// its WAIT must count the new owner's replicas, not the old owner's. The
// new owner's replica is frozen (DEBUG SLEEP), so an honest wait reports
// ErrNotReplicated; a wait left on the old owner would report success.
func TestDurabilityWaitFollowsAMovedSlot(t *testing.T) {
	redistest.Chaos(t)
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 3 * time.Second,
		ExtraArgs: []string{"--enable-debug-command", "yes"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := redistest.Prefix(t)
	store, err := redisstore.New(ctx, cl.Client(t), redisstore.Config{Prefix: prefix, PublishWait: -1,
		Durability: redisstore.Durability{Replicas: 1, Timeout: 300 * time.Millisecond}})
	require.NoError(t, err)
	const moving = "moving"
	slot := redistest.KeySlot(keys.For(prefix, moving).Count())
	from, err := cl.Owner(ctx, slot)
	require.NoError(t, err)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	_, err = store.Append(ctx, moving, []a2redis.Event{{Type: "x"}}, redisstore.AppendOptions{})
	require.NoError(t, err, "the old owner's replica acknowledges")
	_, err = cl.MigrateSlot(ctx, slot, to, redistest.MigrateOptions{})
	require.NoError(t, err)

	replicas, err := cl.ReplicasOf(ctx, to)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	sleeper, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: replicas[:1], ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(ctx, sleeper.B().Arbitrary("DEBUG", "SLEEP", "2").Build()).Error() }()
	time.Sleep(100 * time.Millisecond)

	// The store's client still maps the slot to `from`: the append is
	// redirected to `to`, whose replica is asleep.
	_, err = store.Append(ctx, moving, []a2redis.Event{{ID: "after-move", Type: "y"}}, redisstore.AppendOptions{})
	require.ErrorIs(t, err, a2redis.ErrNotReplicated, "a write on the new owner was reported replicated while its replica slept")
	require.NoError(t, <-slept)
	// Awake again: the same batch replays and is acknowledged.
	res, err := store.Append(ctx, moving, []a2redis.Event{{ID: "after-move", Type: "y"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	assert.True(t, res.Replayed)
}

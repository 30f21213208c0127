package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
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

// Issue 22: Durability with AOF, for real, on Valkey 8.0.1 with appendonly
// yes (WAITAOF came with the Redis 7.2 API; Redis 7.0.15 has none). With
// the default wait, no healthy write is reported not replicated, and a
// stopped replica still is.

// aofCounts appends sequential appends one after the other and then
// concurrent ones at once (one goroutine each), over 16 sessions, and
// returns how many of each were reported not replicated; any other error
// fails the test.
func aofCounts(t *testing.T, ctx context.Context, store *redisstore.Store, sequential, concurrent int) (seqShort, concShort int64, seqTook, concTook time.Duration) {
	t.Helper()
	var short atomic.Int64
	one := func(i int) {
		session := fmt.Sprint("aof-", i%16)
		_, err := store.Append(ctx, session, []a2redis.Event{{ID: fmt.Sprint("e-", i), Type: "t"}}, redisstore.AppendOptions{})
		switch {
		case errors.Is(err, a2redis.ErrNotReplicated):
			short.Add(1)
		case err != nil:
			t.Errorf("append %d: %v", i, err)
		}
	}
	start := time.Now()
	var slowest time.Duration
	for i := range sequential {
		at := time.Now()
		one(i)
		slowest = max(slowest, time.Since(at))
	}
	seqTook = time.Since(start)
	t.Logf("slowest sequential append: %v", slowest.Round(time.Millisecond))
	seqShort = short.Swap(0)
	start = time.Now()
	var wg sync.WaitGroup
	for i := range concurrent {
		wg.Add(1)
		go func() { defer wg.Done(); one(sequential + i) }()
	}
	wg.Wait()
	return seqShort, short.Load(), seqTook, time.Since(start)
}

func singleClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// aofPhases runs aofCounts twice against a store made by newStore on the
// nodes at addrs: with every node on appendfsync always (each write
// fsynced at once), and on
// everysec, Redis's default (an fsync about once a second), checking the
// default wait New chose each time.
func aofPhases(t *testing.T, ctx context.Context, what string, addrs []string, replicas int, newStore func(*testing.T) *redisstore.Store) {
	t.Helper()
	// A replica acknowledges its fsynced offset about once a second, so a
	// sequential write with a replica takes ~0.3s (always) to ~1s
	// (everysec): 1,000 of them take 5 to 17 minutes, too long for CI.
	// CI runs fewer; A2REDIS_AOF_FULL=1 runs 1,000 everywhere.
	always, everysec := 1000, 50
	if replicas > 0 {
		always, everysec = 30, 10
	}
	if os.Getenv("A2REDIS_AOF_FULL") != "" {
		always, everysec = 1000, 1000
	}
	for _, phase := range []struct {
		fsync      string
		sequential int
		wait       time.Duration
	}{
		{"always", always, map[bool]time.Duration{true: redisstore.DefaultDurabilityAOFTimeout, false: redisstore.DefaultDurabilityTimeout}[replicas > 0]},
		{"everysec", everysec, redisstore.DefaultDurabilityAOFTimeout},
	} {
		for _, a := range addrs {
			c := singleClient(t, a)
			require.NoError(t, c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("appendfsync", phase.fsync).Build()).Error())
		}
		store := newStore(t)
		assert.Equal(t, phase.wait, store.Durability().Timeout, "the default wait for appendfsync %s with %d replicas", phase.fsync, replicas)
		seq, conc, seqTook, concTook := aofCounts(t, ctx, store, phase.sequential, 1000)
		t.Logf("%s, appendfsync %s, Durability{AOF: true, Replicas: %d}, default wait %v: not replicated %d of %d sequential (%v), %d of 1000 concurrent (%v)",
			what, phase.fsync, replicas, store.Durability().Timeout, seq, phase.sequential, seqTook.Round(time.Millisecond), conc, concTook.Round(time.Millisecond))
		assert.Zero(t, seq, "healthy sequential writes reported not replicated")
		assert.Zero(t, conc, "healthy concurrent writes reported not replicated")
	}
}

// stoppedReplicaReported appends once more with a replica stopped and
// checks the shortfall: fsynced on the master, no replica acknowledged.
func stoppedReplicaReported(t *testing.T, ctx context.Context, store *redisstore.Store, session string) {
	t.Helper()
	_, err := store.Append(ctx, session, []a2redis.Event{{ID: "while-stopped", Type: "t"}}, redisstore.AppendOptions{})
	var re *a2redis.ReplicationError
	require.ErrorAs(t, err, &re, "a write with the replica stopped was reported replicated")
	assert.True(t, re.AOF)
	assert.True(t, re.LocalAOF, "the master fsynced it")
	assert.Equal(t, 0, re.Acked)
	assert.Equal(t, 1, re.Replicas)
	t.Logf("with the replica stopped: %v", err)
}

func TestDurabilityAOFValkeyStandalone(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	srv := redistest.SpawnServerFrom(t, redistest.Valkey(t), "--appendonly", "yes")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	client := singleClient(t, srv.Addr())
	aofPhases(t, ctx, "standalone", []string{srv.Addr()}, 0, func(t *testing.T) *redisstore.Store {
		store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), PublishWait: -1,
			Durability: redisstore.Durability{AOF: true}})
		require.NoError(t, err)
		return store
	})
}

func TestDurabilityAOFValkeyReplica(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	master, replica := redistest.SpawnReplicatedFrom(t, redistest.Valkey(t), "--appendonly", "yes")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	client := singleClient(t, master.Addr())
	var store *redisstore.Store
	aofPhases(t, ctx, "master + replica", []string{master.Addr(), replica.Addr()}, 1, func(t *testing.T) *redisstore.Store {
		var err error
		store, err = redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), PublishWait: -1,
			Durability: redisstore.Durability{AOF: true, Replicas: 1}})
		require.NoError(t, err)
		return store
	})
	replica.Freeze()
	stoppedReplicaReported(t, ctx, store, "aof-0")
	replica.Thaw()
}

func TestDurabilityAOFValkeyCluster(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 5 * time.Second,
		Bins: redistest.Valkey(t), ExtraArgs: []string{"--appendonly", "yes"}})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	client := cl.Client(t)
	var store *redisstore.Store
	prefix := redistest.Prefix(t)
	aofPhases(t, ctx, "cluster (3 masters, a replica each)", cl.Addrs(), 1, func(t *testing.T) *redisstore.Store {
		var err error
		store, err = redisstore.New(ctx, client, redisstore.Config{Prefix: prefix + fmt.Sprint(time.Now().UnixNano()), PublishWait: -1,
			Durability: redisstore.Durability{AOF: true, Replicas: 1}})
		require.NoError(t, err)
		return store
	})
	// Stop the replica of the master of one session's slot.
	const session = "aof-0"
	owner, err := cl.Owner(ctx, redistest.KeySlot(keys.For(store.Prefix(), session).Count()))
	require.NoError(t, err)
	replicas, err := cl.ReplicasOf(ctx, owner)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	require.NoError(t, cl.Kill(replicas[0]))
	stoppedReplicaReported(t, ctx, store, session)
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// logIDs returns the ids a server holds in a session's log.
func logIDs(ctx context.Context, t *testing.T, c rueidis.Client, prefix, session string) []string {
	t.Helper()
	entries, err := c.Do(ctx, c.B().Xrange().Key(keys.For(prefix, session).Log()).Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.FieldValues["id"]
	}
	return ids
}

// TestDurabilityReplica: with Durability{Replicas: 1}, every write the
// store acknowledges is on the replica when the call returns. With the
// replica gone, a write fails with a2redis.ErrNotReplicated — applied on
// the master all the same — carrying the batch's ids; a claim reports its
// heads with the error. Once the replica is back (resynchronised), the
// caller's retry with the ids replays the batch and is acknowledged.
func TestDurabilityReplica(t *testing.T) {
	t.Parallel()
	master, replica := redistest.SpawnReplicated(t)
	client := faultClient(t, master.Addr())
	replicaClient := faultClient(t, replica.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := Prefix(t)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1,
		Durability: redisstore.Durability{Replicas: 1, Timeout: time.Second}})
	require.NoError(t, err)

	// Acknowledged writes are on the replica as soon as they return.
	for i := range 20 {
		session := fmt.Sprint("s", i%4)
		res, err := store.Append(ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Contains(t, logIDs(ctx, t, replicaClient, prefix, session), res.Events[0].ID, "append %d is not on the replica", i)
	}
	claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s0", Holder: "w", TTL: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 1)
	h := claim.Heads[0]
	done, err := store.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: "s0", Head: h.Ref(), Attempt: h.Attempts,
		Events: []a2redis.Event{{ID: "reply", Type: "done"}}})
	require.NoError(t, err)
	assert.Equal(t, redisstore.Completed, done.Outcome)
	assert.Contains(t, logIDs(ctx, t, replicaClient, prefix, "s0"), "reply")

	// The replica goes away: writes still apply on the master, reported
	// as not replicated.
	replica.Stop()
	events := []a2redis.Event{{Type: "lost?", Targets: []a2redis.Target{{Consumer: "c"}}}, {Type: "lost?"}}
	_, err = store.Append(ctx, "s1", events, redisstore.AppendOptions{})
	require.ErrorIs(t, err, a2redis.ErrNotReplicated)
	var rep *a2redis.ReplicationError
	require.ErrorAs(t, err, &rep)
	assert.Equal(t, 1, rep.Replicas)
	assert.Equal(t, 0, rep.Acked)
	var batch *a2redis.BatchError
	require.ErrorAs(t, err, &batch)
	require.Len(t, batch.IDs, 2)
	t.Logf("without the replica: %v", err)
	onMaster := logIDs(ctx, t, client, prefix, "s1")
	assert.Subset(t, onMaster, batch.IDs, "the unreplicated write is applied on the master")

	claim, err = store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s1", Holder: "w", TTL: time.Minute})
	require.ErrorIs(t, err, a2redis.ErrNotReplicated)
	assert.Equal(t, redisstore.Claimed, claim.Outcome, "an unreplicated claim still reports what it holds")
	assert.NotEmpty(t, claim.Heads)

	// Back: the replica resynchronises; the retry with the same ids
	// replays the batch and is acknowledged.
	replica.Restart()
	redistest.WaitReplicaOnline(t, master, replica)
	res, err := store.Append(ctx, "s1", batch.WithIDs(events), redisstore.AppendOptions{})
	require.NoError(t, err)
	assert.True(t, res.Replayed)
	assert.Subset(t, logIDs(ctx, t, replicaClient, prefix, "s1"), batch.IDs)
	assert.Equal(t, onMaster, logIDs(ctx, t, client, prefix, "s1"), "the replay wrote nothing")
}

// TestDurabilityWithoutReplicas: asking for replicas a server does not
// have reports every write as not replicated, on a single server and on
// a cluster (the wait goes to the session's node) alike; asking for the
// AOF on a server without WAITAOF (before Redis 7.2) fails New.
func TestDurabilityWithoutReplicas(t *testing.T) {
	for _, tg := range redistest.Targets {
		if tg.Name == "miniredis" {
			continue // its WAIT always answers 0; nothing more to learn
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			client := tg.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := Prefix(t)
			store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1,
				Durability: redisstore.Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
			require.NoError(t, err)
			for i := range 3 {
				_, err = store.Append(ctx, fmt.Sprint("s", i), []a2redis.Event{{ID: "a", Type: "t"}}, redisstore.AppendOptions{})
				var rep *a2redis.ReplicationError
				require.ErrorAs(t, err, &rep)
				assert.Equal(t, 0, rep.Acked)
				assert.Nil(t, rep.Err)
				assert.Equal(t, []string{"a"}, logIDs(ctx, t, client, prefix, fmt.Sprint("s", i)))
			}

			version := serverVersion(ctx, t, client)
			_, err = redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Durability: redisstore.Durability{AOF: true}})
			if versionBefore(version, 7, 2) {
				require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "Redis %s has no WAITAOF", version)
				assert.Contains(t, err.Error(), "WAITAOF")
				t.Logf("Redis %s: %v", version, err)
			} else {
				// appendonly is off on the test servers: WAITAOF 1 refuses.
				require.Error(t, err)
				t.Logf("Redis %s: %v", version, err)
			}
		})
	}
}

func serverVersion(ctx context.Context, t *testing.T, c rueidis.Client) string {
	t.Helper()
	for _, n := range c.Nodes() {
		info, err := n.Do(ctx, n.B().Info().Section("server").Build()).ToString()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				return v
			}
		}
	}
	t.Fatal("no redis_version in INFO server")
	return ""
}

func versionBefore(v string, major, minor int) bool {
	var a, b int
	if _, err := fmt.Sscanf(v, "%d.%d", &a, &b); err != nil {
		return false
	}
	return a < major || (a == major && b < minor)
}

// replOffset reads a field of INFO replication as a number.
func replOffset(ctx context.Context, t *testing.T, c rueidis.Client, field string) int64 {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			var n int64
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in INFO replication", field)
	return 0
}

// TestDurabilityFailover is the failover of a replica that stopped
// receiving: it is promoted (REPLICAOF NO ONE) while the old master still
// takes writes, then the old master goes away. Without Durability, the
// appends the old master acknowledged after the cut are lost, and the
// promoted replica gives their indexes to new events. With Durability
// {Replicas: 1}, the same appends fail with ErrNotReplicated instead, and
// every append that was acknowledged survives.
func TestDurabilityFailover(t *testing.T) {
	t.Parallel()
	master, replica := redistest.SpawnReplicated(t)
	oldClient := faultClient(t, master.Addr())
	newClient := faultClient(t, replica.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := Prefix(t)
	plain, err := redisstore.New(ctx, oldClient, redisstore.Config{Prefix: prefix, PublishWait: -1})
	require.NoError(t, err)
	durable, err := redisstore.New(ctx, oldClient, redisstore.Config{Prefix: prefix, PublishWait: -1,
		Durability: redisstore.Durability{Replicas: 1, Timeout: 500 * time.Millisecond}})
	require.NoError(t, err)

	acked := map[string]map[string]int64{"plain": {}, "durable": {}}
	var notReplicated int
	appendAll := func(from, to int) {
		for i := from; i <= to; i++ {
			for name, store := range map[string]*redisstore.Store{"plain": plain, "durable": durable} {
				res, err := store.Append(ctx, name, []a2redis.Event{{ID: fmt.Sprint(name, i), Type: "t"}}, redisstore.AppendOptions{})
				switch {
				case err == nil:
					acked[name][res.Events[0].ID] = res.Events[0].Index
				case errors.Is(err, a2redis.ErrNotReplicated):
					notReplicated++
				default:
					t.Fatalf("%s append %d: %v", name, i, err)
				}
			}
		}
	}
	appendAll(1, 5)
	// Let the replica catch up with the plain appends too.
	for replOffset(ctx, t, newClient, "master_repl_offset") < replOffset(ctx, t, oldClient, "master_repl_offset") {
		time.Sleep(10 * time.Millisecond)
	}
	reply, err := rawDo(replica.Addr(), "REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(reply, "+OK"), reply)
	appendAll(6, 10)
	master.Stop()

	promoted, err := redisstore.New(ctx, newClient, redisstore.Config{Prefix: prefix, PublishWait: -1})
	require.NoError(t, err)
	lost := map[string]int{}
	for name, ids := range acked {
		stored := map[string]bool{}
		for _, id := range logIDs(ctx, t, newClient, prefix, name) {
			stored[id] = true
		}
		for id := range ids {
			if !stored[id] {
				lost[name]++
			}
		}
	}
	// The promoted replica reuses the index of the first lost event.
	res, err := promoted.Append(ctx, "plain", []a2redis.Event{{ID: "after", Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	t.Logf("acknowledged: plain %d, durable %d (%d reported ErrNotReplicated); lost after the failover: plain %d, durable %d; a new event took index %d, which had been acknowledged as plain6",
		len(acked["plain"]), len(acked["durable"]), notReplicated, lost["plain"], lost["durable"], res.Events[0].Index)
	assert.Equal(t, 5, lost["plain"], "without Durability the acknowledged appends after the cut are lost")
	assert.Equal(t, acked["plain"]["plain6"], res.Events[0].Index, "and their indexes are given to new events")
	assert.Zero(t, lost["durable"], "with Durability no acknowledged append is lost")
	assert.Equal(t, 5, notReplicated, "the appends after the cut were reported, not acknowledged")
	assert.Len(t, acked["durable"], 5)
}

package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
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

// While a session's slot migrates — opened and not a key moved, then with
// its counter moved, then with half its keys moved — every write the store
// has is refused with ErrUnavailable and changes nothing on either node,
// and ClaimNext passes over the session for another one that has work.
// Once the slot is handed over, the same writes go through. Retries are off,
// so each operation is one try.
func TestEveryWriteRefusedWhileItsSlotMigrates(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a private cluster")
	}
	cl := redistest.SpawnCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := cl.Client(t)
	lane := a2redis.Consumer{Name: "c"}
	audit := a2redis.Consumer{Name: "audit", Log: &a2redis.LogSpec{Lane: "all"}}
	store, err := redisstore.New(ctx, client, redisstore.Config{
		Prefix: redistest.Prefix(t), PublishWait: -1,
		Consumers: []a2redis.Consumer{lane, audit},
		Retries:   redisstore.RetryPolicy{Attempts: 1},
	})
	require.NoError(t, err)
	const s, other = "moving", "staying"
	k := keys.For(store.Prefix(), s)
	slot := redistest.KeySlot(k.Count())
	require.NotEqual(t, slot, redistest.KeySlot(keys.For(store.Prefix(), other).Count()))
	to := func(l string) []a2redis.Target { return []a2redis.Target{{Consumer: "c", Lane: l}} }

	// The session: lane x claimed, lane z dead-lettered, lane y free (so
	// the session is due in the index before the other one), a snapshot,
	// a presence entry.
	_, err = store.Append(ctx, s, []a2redis.Event{
		{Type: "t", Targets: to("x")}, {Type: "t", Targets: to("x")}, {Type: "t", Targets: to("z")},
	}, redisstore.AppendOptions{})
	require.NoError(t, err)
	claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: s, Holder: "h", TTL: time.Minute, Consumers: []a2redis.Consumer{lane}})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 2, "lanes x and z")
	var x, z a2redis.HeadEvent
	for _, h := range claim.Heads {
		if h.Lane == "x" {
			x = h
		} else {
			z = h
		}
	}
	_, err = store.FailAttempt(ctx, redisstore.FailRequest{Session: s, Head: z.Ref(), Attempt: z.Attempts, Error: "boom", MaxFailures: 1})
	require.NoError(t, err)
	require.NoError(t, store.PutSnapshots(ctx, s, "r", []redisstore.SnapshotWrite{{Index: 1, State: json.RawMessage(`1`)}}))
	_, err = store.PresenceSet(ctx, s, redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": json.RawMessage(`1`)}, At: time.Now(), TTL: time.Hour})
	require.NoError(t, err)
	_, err = store.Append(ctx, s, []a2redis.Event{{Type: "t", Targets: to("y")}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the other session is due later
	_, err = store.Append(ctx, other, []a2redis.Event{{Type: "t", Targets: to("w")}}, redisstore.AppendOptions{})
	require.NoError(t, err)

	xc := redisstore.AttemptOf(x)
	writes := map[string]func() error{
		"Append": func() error {
			_, err := store.Append(ctx, s, []a2redis.Event{{Type: "t", Targets: to("x")}}, redisstore.AppendOptions{})
			return err
		},
		"ClaimAvailable": func() error {
			_, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: s, Holder: "h2", TTL: time.Minute})
			return err
		},
		"CompleteAttempt": func() error {
			_, err := store.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: s, Head: x.Ref(), Attempt: x.Attempts})
			return err
		},
		"CompleteAttempts": func() error {
			_, err := store.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: []redisstore.Attempt{xc}})
			return err
		},
		"CompleteAndClaim": func() error {
			_, err := store.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: []redisstore.Attempt{xc}},
				redisstore.NextClaim{Holder: "h", TTL: time.Minute})
			return err
		},
		"FailAttempt": func() error {
			_, err := store.FailAttempt(ctx, redisstore.FailRequest{Session: s, Head: x.Ref(), Attempt: x.Attempts, Error: "e", MaxFailures: 5})
			return err
		},
		"RenewClaims": func() error {
			_, err := store.RenewClaims(ctx, redisstore.RenewRequest{Session: s, Holder: "h", TTL: time.Hour,
				Claims: []redisstore.Attempt{redisstore.AttemptOf(x)}})
			return err
		},
		"Release": func() error {
			_, err := store.Release(ctx, redisstore.ReleaseRequest{Session: s, Attempts: []redisstore.Attempt{xc}})
			return err
		},
		"Redrive": func() error {
			_, err := store.Redrive(ctx, redisstore.RedriveRequest{Session: s, Consumer: "c", Lane: "z", Index: z.Index, Action: redisstore.Retry})
			return err
		},
		"Clear": func() error {
			_, err := store.Clear(ctx, s, redisstore.ClearOptions{})
			return err
		},
		"ReclaimPage": func() error {
			_, err := store.ReclaimPage(ctx, s)
			return err
		},
		"PutSnapshots": func() error {
			return store.PutSnapshots(ctx, s, "r", []redisstore.SnapshotWrite{{Index: 2, State: json.RawMessage(`2`)}})
		},
		"PresenceSet": func() error {
			_, err := store.PresenceSet(ctx, s, redisstore.PresenceWrite{Participant: "q", Values: map[string]json.RawMessage{"f": json.RawMessage(`2`)}, At: time.Now(), TTL: time.Hour})
			return err
		},
		"PresencePrune": func() error {
			_, err := store.PresencePrune(ctx, s, []redisstore.PresenceField{{Participant: "p", Field: "f"}})
			return err
		},
		"WakeLog": func() error {
			_, err := store.WakeLog(ctx, s, audit)
			return err
		},
	}
	names := slices.Sorted(maps.Keys(writes))

	nodes := map[string]rueidis.Client{}
	for _, addr := range cl.Addrs() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		nodes[addr] = c
	}
	do := func(addr string, args ...string) rueidis.RedisResult {
		c := nodes[addr]
		return c.Do(ctx, c.B().Arbitrary(args...).Build())
	}
	// dump is every key of the slot on every node, with its value.
	dump := func() map[string]string {
		out := map[string]string{}
		for addr := range nodes {
			names, err := do(addr, "CLUSTER", "GETKEYSINSLOT", fmt.Sprint(slot), "100000").AsStrSlice()
			require.NoError(t, err)
			c := nodes[addr]
			for _, key := range names {
				// ASKING: the importing node answers for its keys too.
				res := c.DoMulti(ctx, c.B().Asking().Build(), c.B().Dump().Key(key).Build())
				v, err := res[1].ToString()
				require.NoError(t, err, key)
				out[addr+" "+key] = v
			}
		}
		return out
	}
	src, err := cl.Owner(ctx, slot)
	require.NoError(t, err)
	var dst string
	for addr := range nodes {
		if addr != src {
			dst = addr
			break
		}
	}
	require.NoError(t, do(dst, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "IMPORTING", cl.NodeID(src)).Error())
	require.NoError(t, do(src, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "MIGRATING", cl.NodeID(dst)).Error())
	host, port, err := net.SplitHostPort(dst)
	require.NoError(t, err)
	move := func(key string) {
		require.NoError(t, do(src, "MIGRATE", host, port, "", "0", "5000", "KEYS", key).Error(), key)
	}

	refusedAll := func(stage string) {
		before := dump()
		for _, name := range names {
			err := writes[name]()
			assert.ErrorIs(t, err, a2redis.ErrUnavailable, "%s: %s", stage, name)
		}
		assert.Equal(t, before, dump(), "%s: a refused write changed a key", stage)
		// The other session's work is found past the refused one.
		next, err := store.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "n", TTL: time.Minute, Consumers: []a2redis.Consumer{lane}})
		if assert.NoError(t, err, "%s: ClaimNext", stage) && assert.Equal(t, redisstore.Claimed, next.Outcome, stage) {
			assert.Equal(t, other, next.Session, stage)
			_, err := store.Release(ctx, redisstore.ReleaseRequest{Session: other, Attempts: migCompletions(next.Heads)})
			require.NoError(t, err)
		}
	}
	refusedAll("slot open, nothing moved")
	move(k.Count())
	refusedAll("counter moved")
	before := dump()
	var rest []string
	for key := range before {
		if addr, name, _ := strings.Cut(key, " "); addr == src {
			rest = append(rest, name)
		}
	}
	require.NotEmpty(t, rest)
	slices.Sort(rest)
	half := rest[:len(rest)/2]
	for _, key := range half {
		move(key)
	}
	refusedAll(fmt.Sprintf("%d of %d keys moved", len(half)+1, len(rest)+1))

	// Hand the slot over: the same writes go through.
	for _, key := range rest[len(rest)/2:] {
		move(key)
	}
	for addr := range nodes {
		require.NoError(t, do(addr, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", cl.NodeID(dst)).Error())
	}
	require.Eventually(t, func() bool {
		owner, err := cl.Owner(ctx, slot)
		return err == nil && owner == dst
	}, 10*time.Second, 50*time.Millisecond)
	ok := redisstore.RetryPolicy{Attempts: 20, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	after, err := redisstore.New(ctx, client, redisstore.Config{Prefix: store.Prefix(), PublishWait: -1, Consumers: []a2redis.Consumer{lane, audit}, Retries: ok})
	require.NoError(t, err)
	res, err := after.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: s, Head: x.Ref(), Attempt: x.Attempts})
	require.NoError(t, err)
	assert.Equal(t, redisstore.Completed, res.Outcome, "the claim made before the move completes after it")
	dead, err := after.DeadLetters(ctx, s)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	assert.Equal(t, z.Index, dead[0].Index)
	for key := range dump() {
		addr, _, _ := strings.Cut(key, " ")
		assert.Equal(t, dst, addr, "a key of the slot is left on %s: %s", addr, key)
	}
}

// A repair pass over a cluster with a dead master reads every live master,
// reports the dead one (Unreachable, ErrUnavailable) and returns: it does
// not wait on the dead node for as long as the caller's context allows.
func TestRepairReadyPassesADeadNode(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a private cluster")
	}
	cl := redistest.SpawnCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := redisstore.New(ctx, cl.Client(t), redisstore.Config{
		Prefix: redistest.Prefix(t), PublishWait: -1,
		Retries: redisstore.RetryPolicy{Unavailable: time.Second},
	})
	require.NoError(t, err)
	// Sessions with work on every node.
	perNode := map[string]int{}
	for i := 0; len(perNode) < 3 || i < 30; i++ {
		session := fmt.Sprintf("s%d", i)
		owner, err := cl.Owner(ctx, redistest.KeySlot(keys.For(store.Prefix(), session).Count()))
		require.NoError(t, err)
		_, err = store.Append(ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		perNode[owner]++
	}
	st, err := store.RepairReady(ctx)
	require.NoError(t, err)
	total := 0
	for _, n := range perNode {
		total += n
	}
	assert.Equal(t, redisstore.RepairStats{Sessions: total, Sent: total}, st, "every session read and sent")

	dead := cl.Addrs()[0]
	require.NoError(t, cl.Kill(dead))
	st, err = store.RepairReady(ctx)
	require.ErrorIs(t, err, a2redis.ErrUnavailable)
	assert.Equal(t, 1, st.Unreachable)
	assert.Equal(t, total-perNode[dead], st.Sessions, "the live masters' sessions were read")
	require.NoError(t, ctx.Err(), "the pass waited for the caller's deadline")
}

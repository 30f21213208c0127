package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Issue 22: a claim the master applied but the replicas did not
// acknowledge in time holds its heads all the same. Every claiming call
// returns what it claimed together with ErrNotReplicated (ClaimAvailable
// did; ClaimNext returned no head, CompleteAndClaim neither its
// completions nor the next head, while the lane had moved and the head
// was held), so the caller can run them instead of waiting for the lease
// to lapse and a takeover to count a failure.
func TestClaimsReturnTheirHeadsWhenNotReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a master and a replica")
	}
	master, replica := redistest.SpawnReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), PublishWait: -1,
		Consumers:  []a2redis.Consumer{{Name: "lanes"}, {Name: "events"}},
		Durability: redisstore.Durability{Replicas: 1, Timeout: 100 * time.Millisecond}})
	require.NoError(t, err)
	const session = "s"
	events := make([]a2redis.Event, 4)
	for i := range events {
		events[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "lanes", Lane: "L"}, {Consumer: "events"}}}
	}
	_, err = store.Append(ctx, session, events, redisstore.AppendOptions{})
	require.NoError(t, err, "the replica acknowledges while it runs")

	replica.Freeze()
	notReplicated := func(err error) {
		t.Helper()
		var re *a2redis.ReplicationError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 0, re.Acked)
		assert.Equal(t, 1, re.Replicas)
	}
	lanes := []a2redis.Consumer{{Name: "lanes"}}
	// ClaimNext: the lane's first head.
	next, err := store.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Consumers: lanes, Limit: 1})
	notReplicated(err)
	require.Equal(t, redisstore.Claimed, next.Outcome)
	assert.Equal(t, session, next.Session)
	require.Len(t, next.Heads, 1)
	head := next.Heads[0]
	assert.Equal(t, int64(1), head.Index)
	assert.NotEmpty(t, head.ID, "the head comes with its event")

	// CompleteAndClaim: the completion and the lane's next head.
	for want := int64(2); want <= 3; want++ {
		r, err := store.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: session, Consumers: lanes,
			Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}}, redisstore.NextClaim{Holder: "w", TTL: time.Minute})
		notReplicated(err)
		require.Len(t, r.Results, 1)
		assert.Equal(t, redisstore.Completed, r.Results[0].Outcome)
		require.Equal(t, redisstore.Claimed, r.Next.Outcome)
		require.Len(t, r.Next.Heads, 1)
		head = r.Next.Heads[0]
		assert.Equal(t, want, head.Index)
		assert.Equal(t, int64(1), head.Attempts)
		assert.NotEmpty(t, head.ID)
	}
	// CompleteAttempts: the completion.
	res, err := store.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: session, Consumers: lanes,
		Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}})
	notReplicated(err)
	require.Len(t, res, 1)
	assert.Equal(t, redisstore.Completed, res[0].Outcome)
	// ClaimAvailable, as before.
	ca, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "events"}}})
	notReplicated(err)
	assert.Len(t, ca.Heads, len(events))
	// The lane's last head, by ClaimNext again; then nothing is left to
	// claim, which is no error of the claim's (a re-listing of the session
	// may be reported not replicated).
	next, err = store.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Consumers: lanes, Limit: 1})
	notReplicated(err)
	require.Len(t, next.Heads, 1)
	assert.Equal(t, int64(4), next.Heads[0].Index)
	none, err := store.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Consumers: lanes, Limit: 1})
	if err != nil && !errors.Is(err, a2redis.ErrNotReplicated) {
		t.Fatal(err)
	}
	assert.NotEqual(t, redisstore.Claimed, none.Outcome)

	replica.Thaw()
	// The lane moved on with every completion: its cursor is at the last
	// head, held by w at its first attempt.
	found := false
	for _, c := range mustCursors(t, ctx, store, session) {
		if c.Consumer == "lanes" {
			found = true
			assert.Equal(t, int64(4), c.Head)
		}
	}
	assert.True(t, found, "no cursor of the lane consumer")
}

func mustCursors(t *testing.T, ctx context.Context, s *redisstore.Store, session string) []a2redis.Cursor {
	t.Helper()
	cs, err := s.Cursors(ctx, session)
	require.NoError(t, err)
	return cs
}

package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

var auditor = a2redis.Consumer{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"message.flagged"}, Backfill: true}}

// drainLog claims and completes every head of consumer in session, and
// returns the indexes handled, in order.
func drainLog(ctx context.Context, t *testing.T, s *redisstore.Store, session string, consumer a2redis.Consumer) []int64 {
	t.Helper()
	var handled []int64
	for round := 0; round < 1000; round++ {
		cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "h", TTL: time.Minute,
			Consumers: []a2redis.Consumer{consumer}, Limit: 64})
		require.NoError(t, err)
		if len(cl.Heads) == 0 {
			return handled
		}
		for _, h := range cl.Heads {
			handled = append(handled, h.Index)
			_, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts})
			require.NoError(t, err)
		}
	}
	t.Fatalf("%s: never drained", session)
	return nil
}

func flagged(n int, from int) []a2redis.Event {
	events := make([]a2redis.Event, n)
	for i := range events {
		typ := "message.sent"
		if (from+i)%2 == 0 {
			typ = "message.flagged"
		}
		events[i] = a2redis.Event{Type: typ, Payload: json.RawMessage(fmt.Sprint(from + i))}
	}
	return events
}

// TestProducerWithoutConsumerConfig: the silent loss of the issue. A worker
// side store declares the typed log consumer; the producer's store is
// created with the URL and the prefix only. Every flagged message reaches
// the auditor.
func TestProducerWithoutConsumerConfig(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, client, prefix := e.ctx, e.client, e.prefix
		workerSide, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: []a2redis.Consumer{auditor, {Name: "indexer"}}})
		require.NoError(t, err)
		producer, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
		require.NoError(t, err)
		require.Len(t, producer.Consumers(), 2, "the producer serves the registry")
		want := 0
		for i := 0; i < 10; i++ {
			_, err := producer.Append(ctx, fmt.Sprintf("chat-%d", i%3), flagged(5, i*5), redisstore.AppendOptions{})
			require.NoError(t, err)
			for j := 0; j < 5; j++ {
				if (i*5+j)%2 == 0 {
					want++
				}
			}
		}
		got := 0
		for i := 0; i < 3; i++ {
			got += len(drainLog(ctx, t, workerSide, fmt.Sprintf("chat-%d", i), auditor))
		}
		require.Equal(t, want, got, "every flagged message reaches the auditor")
		require.Equal(t, 25, got)
	})
}

// TestConsumerAddedWhileAppending: a typed log consumer added (with
// Backfill) while producers append: once the registry change has reached
// every store (ConsumerRefresh), the consumer handles every matching event
// of every session, those appended before it was added included. Then it is removed and added again while
// the appends go on: nothing is lost either.
func TestConsumerAddedWhileAppending(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, client, prefix := e.ctx, e.client, e.prefix
		const refresh = 20 * time.Millisecond
		admin, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ConsumerRefresh: refresh})
		require.NoError(t, err)
		const sessions = 6
		var (
			stop     atomic.Bool
			wg       sync.WaitGroup
			appended [sessions]atomic.Int64
		)
		var producers []*redisstore.Store
		for p := 0; p < 2; p++ {
			producer, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ConsumerRefresh: refresh})
			require.NoError(t, err)
			producers = append(producers, producer)
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := p; !stop.Load(); i += 2 {
					s := i % sessions
					_, err := producer.Append(ctx, fmt.Sprintf("chat-%d", s), flagged(2, i*2), redisstore.AppendOptions{})
					if err != nil {
						t.Error(err)
						return
					}
					appended[s].Add(1) // each batch holds one flagged event
					time.Sleep(time.Millisecond)
				}
			}(p)
		}
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, admin.AddConsumers(ctx, auditor))
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, admin.RemoveConsumers(ctx, "auditor"))
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, admin.AddConsumers(ctx, auditor))
		// Every store serves the change within ConsumerRefresh; once both
		// producers do, each session's next append starts (or wakes) the
		// cursor, from the start of its lifetime (Backfill). The appends go
		// on until every session had two since (the first may have begun
		// before its producer's copy changed).
		deadline := time.Now().Add(time.Minute)
		lacks := func(p *redisstore.Store) bool { return !slices.Contains(names(p.Consumers()), "auditor") }
		for slices.ContainsFunc(producers, lacks) {
			require.True(t, time.Now().Before(deadline), "the producers never saw the auditor again")
			time.Sleep(time.Millisecond)
		}
		var seen [sessions]int64
		for s := range seen {
			seen[s] = appended[s].Load()
		}
		for s := 0; s < sessions; s++ {
			for appended[s].Load() < seen[s]+2 {
				require.True(t, time.Now().Before(deadline), "chat-%d had no append after the producers saw the auditor", s)
				time.Sleep(time.Millisecond)
			}
		}
		stop.Store(true)
		wg.Wait()
		for s := 0; s < sessions; s++ {
			session := fmt.Sprintf("chat-%d", s)
			got := drainLog(ctx, t, admin, session, auditor)
			require.Equal(t, int(appended[s].Load()), len(got), "%s: every flagged event once", session)
			for i := 1; i < len(got); i++ {
				require.Less(t, got[i-1], got[i], "%s: in order", session)
			}
		}
	})
}

// TestConsumerRegistry: declarations, mismatches, removal and the refresh
// bound.
func TestConsumerRegistry(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, client, prefix := e.ctx, e.client, e.prefix
		a, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: []a2redis.Consumer{{Name: "mailer"}, auditor}})
		require.NoError(t, err)
		list, version, err := a.ReadConsumers(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), version)
		require.Equal(t, []string{"auditor", "mailer"}, names(list))

		// The same declaration again changes nothing.
		_, err = redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: []a2redis.Consumer{auditor}})
		require.NoError(t, err)
		_, version, err = a.ReadConsumers(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), version)

		// A declaration unlike the registry's fails New, and writes nothing.
		other := a2redis.Consumer{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"message.sent"}}}
		_, err = redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: []a2redis.Consumer{{Name: "billing"}, other}})
		require.ErrorIs(t, err, a2redis.ErrConsumerMismatch)
		var mm *redisstore.ConsumerMismatchError
		require.ErrorAs(t, err, &mm)
		require.Equal(t, "message.flagged", mm.Registered.Log.Types[0])
		require.Contains(t, err.Error(), "registered as")
		list, _, err = a.ReadConsumers(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"auditor", "mailer"}, names(list), "billing was not added either")

		// A claim naming an unregistered consumer is refused; a consumer
		// another store added since is accepted at once.
		_, err = a.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "billing"}}})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		b, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ConsumerRefresh: time.Hour})
		require.NoError(t, err)
		require.NoError(t, b.AddConsumers(ctx, a2redis.Consumer{Name: "billing"}))
		_, err = a.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "billing"}}})
		require.NoError(t, err)

		// Removal reaches a store once its refresh interval has passed, not
		// before: d's copy (an hour) stands, c's (30ms) is read again.
		c, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ConsumerRefresh: 30 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, c.Consumers(), 3)
		d, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ConsumerRefresh: time.Hour})
		require.NoError(t, err)
		require.NoError(t, b.RemoveConsumers(ctx, "mailer", "nobody"))
		_, err = d.Append(ctx, "s", []a2redis.Event{{Type: "x"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, d.Consumers(), 3, "within the refresh interval the copy stands")
		time.Sleep(40 * time.Millisecond) // past c's interval (more is fine)
		_, err = c.Append(ctx, "s", []a2redis.Event{{Type: "x"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"auditor", "billing"}, names(c.Consumers()))

		// Two processes adding at once lose neither change.
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				require.NoError(t, a.AddConsumers(ctx, a2redis.Consumer{Name: fmt.Sprintf("c%d", i)}))
			}(i)
		}
		wg.Wait()
		list, _, err = b.ReadConsumers(ctx)
		require.NoError(t, err)
		require.Len(t, list, 10)

		// Bad input is refused before anything is written.
		require.ErrorIs(t, a.AddConsumers(ctx, a2redis.Consumer{}), a2redis.ErrInvalidArgument)
		require.ErrorIs(t, a.AddConsumers(ctx, a2redis.Consumer{Name: "x"}, a2redis.Consumer{Name: "x", Log: &a2redis.LogSpec{Lane: "l"}}), a2redis.ErrInvalidArgument)
		require.ErrorIs(t, a.RemoveConsumers(ctx, ""), a2redis.ErrInvalidArgument)
	})
}

// TestConsumerRefreshCost: keeping the copy fresh costs one GET per
// ConsumerRefresh while the store is used, and none on the calls between.
func TestConsumerRefreshCost(t *testing.T) {
	ctx := context.Background()
	client := privateServer(t)
	prefix := redistest.Prefix(t)
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ConsumerRefresh: 200 * time.Millisecond,
		Consumers: []a2redis.Consumer{{Name: "mailer"}}})
	require.NoError(t, err)
	resetStats(ctx, t, client)
	start := time.Now()
	ops := 0
	for time.Since(start) < time.Second {
		_, err := s.Append(ctx, "s", []a2redis.Event{{Type: "x", Targets: []a2redis.Target{{Consumer: "mailer"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		ops++
	}
	elapsed := time.Since(start)
	gets := commandStats(ctx, t, client)["get"]
	// One read per interval begun: elapsed/refresh, rounded up, at most.
	require.LessOrEqual(t, gets, int64(elapsed/(200*time.Millisecond))+1)
	require.GreaterOrEqual(t, gets, int64(3))
	t.Logf("%d appends in %v: %d registry reads (%.5f per call)", ops, elapsed.Round(time.Millisecond), gets, float64(gets)/float64(ops))
}

func names(list []a2redis.Consumer) []string {
	out := make([]string, len(list))
	for i, c := range list {
		out[i] = c.Name
	}
	return out
}

// TestPauseResume: a paused consumer's heads wait — claims skip them, a
// paused lane takes no next head in CompleteAndClaim, nothing is counted
// as failed — and a resume announces on every shard so watchers read the
// index again.
func TestPauseResume(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, client, prefix := e.ctx, e.client, e.prefix+"-2shards" // the env recorded 8 shards under its own
		s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ReadyShards: 2,
			Consumers: []a2redis.Consumer{{Name: "mailer"}, {Name: "billing"}}})
		require.NoError(t, err)
		other, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ReadyShards: 2, ConsumerRefresh: 20 * time.Millisecond})
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			_, err := s.Append(ctx, "s", []a2redis.Event{{Type: "x", Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing", Lane: "pay"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		require.ErrorIs(t, s.PauseConsumer(ctx, "nobody"), a2redis.ErrInvalidArgument)
		require.NoError(t, s.PauseConsumer(ctx, "mailer"))
		require.Equal(t, []string{"mailer"}, s.Paused())
		time.Sleep(30 * time.Millisecond) // past other's refresh

		cl, err := other.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 1, "only billing's lane head")
		require.Equal(t, "billing", cl.Heads[0].Consumer)
		only, err := other.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "mailer"}}})
		require.NoError(t, err)
		require.Equal(t, redisstore.Settled, only.Outcome)
		next, err := other.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "h", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "mailer"}}})
		require.NoError(t, err)
		require.Empty(t, next.Heads)

		// A paused lane consumer's completion takes no next head.
		require.NoError(t, s.PauseConsumer(ctx, "billing"))
		h := cl.Heads[0]
		cc, err := s.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}},
			redisstore.NextClaim{Holder: "h", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, cc.Results[0].Outcome)
		require.Empty(t, cc.Next.Heads)

		// Resume announces on every shard; the heads are claimable again.
		sub := client.B().Subscribe().Channel(keys.ReadyFor(prefix, 0).WorkChannel(), keys.ReadyFor(prefix, 1).WorkChannel()).Build()
		got := make(chan string, 4)
		subCtx, stopSub := context.WithCancel(ctx)
		defer stopSub()
		dc, release := client.Dedicate()
		defer release()
		subscribed := make(chan struct{}, 2)
		go func() {
			_ = dc.Receive(rueidis.WithOnSubscriptionHook(subCtx, func(rueidis.PubSubSubscription) { subscribed <- struct{}{} }), sub, func(m rueidis.PubSubMessage) { got <- m.Channel + "=" + m.Message })
		}()
		<-subscribed
		<-subscribed
		require.NoError(t, s.ResumeConsumer(ctx, "mailer"))
		require.NoError(t, s.ResumeConsumer(ctx, "billing"))
		require.NoError(t, s.ResumeConsumer(ctx, "billing"), "resuming twice changes nothing")
		var announced []string
		for len(announced) < 4 {
			select {
			case m := <-got:
				announced = append(announced, m)
			case <-time.After(10 * time.Second):
				t.Fatalf("announcements: %v", announced)
			}
		}
		require.ElementsMatch(t, []string{
			keys.ReadyFor(prefix, 0).WorkChannel() + "=", keys.ReadyFor(prefix, 1).WorkChannel() + "=",
			keys.ReadyFor(prefix, 0).WorkChannel() + "=", keys.ReadyFor(prefix, 1).WorkChannel() + "=",
		}, announced)
		dc.Close()
		require.Empty(t, s.Paused())
		cl, err = s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 4, "mailer's three heads and billing's next")
		cursors, err := s.Cursors(ctx, "s")
		require.NoError(t, err)
		for _, c := range cursors {
			require.Zero(t, c.Failures, "%s: a pause counts no failure", c.Consumer)
		}
	})
}

// TestConsumerChangeReachesEveryStore measures how long a registry change
// takes to reach a busy store with the default ConsumerRefresh (1s): a log
// consumer added by one store is served by another's appends (its cursor
// starts) within the refresh interval.
func TestConsumerChangeReachesEveryStore(t *testing.T) {
	ctx := context.Background()
	client := redistest.Server(t)
	prefix := redistest.Prefix(t)
	admin, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	producer, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	_, err = producer.Append(ctx, "s", flagged(1, 0), redisstore.AppendOptions{})
	require.NoError(t, err)
	log := a2redis.Consumer{Name: "late", Log: &a2redis.LogSpec{Lane: "l", Types: []string{"message.flagged"}}}
	require.NoError(t, admin.AddConsumers(ctx, log))
	added := time.Now()
	var reached time.Duration
	for i := 0; reached == 0; i++ {
		_, err := producer.Append(ctx, "s", flagged(1, 0), redisstore.AppendOptions{})
		require.NoError(t, err)
		cursors, err := producer.Cursors(ctx, "s")
		require.NoError(t, err)
		for _, c := range cursors {
			if c.Consumer == "late" {
				reached = time.Since(added)
			}
		}
		require.Less(t, time.Since(added), redisstore.DefaultConsumerRefresh+10*time.Second, "the change never reached the producer")
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("a consumer added by one store was served by another's appends %v later (bound: ConsumerRefresh, %v)", reached.Round(time.Millisecond), redisstore.DefaultConsumerRefresh)
}

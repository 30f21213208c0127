package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// env is one test's store and feed on its own prefix.
type env struct {
	ctx    context.Context
	client rueidis.Client
	store  *redisstore.Store
	src    *countingSource
	feed   *notify.Feed
	prefix string
}

// countingSource counts the catch-up reads a feed makes.
type countingSource struct {
	*redisstore.Store
	reads, done atomic.Int64
}

// ReadPages counts the reads begun (reads) and finished (done): a test that
// waits for n finished reads knows the feed is past them.
func (c *countingSource) ReadPages(ctx context.Context, session string, after, through int64, fn func([]a2redis.StoredEvent) error) error {
	c.reads.Add(1)
	defer c.done.Add(1)
	return c.Store.ReadPages(ctx, session, after, through, fn)
}

func newEnv(t testing.TB, client rueidis.Client, sharded bool) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	prefix := redistest.Prefix(t)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ShardedPubSub: sharded})
	require.NoError(t, err)
	src := &countingSource{Store: store}
	return &env{
		ctx: ctx, client: client, store: store, src: src, prefix: prefix,
		feed: notify.NewFeed(store, notify.FeedOptions{Source: src}),
	}
}

func each(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, tg.Client(t), false))
		})
	}
}

// collector runs a Follow and records what it delivers.
type collector struct {
	mu      sync.Mutex
	updates []notify.Update
	cancel  context.CancelFunc
	done    chan error
}

func follow(t *testing.T, e *env, session string, after int64) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	c := &collector{cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- e.feed.Follow(ctx, session, after, func(u notify.Update) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.updates = append(c.updates, u)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-c.done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Error("Follow did not return after cancel")
		}
	})
	return c
}

func (c *collector) snapshot() []notify.Update {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]notify.Update(nil), c.updates...)
}

func (c *collector) events() []a2redis.StoredEvent {
	var out []a2redis.StoredEvent
	for _, u := range c.snapshot() {
		out = append(out, u.Events...)
	}
	return out
}

// waitFor waits until the feed delivered an event at index last.
func (c *collector) waitFor(t *testing.T, last int64) []a2redis.StoredEvent {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		events := c.events()
		if n := len(events); n > 0 && events[n-1].Index >= last {
			return events
		}
		select {
		case err := <-c.done:
			t.Fatalf("Follow returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			got := int64(0)
			if n := len(events); n > 0 {
				got = events[n-1].Index
			}
			t.Fatalf("feed stopped at index %d, want %d", got, last)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// indexesFrom checks events are exactly first..last, once, in order.
func requireRun(t *testing.T, events []a2redis.StoredEvent, first, last int64) {
	t.Helper()
	want := make([]int64, 0, last-first+1)
	for i := first; i <= last; i++ {
		want = append(want, i)
	}
	got := make([]int64, len(events))
	for i, ev := range events {
		got[i] = ev.Index
	}
	require.Equal(t, want, got)
}

func appendBatch(t *testing.T, e *env, session string, n int, tag string) []a2redis.StoredEvent {
	t.Helper()
	batch := make([]a2redis.Event, n)
	for i := range batch {
		batch[i] = a2redis.Event{ID: fmt.Sprintf("%s-%d", tag, i), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"tag": %q, "i": %d}`, tag, i))}
	}
	res, err := e.store.Append(e.ctx, session, batch, redisstore.AppendOptions{})
	require.NoError(t, err)
	return res.Events
}

// waitSubscribed waits until the feed's first catch-up read happened, so
// later appends are carried.
func waitReads(t *testing.T, e *env, n int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for e.src.done.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the feed finished %d catch-up reads, want %d", e.src.done.Load(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFeedDeliversConcurrentAppendsInOrder(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendBatch(t, e, "s", 5, "before")
		c := follow(t, e, "s", 2)
		const batches = 60
		var wg sync.WaitGroup
		stored := make([]a2redis.StoredEvent, 0, 300)
		var mu sync.Mutex
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range batches / 3 {
					evs := appendBatch(t, e, "s", 1+(b+w)%5, fmt.Sprintf("w%d-b%d", w, b))
					mu.Lock()
					stored = append(stored, evs...)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		last := int64(5 + len(stored))
		got := c.waitFor(t, last)
		requireRun(t, got, 3, last)
		byIndex := map[int64]a2redis.StoredEvent{}
		for _, ev := range stored {
			byIndex[ev.Index] = ev
		}
		for _, ev := range got[3:] {
			want := byIndex[ev.Index]
			assert.Equal(t, want.ID, ev.ID)
			assert.Equal(t, want.Type, ev.Type)
			assert.Equal(t, string(want.Payload), string(ev.Payload), "payload verbatim")
			assert.Equal(t, want.CreatedAt.UnixMilli(), ev.CreatedAt.UnixMilli())
			assert.Equal(t, "s", ev.Session)
		}
		for _, u := range c.snapshot() {
			assert.Zero(t, u.Cleared)
		}

		// Once caught up, a wake-up that continues where the feed is gets
		// applied as carried.
		for i := range 3 {
			seen := len(c.snapshot())
			evs := appendBatch(t, e, "s", 2, fmt.Sprintf("seq%d", i))
			c.waitFor(t, evs[1].Index)
			updates := c.snapshot()
			require.Len(t, updates, seen+1)
			assert.False(t, updates[seen].CaughtUp)
			assert.Nil(t, updates[seen].Events[0].Cause, "wake-ups carry no cause")
		}
		requireRun(t, c.events(), 3, last+6)
	})
}

func TestFeedCatchesUpOnABareWakeUp(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := follow(t, e, "s", 0)
		waitReads(t, e, 1)
		appendBatch(t, e, "s", 1, "small")
		c.waitFor(t, 1)
		reads := e.src.reads.Load()

		big := strings.Repeat("x", 12*1024)
		batch := make([]a2redis.Event, 3)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "big", Payload: json.RawMessage(`"` + big + `"`)}
		}
		_, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		requireRun(t, c.waitFor(t, 4), 1, 4)
		updates := c.snapshot()
		assert.False(t, updates[len(updates)-2].CaughtUp, "the small append was carried")
		last := updates[len(updates)-1]
		assert.True(t, last.CaughtUp, "a bare wake-up is caught up by reading")
		assert.Len(t, last.Events, 3)
		assert.Greater(t, e.src.reads.Load(), reads)
	})
}

func TestFeedReportsClears(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := follow(t, e, "s", 0)
		waitReads(t, e, 1)
		appendBatch(t, e, "s", 3, "a")
		c.waitFor(t, 3)
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		appendBatch(t, e, "s", 2, "b")
		events := c.waitFor(t, 6)
		requireRun(t, events, 1, 6)
		var cleared []int64
		for _, u := range c.snapshot() {
			if u.Cleared > 0 {
				cleared = append(cleared, u.Cleared)
				assert.Equal(t, a2redis.ClearEventType, u.Events[0].Type)
				assert.Equal(t, u.Cleared, u.Events[0].Index)
			}
		}
		assert.Equal(t, []int64{4}, cleared)

		// A feed that starts below the marker starts at it.
		late := follow(t, e, "s", 1)
		requireRun(t, late.waitFor(t, 6), 4, 6)
		first := late.snapshot()[0]
		assert.Equal(t, int64(4), first.Cleared)
		assert.True(t, first.CaughtUp)

		// A feed that starts after it does not report it.
		after := follow(t, e, "s", 4)
		appendBatch(t, e, "s", 1, "c")
		requireRun(t, after.waitFor(t, 7), 5, 7)
		for _, u := range after.snapshot() {
			assert.Zero(t, u.Cleared)
		}
	})
}

func TestFeedReturnsFnErrorAndRejectsBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendBatch(t, e, "s", 2, "a")
		boom := errors.New("boom")
		err := e.feed.Follow(e.ctx, "s", 0, func(notify.Update) error { return boom })
		require.ErrorIs(t, err, boom)

		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		defer cancel()
		err = e.feed.Follow(ctx, "s", 2, func(notify.Update) error { return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)

		assert.ErrorIs(t, e.feed.Follow(e.ctx, "", 0, func(notify.Update) error { return nil }), a2redis.ErrInvalidArgument)
		assert.ErrorIs(t, e.feed.Follow(e.ctx, "s", -1, func(notify.Update) error { return nil }), a2redis.ErrInvalidArgument)
		assert.ErrorIs(t, e.feed.Follow(e.ctx, "s", 0, nil), a2redis.ErrInvalidArgument)
	})
}

// gapTest follows a session, drops the subscription with drop, appends
// while the subscriber is away, and checks every event arrives once.
func gapTest(t *testing.T, e *env, drop func()) {
	c := follow(t, e, "s", 0)
	waitReads(t, e, 1)
	appendBatch(t, e, "s", 3, "a")
	c.waitFor(t, 3)
	reads := e.src.reads.Load()
	drop()
	appendBatchRetrying(t, e, "s", 4, "b")
	appendBatchRetrying(t, e, "s", 3, "c")
	requireRun(t, c.waitFor(t, 10), 1, 10)
	assert.Greater(t, e.src.reads.Load(), reads, "the resubscription caught up by reading")
	// rueidis pipelines over several connections; each one may still have to
	// find out that the old server is gone, so this append retries too.
	appendBatchRetrying(t, e, "s", 2, "d")
	requireRun(t, c.waitFor(t, 12), 1, 12)
}

// appendBatchRetrying appends once the server takes writes again.
func appendBatchRetrying(t *testing.T, e *env, session string, n int, tag string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	batch := make([]a2redis.Event, n)
	for i := range batch {
		batch[i] = a2redis.Event{ID: fmt.Sprintf("%s-%d", tag, i), Type: "t"}
	}
	for {
		_, err := e.store.Append(e.ctx, session, batch, redisstore.AppendOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("append: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFeedSurvivesAKilledConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	client := privateClient(t, srv.Addr())
	e := newEnv(t, client, false)
	gapTest(t, e, func() {
		n, err := client.Do(e.ctx, client.B().ClientKill().TypePubsub().Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})
}

func TestFeedSurvivesARestart(t *testing.T) {
	t.Parallel()
	// Persistence on, so the log survives the restart.
	srv := redistest.SpawnServer(t, "--appendonly", "yes")
	client := privateClient(t, srv.Addr())
	e := newEnv(t, client, false)
	gapTest(t, e, srv.Restart)
}

func TestFeedSurvivesAMiniredisRestart(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Miniredis(t)
	e := newEnv(t, client, false)
	gapTest(t, e, func() { restart(t, mr) })
}

func privateClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestFeedShardedOnACluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t, redistest.Cluster(t), true)
	c := follow(t, e, "s", 0)
	waitReads(t, e, 1)
	for i := range 5 {
		appendBatch(t, e, "s", 2, fmt.Sprintf("b%d", i))
	}
	requireRun(t, c.waitFor(t, 10), 1, 10)
	carried := 0
	for _, u := range c.snapshot() {
		if !u.CaughtUp {
			carried++
		}
	}
	assert.Positive(t, carried, "SSUBSCRIBE received the SPUBLISHed wake-ups")
	// Other sessions (other slots) work alike.
	other := follow(t, e, "another session", 0)
	appendBatch(t, e, "another session", 1, "x")
	requireRun(t, other.waitFor(t, 1), 1, 1)
}

// A feed whose followed mark lapses (deleted here, as an expiry or a
// restart without persistence would) misses the wake-ups of the appends
// meanwhile — they are not published — and its next refresh catches up:
// nothing is lost, nothing repeated; and the refresh marks the session
// again, so wake-ups carry appends again.
func TestFeedCatchesUpWhenItsMarkLapses(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.feed = notify.NewFeed(e.store, notify.FeedOptions{Source: e.src, FollowTTL: 400 * time.Millisecond})
		c := follow(t, e, "s", 0)
		waitReads(t, e, 1)
		mark := keys.For(e.prefix, "s").Followed()
		for i := range 8 {
			require.NoError(t, e.client.Do(e.ctx, e.client.B().Del().Key(mark).Build()).Error())
			appendBatch(t, e, "s", 1+i%2, fmt.Sprintf("lapsed%d", i))
		}
		last := int64(12)
		requireRun(t, c.waitFor(t, last), 1, last)
		// The mark is back: an append's wake-up carries it. An append can
		// still be caught up instead: when the refresher set the mark again
		// before the last deletion and the catch-up it started read after
		// the last append (the mark is gone until its next refresh), or
		// when the machine stalled the refresher past the TTL. Then the
		// next append is tried.
		deadline := time.Now().Add(15 * time.Second)
		for i := 0; ; i++ {
			seen := len(c.snapshot())
			appendBatch(t, e, "s", 1, fmt.Sprintf("after%d", i))
			last++
			requireRun(t, c.waitFor(t, last), 1, last)
			if !c.snapshot()[seen].CaughtUp {
				if i > 0 {
					t.Logf("append %d after the lapses carried by its wake-up", i+1)
				}
				break
			}
			require.True(t, time.Now().Before(deadline), "%d appends after the lapses, none carried by its wake-up", i+1)
		}
	})
}

// Without the mark an append publishes nothing (INFO commandstats, on a
// server of this test's own), so nothing wakes the feed; a resubscription
// sets the mark again before it catches up.
func TestFeedMarksTheSessionAgainOnResubscribing(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	client := privateClient(t, srv.Addr())
	e := newEnv(t, client, false)
	c := follow(t, e, "s", 0)
	waitReads(t, e, 1)
	publishes := func() int64 {
		t.Helper()
		calls, err := redistest.CommandCalls(e.ctx, client)
		require.NoError(t, err)
		return calls["publish"]
	}
	appendBatch(t, e, "s", 1, "followed")
	c.waitFor(t, 1)
	assert.Equal(t, int64(1), publishes(), "a followed session's append publishes")

	mark := keys.For(e.prefix, "s").Followed()
	require.NoError(t, client.Do(e.ctx, client.B().Del().Key(mark).Build()).Error())
	appendBatch(t, e, "s", 1, "unmarked")
	assert.Equal(t, int64(1), publishes(), "an append to an unmarked session does not")
	time.Sleep(200 * time.Millisecond)
	assert.Len(t, c.events(), 1, "and nothing woke the feed (its next refresh is 15 s away)")

	n, err := client.Do(e.ctx, client.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	requireRun(t, c.waitFor(t, 2), 1, 2)
	ttl, err := client.Do(e.ctx, client.B().Pttl().Key(mark).Build()).AsInt64()
	require.NoError(t, err)
	assert.Greater(t, ttl, int64(50_000), "marked again, with its expiry")
	appendBatch(t, e, "s", 1, "again")
	requireRun(t, c.waitFor(t, 3), 1, 3)
	assert.Equal(t, int64(2), publishes())
}

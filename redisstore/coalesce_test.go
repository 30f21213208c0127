package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Concurrent plain appends to one session, with retries of committed
// batches (lost-ack replays) and batches overlapping others (partial
// duplicates) mixed in: every caller gets the result it would get alone,
// and the log holds exactly the batches that succeeded, each contiguous.
func TestCoalescedAppendsKeepEachBatchsSemantics(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const callers, rounds = 32, 12
		var mu sync.Mutex
		owner := map[string]int64{} // id -> index, from the appends that wrote
		var wrote [][]a2redis.StoredEvent
		var wg sync.WaitGroup
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					n := 1 + (c+r)%3
					batch := make([]a2redis.Event, n)
					for i := range batch {
						batch[i] = a2redis.Event{ID: fmt.Sprintf("c%d-r%d-%d", c, r, i), Type: "t", Payload: []byte(fmt.Sprintf(`{"c":%d}`, c))}
						if c%2 == 0 {
							// Event-cursor targets ride the same path.
							batch[i].Targets = []a2redis.Target{{Consumer: "w"}, {Consumer: fmt.Sprintf("x:%d", c)}}
						}
					}
					res, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
					if !assert.NoError(t, err) {
						return
					}
					assert.False(t, res.Replayed)
					if c%2 == 0 {
						assert.True(t, res.HasPending, "a targeted batch leaves heads pending")
					}
					mu.Lock()
					wrote = append(wrote, res.Events)
					for _, ev := range res.Events {
						owner[ev.ID] = ev.Index
					}
					mu.Unlock()
					// The same batch again replays the stored rows.
					again, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
					if assert.NoError(t, err) {
						assert.True(t, again.Replayed)
						assert.Equal(t, indexesOf(res.Events), indexesOf(again.Events))
					}
					// One stored id with a new one is a partial duplicate.
					mixed := []a2redis.Event{batch[0], {ID: fmt.Sprintf("c%d-r%d-new", c, r), Type: "t"}}
					_, err = e.store.Append(e.ctx, "s", mixed, redisstore.AppendOptions{})
					assert.ErrorIs(t, err, a2redis.ErrPartialDuplicateBatch)
				}
			}()
		}
		wg.Wait()
		stored, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, stored, len(owner), "exactly the written batches are stored")
		for _, ev := range stored {
			require.Equal(t, owner[ev.ID], ev.Index, "event %s", ev.ID)
		}
		for _, batch := range wrote {
			for i := range batch {
				require.Equal(t, batch[0].Index+int64(i), batch[i].Index, "a batch's events are contiguous")
			}
		}
		// Every targeted event is a head of both its consumers, once.
		want := map[string]bool{}
		for _, ev := range stored {
			var payload struct{ C int }
			require.NoError(t, json.Unmarshal(ev.Payload, &payload))
			if payload.C%2 == 0 {
				want[fmt.Sprintf("w@%d", ev.Index)] = true
				want[fmt.Sprintf("x:%d@%d", payload.C, ev.Index)] = true
			}
		}
		got := map[string]bool{}
		for {
			claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute, Limit: redisstore.DefaultMaxBatch})
			require.NoError(t, err)
			if len(claim.Heads) == 0 {
				break
			}
			for _, h := range claim.Heads {
				key := fmt.Sprintf("%s@%d", h.Consumer, h.Index)
				require.False(t, got[key], "head %s twice", key)
				got[key] = true
			}
		}
		require.Equal(t, want, got)
	})
}

func indexesOf(events []a2redis.StoredEvent) []int64 {
	out := make([]int64, len(events))
	for i, ev := range events {
		out[i] = ev.Index
	}
	return out
}

// serverWithControl spawns a server and returns a client for the store and
// one of the test's own (another connection: the store's is held with its
// script while writes are paused).
func serverWithControl(t *testing.T) (client, ctl rueidis.Client) {
	t.Helper()
	addr, _ := redistest.Spawn(t)
	var err error
	client, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctl, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(ctl.Close)
	return client, ctl
}

// pauseWrites holds the server's write commands for d (CLIENT PAUSE ends by
// itself, or at CLIENT UNPAUSE from another connection).
func pauseWrites(t *testing.T, c rueidis.Client, d time.Duration) {
	t.Helper()
	cmd := c.B().Arbitrary("CLIENT", "PAUSE").Args(fmt.Sprint(d.Milliseconds()), "WRITE").Build()
	require.NoError(t, c.Do(context.Background(), cmd).Error())
}

// While a session's two rounds are held by the server, the appends that
// arrive for it queue and go together: 40 appends cost at most 4 script
// calls and wake-ups; a queued caller whose context ends first is dropped
// unsent; a session of its own is not held back by the queue.
func TestCoalescingSharesScriptCalls(t *testing.T) {
	t.Parallel()
	client, ctl := serverWithControl(t)
	ctx := context.Background()
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "co"})
	require.NoError(t, err)
	_, err = s.Append(ctx, "s", []a2redis.Event{{ID: "warm", Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	watchSession(t, s, "s") // followed: every round publishes its wake-up
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())

	// Writes are held until the test lets them go (CLIENT UNPAUSE), once
	// the line's two rounds are out and the other 38 calls queued.
	pauseWrites(t, client, time.Minute)
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			require.NoError(t, ctl.Do(ctx, ctl.B().Arbitrary("CLIENT", "UNPAUSE").Build()).Error())
		}
	}
	defer unpause()
	var wg sync.WaitGroup
	results := make([]redisstore.AppendResult, 40)
	errs := make([]error, 40)
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[0], errs[0] = s.Append(ctx, "s", []a2redis.Event{{ID: "lead", Type: "t"}}, redisstore.AppendOptions{})
	}()
	waitLine := func(what string, inFlight, queued int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			f, q := redisstore.CoalesceLine(s, "s")
			if f == inFlight && q == queued {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s: the line has %d rounds out and %d calls queued", what, f, q)
		}
	}
	waitLine("the leader's round", 1, 0)
	// ... and its script held by the server (so it goes first).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		info, err := ctl.Do(ctx, ctl.B().Info().Section("clients").Build()).ToString()
		require.NoError(t, err)
		if strings.Contains(info, "blocked_clients:1\r\n") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the leader's script was never held: %s", info)
	}
	for i := 1; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.Append(ctx, "s", []a2redis.Event{{ID: fmt.Sprintf("q%d", i), Type: "t"}}, redisstore.AppendOptions{})
		}()
		if i == 1 {
			waitLine("the second round", 2, 0) // the leader's goes first
		}
	}
	waitLine("the rest queued", 2, 38)
	// A queued caller that gives up is not written.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = s.Append(short, "s", []a2redis.Event{{ID: "gave-up", Type: "t"}}, redisstore.AppendOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	unpause()
	wg.Wait()

	var indexes []int64
	for i := range results {
		require.NoError(t, errs[i], "append %d", i)
		require.Len(t, results[i].Events, 1)
		indexes = append(indexes, results[i].Events[0].Index)
	}
	sort.Slice(indexes, func(a, b int) bool { return indexes[a] < indexes[b] })
	for i, idx := range indexes {
		require.Equal(t, int64(i+2), idx, "indexes 2..41, each once")
	}
	assert.Equal(t, int64(2), results[0].Events[0].Index, "the leader went first")
	stats := commandStats(ctx, t, client)
	// Two rounds go out at once (the leader's and the next caller's), the
	// rest queue behind them.
	assert.LessOrEqual(t, stats["evalsha"], int64(4), "40 appends in at most 4 script calls: %v", stats)
	assert.Equal(t, stats["evalsha"], stats["publish"], "one wake-up per round: %v", stats)
	assert.Equal(t, int64(40), stats["xadd"], "one entry per append: %v", stats)
	events, err := s.Read(ctx, "s", 0, 0)
	require.NoError(t, err)
	require.Len(t, events, 41)
	for _, ev := range events {
		require.NotEqual(t, "gave-up", ev.ID)
	}
}

// With NoCoalescing every append is a script call of its own.
func TestNoCoalescing(t *testing.T) {
	t.Parallel()
	client := privateServer(t)
	ctx := context.Background()
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "nc", NoCoalescing: true})
	require.NoError(t, err)
	_, err = s.Append(ctx, "s", []a2redis.Event{{ID: "warm", Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	watchSession(t, s, "s") // followed: every round publishes its wake-up
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	pauseWrites(t, client, 200*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Append(ctx, "s", []a2redis.Event{{ID: fmt.Sprintf("n%d", i), Type: "t"}}, redisstore.AppendOptions{})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(10), commandStats(ctx, t, client)["evalsha"])
}

// A coalesced round whose server call fails hands every caller in it the
// error; nothing is half-written (the next appends of the same ids write).
func TestCoalescedRoundFailureReachesEveryCaller(t *testing.T) {
	t.Parallel()
	client, ctl := serverWithControl(t)
	ctx := context.Background()
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "cf"})
	require.NoError(t, err)
	_, err = s.Append(ctx, "s", []a2redis.Event{{ID: "warm", Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	pauseWrites(t, client, time.Minute) // until every append gave up
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, errs[i] = s.Append(c, "s", []a2redis.Event{{ID: fmt.Sprintf("f%d", i), Type: "t"}}, redisstore.AppendOptions{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.Error(t, err, "append %d", i)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "append %d: %v", i, err)
	}
	require.NoError(t, ctl.Do(ctx, ctl.B().Arbitrary("CLIENT", "UNPAUSE").Build()).Error())
	// Whatever was sent committed whole or not at all: the retries write
	// or replay, and the log is contiguous.
	for i := range errs {
		_, err := s.Append(ctx, "s", []a2redis.Event{{ID: fmt.Sprintf("f%d", i), Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	events, err := s.Read(ctx, "s", 0, 0)
	require.NoError(t, err)
	require.Len(t, events, 9)
}

package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/wire"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// §1 HasPending: whether a served consumer has a live head.
func init() {
	contract("Append/HasPendingCountsLiveServedHeads", func(t *testing.T, e *env) {
		pending := func(consumers []a2redis.Consumer, events ...a2redis.Event) bool {
			e.t.Helper()
			r, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{Consumers: consumers})
			e.no(err, "append")
			return r.HasPending
		}
		e.check(!pending(nil, ev("t")), "no cursor, nothing pending")
		e.check(pending(nil, ev("t", to("a"))), "a new event cursor is pending (every consumer served)")
		e.check(!pending([]a2redis.Consumer{{Name: "b"}}), "another consumer's head is not")
		e.check(!pending([]a2redis.Consumer{}), "serving none: nothing pending")
		e.complete(e.claim(redisstore.ClaimRequest{}).Heads[0])
		e.check(!pending(nil), "completed")

		e.append("s", ev("t", lane("c", "x")))
		e.fail(e.claim(redisstore.ClaimRequest{}).Heads[0], 1, 0)
		e.check(!pending(nil), "a dead-lettered head is not pending")
		e.check(!pending(nil, ev("t", lane("c", "x"))), "an event queued behind a dead-lettered lane head is not pending either")
		e.check(!pending([]a2redis.Consumer{{Name: "c"}}, ev("t", lane("c", "x"))), "nor when its consumer is served by name")
	})
}

// §1 Wake-ups: after a write commits, the client publishes the new events
// on the session's notify channel; replays and oversized batches are
// announced bare. (Plain appends publish only while the session is marked
// followed, as a notify.SessionWatcher marks it.)
func init() {
	wake := func(sharded bool) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			if sharded {
				e.store = e.newStore(func(c *redisstore.Config) { c.ShardedPubSub = true })
			}
			sub := e.watch("s")
			msg := func(n int) wire.Message {
				t.Helper()
				m, err := wire.Decode(sub.next(t, n))
				e.no(err, "decode wake-up %d", n)
				return m
			}
			now := e.clock.Now().UnixMilli()
			e.append("s", a2redis.Event{ID: "a", Type: "t", Payload: json.RawMessage(`{"x":[1, 2]}`)}, evID("b", "u", to("c")))
			e.eq(msg(0), wire.Message{Frontier: 2, CreatedAt: now, Entries: []wire.Entry{
				{Index: 1, ID: "a", Type: "t", Payload: json.RawMessage(`{"x":[1, 2]}`)},
				{Index: 2, ID: "b", Type: "u", Payload: json.RawMessage(`null`)},
			}}, "an append carries its events, payloads verbatim")
			e.append("s", evID("a", "t"))
			e.eq(msg(1), wire.Message{Frontier: 1, Bare: true}, "a replay is announced bare")
			h := e.claim(redisstore.ClaimRequest{}).Heads[0]
			e.complete(h, evID("r", "ret"))
			e.eq(msg(2).Entries, []wire.Entry{{Index: 3, ID: "r", Type: "ret", Payload: json.RawMessage(`null`)}}, "a completion carries its returned events")
			big := strings.Repeat("x", wire.MaxCarried)
			e.append("s", a2redis.Event{Type: "big", Payload: json.RawMessage(`"` + big + `"`)})
			e.eq(msg(3), wire.Message{Frontier: 4, Bare: true}, "a batch over 32 KiB is announced bare")
			marker := e.clearSession("s")
			m := msg(4)
			e.eq([]any{m.Frontier, len(m.Entries), m.Entries[0].Type, m.Entries[0].Index}, []any{marker.Index, 1, a2redis.ClearEventType, marker.Index}, "a clear announces its marker")
			e.clearSession("s")
			time.Sleep(100 * time.Millisecond)
			e.check(sub.count() <= 6, "a no-op clear publishes at most a bare wake-up")
		}
	}
	contract("Notify/WakeUpsCarryTheEvents", wake(false))
	contract("Notify/ShardedWakeUps", wake(true), needShardedPubSub)

	// A feed delivers every event once, in order, across a clear.
	contract("Notify/FeedFollowsAcrossAClear", func(t *testing.T, e *env) {
		e.appendN("s", 5, func(int) a2redis.Event { return ev("t") })
		feed := notify.NewFeed(e.store, notify.FeedOptions{})
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		var mu sync.Mutex
		var got []int64
		var cleared []int64
		done := make(chan error, 1)
		go func() {
			done <- feed.Follow(ctx, "s", 2, func(u notify.Update) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, indexes(u.Events)...)
				if u.Cleared > 0 {
					cleared = append(cleared, u.Cleared)
				}
				return nil
			})
		}()
		waitFor := func(n int) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				have := len(got)
				mu.Unlock()
				if have >= n {
					return
				}
				e.check(time.Now().Before(deadline), "the feed delivered %d of %d events", have, n)
				time.Sleep(5 * time.Millisecond)
			}
		}
		waitFor(3)
		for range 3 {
			e.append("s", ev("t"), ev("t"))
		}
		waitFor(9)
		e.clearSession("s")
		e.append("s", ev("t"))
		waitFor(11)
		cancel()
		err := <-done
		e.check(errors.Is(err, context.Canceled), "Follow ends with ctx: %v", err)
		mu.Lock()
		defer mu.Unlock()
		e.eq(got, []int64{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, "every event once, in order")
		e.eq(cleared, []int64{12}, "the clear is reported")
	})
}

// §2 and §3: the layout claim and the key-locking probe.
func init() {
	contract("Layout/ClaimAndMismatch", func(t *testing.T, e *env) {
		got, err := e.client.Do(e.ctx, e.client.B().Get().Key(keys.Schema(e.prefix)).Build()).ToString()
		e.no(err, "GET schema")
		e.eq(got, keys.Layout, "a store claims its prefix's layout")
		e.newStore() // the same layout again
		other := e.prefix + "-old"
		e.no(e.client.Do(e.ctx, e.client.B().Set().Key(keys.Schema(other)).Value("flat-0").Build()).Error(), "SET schema")
		_, err = redisstore.New(e.ctx, e.client, e.config(func(c *redisstore.Config) { c.Prefix = other }))
		e.is(err, a2redis.ErrLayoutMismatch, "another layout")
		var le *a2redis.LayoutError
		e.check(errorsAs(err, &le), "a *LayoutError: %v", err)
		e.eq([]string{le.Prefix, le.Found, le.Want}, []string{other, "flat-0", keys.Layout}, "layout error")
		_, err = redisstore.New(e.ctx, e.client, e.config(func(c *redisstore.Config) { c.Prefix = "a{b" }))
		e.is(err, a2redis.ErrInvalidArgument, "a prefix with a brace")
	})

	contract("KeyLocking/ProbeMatchesTheServer", func(t *testing.T, e *env) {
		enabled, known := e.store.KeyLockingEnabled()
		e.eq([]bool{enabled, known}, []bool{e.tg.Features.KeyLocking, true}, "KeyLockingEnabled (enabled, known)")
		forced := e.newStore(func(c *redisstore.Config) { c.KeyLocking = redisstore.KeyLockingOn })
		_, err := forced.Append(e.ctx, "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{})
		if e.tg.Features.KeyLocking {
			e.no(err, "scripts with the flag run on a key-locking server")
		} else {
			e.check(err != nil, "a server without key locking rejects the flag")
		}
		e.eq(e.bounds("s").Head, map[bool]int64{true: 1, false: 0}[e.tg.Features.KeyLocking], "written only when accepted")
		if !e.tg.Features.KeyLocking {
			off := e.newStore(func(c *redisstore.Config) { c.KeyLocking = redisstore.KeyLockingOff })
			_, err = off.Append(e.ctx, "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{})
			e.no(err, "scripts without the flag")
		}
	})

	// Every operation honours its context: a context that has already
	// ended fails the call with its error and writes nothing.
	contract("Context/EndedContextFailsPromptly", func(t *testing.T, e *env) {
		ctx, cancel := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
		defer cancel()
		start := time.Now()
		_, err := e.store.Append(ctx, "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{})
		e.is(err, context.DeadlineExceeded, "append")
		_, err = e.store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Second})
		e.is(err, context.DeadlineExceeded, "claim")
		_, err = e.store.Read(ctx, "s", 0, 0)
		e.is(err, context.DeadlineExceeded, "read")
		_, err = e.store.Clear(ctx, "s", redisstore.ClearOptions{})
		e.is(err, context.DeadlineExceeded, "clear")
		e.check(time.Since(start) < time.Second, "returned in %v", time.Since(start))
		e.eq(e.bounds("s"), redisstore.Bounds{}, "nothing written")
	})

	// §2: one session lives in one slot (its keys on one node); sessions
	// spread over the nodes.
	contract("Cluster/SessionsSpreadOverNodes", func(t *testing.T, e *env) {
		used := map[int]bool{}
		for i := range 24 {
			session := fmt.Sprintf("s%d", i)
			e.append(session, ev("t", to("c"), lane("l", "x")))
			e.complete(e.claim(redisstore.ClaimRequest{Session: session, Limit: 1}).Heads[0])
			holding := 0
			for node, list := range e.sessionKeys(session) {
				if len(list) > 0 {
					holding++
					used[node] = true
				}
			}
			e.check(holding == 1, "session %s has keys on %d nodes", session, holding)
		}
		e.check(len(used) >= 2, "24 sessions landed on %d node(s)", len(used))
	}, needCluster)
}

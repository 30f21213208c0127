package redisstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/wire"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// subscribe collects the session's wake-ups through a notify.SessionWatcher
// (which marks the session followed: plain appends publish only then) and
// returns once the subscription is live.
func subscribe(t *testing.T, e *env, session string) <-chan wire.Message {
	t.Helper()
	return watchSession(t, e.store, session)
}

// watchSession is subscribe on any store. The channel it returns holds up
// to 1024 wake-ups; more are dropped.
func watchSession(t *testing.T, store *redisstore.Store, session string) <-chan wire.Message {
	t.Helper()
	out := make(chan wire.Message, 1024)
	live := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		<-done
	})
	w := notify.NewSessionWatcher(store, notify.WatchOptions{})
	go func() {
		first := true
		done <- w.Watch(ctx, session, func(n notify.Notice) error {
			switch {
			case n.Kind == notify.NoticeSubscribed && first:
				first = false
				close(live)
			case n.Kind == notify.NoticeMessage:
				if msg, err := wire.Decode(n.Payload); err == nil {
					select {
					case out <- msg:
					default:
					}
				}
			}
			return nil
		})
	}()
	select {
	case <-live:
	case err := <-done:
		t.Fatalf("watch ended before it was subscribed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription never went live")
	}
	return out
}

func next(t *testing.T, ch <-chan wire.Message) wire.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up")
		return wire.Message{}
	}
}

func TestWakeUpsCarryTheEvents(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		wakes := subscribe(t, e, "s")
		res, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: "a", Type: "t", Payload: json.RawMessage(`{"x": [1, 2]}`)}, {ID: "b", Type: "u"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		m := next(t, wakes)
		assert.False(t, m.Bare)
		assert.Equal(t, int64(2), m.Frontier)
		assert.Equal(t, res.Events[0].CreatedAt.UnixMilli(), m.CreatedAt)
		require.Len(t, m.Entries, 2)
		assert.Equal(t, wire.Entry{Index: 1, ID: "a", Type: "t", Payload: json.RawMessage(`{"x": [1, 2]}`)}, m.Entries[0])
		assert.Equal(t, "null", string(m.Entries[1].Payload))

		// A lost-ack replay announces the frontier bare.
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{ID: "a", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Equal(t, wire.Message{Frontier: 1, Bare: true}, next(t, wakes))

		// A batch over 32 KiB announces only its frontier.
		big := make([]a2redis.Event, 40)
		for i := range big {
			big[i] = a2redis.Event{Type: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)}
		}
		_, err = e.store.Append(e.ctx, "s", big, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Equal(t, wire.Message{Frontier: 42, Bare: true}, next(t, wakes))

		// A clear carries its marker.
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		m = next(t, wakes)
		require.Len(t, m.Entries, 1)
		assert.Equal(t, a2redis.ClearEventType, m.Entries[0].Type)
		assert.Equal(t, int64(43), m.Entries[0].Index)
	})
}

func TestFailedPublishNeverFailsTheWrite(t *testing.T) {
	tg := redistest.Targets[1]
	e := newEnv(t, tg, func(c *redisstore.Config) { c.PublishWait = time.Nanosecond })
	res, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	assert.Len(t, res.Events, 1)
}

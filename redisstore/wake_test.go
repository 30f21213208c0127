package redisstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// subscribe collects the session's wake-ups on a dedicated connection.
func subscribe(t *testing.T, e *env, session string) <-chan notify.Message {
	t.Helper()
	conn, release := e.client.Dedicate()
	t.Cleanup(release)
	out := make(chan notify.Message, 16)
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	go func() {
		_ = conn.Receive(ctx, conn.B().Subscribe().Channel(keysFor(e, session).NotifyChannel()).Build(), func(m rueidis.PubSubMessage) {
			msg, err := notify.Decode([]byte(m.Message))
			if err == nil {
				out <- msg
			}
		})
	}()
	// Wait until the subscription is live: probe until a probe arrives (on a
	// cluster PUBLISH counts only the local node's subscribers, so its reply
	// can't tell).
	probe := `{"f":-1}`
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.NoError(t, e.client.Do(e.ctx, e.client.B().Publish().Channel(keysFor(e, session).NotifyChannel()).Message(probe).Build()).Error())
		select {
		case m := <-out:
			if m.Frontier == -1 {
				// Drain the other probes in flight.
				for {
					select {
					case <-out:
					case <-time.After(100 * time.Millisecond):
						return out
					}
				}
			}
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscription never went live")
		}
	}
}

func next(t *testing.T, ch <-chan notify.Message) notify.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up")
		return notify.Message{}
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
		assert.Equal(t, notify.Entry{Index: 1, ID: "a", Type: "t", Payload: json.RawMessage(`{"x": [1, 2]}`)}, m.Entries[0])
		assert.Equal(t, "null", string(m.Entries[1].Payload))

		// A lost-ack replay announces the frontier bare.
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{ID: "a", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Equal(t, notify.Message{Frontier: 1, Bare: true}, next(t, wakes))

		// A batch over 32 KiB announces only its frontier.
		big := make([]a2redis.Event, 40)
		for i := range big {
			big[i] = a2redis.Event{Type: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)}
		}
		_, err = e.store.Append(e.ctx, "s", big, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Equal(t, notify.Message{Frontier: 42, Bare: true}, next(t, wakes))

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

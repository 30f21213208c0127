package notify_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/notify"
)

// subscription runs a Subscribe and streams its notices.
func subscription(t *testing.T, ctx context.Context, sub *notify.Subscriber, channel string, fn func(notify.Notice)) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Subscribe(ctx, channel, func(n notify.Notice) error {
			fn(n)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Subscribe did not return after cancel")
		}
	})
	return done
}

func next(t *testing.T, notices <-chan notify.Notice) notify.Notice {
	t.Helper()
	select {
	case n := <-notices:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no notice")
		return notify.Notice{}
	}
}

// restart closes miniredis and starts it again on the same port, retrying
// while the port is briefly taken (a client reconnecting to a closed
// loopback port can end up bound to it).
func restart(t *testing.T, mr *miniredis.Miniredis) {
	t.Helper()
	mr.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := mr.Restart()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("restart miniredis: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publish publishes msg, retrying while the client reconnects.
func publish(t *testing.T, ctx context.Context, c rueidis.Client, channel, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Do(ctx, c.B().Publish().Channel(channel).Message(msg).Build()).Error()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSubscriberReportsReconnects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mr, client := redistest.Miniredis(t)
	notices := make(chan notify.Notice, 100)
	subscription(t, ctx, notify.NewSubscriber(client, notify.SubscriberOptions{}), "ch", func(n notify.Notice) { notices <- n })

	n := next(t, notices)
	assert.Equal(t, notify.Notice{Kind: notify.NoticeSubscribed, Channel: "ch"}, n)
	publish(t, ctx, client, "ch", "one")
	publish(t, ctx, client, "other", "not ours")
	n = next(t, notices)
	assert.Equal(t, notify.Notice{Kind: notify.NoticeMessage, Channel: "ch", Payload: []byte("one")}, n)

	restart(t, mr)
	n = next(t, notices)
	assert.Equal(t, notify.NoticeDisconnected, n.Kind)
	n = next(t, notices)
	assert.Equal(t, notify.Notice{Kind: notify.NoticeSubscribed, Channel: "ch", Resubscribed: true}, n)
	publish(t, ctx, client, "ch", "two")
	n = next(t, notices)
	assert.Equal(t, "two", string(n.Payload))
	assert.Equal(t, "disconnected", notify.NoticeDisconnected.String())
}

func TestSubscriberReportsOverflow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, client := redistest.Miniredis(t)
	release := make(chan struct{})
	notices := make(chan notify.Notice, 100)
	sub := notify.NewSubscriber(client, notify.SubscriberOptions{QueueLimit: 3})
	var received atomic.Int64
	notify.SetReceived(sub, func(notify.Notice) { received.Add(1) })
	subscription(t, ctx, sub, "ch", func(n notify.Notice) {
		notices <- n
		if n.Kind == notify.NoticeMessage && string(n.Payload) == "block" {
			<-release
		}
	})
	require.Equal(t, notify.NoticeSubscribed, next(t, notices).Kind)
	publish(t, ctx, client, "ch", "block")
	require.Equal(t, "block", string(next(t, notices).Payload))
	// The handler is stuck: three messages wait, the rest overflow.
	for _, m := range []string{"1", "2", "3", "4", "5", "6"} {
		publish(t, ctx, client, "ch", m)
	}
	// Published messages reach the subscriber asynchronously: the handler
	// drains the queue once all seven ("block" and six) were read.
	for received.Load() < 7 {
		require.NoError(t, ctx.Err(), "the subscriber read %d of 7 messages", received.Load())
		time.Sleep(time.Millisecond)
	}
	close(release)
	var got []string
	for range 4 {
		n := next(t, notices)
		if n.Kind == notify.NoticeOverflow {
			got = append(got, "overflow")
		} else {
			got = append(got, string(n.Payload))
		}
	}
	assert.Equal(t, []string{"1", "2", "3", "overflow"}, got)
	publish(t, ctx, client, "ch", "7")
	assert.Equal(t, "7", string(next(t, notices).Payload), "back to normal once drained")
}

func TestSubscriberReturnsRefusalsAndHandlerErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, client := redistest.Miniredis(t)

	// miniredis has no sharded pub/sub: refused, not retried.
	err := notify.NewSubscriber(client, notify.SubscriberOptions{Sharded: true}).Subscribe(ctx, "ch", func(notify.Notice) error { return nil })
	_, isRedis := rueidis.IsRedisErr(errors.Unwrap(err))
	assert.True(t, isRedis, "%v", err)

	boom := errors.New("boom")
	err = notify.NewSubscriber(client, notify.SubscriberOptions{}).Subscribe(ctx, "ch", func(notify.Notice) error { return boom })
	assert.ErrorIs(t, err, boom)

	sub := notify.NewSubscriber(client, notify.SubscriberOptions{})
	assert.ErrorIs(t, sub.Subscribe(ctx, "", func(notify.Notice) error { return nil }), a2redis.ErrInvalidArgument)
	assert.ErrorIs(t, sub.Subscribe(ctx, "ch", nil), a2redis.ErrInvalidArgument)

	// The client still works for commands: the subscriptions had
	// connections of their own.
	require.NoError(t, client.Do(ctx, client.B().Ping().Build()).Error())
}

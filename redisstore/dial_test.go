package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// TestDial connects with nothing but a URL to every kind of server and runs
// a store there: an append, a claim, a completion, and a wake-up through a
// feed (pub/sub is where a client in the wrong mode fails first).
func TestDial(t *testing.T) {
	targets := []struct {
		name string
		url  func(t *testing.T) string
		mode rueidis.ClientMode
	}{
		{"miniredis", func(t *testing.T) string { return "redis://" + miniredis.RunT(t).Addr() }, rueidis.ClientModeStandalone},
		{"redis", func(t *testing.T) string { return "redis://" + redistest.ServerAddr(t) }, rueidis.ClientModeStandalone},
		{"cluster", func(t *testing.T) string { return "redis://" + redistest.ClusterAddrs(t)[0] }, rueidis.ClientModeCluster},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client, err := redisstore.Dial(ctx, tg.url(t))
			require.NoError(t, err)
			defer client.Close()
			assert.Equal(t, tg.mode, client.Mode())

			prefix := redistest.Prefix(t)
			store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
			require.NoError(t, err)
			_, err = store.Append(ctx, "s", []a2redis.Event{{ID: "e1", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, claim.Heads, 1)
			done, err := store.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: "s", Head: claim.Heads[0].Ref(), Attempt: claim.Heads[0].Attempts})
			require.NoError(t, err)
			assert.Equal(t, redisstore.Completed, done.Outcome)

			feed := notify.NewFeed(store, notify.FeedOptions{})
			stop := errors.New("stop")
			err = feed.Follow(ctx, "s", 0, func(u notify.Update) error {
				for _, e := range u.Events {
					switch e.ID {
					case "e1": // caught up: what comes next arrives by wake-up
						go func() {
							_, _ = store.Append(ctx, "s", []a2redis.Event{{ID: "e2", Type: "t"}}, redisstore.AppendOptions{})
						}()
					case "e2":
						return stop
					}
				}
				return nil
			})
			assert.ErrorIs(t, err, stop)
		})
	}
}

func TestDialRefusesABadURL(t *testing.T) {
	ctx := context.Background()
	_, err := redisstore.Dial(ctx, "http://user:secret@127.0.0.1:6379")
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	_, err = redisstore.Dial(ctx, "redis://user:secret@[::1")
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	assert.False(t, strings.Contains(err.Error(), "secret"), "the error hides the password: %v", err)
}

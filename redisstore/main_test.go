package redisstore_test

import (
	"context"
	"github.com/a2redis/a2redis/keys"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// env is one test's store on its own prefix.
type env struct {
	t      *testing.T
	ctx    context.Context
	store  *redisstore.Store
	clock  *redistest.Clock
	client rueidis.Client
	prefix string
}

func newEnv(t *testing.T, tg redistest.Target, mutate ...func(*redisstore.Config)) *env {
	t.Helper()
	client := tg.Client(t)
	ck := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
	prefix := redistest.Prefix(t)
	cfg := redisstore.Config{Prefix: prefix, Clock: ck.Now}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := redisstore.New(ctx, client, cfg)
	require.NoError(t, err)
	return &env{t: t, ctx: ctx, store: s, clock: ck, client: client, prefix: cfg.Prefix}
}

// each runs fn against every target, in parallel subtests.
func each(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, tg))
		})
	}
}

func keysFor(e *env, session string) keys.Session { return keys.For(e.prefix, session) }

// nodes returns a client per node (one for a single server).
func nodes(c rueidis.Client) []rueidis.Client {
	var out []rueidis.Client
	for _, n := range c.Nodes() {
		out = append(out, n)
	}
	return out
}

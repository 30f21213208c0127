package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

func TestMain(m *testing.M) {
	if os.Getenv(envTestWorker) != "" {
		os.Exit(testWorkerMain())
	}
	redistest.Main(m)
}

// The consumers most tests declare: an event consumer, a lane consumer and
// a typed log consumer.
var (
	mailer   = a2redis.Consumer{Name: "mailer"}
	billing  = a2redis.Consumer{Name: "billing"}
	auditor  = a2redis.Consumer{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"order.paid"}}}
	everyone = []a2redis.Consumer{mailer, billing, auditor}
)

// env is one test's store on its own prefix, with a test clock.
type env struct {
	t      *testing.T
	ctx    context.Context
	store  *redisstore.Store
	clock  *redistest.Clock
	client rueidis.Client
	prefix string
}

func newEnv(t *testing.T, client rueidis.Client, consumers []a2redis.Consumer, realClock bool) *env {
	t.Helper()
	ck := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
	prefix := redistest.Prefix(t)
	cfg := redisstore.Config{Prefix: prefix, Clock: ck.Now, Consumers: consumers}
	if realClock {
		cfg.Clock = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	s, err := redisstore.New(ctx, client, cfg)
	require.NoError(t, err)
	return &env{t: t, ctx: ctx, store: s, clock: ck, client: client, prefix: prefix}
}

// each runs fn against every target, in parallel subtests.
func each(t *testing.T, consumers []a2redis.Consumer, fn func(t *testing.T, e *env)) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, tg.Client(t), consumers, false))
		})
	}
}

// quiet is a logger that drops everything (tests assert outcomes, not
// logs); A2REDIS_TEST_LOG=1 shows the log.
func quiet() *slog.Logger {
	if os.Getenv("A2REDIS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is a worker started by a test.
type running struct {
	w    *worker.Worker
	err  chan error
	once sync.Once
	rerr error
}

// start runs a worker on the env's store until the test ends (or stop).
func (e *env) start(cfg worker.Config, handlers ...worker.HandlerSpec) *running {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	w, err := worker.New(e.store, cfg, handlers...)
	require.NoError(e.t, err)
	r := &running{w: w, err: make(chan error, 1)}
	go func() { r.err <- w.Run(e.ctx) }()
	e.t.Cleanup(func() { _ = r.stop() })
	return r
}

// stop shuts the worker down and returns Run's error.
func (r *running) stop() error {
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = r.w.Shutdown(ctx)
		r.rerr = <-r.err
	})
	return r.rerr
}

// eventually polls cond every 5ms until it holds, failing the test after
// a minute.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(eventuallyWait)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle reports whether the ready index lists nothing: no work left.
func (e *env) idle() bool {
	stats, err := e.store.ReadyStats(e.ctx)
	require.NoError(e.t, err)
	for _, st := range stats {
		if st.Due+st.Held > 0 {
			return false
		}
	}
	return true
}

// cursors returns a session's cursors.
func (e *env) cursors(session string) []a2redis.Cursor {
	e.t.Helper()
	cs, err := e.store.Cursors(e.ctx, session)
	require.NoError(e.t, err)
	return cs
}

// cursor returns one consumer's cursor with a head in session (fails when
// there is none).
func (e *env) cursor(session, consumer string) a2redis.Cursor {
	e.t.Helper()
	for _, c := range e.cursors(session) {
		if c.Consumer == consumer && c.Head > 0 {
			return c
		}
	}
	e.t.Fatalf("consumer %q has no head in session %q", consumer, session)
	return a2redis.Cursor{}
}

func (e *env) append(session string, events ...a2redis.Event) redisstore.AppendResult {
	e.t.Helper()
	r, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
	require.NoError(e.t, err)
	return r
}

// outcomes records what the worker reports.
type outcomes struct {
	mu   sync.Mutex
	list []worker.Outcome
}

func (o *outcomes) hook(_ context.Context, out worker.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, out)
}

func (o *outcomes) count(kind worker.OutcomeKind) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, out := range o.list {
		if out.Kind == kind {
			n++
		}
	}
	return n
}

func (o *outcomes) kinds() map[worker.OutcomeKind]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[worker.OutcomeKind]int{}
	for _, out := range o.list {
		m[out.Kind]++
	}
	return m
}

func (o *outcomes) all() []worker.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]worker.Outcome(nil), o.list...)
}

func headName(h a2redis.HeadEvent) string {
	return fmt.Sprintf("%s/%s/%s/%d", h.Session, h.Consumer, h.Lane, h.Index)
}

// eventuallyWait bounds eventually's wait (A2REDIS_TEST_WAIT overrides).
var eventuallyWait = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("A2REDIS_TEST_WAIT")); err == nil {
		return d
	}
	return time.Minute
}()

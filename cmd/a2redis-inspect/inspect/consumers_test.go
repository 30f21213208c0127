package inspect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
)

// TestConsumersCommand: list, add, remove and backfill through the CLI;
// the backfill reaches sessions that got no append after the consumer was
// added.
func TestConsumersCommand(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	out := c.run(t, "", "consumers").ok(t)
	assert.Contains(t, out, "no consumers registered")

	// Sessions written before the log consumer exists.
	for i := 0; i < 5; i++ {
		_, err := e.store.Append(e.ctx, fmt.Sprintf("chat-%d", i), []a2redis.Event{
			{Type: "message.flagged"}, {Type: "message.sent"}, {Type: "message.flagged"},
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	c.run(t, "", "consumers", "add", "indexer", "--per-session", "2").ok(t)
	c.run(t, "", "consumers", "add", "auditor", "--log-lane", "audit", "--types", "message.flagged", "--backfill").ok(t)
	rows := parseTable(t, strings.SplitN(c.run(t, "", "consumers", "list").ok(t), "registry version", 2)[0])
	require.Len(t, rows, 2)
	byName := byKey(rows, "NAME")
	assert.Equal(t, "log", byName["auditor"]["KIND"])
	assert.Equal(t, "audit", byName["auditor"]["LANE"])
	assert.Equal(t, "message.flagged", byName["auditor"]["TYPES"])
	assert.Equal(t, "backfill", byName["auditor"]["START"])
	assert.Equal(t, "events", byName["indexer"]["KIND"])
	assert.Equal(t, "2", byName["indexer"]["PER-SESSION"])
	assert.Equal(t, "-", byName["auditor"]["PER-SESSION"])
	// Added again with another limit: the limit changes.
	c.run(t, "", "consumers", "add", "indexer", "--per-session", "1", "--max-failures", "3").ok(t)
	rows = parseTable(t, strings.SplitN(c.run(t, "", "consumers", "list").ok(t), "registry version", 2)[0])
	assert.Equal(t, "1", byKey(rows, "NAME")["indexer"]["PER-SESSION"], "%v", rows)
	assert.Equal(t, "3", byKey(rows, "NAME")["indexer"]["MAX-FAILURES"], "%v", rows)
	assert.Equal(t, "-", byKey(rows, "NAME")["auditor"]["MAX-FAILURES"], "%v", rows)
	c.run(t, "", "consumers", "add", "x", "--log-lane", "l", "--per-session", "1").failed(t, ExitUsage)
	c.run(t, "", "consumers", "add", "x", "--per-session", "-1").failed(t, ExitUsage)

	// A declaration unlike the registry's: a clear error.
	msg := c.run(t, "", "consumers", "add", "auditor", "--log-lane", "other").failed(t, ExitError)
	assert.Contains(t, msg, "registered as")

	// Backfill: every session's flagged events become the auditor's heads.
	res := c.run(t, "", "consumers", "backfill", "auditor")
	assert.Contains(t, res.ok(t), "backfilled auditor over 5 sessions: 5 with work to run")
	store, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: c.prefix})
	require.NoError(t, err)
	auditor := store.Consumers()[0]
	require.Equal(t, "auditor", auditor.Name)
	handled := 0
	for i := 0; i < 5; i++ {
		for {
			cl, err := store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: fmt.Sprintf("chat-%d", i), Holder: "h", TTL: time.Minute, Consumers: []a2redis.Consumer{auditor}})
			require.NoError(t, err)
			if len(cl.Heads) == 0 {
				break
			}
			for _, h := range cl.Heads {
				handled++
				_, err := store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: h.Session, Head: h.Ref(), Attempt: h.Attempts})
				require.NoError(t, err)
			}
		}
	}
	assert.Equal(t, 10, handled, "two flagged messages in each of five sessions")
	assert.Contains(t, c.run(t, "", "consumers", "backfill", "indexer").failed(t, ExitError), "not a typed log consumer")

	// Remove: confirmed, or --yes.
	c.run(t, "n\n", "consumers", "remove", "indexer").failed(t, ExitError)
	c.run(t, "", "consumers", "remove", "indexer", "--yes").ok(t)
	var listed []consumerJSON
	for _, line := range strings.Split(strings.TrimSpace(c.run(t, "", "consumers", "--json").ok(t)), "\n") {
		var j consumerJSON
		parseJSON(t, line, &j)
		listed = append(listed, j)
	}
	assert.Equal(t, []consumerJSON{{Name: "auditor", Kind: "log", Lane: "audit", Types: []string{"message.flagged"}, Backfill: true}}, listed)

	// Pause and resume.
	c.run(t, "", "pause", "auditor").ok(t)
	assert.Equal(t, "paused", byKey(parseTable(t, strings.SplitN(c.run(t, "", "consumers").ok(t), "registry version", 2)[0]), "NAME")["auditor"]["STATE"])
	require.NoError(t, store.PauseConsumer(e.ctx, "auditor"), "pausing twice is no error")
	_, _, err = store.ReadConsumers(e.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"auditor"}, store.Paused())
	assert.Contains(t, c.run(t, "", "pause", "nobody").failed(t, ExitError), "does not hold")
	c.run(t, "", "resume", "auditor").ok(t)
	assert.Equal(t, "running", byKey(parseTable(t, strings.SplitN(c.run(t, "", "consumers").ok(t), "registry version", 2)[0]), "NAME")["auditor"]["STATE"])
	c.run(t, "", "consumers", "frob").failed(t, ExitUsage)
	c.run(t, "", "consumers", "add").failed(t, ExitUsage)
}

// TestSchedulesCommand lists what schedule runners recorded.
func TestSchedulesCommand(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	assert.Contains(t, c.run(t, "", "schedules").ok(t), "no schedules")
	runSchedules(t, e, "proc-1",
		schedule.Schedule{Name: "nightly", Cron: "0 3 * * *", Session: "reports", Event: a2redis.Event{Type: "report.due"}},
		schedule.Schedule{Name: "fast", Every: 20 * time.Millisecond, Session: "ticks", Event: a2redis.Event{Type: "tick"}})
	rows := byKey(parseTable(t, c.run(t, "", "schedules").ok(t)), "NAME")
	require.Len(t, rows, 2)
	assert.Equal(t, "0 3 * * *", rows["nightly"]["SPEC"])
	assert.Equal(t, "reports", rows["nightly"]["SESSION"])
	assert.Equal(t, "-", rows["nightly"]["LAST"])
	assert.Equal(t, "every 20ms", rows["fast"]["SPEC"])
	assert.NotEqual(t, "-", rows["fast"]["LAST"])
	assert.Equal(t, "proc-1", rows["fast"]["BY"])
	var j map[string]any
	parseJSON(t, strings.SplitN(c.run(t, "", "schedules", "--json").ok(t), "\n", 2)[0], &j)
	assert.Equal(t, "fast", j["name"])
	assert.NotEmpty(t, j["last"])
}

// runSchedules runs a schedule runner (process id) on e's store until the
// listing holds every schedule and the first (by name) has stored a tick.
func runSchedules(t *testing.T, e *env, id string, schedules ...schedule.Schedule) {
	t.Helper()
	r, err := schedule.NewRunner(e.store, schedule.Config{ID: id}, schedules...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool {
		list, err := e.store.Schedules(e.ctx)
		return err == nil && len(list) == len(schedules) && !list[0].Last.IsZero()
	}, 20*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

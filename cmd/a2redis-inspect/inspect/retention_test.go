package inspect

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// retention: a dry run names the idle sessions and writes nothing; --apply
// asks, then ends them; --json gives the pass's result.
func TestRetentionCommand(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	for i := range 3 {
		_, err := e.store.Append(e.ctx, fmt.Sprintf("chat-%d", i), []a2redis.Event{{Type: "m"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	e.clock.Advance(3 * time.Hour)
	_, err := e.store.Append(e.ctx, "chat-new", []a2redis.Event{{Type: "m"}}, redisstore.AppendOptions{})
	require.NoError(t, err)

	out := c.run(t, "", "retention", "--idle", "2h").ok(t)
	assert.Contains(t, out, "a pass would end 3 of 4 sessions scanned (dry run: nothing written)")
	for i := range 3 {
		assert.Contains(t, out, fmt.Sprintf("%q", fmt.Sprintf("chat-%d", i)))
	}
	assert.NotContains(t, out, "chat-new")
	b, err := e.store.Bounds(e.ctx, "chat-0")
	require.NoError(t, err)
	assert.Zero(t, b.ClearIndex, "a dry run writes nothing")

	c.run(t, "n\n", "retention", "--idle", "2h", "--apply").failed(t, ExitError)
	var r redisstore.RetentionResult
	parseJSON(t, c.run(t, "", "retention", "--idle", "2h", "--apply", "--yes", "--json").ok(t), &r)
	assert.Equal(t, 3, r.Ended)
	assert.Len(t, r.Idle, 3)
	b, err = e.store.Bounds(e.ctx, "chat-0")
	require.NoError(t, err)
	assert.Equal(t, redisstore.Bounds{Head: 2, ClearIndex: 2}, b, "ended")
	out = c.run(t, "", "retention", "--idle", "2h").ok(t)
	assert.True(t, strings.HasPrefix(out, "a pass would end 0 of"), out)
	out = c.run(t, "", "retention", "--idle", "2h", "--drop").ok(t)
	assert.Contains(t, out, "a pass would drop 0 of", "the ended sessions' markers are new")
	e.clock.Advance(3 * time.Hour)
	out = c.run(t, "", "retention", "--idle", "2h", "--drop").ok(t)
	assert.Contains(t, out, "a pass would drop 4 of", "ended sessions go with --drop, and the one idle since")
	c.run(t, "", "retention").failed(t, ExitUsage)
}

// retention --trim-keep-last: a dry run lists the sessions a pass would
// trim, with the events removed and where the log would start, writing
// nothing; --apply trims them.
func TestRetentionCommandTrims(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	events := make([]a2redis.Event, 30)
	for i := range events {
		events[i] = a2redis.Event{Type: "m"}
	}
	_, err := e.store.Append(e.ctx, "long", events, redisstore.AppendOptions{})
	require.NoError(t, err)
	_, err = e.store.Append(e.ctx, "short", events[:5], redisstore.AppendOptions{})
	require.NoError(t, err)

	out := c.run(t, "", "retention", "--trim-keep-last", "10").ok(t)
	assert.Contains(t, out, "a pass would end 0 and trim 1 of 2 sessions scanned (dry run: nothing written)")
	assert.Contains(t, out, `"long": trim 20 events, the log starting at 21`)
	b, err := e.store.Bounds(e.ctx, "long")
	require.NoError(t, err)
	assert.Zero(t, b.Floor, "a dry run writes nothing")

	var r redisstore.RetentionResult
	parseJSON(t, c.run(t, "", "retention", "--trim-keep-last", "10", "--apply", "--yes", "--json").ok(t), &r)
	assert.Equal(t, []redisstore.SessionTrim{{Session: "long", Floor: 20, Removed: 20}}, r.Trimmed)
	b, err = e.store.Bounds(e.ctx, "long")
	require.NoError(t, err)
	assert.Equal(t, redisstore.Bounds{Head: 30, Floor: 20}, b)
	rows := parseTable(t, c.run(t, "", "log", "long").ok(t))
	require.Len(t, rows, 10, "log shows the retained log")
	assert.Equal(t, "21", rows[0]["INDEX"])
	c.run(t, "", "log", "long", "--after", "5").failed(t, ExitError)
	c.run(t, "", "retention", "--trim-keep-last", "-1").failed(t, ExitUsage)
}

// The dashboard's session page of a trimmed session says where its log
// starts and lists the retained events from there.
func TestServeTrimmedSession(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	events := make([]a2redis.Event, 30)
	for i := range events {
		events[i] = a2redis.Event{ID: fmt.Sprintf("ev-%02d", i+1), Type: "m"}
	}
	_, err := e.store.Append(e.ctx, "long", events, redisstore.AppendOptions{})
	require.NoError(t, err)
	_, err = e.store.Trim(e.ctx, "long", redisstore.TrimRequest{KeepLast: 10})
	require.NoError(t, err)
	srv := dashServer(t, e, serveOptions{})
	code, body := get(t, srv, "/session?id=long")
	require.Equal(t, 200, code, body)
	assert.Contains(t, body, "trimmed through 20 (the log starts at 21)")
	assert.Contains(t, body, "ev-21")
	assert.NotContains(t, body, "ev-20")
	code, body = get(t, srv, "/session?id=long&after=3")
	require.Equal(t, 200, code, body)
	assert.Contains(t, body, "ev-21", "a page asked below the floor starts at it")
}

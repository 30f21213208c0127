package inspect

import (
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// cursors and dead read small pages, each its own call, and list every
// cursor and dead letter once, sorted; LAG counts from a cursor's head, so
// a caught-up lane or log cursor shows 0 however far the session went on.
func TestCursorsAndDeadInPages(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	audit := a2redis.Consumer{Name: "audit", Log: &a2redis.LogSpec{Lane: "x-only", Types: []string{"x"}}}
	served := []a2redis.Consumer{audit, {Name: "biller"}, {Name: "mailer"}}
	_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Targets: []a2redis.Target{{Consumer: "biller", Lane: "b1"}}}},
		redisstore.AppendOptions{Consumers: served})
	require.NoError(t, err)
	c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: served})
	require.NoError(t, err)
	require.Len(t, c.Heads, 2)
	for _, h := range c.Heads {
		_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Consumers: served})
		require.NoError(t, err)
	}
	// 150 event heads the lane and the typed log do not take.
	const heads = 150
	batch := make([]a2redis.Event, heads)
	for i := range batch {
		batch[i] = a2redis.Event{Type: "y", Targets: []a2redis.Target{{Consumer: "mailer"}}}
	}
	_, err = e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{Consumers: served})
	require.NoError(t, err)
	// Every third one dead-lettered.
	c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Limit: heads, Consumers: served})
	require.NoError(t, err)
	require.Len(t, c.Heads, heads)
	var dead []string
	for i, h := range c.Heads {
		if i%3 == 0 {
			_, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 1})
			require.NoError(t, err)
			dead = append(dead, itoa(h.Index))
		}
	}
	const total = heads + 1

	for _, limit := range []int{0, 7} {
		cl := *e.cli
		cl.pageLimit = limit
		out := cl.run(t, "", "cursors", "s").ok(t)
		checkAligned(t, out)
		rows := parseTable(t, out)
		require.Len(t, rows, heads+2, "limit %d", limit)
		assert.Equal(t, map[string]string{"CONSUMER": "audit", "KIND": "log", "LANE": "x-only", "POSITION": "1", "HEAD": "-", "LAG": "0",
			"STATE": "idle", "ATTEMPTS": "0", "FAILURES": "0", "HOLDER": "-", "CLAIM_EXPIRES": "-", "DEAD_LETTERED": "-", "LAST_ERROR": "-"}, rows[0])
		assert.Equal(t, "biller", rows[1]["CONSUMER"])
		assert.Equal(t, "0", rows[1]["LAG"], "a caught-up lane lags by nothing")
		assert.Equal(t, "idle", rows[1]["STATE"])
		for k, r := range rows[2:] {
			idx := int64(k + 2)
			require.Equal(t, "mailer", r["CONSUMER"])
			require.Equal(t, itoa(idx), r["HEAD"], "sorted by head")
			require.Equal(t, itoa(total-idx+1), r["LAG"])
		}

		var doc cursorsDoc
		parseJSON(t, cl.run(t, "", "cursors", "s", "--json").ok(t), &doc)
		require.Len(t, doc.Cursors, heads+2)
		assert.Equal(t, int64(0), doc.Cursors[0].Lag)
		assert.Equal(t, int64(total-1), doc.Cursors[2].Lag, "the head at 2: 150 events appended since, itself included")

		rows = parseTable(t, cl.run(t, "", "dead", "s").ok(t))
		var listed []string
		for _, r := range rows {
			listed = append(listed, r["INDEX"])
		}
		assert.Equal(t, dead, listed, "limit %d: every dead letter once, by index", limit)
	}

	cl := *e.cli
	cl.pageLimit = 3
	out := cl.run(t, "", "redrive", "s", "mailer", dead[len(dead)-1], "--retry", "--yes").ok(t)
	assert.Contains(t, out, "made runnable again", "redrive finds a head on a later page")
}

// sessions prints every session once, sorted, and aligned however many
// SCAN pages it took (a page holding only short ids used to fix the
// column widths before a longer one came).
func TestSessionsSortedAcrossPages(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	var want []string
	for i := range 30 {
		id := fmt.Sprintf("s%d", i)
		if i == 17 {
			id = "a-much-longer-session-id-than-the-others-" + strconv.Itoa(i)
		}
		_, err := e.store.Append(e.ctx, id, []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		want = append(want, id)
	}
	sort.Strings(want)
	cl := *e.cli
	cl.pageLimit = 1
	out := cl.run(t, "", "sessions").ok(t)
	checkAligned(t, out)
	var got []string
	for _, r := range parseTable(t, out) {
		got = append(got, r["SESSION"])
	}
	assert.Equal(t, want, got)

	var doc sessionsDoc
	parseJSON(t, cl.run(t, "", "sessions", "--json").ok(t), &doc)
	got = got[:0]
	for _, s := range doc.Sessions {
		got = append(got, s.Session)
	}
	assert.Equal(t, want, got)
	assert.Len(t, doc.Sessions, len(want))

	lr := cl.run(t, "", "sessions", "--json", "--limit", "5")
	parseJSON(t, lr.ok(t), &doc)
	assert.Len(t, doc.Sessions, 5)
	assert.Contains(t, lr.stderr, "stopped at --limit 5")
	assert.True(t, sort.SliceIsSorted(doc.Sessions, func(i, j int) bool { return doc.Sessions[i].Session < doc.Sessions[j].Session }))
}

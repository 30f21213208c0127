package inspect

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// deadLanes lists a session's dead letters as consumer/lane@index.
func deadLanes(t *testing.T, e *env, session string) []string {
	t.Helper()
	heads, err := e.store.DeadLetters(e.ctx, session)
	require.NoError(t, err)
	var out []string
	for _, h := range heads {
		out = append(out, h.Consumer+"/"+h.Lane+"@"+itoa(h.Index))
	}
	return out
}

func TestRedriveAll(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		c := e.cli
		const session = "bulk"
		var events []a2redis.Event
		for range 6 {
			events = append(events, a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "a"}}})
		}
		events = append(events,
			a2redis.Event{Type: "pay", Targets: []a2redis.Target{{Consumer: "b", Lane: "x"}}},
			a2redis.Event{Type: "pay", Targets: []a2redis.Target{{Consumer: "b", Lane: "y"}}})
		_, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
		require.NoError(t, err)
		claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 8)
		for _, h := range claim.Heads {
			_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 1})
			require.NoError(t, err)
		}
		all := []string{"a/@1", "a/@2", "a/@3", "a/@4", "a/@5", "a/@6", "b/x@7", "b/y@8"}
		require.Equal(t, all, deadLanes(t, e, session))
		e.clock.Advance(time.Millisecond)

		// Declined: nothing changes.
		r := c.run(t, "n\n", "redrive", session, "--all", "--retry")
		assert.Contains(t, r.failed(t, ExitError), "not redriven")
		assert.Contains(t, r.stderr, `Redrive (retry) 8 dead-lettered heads in session "bulk"? [y/N]`)
		require.Equal(t, all, deadLanes(t, e, session))

		// One lane of one consumer, skipped.
		r = c.run(t, "y\n", "redrive", session, "--all", "--consumer", "b", "--lane", "x", "--skip")
		assert.Contains(t, r.stderr, `Redrive (skip) 1 dead-lettered head of consumer "b" and lane "x" in session "bulk"? [y/N]`)
		out := r.ok(t)
		rows := parseTable(t, out[:strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1])
		require.Len(t, rows, 1, out)
		assert.Equal(t, map[string]string{"CONSUMER": "b", "KIND": "lane", "LANE": "x", "INDEX": "7", "TYPE": "pay", "FAILURES": "1", "REDRIVEN": "yes", "LAST_ERROR": "boom"}, rows[0])
		assert.True(t, strings.HasSuffix(out, "redriven: 1 dead-lettered head of consumer \"b\" and lane \"x\" in session \"bulk\" skipped\n"), out)
		require.Equal(t, []string{"a/@1", "a/@2", "a/@3", "a/@4", "a/@5", "a/@6", "b/y@8"}, deadLanes(t, e, session))

		// Every head of one consumer, over pages of two.
		small := *c
		small.pageLimit = 2
		out = small.run(t, "", "redrive", session, "--all", "--consumer", "a", "--retry", "--yes").ok(t)
		table := out[:strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1]
		checkAligned(t, table)
		assert.Len(t, parseTable(t, table), 6, out)
		assert.Contains(t, out, `redriven: 6 dead-lettered heads of consumer "a" in session "bulk" made runnable again`)
		require.Equal(t, []string{"b/y@8"}, deadLanes(t, e, session))

		// JSON: one object per redriven head.
		var docs []redriveDoc
		parseLines(t, c.run(t, "", "redrive", session, "--all", "--lane", "y", "--retry", "--yes", "--json").ok(t), &docs)
		assert.Equal(t, []redriveDoc{{Session: session, Consumer: "b", Lane: "y", Index: 8, Action: "retry", Redriven: true, HasPending: true}}, docs)
		require.Empty(t, deadLanes(t, e, session))

		assert.Contains(t, c.run(t, "", "redrive", session, "--all", "--retry", "--yes").failed(t, ExitError), `no dead-lettered heads in session "bulk"`)
		for _, args := range [][]string{
			{"redrive", session, "--all", "a", "1", "--retry"},
			{"redrive", session, "--retry"},
			{"redrive", session, "a", "1", "--retry", "--consumer", "a"},
			{"redrive", session, "--all", "--consumer", "", "--retry"},
		} {
			c.run(t, "", args...).failed(t, ExitUsage)
		}
	})
}

type redriveDoc struct {
	Session    string `json:"session"`
	Consumer   string `json:"consumer"`
	Lane       string `json:"lane"`
	Index      int64  `json:"index"`
	Action     string `json:"action"`
	Redriven   bool   `json:"redriven"`
	HasPending bool   `json:"has_pending"`
}

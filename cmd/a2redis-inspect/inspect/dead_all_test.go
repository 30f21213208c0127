package inspect

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// supportChat builds the scenario: 200 conversations, three
// consumers; 26 conversations hold 28 dead letters (conv-000 and conv-001
// two each), a millisecond apart, the last errors "timeout calling the
// model" (every third) or "bad request"; the other 174 hold a head each,
// nothing dead. It returns the dead letters as session/consumer@index, in
// the order they were made.
func supportChat(t *testing.T, e *env) []string {
	t.Helper()
	consumers := []string{"billing", "notify", "search"}
	var made []string
	for i := range 200 {
		session := fmt.Sprintf("conv-%03d", i)
		consumer := consumers[i%3]
		n := 0
		switch {
		case i < 2:
			n = 2
		case i < 26:
			n = 1
		}
		events := []a2redis.Event{{Type: "message", Payload: []byte(`{"text":"hi"}`), Targets: []a2redis.Target{{Consumer: consumer}}}}
		for range n {
			_, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
			require.NoError(t, err)
			cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "worker-1", TTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, cl.Heads, 1)
			h := cl.Heads[0]
			text := "bad request"
			if i%3 == 0 {
				text = "timeout calling the model"
			}
			_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: text, MaxFailures: 1})
			require.NoError(t, err)
			made = append(made, fmt.Sprintf("%s/%s@%d", session, consumer, h.Index))
			e.clock.Advance(time.Millisecond)
		}
		if n == 0 {
			_, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
	}
	return made
}

// deadRows renders a `dead --all` table's rows as session/consumer@index.
func deadRows(rows []map[string]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r["SESSION"]+"/"+r["CONSUMER"]+"@"+r["INDEX"])
	}
	return out
}

func TestDeadAll(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		c := e.cli
		// Nothing dead yet: the table's empty line, exit 0.
		out := c.run(t, "", "dead", "--all").ok(t)
		assert.Equal(t, "no dead-lettered heads in any session\n", out)

		made := supportChat(t, e)
		require.Len(t, made, 28)
		r := c.run(t, "", "dead", "--all")
		out = r.ok(t)
		checkAligned(t, out)
		rows := parseTable(t, out)
		assert.Equal(t, made, deadRows(rows), "every dead letter once, the longest-held first")
		assert.Equal(t, map[string]string{
			"SESSION": "conv-000", "CONSUMER": "billing", "KIND": "event", "LANE": "-", "INDEX": "1", "TYPE": "message",
			"ATTEMPTS": "1", "FAILURES": "1", "DEAD_LETTERED": rows[0]["DEAD_LETTERED"], "LAST_ERROR": "timeout calling the model",
		}, rows[0])
		assert.Contains(t, r.stderr, "28 dead letters in 26 sessions\n")
		assert.Contains(t, r.stderr, "redrive one consumer's with: a2redis-inspect redrive --all-sessions --consumer billing --retry")

		// The same over pages of three.
		small := *c
		small.pageLimit = 3
		assert.Equal(t, made, deadRows(parseTable(t, small.run(t, "", "dead", "--all").ok(t))))

		// Filters.
		var billing, timeouts []string
		for i, m := range made {
			if strings.Contains(m, "/billing@") {
				billing = append(billing, m)
			}
			if strings.Contains(m, "/billing@") { // every third session is billing's and times out
				timeouts = append(timeouts, made[i])
			}
		}
		r = c.run(t, "", "dead", "--all", "--consumer", "billing")
		assert.Equal(t, billing, deadRows(parseTable(t, r.ok(t))))
		assert.Contains(t, r.stderr, fmt.Sprintf("%d dead letters of consumer \"billing\" in ", len(billing)))
		assert.Equal(t, timeouts, deadRows(parseTable(t, c.run(t, "", "dead", "--all", "--error", "timeout").ok(t))))
		assert.Equal(t, "no dead-lettered heads of consumer \"notify\" with \"timeout\" in the last error in any session\n",
			c.run(t, "", "dead", "--all", "--consumer", "notify", "--error", "timeout").ok(t))

		// JSON: one object per dead letter, with its session.
		var docs []deadAllDoc
		parseLines(t, c.run(t, "", "dead", "--all", "--json").ok(t), &docs)
		require.Len(t, docs, 28)
		assert.Equal(t, "conv-000", docs[0].Session)
		assert.Equal(t, "timeout calling the model", docs[0].LastError)

		for _, args := range [][]string{
			{"dead", "--all", "conv-000"},
			{"dead"},
			{"dead", "conv-000", "--consumer", "billing"},
			{"dead", "--all", "--consumer", ""},
		} {
			c.run(t, "", args...).failed(t, ExitUsage)
		}
	})
}

// deadAllDoc is one line of `dead --all --json`.
type deadAllDoc struct {
	Session        string          `json:"session"`
	Consumer       string          `json:"consumer"`
	Kind           string          `json:"kind"`
	Lane           string          `json:"lane"`
	Index          int64           `json:"index"`
	EventID        string          `json:"event_id"`
	Type           string          `json:"type"`
	CreatedAt      *string         `json:"created_at"`
	Attempts       int64           `json:"attempts"`
	Failures       int64           `json:"failures"`
	Holder         string          `json:"holder"`
	LastFailedAt   *string         `json:"last_failed_at"`
	LastError      string          `json:"last_error"`
	DeadLetteredAt *string         `json:"dead_lettered_at"`
	Payload        json.RawMessage `json:"payload"`
}

type progressDoc struct {
	Redriven int    `json:"redriven"`
	Missed   int    `json:"missed"`
	Total    int    `json:"total"`
	Next     string `json:"next"`
	Done     bool   `json:"done"`
}

func TestRedriveAllSessions(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		c := e.cli
		made := supportChat(t, e)
		var billing, rest []string
		for _, m := range made {
			if strings.Contains(m, "/billing@") {
				billing = append(billing, m)
			} else {
				rest = append(rest, m)
			}
		}
		listed := func() []string { return deadRows(parseTable(t, c.run(t, "", "dead", "--all").ok(t))) }

		// Declined: nothing changes.
		r := c.run(t, "n\n", "redrive", "--all-sessions", "--consumer", "billing", "--retry")
		assert.Contains(t, r.failed(t, ExitError), "not redriven")
		assert.Contains(t, r.stderr, fmt.Sprintf(`Redrive (retry) %d dead-lettered heads of consumer "billing" in 9 sessions? [y/N]`, len(billing)))
		require.Equal(t, made, listed())

		// The error filter: billing's timeouts are all of billing's, so
		// notify's bad requests are ruled out by the consumer.
		assert.Contains(t, c.run(t, "", "redrive", "--all-sessions", "--consumer", "notify", "--error", "timeout", "--retry", "--yes").failed(t, ExitError),
			`no dead-lettered heads of consumer "notify" with "timeout" in the last error in any session`)

		// Confirmed, over batches of two, with NDJSON progress.
		small := *c
		small.pageLimit = 2
		var docs []progressDoc
		parseLines(t, small.run(t, "y\n", "redrive", "--all-sessions", "--consumer", "billing", "--retry", "--json").ok(t), &docs)
		require.NotEmpty(t, docs)
		assert.Greater(t, len(docs), 2, "one progress object per batch")
		lastDoc := docs[len(docs)-1]
		assert.Equal(t, progressDoc{Redriven: len(billing), Total: len(billing), Done: true}, lastDoc)
		for i := 1; i < len(docs); i++ {
			assert.GreaterOrEqual(t, docs[i].Redriven, docs[i-1].Redriven)
			if !docs[i-1].Done {
				assert.NotEmpty(t, docs[i-1].Next, "each batch but the last tells how to resume")
			}
		}
		require.Equal(t, rest, listed(), "billing's retried, the others stay")

		// Skipped, with progress; then without JSON, a summary line.
		var first []progressDoc
		parseLines(t, small.run(t, "", "redrive", "--all-sessions", "--consumer", "search", "--skip", "--yes", "--json").ok(t), &first)
		require.NotEmpty(t, first)
		out := c.run(t, "", "redrive", "--all-sessions", "--consumer", "notify", "--skip", "--yes").ok(t)
		assert.Equal(t, "redriven: 10 dead-lettered heads of consumer \"notify\" in 9 sessions skipped\n", out)
		assert.Empty(t, listed())
		assert.Contains(t, c.run(t, "", "redrive", "--all-sessions", "--consumer", "notify", "--skip", "--yes").failed(t, ExitError), "no dead-lettered heads")

		for _, args := range [][]string{
			{"redrive", "--all-sessions", "--retry"},
			{"redrive", "--all-sessions", "--consumer", "billing"},
			{"redrive", "conv-000", "--all-sessions", "--consumer", "billing", "--retry"},
			{"redrive", "--all-sessions", "--all", "--consumer", "billing", "--retry"},
			{"redrive", "conv-000", "--all", "--error", "x", "--retry"},
		} {
			c.run(t, "", args...).failed(t, ExitUsage)
		}
	})
}

// TestRedriveAllSessionsResumes: a run started from an interrupted run's
// token does what the interrupted run left.
func TestRedriveAllSessionsResumes(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		made := supportChat(t, e)
		// The first batch of four, redriven through the store as an
		// interrupted run would have: its progress's token.
		p, err := e.store.RedriveAcross(e.ctx, redisstore.RedriveAcrossRequest{Consumer: "billing", Action: redisstore.Skip, Batch: 4,
			Progress: func(redisstore.RedriveProgress) error { return errBatchDone }})
		require.ErrorIs(t, err, errBatchDone)
		require.Equal(t, 4, p.Redriven)
		out := e.cli.run(t, "", "redrive", "--all-sessions", "--consumer", "billing", "--skip", "--yes", "--resume", p.Next).ok(t)
		billing := 0
		for _, m := range made {
			if strings.Contains(m, "/billing@") {
				billing++
			}
		}
		assert.Equal(t, fmt.Sprintf("redriven: %d dead-lettered heads of consumer \"billing\" in 6 sessions skipped\n", billing-4), out)
		heads, err := e.store.DeadLettersAcross(e.ctx, redisstore.DeadLetterQuery{Consumer: "billing"})
		require.NoError(t, err)
		assert.Empty(t, heads.DeadLetters)
		assert.Contains(t, e.cli.run(t, "", "redrive", "--all-sessions", "--consumer", "billing", "--skip", "--resume", "bogus").failed(t, ExitError), "After")
	})
}

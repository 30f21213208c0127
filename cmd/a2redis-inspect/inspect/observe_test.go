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
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// eachTarget runs fn on an env of every target (miniredis, redis-server,
// cluster), in parallel subtests.
func eachTarget(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr, c := redistest.Miniredis(t)
		fn(t, newEnv(t, c, "redis://"+mr.Addr()))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, serverEnv(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		var urls []string
		for _, a := range redistest.ClusterAddrs(t) {
			urls = append(urls, "redis://"+a)
		}
		fn(t, newEnv(t, redistest.Cluster(t), urls...))
	})
}

// parseLines decodes a run's stdout as NDJSON: one object per line, each
// appended to *into.
func parseLines[T any](t *testing.T, out string, into *[]T) {
	t.Helper()
	if out == "" {
		return
	}
	require.True(t, strings.HasSuffix(out, "\n"), "NDJSON ends with a newline: %q", out)
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var v T
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&v), "line: %s", line)
		*into = append(*into, v)
	}
}

func TestWorkersCommand(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		c := e.cli
		seed(t, e) // the prefix must hold data
		out := c.run(t, "", "workers").ok(t)
		assert.Equal(t, fmt.Sprintf("no live workers under prefix %q\n", c.prefix), out)
		assert.Empty(t, c.run(t, "", "workers", "--json").ok(t))

		started := e.clock.Now().Add(-time.Hour)
		var heads []redisstore.WorkerHead
		for i := range 5 {
			heads = append(heads, redisstore.WorkerHead{Session: fmt.Sprintf("s%d", i), HeadRef: a2redis.HeadRef{Consumer: "billing", Lane: "acct", Index: int64(i + 1)}})
		}
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "w-b", Host: "host-b", PID: 7, StartedAt: started,
			Consumers: []string{"mailer", "billing"}, Concurrency: 16, InFlight: 4, Heads: heads, HeadsTotal: 250}, 15*time.Second))
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "w-a", Host: "host-a", PID: 8, StartedAt: started,
			Consumers: []string{"mailer"}, Concurrency: 4}, 15*time.Second))
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "w-dead", Host: "host-c"}, time.Second))
		e.clock.Advance(2 * time.Second) // w-dead stopped heartbeating: its TTL passed

		small := *c
		small.pageLimit = 1
		for _, cl := range []*cli{c, &small} {
			out = cl.run(t, "", "workers").ok(t)
			checkAligned(t, out)
			rows := parseTable(t, out)
			require.Len(t, rows, 2, out)
			assert.Equal(t, map[string]string{"ID": "w-a", "HOST": "host-a", "PID": "8", "STARTED": formatTime(started), "HEARTBEAT": "2s ago",
				"CONSUMERS": "mailer", "SLOTS": "4", "IN_FLIGHT": "0", "HELD": "0", "HEADS": "-"}, rows[0])
			assert.Equal(t, "w-b", rows[1]["ID"])
			assert.Equal(t, "mailer,billing", rows[1]["CONSUMERS"])
			assert.Equal(t, "4", rows[1]["IN_FLIGHT"])
			assert.Equal(t, "250", rows[1]["HELD"])
			assert.Equal(t, "s0:billing/acct@1, s1:billing/acct@2, s2:billing/acct@3 (+247 more)", rows[1]["HEADS"])
		}

		var docs []workerJSONDoc
		parseLines(t, c.run(t, "", "workers", "--json").ok(t), &docs)
		require.Len(t, docs, 2)
		assert.Equal(t, "w-a", docs[0].ID)
		assert.Equal(t, []string{"mailer"}, docs[0].Consumers)
		assert.Empty(t, docs[0].Heads)
		b := docs[1]
		assert.Equal(t, "w-b", b.ID)
		assert.Equal(t, "host-b", b.Host)
		assert.Equal(t, 7, b.PID)
		assert.Equal(t, 16, b.Concurrency)
		assert.Equal(t, 4, b.InFlight)
		assert.Equal(t, 250, b.Held)
		require.Len(t, b.Heads, 5)
		assert.Equal(t, workerHeadJSON{Session: "s4", Consumer: "billing", Lane: "acct", Index: 5}, b.Heads[4])
		assert.Equal(t, started.UTC().Truncate(time.Millisecond), rfc3339(t, b.StartedAt))
		assert.Equal(t, rfc3339(t, b.HeartbeatAt).Add(15*time.Second), rfc3339(t, b.ExpiresAt))

		require.NoError(t, workerreg.Of(e.store).Deregister(e.ctx, "w-b"))
		rows := parseTable(t, c.run(t, "", "workers").ok(t))
		require.Len(t, rows, 1)
		assert.Equal(t, "w-a", rows[0]["ID"])
	})
}

type workerJSONDoc struct {
	ID          string           `json:"id"`
	Host        string           `json:"host"`
	PID         int              `json:"pid"`
	StartedAt   *string          `json:"started_at"`
	HeartbeatAt *string          `json:"heartbeat_at"`
	ExpiresAt   *string          `json:"expires_at"`
	Consumers   []string         `json:"consumers"`
	Concurrency int              `json:"concurrency"`
	InFlight    int              `json:"in_flight"`
	Held        int              `json:"held"`
	Heads       []workerHeadJSON `json:"heads"`
}

// seed writes one session without work, so the prefix holds data.
func seed(t *testing.T, e *env) {
	t.Helper()
	_, err := e.store.Append(e.ctx, "seed", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
}

func TestReadyCommand(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		c := e.cli
		seed(t, e)
		assert.Equal(t, fmt.Sprintf("no sessions with work under prefix %q\n", c.prefix), c.run(t, "", "ready").ok(t))

		const n = 12
		got := map[string]time.Time{}
		for i := range n {
			s := fmt.Sprintf("r-%02d", i)
			_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "mailer"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			got[s] = e.clock.Now()
			e.clock.Advance(time.Millisecond)
		}
		// One session is held: its only head is claimed for a minute.
		claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "r-00", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 1)
		e.clock.Advance(time.Second)

		small := *c
		small.pageLimit = 1
		for _, cl := range []*cli{c, &small} {
			out := cl.run(t, "", "ready").ok(t)
			checkAligned(t, out)
			rows := parseTable(t, out)
			require.Len(t, rows, n, out)
			shard := map[string]int{}
			for _, r := range rows {
				switch r["SESSION"] {
				case "r-00":
					assert.Equal(t, "held", r["STATE"])
					assert.Equal(t, "-", r["WAIT"])
				default:
					assert.Equal(t, "due", r["STATE"], r["SESSION"])
					assert.Equal(t, formatTime(got[r["SESSION"]]), r["AT"])
				}
				shard[r["SESSION"]]++
			}
			assert.Len(t, shard, n, "each session once")
		}

		var lines []readyDoc
		parseLines(t, c.run(t, "", "ready", "--json").ok(t), &lines)
		require.Len(t, lines, n)
		byShard := map[int]int{}
		for _, l := range lines {
			byShard[l.Shard]++
			if l.Session == "r-00" {
				assert.Equal(t, "held", l.State)
			}
		}
		var limited []readyDoc
		parseLines(t, c.run(t, "", "ready", "--json", "--limit", "3").ok(t), &limited)
		assert.Len(t, limited, 3)
		for sh, count := range byShard {
			var one []readyDoc
			parseLines(t, small.run(t, "", "ready", "--json", "--shard", fmt.Sprint(sh)).ok(t), &one)
			assert.Len(t, one, count, "shard %d", sh)
		}

		var stats []readyStatsDoc
		parseLines(t, c.run(t, "", "ready", "--stats", "--json").ok(t), &stats)
		require.Len(t, stats, keys.DefaultReadyShards)
		var due, held int64
		for _, st := range stats {
			due += st.Due
			held += st.Held
		}
		assert.Equal(t, int64(n-1), due)
		assert.Equal(t, int64(1), held)
		rows := parseTable(t, c.run(t, "", "ready", "--stats").ok(t))
		require.Len(t, rows, keys.DefaultReadyShards)

		r := c.run(t, "", "ready", "--shard", "99")
		assert.Equal(t, ExitUsage, r.code, r.stderr)
	})
}

type readyDoc struct {
	Shard   int     `json:"shard"`
	Session string  `json:"session"`
	State   string  `json:"state"`
	At      *string `json:"at"`
}

type readyStatsDoc struct {
	Shard  int     `json:"shard"`
	Due    int64   `json:"due"`
	Held   int64   `json:"held"`
	Oldest *string `json:"oldest"`
	Next   *string `json:"next"`
}

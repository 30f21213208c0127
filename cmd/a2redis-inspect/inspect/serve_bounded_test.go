package inspect

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// TestServeBoundedWork counts the commands a page request runs on a private
// redis-server (INFO commandstats): the session page of a 1-event session
// and of a 1000-event one, with 1 and 150 dead letters, run the same
// commands, and a search over 300 sessions stays within its page bounds.
func TestServeBoundedWork(t *testing.T) {
	addr, _ := redistest.Spawn(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	e := newEnv(t, client, "redis://"+addr)

	flaky := a2redis.Consumer{Name: "flaky"}
	fill := func(session string, events, dead int) {
		for done := 0; done < events; done += 100 {
			batch := make([]a2redis.Event, min(100, events-done))
			for i := range batch {
				batch[i] = a2redis.Event{Type: "n", Payload: json.RawMessage(`{"i":1}`)}
				if done+i < dead {
					batch[i].Targets = []a2redis.Target{{Consumer: "flaky"}}
				}
			}
			_, err := e.store.Append(e.ctx, session, batch, redisstore.AppendOptions{Consumers: []a2redis.Consumer{flaky}})
			require.NoError(t, err)
		}
		for failed := 0; failed < dead; {
			claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: 60e9, Consumers: []a2redis.Consumer{flaky}})
			require.NoError(t, err)
			require.NotEmpty(t, claim.Heads)
			for _, h := range claim.Heads {
				_, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 1})
				require.NoError(t, err)
				failed++
			}
		}
	}
	fill("small", 1, 1)
	fill("big", 1000, 150)
	for i := range 300 {
		_, err := e.store.Append(e.ctx, fmt.Sprintf("s-%03d", i), []a2redis.Event{{Type: "n"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	srv := dashServer(t, e, serveOptions{})

	calls := func(path string) map[string]int64 {
		t.Helper()
		before, err := redistest.CommandCalls(e.ctx, client)
		require.NoError(t, err)
		code, body := get(t, srv, path)
		require.Equal(t, http.StatusOK, code, body)
		after, err := redistest.CommandCalls(e.ctx, client)
		require.NoError(t, err)
		diff := map[string]int64{}
		for k, v := range after {
			if d := v - before[k]; d > 0 && k != "info" {
				diff[k] = d
			}
		}
		return diff
	}
	calls("/session?id=small") // loads the scripts (EVAL once, then EVALSHA)
	small, big := calls("/session?id=small"), calls("/session?id=big")
	require.Equal(t, small, big, "a session page's commands do not grow with the session")

	search := calls("/sessions?q=s-")
	require.LessOrEqual(t, search["scan"], int64(sessionScanCalls))
	require.LessOrEqual(t, search["mget"], int64(dashboardPage)+10, "one MGET per session listed, about a page")
	require.GreaterOrEqual(t, search["mget"], int64(50))
	_, body := get(t, srv, "/sessions?q=s-")
	require.Contains(t, body, `id="next"`, "300 sessions take more than one page")
	overview, shards := calls("/"), calls("/shards")
	total := func(m map[string]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	require.NotContains(t, overview, "scan", "the overview reads no keyspace scan")
	require.LessOrEqual(t, total(overview), int64(4*statsSampleSessions+40), "the overview's reads are bounded by its sample, not by the 302 sessions")
	t.Logf("session page: %v; search page over 300 sessions: %v; overview: %v (%d commands); shards: %v (%d commands)", big, search, overview, total(overview), shards, total(shards))
}

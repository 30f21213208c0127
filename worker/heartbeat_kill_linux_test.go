package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/cmd/a2redis-inspect/inspect"
	"github.com/a2redis/a2redis/internal/redistest"
)

// inspectRun runs the a2redis-inspect CLI in this process on the env's
// prefix and returns its stdout (failing on another exit status than 0).
func (e *processEnv) inspectRun(args ...string) string {
	e.t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	code := inspect.Run(ctx, append([]string{"--url", e.url, "--prefix", e.prefix}, args...),
		inspect.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
	require.Equal(e.t, inspect.ExitOK, code, "a2redis-inspect %v: %s", args, errOut.String())
	return out.String()
}

// A worker process that stops renewing its heartbeat (SIGKILLed while its
// handlers run) leaves every view of the registry once its record's TTL
// has passed: Store.Workers, the CLI's `workers` (table and JSON) and the
// dashboard's workers page and overview count, and none of them counts its
// heads in flight after that. Its heads' claims outlive the record (their
// lease is longer than the heartbeat's TTL, as by default: 30 s and 15 s):
// until the lease ends the CLI's `cursors` and the dashboard's session page
// show them "orphaned" (not "claimed": nothing runs them), then "lapsed".
func TestKilledWorkerLeavesTheViews(t *testing.T) {
	redistest.Chaos(t)
	for _, tg := range processTargets[1:] { // real servers: redis, cluster
		t.Run(tg.name, func(t *testing.T) {
			e := newProcessEnv(t, tg.url(t))
			const heartbeat, lease = time.Second, 4 * time.Second
			doomed := startProc(t, e.url, e.prefix, "doomed", "TW_TTL=4s", "TW_HEARTBEAT=1s", "TW_CONCURRENCY=4",
				"TW_SLOW=10m") // its heads stay in flight until the kill, however late the two claims and heartbeats come
			alive := startProc(t, e.url, e.prefix, "alive", "TW_TTL=4s", "TW_HEARTBEAT=1s", "TW_HANDLE=ln")
			sessions := []string{"k0", "k1"}
			for _, s := range sessions {
				e.append(s, a2redis.Event{Type: "t.slow", Targets: []a2redis.Target{{Consumer: "ev"}}})
			}
			e.eventually("the doomed worker lists its two heads in flight", func() bool {
				return e.liveWorkers()["doomed"].InFlight == 2
			})

			// The dashboard, served by this process.
			ctx, stopServe := context.WithCancel(e.ctx)
			served := &syncWriter{}
			serveDone := make(chan int, 1)
			go func() {
				serveDone <- inspect.Run(ctx, []string{"--url", e.url, "--prefix", e.prefix, "serve", "--addr", "127.0.0.1:0"},
					inspect.Env{Stdout: served, Stderr: io.Discard, Getenv: func(string) string { return "" }})
			}()
			defer func() { stopServe(); <-serveDone }()
			var base string
			e.eventually("the dashboard listens", func() bool {
				base = regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(served.String())
				return base != ""
			})
			page := func(path string) string {
				resp, err := http.Get(base + path)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
				return string(b)
			}
			require.Contains(t, page("/workers"), "<td>doomed</td>")
			require.Contains(t, page("/"), `<b id="workers-alive">2</b>`)

			require.NoError(t, doomed.cmd.Process.Signal(syscall.SIGKILL))
			<-doomed.waited
			killedAt := time.Now()
			// Its last record: listed until it expires, by the store's clock.
			last, listed := e.liveWorkers()["doomed"]
			if listed {
				assert.Equal(t, 2, last.InFlight)
				assert.LessOrEqual(t, last.ExpiresAt.Sub(last.HeartbeatAt), heartbeat, "the record's TTL")
				time.Sleep(time.Until(last.ExpiresAt) + time.Millisecond)
			}
			gone := time.Now()
			ws := e.liveWorkers()
			assert.NotContains(t, ws, "doomed", "Store.Workers past the record's TTL")
			assert.Contains(t, ws, "alive")
			table := e.inspectRun("workers")
			assert.NotContains(t, table, "doomed", "the CLI's workers table")
			assert.Contains(t, table, "alive")
			for _, line := range strings.Split(strings.TrimSpace(e.inspectRun("workers", "--json")), "\n") {
				var doc struct {
					ID       string `json:"id"`
					InFlight int    `json:"in_flight"`
					Held     int    `json:"held"`
				}
				require.NoError(t, json.Unmarshal([]byte(line), &doc), line)
				assert.Equal(t, "alive", doc.ID, "the CLI's workers --json lists only the live worker")
				assert.Zero(t, doc.InFlight+doc.Held, "and counts nothing in flight: the live worker has no work")
			}
			assert.NotContains(t, page("/workers"), "doomed", "the dashboard's workers page")
			assert.Contains(t, page("/"), `<b id="workers-alive">1</b>`, "the dashboard's overview counts one worker alive")

			stateOf := func(session string) (state, holder string) {
				var doc struct {
					Consumer string `json:"consumer"`
					State    string `json:"state"`
					Holder   string `json:"holder"`
				}
				for _, line := range strings.Split(strings.TrimSpace(e.inspectRun("cursors", session, "--json")), "\n") {
					d := doc
					require.NoError(t, json.Unmarshal([]byte(line), &d), line)
					if d.Consumer == "ev" {
						return d.State, d.Holder
					}
				}
				t.Fatalf("%s: no ev cursor", session)
				return "", ""
			}
			// Its heads' claims outlive the record until their lease ends:
			// orphaned, not claimed, in the CLI's cursors and the
			// dashboard's session page.
			for _, s := range sessions {
				state, h := stateOf(s)
				assert.Equal(t, "orphaned", state, "%s: claimed by a worker whose heartbeat stopped", s)
				assert.Equal(t, "doomed", h)
				session := page("/session?id=" + s)
				assert.Contains(t, session, `<td class="state state-orphaned">orphaned</td>`, "%s: the dashboard's session page", s)
				assert.NotContains(t, session, "state-claimed", s)
			}
			between, holder := stateOf(sessions[0])
			time.Sleep(time.Until(killedAt.Add(lease + 100*time.Millisecond)))
			for _, s := range sessions {
				state, h := stateOf(s)
				assert.Equal(t, "lapsed", state, "%s: the claim's lease ended", s)
				assert.Equal(t, "doomed", h)
			}
			alive.stop(t)
			t.Logf("record gone %v after the kill (heartbeat TTL %v); between the record's end and the lease's (%v), cursors showed the head %q by %q",
				gone.Sub(killedAt).Round(time.Millisecond), heartbeat, lease, between, holder)
		})
	}
}

// syncWriter is a writer safe for a writer and a concurrent reader.
type syncWriter struct{ lockedBuffer }

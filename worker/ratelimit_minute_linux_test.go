package worker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/worker"
)

// envRateMinute runs TestRateLimitOverAMinute.
const envRateMinute = "A2REDIS_RATE_MINUTE"

// TestRateLimitOverAMinute measures the fleet-wide rate limit over a
// minute: three worker processes (the test binary in worker mode, each
// with its own client and store) share a backlog of one rate-limited event
// consumer (40 starts per 1 s window) big enough to last past 61 windows,
// on a redis-server and on a 3-node cluster of its own (so INFO
// commandstats counts only this test). Every process lists its handler
// starts (their Unix ms) in Redis; the test counts them per window of the
// server's clock (the same machine's clock) and asserts: the 60 full
// windows from the first start's window on hold within 5% of 60 times the
// limit; no window has more starts than the limit; no failure is counted
// (every outcome is a completion, no cursor counts a failure); every head
// ran exactly once. It reports the rate_take calls per window (INFO
// commandstats' TIME calls: only rate_take calls TIME), every script call
// per window (EVALSHA), and the processes' own counts by script, claims
// included, over the run and while idle after it.
//
// It runs only with A2REDIS_RATE_MINUTE=1 (over two minutes of wall time
// for the two targets); otherwise, CI included, it is skipped.
// TestRateLimitAcrossWorkers is the short run every test run makes.
func TestRateLimitOverAMinute(t *testing.T) {
	if os.Getenv(envRateMinute) == "" {
		t.Skip("a minute per target: set " + envRateMinute + "=1 to run it")
	}
	targets := []struct {
		name  string
		addrs func(t *testing.T) []string // the masters: the first is dialled
	}{
		{"redis", func(t *testing.T) []string { addr, _ := redistest.Spawn(t); return []string{addr} }},
		{"cluster", func(t *testing.T) []string { return redistest.SpawnCluster(t).Addrs() }},
	}
	// A2REDIS_RATE_MINUTE=N (N > 1) measures N windows instead of 60.
	windows := 60
	if n, err := strconv.Atoi(os.Getenv(envRateMinute)); err == nil && n > 1 {
		windows = n
	}
	// The processes handle the limited consumer alone, or beside two
	// unlimited consumers with no work (whose claims find the limited
	// consumer's sessions due in the ready index).
	mixes := []struct{ name, handle string }{{"alone", "ev"}, {"beside", "ev,ln,audit"}}
	for _, tg := range targets {
		for _, mix := range mixes {
			t.Run(tg.name+"/"+mix.name, func(t *testing.T) {
				addrs := tg.addrs(t)
				e := newProcessEnv(t, "redis://"+addrs[0])
				nodes := make([]rueidis.Client, len(addrs))
				for i, a := range addrs {
					c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
					require.NoError(t, err)
					t.Cleanup(c.Close)
					nodes[i] = c
				}
				calls := func() map[string]int64 {
					sum := map[string]int64{}
					for _, c := range nodes {
						st, err := redistest.CommandCalls(e.ctx, c)
						require.NoError(t, err)
						for k, v := range st {
							sum[k] += v
						}
					}
					return sum
				}
				const (
					limit    = 40
					per      = time.Second
					sessions = 80
				)
				each := ((windows+2)*limit + sessions - 1) / sessions // 2,480 heads for 60 windows: 62 windows at the limit
				heads := sessions * each
				for s := range sessions {
					batch := make([]a2redis.Event, each)
					for i := range batch {
						batch[i] = a2redis.Event{Type: "t.plain", Targets: []a2redis.Target{{Consumer: "ev"}}}
					}
					e.append(fmt.Sprintf("s%02d", s), batch...)
				}
				for _, c := range nodes {
					require.NoError(t, c.Do(e.ctx, c.B().ConfigResetstat().Build()).Error())
				}

				// commandstats sampled at every window's end (this machine's
				// clock, the server's), 20 ms into the next.
				type sample struct {
					at    time.Time
					calls map[string]int64
				}
				var (
					mu      sync.Mutex
					samples []sample
				)
				sampling, stopSampling := context.WithCancel(e.ctx)
				sampled := make(chan struct{})
				go func() {
					defer close(sampled)
					for {
						now := time.Now()
						next := now.Truncate(per).Add(per + 20*time.Millisecond)
						select {
						case <-sampling.Done():
							return
						case <-time.After(next.Sub(now)):
						}
						st := calls()
						mu.Lock()
						samples = append(samples, sample{next, st})
						mu.Unlock()
					}
				}()

				env := []string{fmt.Sprintf("TW_RATE=%d/%v", limit, per), "TW_RUNLOG=1", "TW_HANDLE=" + mix.handle, "TW_CONCURRENCY=8", "TW_HEARTBEAT=5s"}
				procs := []*proc{
					startProc(t, e.url, e.prefix, "p0", env...),
					startProc(t, e.url, e.prefix, "p1", env...),
					startProc(t, e.url, e.prefix, "p2", env...),
				}
				runs := fxRuns(e.prefix)
				deadline := time.Now().Add(3 * time.Minute)
				for {
					n, err := e.client.Do(e.ctx, e.client.B().Hlen().Key(runs).Build()).AsInt64()
					require.NoError(t, err)
					if n == int64(heads) {
						break
					}
					require.False(t, time.Now().After(deadline), "%d of %d heads ran", n, heads)
					time.Sleep(100 * time.Millisecond)
				}
				doneAt := time.Now()
				// Three idle windows: what the processes call with no work.
				time.Sleep(3*per + per/2)
				stopSampling()
				<-sampled
				for _, p := range procs {
					p.stop(t)
				}

				// Every head ran once, and only completions were counted.
				for head, n := range e.hash(runs) {
					require.Equal(t, 1, n, "%s ran once", head)
				}
				completed, failed := 0, 0
				scriptRuns := map[string]int64{}
				for _, p := range procs {
					for kind, n := range p.outcome {
						if kind == worker.OutcomeCompleted {
							completed += n
						} else {
							failed += n
						}
					}
					for name, n := range p.stats.Scripts {
						scriptRuns[name] += n
					}
				}
				assert.Equal(t, heads, completed, "every head completed")
				assert.Zero(t, failed, "no outcome but completions: %v %v %v", procs[0].outcome, procs[1].outcome, procs[2].outcome)
				failures := int64(0)
				for s := range sessions {
					for _, c := range e.cursors(fmt.Sprintf("s%02d", s)) {
						failures += c.Failures
						assert.Zero(t, c.Head, "nothing left")
					}
				}
				assert.Zero(t, failures, "no failure counted")

				// Starts per window of the server's clock.
				items, err := e.client.Do(e.ctx, e.client.B().Lrange().Key(fxRunLog(e.prefix)).Start(0).Stop(-1).Build()).AsStrSlice()
				require.NoError(t, err)
				require.Len(t, items, heads)
				perWindow := map[int64]int{}
				byProc := map[string]int{}
				first, last := int64(-1), int64(-1)
				for _, it := range items {
					f := strings.Fields(it) // head process attempt ms
					require.Len(t, f, 4, it)
					ms, err := strconv.ParseInt(f[3], 10, 64)
					require.NoError(t, err)
					w := ms / per.Milliseconds()
					perWindow[w]++
					byProc[f[1]]++
					if first < 0 || w < first {
						first = w
					}
					last = max(last, w)
				}
				require.Greater(t, last-first, int64(windows), "the backlog lasted past the measured minute")
				measured, worst, least := 0, 0, limit
				for w := first; w <= last; w++ {
					worst = max(worst, perWindow[w])
					if w >= first && w < first+int64(windows) {
						measured += perWindow[w]
						least = min(least, perWindow[w])
					}
				}
				ratio := float64(measured) / float64(windows*limit)

				// commandstats per window over the measured minute, and idle.
				mu.Lock()
				defer mu.Unlock()
				var takes, scriptCalls []int64
				var idleTakes, idleScripts int64
				idleWindows := 0
				for i := 1; i < len(samples); i++ {
					w := samples[i].at.Add(-per).UnixMilli() / per.Milliseconds() // the window that ended
					dTime := samples[i].calls["time"] - samples[i-1].calls["time"]
					dEval := samples[i].calls["evalsha"] - samples[i-1].calls["evalsha"]
					switch {
					case w >= first && w < first+int64(windows):
						takes = append(takes, dTime)
						scriptCalls = append(scriptCalls, dEval)
					case samples[i-1].at.After(doneAt):
						idleTakes += dTime
						idleScripts += dEval
						idleWindows++
					}
				}
				require.NotEmpty(t, takes)
				mean := func(xs []int64) float64 {
					var s int64
					for _, x := range xs {
						s += x
					}
					return float64(s) / float64(len(xs))
				}
				span := float64(last-first+1) * per.Seconds()
				claims := scriptRuns["claim"] + scriptRuns["claim_fast"]
				t.Logf("limit %d per %v, 3 processes (starts %v), %d heads over windows %d..%d (%d windows)", limit, per, byProc, heads, first, last, last-first+1)
				t.Logf("the minute: %d starts in %d windows = %.3f of the limit; fewest %d, most %d in any window (limit %d)", measured, windows, ratio, least, worst, limit)
				t.Logf("rate_take calls per window (commandstats TIME): mean %.2f, max %d; every script call per window (EVALSHA): mean %.1f, max %d",
					mean(takes), slices.Max(takes), mean(scriptCalls), slices.Max(scriptCalls))
				t.Logf("the processes' claim and index scripts over the run (%.0f s): claims %d (%.2f per window, %.2f heads per claim), ready_sync %d (%.2f per window), %v",
					span, claims, float64(claims)/span, float64(heads)/float64(claims), scriptRuns["ready_sync"], float64(scriptRuns["ready_sync"])/span, scriptRuns)
				t.Logf("idle after the backlog, %d windows: %d rate_take calls, %d script calls", idleWindows, idleTakes, idleScripts)
				assert.InDelta(t, 1, ratio, 0.05, "starts over the minute within 5%% of the limit")
				assert.LessOrEqual(t, worst, limit, "no window over the limit")
				// Idle, a process takes starts only for its MaxWait pass (every
				// 10 s: a take and its give-back), at most once here.
				assert.LessOrEqual(t, idleTakes, int64(2*len(procs)), "no rate_take call with no work but a MaxWait pass's")
				if mix.name == "alone" {
					// The limited consumer's own claims: fewer calls than starts.
					assert.Less(t, claims, int64(heads), "claims per start")
				}
				// Beside unlimited consumers, their claims visit the limited
				// consumer's waiting sessions too (the ready index lists a
				// session, not a consumer): once per session and process per
				// second at most (ClaimNext's skips), each a claim and a
				// ready_sync; reported above, not bounded here.
			})
		}
	}
}

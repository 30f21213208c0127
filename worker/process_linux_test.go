package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// processTargets are the servers the subprocess tests run on, by URL (the
// worker processes dial it; miniredis listens on TCP too).
var processTargets = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"miniredis", func(t *testing.T) string { mr, _ := redistest.Miniredis(t); return "redis://" + mr.Addr() }},
	{"redis", func(t *testing.T) string { return "redis://" + redistest.ServerAddr(t) }},
	{"cluster", func(t *testing.T) string { return "redis://" + redistest.ClusterAddrs(t)[0] }},
}

// proc is a worker process started by a test.
type proc struct {
	id      string
	cmd     *exec.Cmd
	stderr  lockedBuffer
	lines   chan string
	waited  chan error
	outcome map[worker.OutcomeKind]int
	stats   procStats
}

// lockedBuffer collects a process's stderr; the test reads it while the
// process writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startProc starts a worker process (the test binary in worker mode) and
// waits until it runs.
func startProc(t *testing.T, url, prefix, id string, env ...string) *proc {
	t.Helper()
	p := &proc{id: id, lines: make(chan string, 16), waited: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), envTestWorker+"=1", "TW_URL="+url, "TW_PREFIX="+prefix, "TW_ID="+id)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.waited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
	})
	select {
	case line := <-p.lines:
		require.Equal(t, "started", line, "worker %s: %s", id, p.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("worker %s did not start: %s", id, p.stderr.String())
	}
	return p
}

// stop ends a worker process with SIGTERM (a graceful stop) and reads its
// outcome counts.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.collect(t)
}

// collect reads a signalled worker process's outcome counts and waits for
// its clean exit.
func (p *proc) collect(t *testing.T) {
	t.Helper()
	var last string
	for line := range p.lines {
		if raw, ok := strings.CutPrefix(line, "stats "); ok {
			require.NoError(t, json.Unmarshal([]byte(raw), &p.stats), "worker %s printed %q", p.id, line)
			continue
		}
		last = line
	}
	require.NoError(t, <-p.waited, "worker %s: %s", p.id, p.stderr.String())
	require.NoError(t, json.Unmarshal([]byte(last), &p.outcome), "worker %s printed %q", p.id, last)
}

// processEnv is a subprocess test's own store and client.
type processEnv struct {
	*env
	url string
}

func newProcessEnv(t *testing.T, url string) *processEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := redisstore.Dial(ctx, url)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return &processEnv{env: newEnv(t, client, processConsumers, true), url: url}
}

func (e *processEnv) hash(key string) map[string]int {
	e.t.Helper()
	m, err := e.client.Do(e.ctx, e.client.B().Hgetall().Key(key).Build()).AsIntMap()
	require.NoError(e.t, err)
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = int(v)
	}
	return out
}

func (e *processEnv) list(key string) []int64 {
	e.t.Helper()
	items, err := e.client.Do(e.ctx, e.client.B().Lrange().Key(key).Start(0).Stop(-1).Build()).AsIntSlice()
	require.NoError(e.t, err)
	return items
}

// Three worker processes share 200 sessions; one is killed with SIGKILL
// mid-run and the other two finish. Every (consumer, event) is completed
// exactly once and nothing is lost; lanes run in order; a handler ran
// twice only for heads the killed process held when it died.
func TestKilledWorkerProcessLosesNothing(t *testing.T) {
	redistest.Chaos(t)
	for _, tg := range processTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newProcessEnv(t, tg.url(t))
			const sessions, perSession = 200, 6
			want := map[string]bool{}
			appendSessions := func(from, to int) {
				for i := from; i < to; i++ {
					session := fmt.Sprintf("s%03d", i)
					batch := make([]a2redis.Event, perSession)
					for j := range batch {
						typ := "t.plain"
						if j%2 == 0 {
							typ = "t.audit"
						}
						lane := fmt.Sprintf("L%d", j%2)
						batch[j] = a2redis.Event{Type: typ, Targets: []a2redis.Target{{Consumer: "ev"}, {Consumer: "ln", Lane: lane}}}
						idx := int64(j + 1)
						want[fmt.Sprintf("%s/ev//%d", session, idx)] = true
						want[fmt.Sprintf("%s/ln/%s/%d", session, lane, idx)] = true
						if typ == "t.audit" {
							want[fmt.Sprintf("%s/audit/audit/%d", session, idx)] = true
						}
					}
					e.append(session, batch...)
				}
			}
			appendSessions(0, sessions/2)
			env := []string{"TW_TTL=3s", "TW_CONCURRENCY=8", "TW_DELAY_MIN=2ms", "TW_DELAY_MAX=12ms", "TW_HEARTBEAT=1s"}
			procs := []*proc{
				startProc(t, e.url, e.prefix, "p0", env...),
				startProc(t, e.url, e.prefix, "p1", env...),
				startProc(t, e.url, e.prefix, "p2", env...),
			}
			appendSessions(sessions/2, sessions) // while they run: found through wake-ups
			runs := fxRuns(e.prefix)
			hlen := func() int {
				n, err := e.client.Do(e.ctx, e.client.B().Hlen().Key(runs).Build()).AsInt64()
				require.NoError(t, err)
				return int(n)
			}
			e.eventually("a third of the heads run", func() bool { return hlen() >= len(want)/3 })
			e.eventually("the three processes registered", func() bool { return len(e.liveWorkers()) == 3 })
			killed := procs[1]
			require.NoError(t, killed.cmd.Process.Kill())
			<-killed.waited
			atKill := hlen()
			e.eventually("the killed process gone from the registry", func() bool {
				ws := e.liveWorkers()
				_, p0 := ws["p0"]
				_, p2 := ws["p2"]
				return len(ws) == 2 && p0 && p2
			})
			e.eventually("every head run and nothing left", func() bool { return hlen() == len(want) && e.idle() })
			procs[0].stop(t)
			procs[2].stop(t)
			assert.Empty(t, e.liveWorkers(), "the stopped processes deregistered")

			total := e.hash(runs)
			byKilled := e.hash(fxRunsBy(e.prefix, killed.id))
			survivors := map[string]int{}
			for _, p := range []*proc{procs[0], procs[2]} {
				for k, n := range e.hash(fxRunsBy(e.prefix, p.id)) {
					survivors[k] += n
				}
			}
			rerun := 0
			for head := range want {
				n := total[head]
				require.GreaterOrEqual(t, n, 1, "%s ran", head)
				if n > 1 {
					rerun++
					assert.Equal(t, 1, byKilled[head], "%s ran twice: once in the killed process", head)
					assert.Equal(t, 1, survivors[head], "%s ran twice: once more in a survivor", head)
				}
			}
			assert.Len(t, total, len(want), "no head ran that was not appended")
			assert.LessOrEqual(t, rerun, 8*3, "at most the killed process's slots (and the lane heads they freed) ran again")
			t.Logf("%d heads; %d run when p1 was killed (p1 ran %d); %d re-run after the kill; survivors' outcomes %v, %v",
				len(want), atKill, len(byKilled), rerun, procs[0].outcome, procs[2].outcome)
			for _, p := range []*proc{procs[0], procs[2]} {
				for kind := range p.outcome {
					assert.Contains(t, []worker.OutcomeKind{worker.OutcomeCompleted}, kind, "%s: %v", p.id, p.outcome)
				}
			}

			for i := range sessions {
				session := fmt.Sprintf("s%03d", i)
				for _, c := range e.cursors(session) {
					assert.Zero(t, c.Head, "%s %s/%s: nothing left", session, c.Consumer, c.Lane)
					assert.True(t, c.DeadLetteredAt.IsZero())
				}
				for lane := range 2 {
					order := e.list(fxOrder(e.prefix, session, fmt.Sprintf("L%d", lane)))
					assert.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return order[i] < order[j] }), "%s L%d ran in order: %v", session, lane, order)
				}
				events, err := e.store.Read(e.ctx, session, 0, 0)
				require.NoError(t, err)
				returned := map[int64]int{}
				for _, ev := range events {
					if ev.Type == "ev.done" {
						returned[ev.Cause.Index]++
					}
				}
				assert.Equal(t, map[int64]int{1: 1, 3: 1, 5: 1}, returned, "%s: each returned event appended once", session)
			}
		})
	}
}

// A worker process paused (SIGSTOP) while its handler runs loses the head
// to another process once the lease lapses; resumed, its outcome is not
// recorded (its renewal finds the claim gone, or the fence refuses the late
// completion): the takeover's completion is the one that counts.
func TestPausedWorkerProcessLosesToTheTakeover(t *testing.T) {
	redistest.Chaos(t)
	for _, tg := range processTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newProcessEnv(t, tg.url(t))
			env := []string{"TW_TTL=1500ms", "TW_CONCURRENCY=4"}
			paused := startProc(t, e.url, e.prefix, "paused", env...)
			e.append("s", a2redis.Event{Type: "t.slow", Targets: []a2redis.Target{{Consumer: "ev"}}})
			byPaused := fxRunsBy(e.prefix, "paused")
			e.eventually("the handler started", func() bool { return len(e.hash(byPaused)) == 1 })
			require.NoError(t, paused.cmd.Process.Signal(syscall.SIGSTOP))
			taker := startProc(t, e.url, e.prefix, "taker", env...)
			e.eventually("the takeover completed", func() bool { return e.idle() && len(e.hash(fxRunsBy(e.prefix, "taker"))) == 1 })
			require.NoError(t, paused.cmd.Process.Signal(syscall.SIGCONT))
			// The paused handler sleeps 2s in all; give it time to return.
			time.Sleep(3 * time.Second)
			paused.stop(t)
			taker.stop(t)
			t.Logf("paused: %v, taker: %v", paused.outcome, taker.outcome)
			assert.Equal(t, map[worker.OutcomeKind]int{worker.OutcomeCompleted: 1}, taker.outcome)
			assert.Zero(t, paused.outcome[worker.OutcomeCompleted], "the paused worker's completion is not recorded")
			assert.Equal(t, 1, paused.outcome[worker.OutcomeLeaseLost]+paused.outcome[worker.OutcomeSuperseded], "it learns the lease was lost: %v", paused.outcome)
			events, err := e.store.Read(e.ctx, "s", 0, 0)
			require.NoError(t, err)
			var done []a2redis.StoredEvent
			for _, ev := range events {
				if ev.Type == "ev.done" {
					done = append(done, ev)
				}
			}
			require.Len(t, done, 1)
			assert.JSONEq(t, `"taker"`, string(done[0].Payload))
			assert.Equal(t, int64(2), done[0].Cause.Attempt)
		})
	}
}

// One event's handler exits its process (os.Exit) every time it runs;
// three worker processes run in a restart loop over a session with lane,
// event and typed log heads. The crashing head is dead-lettered after
// MaxFailures with the takeovers' reason, and every other head of the
// session completes exactly once: a crash takes down only itself.
func TestCrashingHandlerTakesDownOnlyItself(t *testing.T) {
	redistest.Chaos(t)
	for _, tg := range processTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newProcessEnv(t, tg.url(t))
			const maxFailures = 3
			const session = "s"
			want := map[string]bool{}
			var batch []a2redis.Event
			for j := range 6 {
				typ, payload := "t.plain", json.RawMessage(`"ok"`)
				if j%2 == 0 {
					typ = "t.audit"
				}
				if j == 0 {
					payload = json.RawMessage(`"crash"`) // ev's handler exits on it
				}
				lane := fmt.Sprintf("L%d", j%2)
				batch = append(batch, a2redis.Event{Type: typ, Payload: payload, Targets: []a2redis.Target{{Consumer: "ev"}, {Consumer: "ln", Lane: lane}}})
				idx := int64(j + 1)
				want[fmt.Sprintf("%s/ev//%d", session, idx)] = true
				want[fmt.Sprintf("%s/ln/%s/%d", session, lane, idx)] = true
				if typ == "t.audit" {
					want[fmt.Sprintf("%s/audit/audit/%d", session, idx)] = true
				}
			}
			crasher := session + "/ev//1"
			e.append(session, batch...)

			// A lease of 3s: with 1s, a live process slowed by -race and a
			// loaded machine let leases lapse unrenewed, and those lapses
			// count failures too (CI dead-lettered a plain head that way).
			env := []string{"TW_TTL=3s", "TW_CONCURRENCY=8", "TW_DELAY_MIN=20ms", "TW_DELAY_MAX=60ms", "TW_HEARTBEAT=1s",
				"TW_CRASH=ev", fmt.Sprintf("TW_MAX_FAILURES=%d", maxFailures)}
			gen := 0
			start := func(slot int) *proc {
				gen++
				return startProc(t, e.url, e.prefix, fmt.Sprintf("p%d.%d", slot, gen), env...)
			}
			slots := []*proc{start(0), start(1), start(2)}
			crashes, otherExits := 0, 0
			deadline := time.Now().Add(eventuallyWait)
			settled := func() bool {
				dead, err := e.store.DeadLetters(e.ctx, session)
				require.NoError(t, err)
				return len(dead) > 0 && e.idle()
			}
			for !settled() {
				require.False(t, time.Now().After(deadline), "timed out: %d crashes", crashes)
				for i, p := range slots {
					select {
					case err := <-p.waited:
						var exit *exec.ExitError
						if errors.As(err, &exit) && exit.ExitCode() == exitCrash {
							crashes++
						} else {
							otherExits++
							t.Logf("%s exited: %v: %s", p.id, err, p.stderr.String())
						}
						slots[i] = start(i) // the restart loop
					default:
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, p := range slots {
				if err := p.cmd.Process.Signal(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
					// It crashed after the last look: it ran the crashing
					// head on a claim it held past its lease (slow under
					// -race) while another took it over and dead-lettered it.
					var exit *exec.ExitError
					if err := <-p.waited; errors.As(err, &exit) && exit.ExitCode() == exitCrash {
						crashes++
					} else {
						otherExits++
						t.Logf("%s exited: %v: %s", p.id, err, p.stderr.String())
					}
					continue
				}
				p.collect(t)
			}
			assert.Zero(t, otherExits, "no process ended but by the crash")

			dead, err := e.store.DeadLetters(e.ctx, session)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			d := dead[0]
			assert.Equal(t, a2redis.HeadRef{Consumer: "ev", Index: 1}, d.Ref(), "only the crashing head is dead-lettered")
			assert.Equal(t, int64(maxFailures), d.Failures)
			assert.Regexp(t, `^lease expired: held by p\d\.\d+ until \S+Z, taken over by p\d\.\d+ at \S+Z$`, d.LastError)

			total := e.hash(fxRuns(e.prefix))
			assert.Len(t, total, len(want), "no head ran that was not appended")
			assert.Equal(t, crashes, total[crasher], "every run of the crashing head crashed its process")
			rerun := 0
			for head := range want {
				require.GreaterOrEqual(t, total[head], 1, "%s ran", head)
				if head != crasher && total[head] > 1 {
					rerun++
				}
			}
			for _, c := range e.cursors(session) {
				if c.Head > 0 {
					assert.Equal(t, "ev", c.Consumer, "%s/%s@%d: nothing left but the dead head", c.Consumer, c.Lane, c.Head)
					assert.False(t, c.DeadLetteredAt.IsZero())
				}
			}
			events, err := e.store.Read(e.ctx, session, 0, 0)
			require.NoError(t, err)
			returned := map[int64]int{}
			for _, ev := range events {
				if ev.Type == "ev.done" {
					returned[ev.Cause.Index]++
				}
			}
			assert.Equal(t, map[int64]int{3: 1, 5: 1}, returned, "each returned event appended once")
			for _, lane := range []string{"L0", "L1"} {
				order := e.list(fxOrder(e.prefix, session, lane))
				assert.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return order[i] < order[j] }), "%s ran in order: %v", lane, order)
			}
			t.Logf("%d heads; %d crashes (the crashing head ran %d times, %d failures counted: %q); %d other heads completed, %d of them run more than once (in flight in a crashed process); dead letters: 1",
				len(want), crashes, total[crasher], d.Failures, d.LastError, len(want)-1, rerun)
		})
	}
}

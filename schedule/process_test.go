package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
)

// envRunner makes the test binary a schedule process (see runnerMain).
const envRunner = "A2REDIS_SCHEDULE_RUNNER"

func init() {
	if os.Getenv(envRunner) != "" {
		os.Exit(runnerMain())
	}
}

// procSchedule is the schedule the processes run: a tick every 50ms of the
// system clock. Its CatchUp covers a process that starts late: without
// it, a process that started just after a tick skips it (as documented)
// and, if the others were both late for that tick (seen under -race on a
// loaded machine), appended the next tick before them: the late tick then
// followed the newer one. With it, a starting process first appends the
// ticks of the last second not stored yet, oldest first.
var procSchedule = schedule.Schedule{Name: "fast", Every: 50 * time.Millisecond, Session: "ticks", CatchUp: time.Second,
	Event: a2redis.Event{Type: "tick", Targets: []a2redis.Target{{Consumer: "c"}}}}

// runnerMain runs procSchedule on SR_URL / SR_PREFIX until SIGTERM, then
// prints how many ticks its appends stored and how many replayed.
func runnerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	client, err := redisstore.Dial(ctx, os.Getenv("SR_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: os.Getenv("SR_PREFIX")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var stored, replayed, failed atomic.Int64
	r, err := schedule.NewRunner(store, schedule.Config{ID: "p" + strconv.Itoa(os.Getpid()),
		OnTick: func(_ string, _ time.Time, res redisstore.AppendResult, err error) {
			switch {
			case err != nil:
				failed.Add(1)
			case res.Replayed:
				replayed.Add(1)
			default:
				stored.Add(1)
			}
		}}, procSchedule)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("started")
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	raw, _ := json.Marshal(map[string]int64{"stored": stored.Load(), "replayed": replayed.Load(), "failed": failed.Load()})
	fmt.Println(string(raw))
	return 0
}

// TestThreeProcesses: three OS processes run one schedule on the system
// clock until the session holds 60 ticks (the 20 of the second before the
// first start, caught up, and about 40 more: two seconds on an idle
// machine, as long as it takes on a loaded one): the session holds each
// tick from the first to the last exactly once, with no gap, and the
// processes' stored appends add up to the events (every other append of a
// tick replayed).
func TestThreeProcesses(t *testing.T) {
	for _, target := range []string{"redis", "cluster"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			url := "redis://" + redistest.ServerAddr(t)
			if target == "cluster" {
				url = "redis://" + redistest.ClusterAddrs(t)[0]
			}
			prefix := redistest.Prefix(t)
			type proc struct {
				cmd *exec.Cmd
				out *lineWriter
			}
			var procs []proc
			for i := 0; i < 3; i++ {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), envRunner+"=1", "SR_URL="+url, "SR_PREFIX="+prefix)
				out := &lineWriter{}
				cmd.Stdout, cmd.Stderr = out, os.Stderr
				require.NoError(t, cmd.Start())
				procs = append(procs, proc{cmd, out})
			}
			for _, p := range procs {
				require.Eventually(t, func() bool { return p.out.has("started") }, 30*time.Second, 5*time.Millisecond)
			}
			client, err := redisstore.Dial(context.Background(), url)
			require.NoError(t, err)
			defer client.Close()
			store, err := redisstore.New(context.Background(), client, redisstore.Config{Prefix: prefix})
			require.NoError(t, err)
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				b, err := store.Bounds(context.Background(), "ticks")
				require.NoError(t, err)
				if b.Head >= 60 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the processes stored %d ticks", b.Head)
			}
			var stored, replayed int64
			for _, p := range procs {
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
				require.NoError(t, p.cmd.Wait())
				var counts map[string]int64
				require.NoError(t, json.Unmarshal([]byte(p.out.last()), &counts), p.out.last())
				require.Zero(t, counts["failed"])
				stored += counts["stored"]
				replayed += counts["replayed"]
			}
			events := logOf(t, client, prefix, "ticks")
			require.GreaterOrEqual(t, len(events), 60)
			var first int64
			for i, ev := range events {
				var ms int64
				_, err := fmt.Sscanf(ev.ID, schedule.IDPrefix+"fast:%d", &ms)
				require.NoError(t, err, ev.ID)
				if i == 0 {
					first = ms
				}
				require.Equal(t, first+int64(i)*50, ms, "tick %d: no gap, no repeat, in order", i)
			}
			require.Equal(t, int64(len(events)), stored, "each tick stored by one process")
			t.Logf("%d ticks: %d appends stored, %d replayed", len(events), stored, replayed)
		})
	}
}

// lineWriter collects a process's output lines.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *lineWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Fields(string(w.buf))
}

func (w *lineWriter) has(line string) bool { return slices.Contains(w.lines(), line) }

func (w *lineWriter) last() string {
	l := w.lines()
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// EnvPerf turns TestStreamingMemory on.
const envPerf = "A2REDIS_INSPECT_PERF"

// TestStreamingMemory measures the peak RSS of the built binary listing
// 100 vs 10,000 sessions and logging a 1,000- vs a 100,000-event session,
// on a private redis-server filled through the store (Append in batches of
// 1000). It asserts nothing about the figures (they are logged); it checks
// that every row came out. Run it with
//
//	A2REDIS_INSPECT_PERF=1 go test ./cmd/a2redis-inspect/inspect -run TestStreamingMemory -v
func TestStreamingMemory(t *testing.T) {
	if os.Getenv(envPerf) == "" {
		t.Skipf("set %s=1 to build the data sets and measure peak RSS", envPerf)
	}
	in := redistest.SpawnServer(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	newStore := func(prefix string) *redisstore.Store {
		s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1})
		require.NoError(t, err)
		return s
	}
	payload := json.RawMessage(`{"order":12345,"customer":"c-000042","items":["sku-1","sku-2","sku-3"],"note":"` + strings.Repeat("x", 40) + `"}`)

	fillSessions := func(prefix string, n int) {
		s := newStore(prefix)
		var wg sync.WaitGroup
		next := make(chan int)
		for range 32 {
			wg.Go(func() {
				for i := range next {
					_, err := s.Append(ctx, fmt.Sprintf("session-%05d", i), []a2redis.Event{{Type: "created", Payload: payload,
						Targets: []a2redis.Target{{Consumer: "worker"}}}}, redisstore.AppendOptions{})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	fillLog := func(prefix, session string, n int) {
		s := newStore(prefix)
		batch := make([]a2redis.Event, redisstore.DefaultMaxBatch)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "tick", Payload: payload}
		}
		for done := 0; done < n; done += len(batch) {
			_, err := s.Append(ctx, session, batch[:min(len(batch), n-done)], redisstore.AppendOptions{})
			require.NoError(t, err)
		}
	}
	started := time.Now()
	fillSessions("few", 100)
	fillSessions("many", 10_000)
	fillLog("logs", "small", 1_000)
	fillLog("logs", "big", 100_000)
	t.Logf("filled in %v", time.Since(started).Round(time.Millisecond))

	bin := filepath.Join(t.TempDir(), "a2redis-inspect")
	build := exec.Command("go", "build", "-o", bin, "..")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	url := "redis://" + in.Addr()
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-44s %10s %12s %10s\n", "command", "rows", "max RSS KiB", "wall")
	for _, tc := range []struct {
		args []string
		rows int // lines of output expected (table: rows + header; JSON: rows + 2)
	}{
		{[]string{"--prefix", "few", "sessions"}, 101},
		{[]string{"--prefix", "many", "sessions"}, 10_001},
		{[]string{"--prefix", "many", "sessions", "--json"}, 10_002},
		{[]string{"--prefix", "logs", "log", "small"}, 1_001},
		{[]string{"--prefix", "logs", "log", "big"}, 100_001},
		{[]string{"--prefix", "logs", "log", "big", "--json"}, 100_002},
		{[]string{"--prefix", "logs", "log", "big", "--raw", "--type", "none"}, 1},
		{[]string{"--prefix", "logs", "tail", "big", "-n", "50000"}, 50_001},
	} {
		lines, rss, wall := measure(t, bin, append([]string{"--url", url}, tc.args...))
		require.Equal(t, tc.rows, lines, "%v", tc.args)
		fmt.Fprintf(&report, "%-44s %10d %12d %10v\n", strings.Join(tc.args, " "), lines, rss, wall.Round(time.Millisecond))
	}
	t.Log(report.String())
}

// lineCounter counts the lines written to it.
type lineCounter struct{ lines int }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

var maxRSS = regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)

// measure runs the binary (under /usr/bin/time -v when present) and returns
// its output lines, peak RSS in KiB and wall time.
func measure(t *testing.T, bin string, args []string) (lines int, rssKiB int64, wall time.Duration) {
	t.Helper()
	var cmd *exec.Cmd
	timeV := runtime.GOOS == "linux" && fileExists("/usr/bin/time")
	if timeV {
		cmd = exec.Command("/usr/bin/time", append([]string{"-v", bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	var out lineCounter
	var errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	started := time.Now()
	require.NoError(t, cmd.Run(), "%v: %s", args, errOut.String())
	wall = time.Since(started)
	if m := maxRSS.FindStringSubmatch(errOut.String()); timeV && m != nil {
		_, _ = fmt.Sscan(m[1], &rssKiB)
	} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rssKiB = int64(ru.Maxrss)
	}
	return out.lines, rssKiB, wall
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/cmd/a2redis-inspect/inspect"
	"github.com/a2redis/a2redis/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// wantLines are key lines of a first walk-through, in the order they must
// appear.
var wantLines = []string{
	"== 1. Append",
	`appended #1 order.placed (id "placed")`,
	`appended #3 order.shipped (id "shipped")`,
	"pending work: true",
	"== 2. Read",
	"order-42 log (3 events):",
	`  #2 order.paid    {"amount":42}`,
	"== 3. Event consumer",
	"mailer: claimed #1 order.placed, attempt 1 -> completed",
	"  follow-up #4 email.sent caused by mailer #1",
	`  meanwhile worker-2 asked for mailer's heads too and was told "busy": a claimed head is never`,
	"== 4. Lane consumer",
	"billing: claimed #1 order.placed, attempt 1 -> completed",
	"billing: claimed #2 order.paid, attempt 1 -> completed",
	"billing: claimed #3 order.shipped, attempt 1 -> completed",
	"== 5. Typed log consumer",
	"auditor: claimed #2 order.paid, attempt 1 -> completed",
	"== 6. A failing handler",
	"flaky: claimed #3 order.shipped, attempt 1 -> failed (1/3 failures)",
	"flaky: claimed #3 order.shipped, attempt 2 -> failed (2/3 failures)",
	"flaky: claimed #3 order.shipped, attempt 3 -> dead_lettered (3/3 failures)",
	"== 7. Dead letters, redrive",
	`dead letter: flaky #3 order.shipped, 3 failures, last error "smtp: connection refused"`,
	"retry flaky #3: redriven true, pending work true",
	"== 8. The redriven head runs again",
	"flaky: claimed #3 order.shipped, attempt 4 -> completed",
	"== 9. A finished session: clear, then reclaim",
	"order-41 cleared true: clear marker at #3",
	"reclaimed 2 entries, done true",
	"order-41 log (1 events):",
	"  #3 a2.clear      null",
	"== 10. Work left for a2redis-inspect",
	"appended #5 order.refunded",
	"flaky: claimed #5 order.refunded, attempt 3 -> dead_lettered (3/3 failures)",
	"billing: claimed #5 order.refunded, attempt 1, and worker-1 stops here: the claim lapses at ",
	"auditor: #5 waits for a worker",
	"== 11. Cursors",
	"CONSUMER KIND  LANE      POSITION HEAD ATTEMPTS FAILURES STATE",
	"auditor  log   audit     2        5    0        0        ready",
	"billing  lane  payments  3        5    1        0        claimed by worker-1",
	"flaky    event -         4        5    3        3        dead: smtp: connection refused",
	"POSITION is the last index a cursor moved past, HEAD the index it must",
}

// checkOutput fails t unless out holds every wanted line, in order, and
// nothing the walk-through should not print.
func checkOutput(t *testing.T, out string, want []string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	next := 0
	for _, w := range want {
		for next < len(lines) && !strings.HasPrefix(lines[next], w) {
			next++
		}
		if next == len(lines) {
			t.Fatalf("output lacks %q (in order); got:\n%s", w, out)
		}
		next++
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "auditor: claimed") && !strings.Contains(line, "order.paid") && !strings.Contains(line, "order.refunded") {
			t.Errorf("the typed log consumer took an event of another type: %q", line)
		}
	}
	if n := strings.Count(out, "billing: claimed"); n != 4 {
		t.Errorf("billing claimed %d times, want 4 (one per lane event)", n)
	}
	if n := strings.Count(out, "worker-2"); n != 1 {
		t.Errorf("worker-2 is explained %d times, want once", n)
	}
}

func runOn(t *testing.T, client rueidis.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	dead, err := run(ctx, &out, client, redistest.Prefix(t))
	if err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if dead != 5 {
		t.Errorf("run left its dead letter at #%d, want #5", dead)
	}
	return out.String()
}

func TestRunMiniredis(t *testing.T) {
	_, client := redistest.Miniredis(t)
	checkOutput(t, runOn(t, client), wantLines)
}

func TestRunRedisServer(t *testing.T) {
	checkOutput(t, runOn(t, redistest.Server(t)), wantLines)
}

func TestRunCluster(t *testing.T) {
	checkOutput(t, runOn(t, redistest.Cluster(t)), wantLines)
}

// serverURL is the spawned redis-server's URL (or A2REDIS_TEST_URL's).
func serverURL(t *testing.T) string {
	if url := os.Getenv(redistest.EnvURL); url != "" {
		return url
	}
	return "redis://" + redistest.ServerAddr(t)
}

// TestQuickstartStart runs the program's own setup: embedded miniredis by
// default, the server A2REDIS_URL names otherwise, where a rerun clears the
// last run's session first.
func TestQuickstartStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Run("miniredis", func(t *testing.T) {
		t.Setenv("A2REDIS_URL", "")
		t.Setenv("A2REDIS_PREFIX", "")
		var out bytes.Buffer
		if err := start(ctx, &out); err != nil {
			t.Fatalf("start: %v\n%s", err, out.String())
		}
		checkOutput(t, out.String(), wantLines)
		checkOutput(t, out.String(), []string{
			`Session "order-42" on prefix "a2"`,
			"== Look at it with a2redis-inspect",
			"  go run ./cmd/a2redis-inspect cursors order-42",
			"  go run ./cmd/a2redis-inspect redrive order-42 flaky 5 --retry",
			"(The embedded miniredis ends with this program.",
		})
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Setenv("A2REDIS_URL", serverURL(t))
		t.Setenv("A2REDIS_PREFIX", redistest.Prefix(t))
		var out bytes.Buffer
		if err := start(ctx, &out); err != nil {
			t.Fatalf("start: %v\n%s", err, out.String())
		}
		checkOutput(t, out.String(), wantLines)
		if strings.Contains(out.String(), "previous run") {
			t.Errorf("a first run found a previous one:\n%s", out.String())
		}
		// A rerun on the same prefix clears the last run's session, and
		// its indexes go on from there.
		out.Reset()
		if err := start(ctx, &out); err != nil {
			t.Fatalf("second start: %v\n%s", err, out.String())
		}
		checkOutput(t, out.String(), []string{
			"order-42 holds a previous run (events up to #5): clearing and reclaiming it first",
			`appended #7 order.placed (id "placed")`,
			"flaky: claimed #9 order.shipped, attempt 3 -> dead_lettered (3/3 failures)",
			"order-41 cleared true: clear marker at #6",
			"appended #11 order.refunded",
			"flaky    event -         10       11   3        3        dead: smtp: connection refused",
		})
		if !strings.Contains(out.String(), " redrive order-42 flaky 11 --retry\n") {
			t.Errorf("the rerun does not print the redrive of its dead letter (#11):\n%s", out.String())
		}
	})
	t.Run("bad URL", func(t *testing.T) {
		t.Setenv("A2REDIS_URL", "nope://x")
		if err := start(ctx, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "A2REDIS_URL") {
			t.Fatalf("start with a bad URL: %v, want an error naming A2REDIS_URL", err)
		}
	})
}

// readmeCommand is one a2redis-inspect command of the README's
// walkthrough, with the output the README shows for it.
type readmeCommand struct {
	args   []string // after "go run ./cmd/a2redis-inspect"
	output []string
}

const inspectCommand = "go run ./cmd/a2redis-inspect"

// readmeWalkthrough reads the README's "$ go run ./cmd/a2redis-inspect …"
// lines and the output lines under each (up to a blank line, the next
// command or the end of the block).
func readmeWalkthrough(t *testing.T) (quickstart string, cmds []readmeCommand) {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cur *readmeCommand
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "$ "+inspectCommand+" "):
			cmds = append(cmds, readmeCommand{args: strings.Fields(strings.TrimPrefix(line, "$ "+inspectCommand+" "))})
			cur = &cmds[len(cmds)-1]
		case strings.HasSuffix(line, "go run ./examples/quickstart") && strings.HasPrefix(line, "A2REDIS_URL="):
			quickstart = line
		case line == "" || strings.HasPrefix(line, "```"):
			cur = nil
		case cur != nil:
			cur.output = append(cur.output, line)
		}
	}
	if len(cmds) == 0 {
		t.Fatal("the README shows no a2redis-inspect command")
	}
	return quickstart, cmds
}

// withoutGlobalFlags drops --url and --prefix with their values.
func withoutGlobalFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--url" || args[i] == "--prefix" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`)

// normalized are the lines of out with times blanked out, sorted (sessions
// come in SCAN order).
func normalized(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if l = strings.TrimRight(timestamp.ReplaceAllString(l, "<time>"), " "); l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReadmeWalkthrough runs the quickstart on the spawned redis-server,
// then the a2redis-inspect commands it prints, and checks they are the
// README's walkthrough (but for --url and --prefix, which point at the test's
// server and prefix) and print what the README shows (but for the times).
func TestReadmeWalkthrough(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quickstartLine, readme := readmeWalkthrough(t)
	if want := "A2REDIS_URL=" + defaultURL + " go run ./examples/quickstart"; quickstartLine != want {
		t.Errorf("the README runs the quickstart with %q, want %q", quickstartLine, want)
	}

	t.Setenv("A2REDIS_URL", serverURL(t))
	t.Setenv("A2REDIS_PREFIX", redistest.Prefix(t))
	var out bytes.Buffer
	if err := start(ctx, &out); err != nil {
		t.Fatalf("start: %v\n%s", err, out.String())
	}
	_, printed, ok := strings.Cut(out.String(), "== Look at it with a2redis-inspect\n")
	if !ok {
		t.Fatalf("the quickstart prints no commands:\n%s", out.String())
	}
	var commands [][]string
	for _, line := range strings.Split(printed, "\n") {
		if rest, ok := strings.CutPrefix(line, "  "+inspectCommand+" "); ok {
			commands = append(commands, strings.Fields(rest))
		}
	}
	if len(commands) != len(readme) {
		t.Fatalf("the quickstart prints %d commands, the README shows %d:\n%s", len(commands), len(readme), printed)
	}
	for i, args := range commands {
		if got, want := strings.Join(withoutGlobalFlags(args), " "), strings.Join(readme[i].args, " "); got != want {
			t.Errorf("command %d: the quickstart prints %q, the README shows %q", i+1, got, want)
		}
	}

	for i, args := range commands {
		t.Run(strings.Join(readme[i].args, " "), func(t *testing.T) {
			var stdout, stderr syncBuffer
			env := inspect.Env{Stdin: strings.NewReader("y\n"), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			code := -1
			if follow := strings.Contains(strings.Join(args, " "), "tail -f"); follow {
				// tail -f runs until Ctrl-C: stop it once it showed the
				// README's rows.
				fctx, stop := context.WithCancel(ctx)
				done := make(chan int, 1)
				go func() { done <- inspect.Run(fctx, args, env) }()
				for len(normalized(strings.Split(stdout.String(), "\n"))) < len(readme[i].output) && fctx.Err() == nil {
					select {
					case code = <-done:
						t.Fatalf("tail -f ended by itself with %d; stderr: %s", code, stderr.String())
					case <-time.After(10 * time.Millisecond):
					}
				}
				stop()
				code = <-done
			} else {
				code = inspect.Run(ctx, args, env)
			}
			if code != inspect.ExitOK {
				t.Fatalf("exit code %d; stderr: %s", code, stderr.String())
			}
			got, want := normalized(strings.Split(stdout.String(), "\n")), normalized(readme[i].output)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("output (times blanked, lines sorted):\n%s\nthe README shows:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

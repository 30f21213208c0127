package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// wantLines are key lines of a walk-through, in the order they must appear.
var wantLines = []string{
	"== 1. Append",
	`appended #1 order.placed (id "placed")`,
	`appended #3 order.shipped (id "shipped")`,
	"pending work: true",
	"== 2. Read",
	"log (3 events):",
	`  #2 order.paid    {"amount":42}`,
	"== 3. Event consumer",
	"mailer: claimed #1 order.placed, attempt 1 (worker-2: busy) -> completed",
	"  follow-up #4 email.sent caused by mailer #1",
	"== 4. Lane consumer",
	"billing: claimed #1 order.placed, attempt 1 (worker-2: busy) -> completed",
	"billing: claimed #2 order.paid, attempt 1 (worker-2: busy) -> completed",
	"billing: claimed #3 order.shipped, attempt 1 (worker-2: busy) -> completed",
	"== 5. Typed log consumer",
	"auditor: claimed #2 order.paid, attempt 1 (worker-2: busy) -> completed",
	"== 6. A failing handler",
	"flaky: claimed #3 order.shipped, attempt 1 (worker-2: busy) -> failed (1/3 failures)",
	"flaky: claimed #3 order.shipped, attempt 2 (worker-2: busy) -> failed (2/3 failures)",
	"flaky: claimed #3 order.shipped, attempt 3 (worker-2: busy) -> dead_lettered (3/3 failures)",
	"== 7. Dead letters, redrive",
	`dead letter: flaky #3 order.shipped, 3 failures, last error "smtp: connection refused"`,
	"retry flaky #3: redriven true, pending work true",
	"== 8. Cursors",
	`auditor log   lane "audit"    position 2, head 0`,
	`billing lane  lane "payments" position 3, head 0`,
	`flaky   event lane ""         position 2, head 3 (attempts 3, failures 0)`,
	"== 9. The redriven head runs again",
	"flaky: claimed #3 order.shipped, attempt 4 (worker-2: busy) -> completed",
	"== 10. Clear, then reclaim",
	"cleared true: clear marker at #5",
	"log (1 events):",
	"  #5 a2.clear      null",
	"reclaimed 4 entries, done true",
	"log (1 events):",
	"  #5 a2.clear      null",
}

// checkOutput fails t unless out holds every wanted line, in order, and
// nothing the walk-through should not print.
func checkOutput(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	next := 0
	for _, want := range wantLines {
		for next < len(lines) && !strings.HasPrefix(lines[next], want) {
			next++
		}
		if next == len(lines) {
			t.Fatalf("output lacks %q (in order); got:\n%s", want, out)
		}
		next++
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "auditor:") && !strings.Contains(line, "order.paid") {
			t.Errorf("the typed log consumer took an event of another type: %q", line)
		}
	}
	if n := strings.Count(out, "billing: claimed"); n != 3 {
		t.Errorf("billing claimed %d times, want 3 (one per lane event)", n)
	}
}

func runOn(t *testing.T, client rueidis.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, client, redistest.Prefix(t), "order-1"); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	return out.String()
}

func TestRunMiniredis(t *testing.T) {
	_, client := redistest.Miniredis(t)
	checkOutput(t, runOn(t, client))
}

func TestRunRedisServer(t *testing.T) {
	checkOutput(t, runOn(t, redistest.Server(t)))
}

// TestQuickstartStart runs the program's own setup: embedded miniredis by
// default, the server A2REDIS_URL names otherwise (with a fresh session per
// run, so a rerun on the same prefix starts from scratch).
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
		checkOutput(t, out.String())
		if !strings.Contains(out.String(), `Session "order-1" on prefix "a2"`) {
			t.Errorf("want the default session and prefix; got:\n%s", out.String())
		}
	})
	t.Run("redis-server", func(t *testing.T) {
		url := os.Getenv(redistest.EnvURL)
		if url == "" {
			url = "redis://" + redistest.ServerAddr(t)
		}
		t.Setenv("A2REDIS_URL", url)
		t.Setenv("A2REDIS_PREFIX", redistest.Prefix(t))
		for range 2 { // a rerun on the same prefix must not collide
			var out bytes.Buffer
			if err := start(ctx, &out); err != nil {
				t.Fatalf("start: %v\n%s", err, out.String())
			}
			checkOutput(t, out.String())
		}
	})
	t.Run("bad URL", func(t *testing.T) {
		t.Setenv("A2REDIS_URL", "nope://x")
		if err := start(ctx, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "A2REDIS_URL") {
			t.Fatalf("start with a bad URL: %v, want an error naming A2REDIS_URL", err)
		}
	})
}

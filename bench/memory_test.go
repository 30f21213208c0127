package bench

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestMeasureMemory runs the memory mode over a few sessions: every row is
// there, and the keys each state leaves are exact (an ended a2redis session
// keeps its clear key alone, its marker in it, a dropped one nothing, a processed asynq
// task nothing unless retained, beside its queue's few keys). Bytes are not asserted (used_memory over
// a few sessions is noise).
func TestMeasureMemory(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("redis-server not found on PATH (%v) [CI=true: a missing server is a failure]", err)
		}
		t.Skipf("redis-server not found on PATH (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows, err := MeasureMemory(ctx, MemoryOptions{Sessions: 20, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + MemoryMarkdown(rows))
	if len(rows) != 2*3*4+2*2 {
		t.Fatalf("%d rows", len(rows))
	}
	want := map[string]float64{"a2redis/ended": 1, "a2redis, NoCompaction/ended": 1, "a2redis/dropped": 0, "a2redis, NoCompaction/dropped": 0,
		"asynq/processed": 0, "asynq, Retention 24h0m0s/processed": 1}
	for _, r := range rows {
		k, ok := want[r.System+"/"+r.State]
		if !ok {
			continue
		}
		// asynq keeps a few queue-wide keys (its queue set, the queue's
		// own records) beside its tasks.
		slack := 0.0
		if r.System != "a2redis" && r.System != "a2redis, NoCompaction" {
			slack = 3
		}
		if d := (r.Keys - k) * 20; d < 0 || d > slack {
			t.Errorf("%s, %d events, %s: %.2f keys per session, want %v", r.System, r.Events, r.State, r.Keys, k)
		}
	}
}

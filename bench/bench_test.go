package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestQuick runs the quick mode against a spawned redis-server: a smoke
// test of every scenario (no timing is asserted). Without redis-server on
// PATH it skips, except with CI=true, where that is a failure.
func TestQuick(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("redis-server not found on PATH (%v) [CI=true: a missing server is a failure]", err)
		}
		t.Skipf("redis-server not found on PATH (%v); install Redis to run the quick benchmark", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	report, err := Run(ctx, Options{Quick: true, Command: "go test ./...", Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quick run took %v", time.Since(start).Round(time.Second))
	if want := len((&harness{}).scenarios()); len(report.Scenarios) != want {
		t.Errorf("%d scenarios, want every one of the %d", len(report.Scenarios), want)
	}
	for _, s := range report.Scenarios {
		sm := s.Summary
		if sm == nil {
			t.Errorf("%s: no summary (runs %+v)", s.ID, s.Runs)
			continue
		}
		if sm.Events <= 0 || sm.Throughput <= 0 || sm.E2E.Commands <= 0 || sm.E2E.ServerCPU <= 0 {
			t.Errorf("%s: empty figures: %+v", s.ID, sm)
		}
		if s.Kind == KindLatency && (sm.Latency == nil || sm.Latency.Samples != sm.Events) {
			t.Errorf("%s: latency %+v for %d events", s.ID, sm.Latency, sm.Events)
		}
		if s.Kind == KindProcess && (sm.MemHandled == nil || s.Runs[0].Fill == nil) {
			t.Errorf("%s: a processing scenario without fill or handled memory", s.ID)
		}
		if s.System == SystemA2 && s.Kind != KindLatency && sm.E2E.Scripts <= 0 {
			t.Errorf("%s: no script calls counted", s.ID)
		}
	}
	if len(report.Goals) == 0 {
		t.Error("no goal checked")
	}

	dir := t.TempDir()
	jsonPath, mdPath := filepath.Join(dir, "r", "latest.json"), filepath.Join(dir, "r", "latest.md")
	if err := report.WriteJSON(jsonPath); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteMarkdown(mdPath); err != nil {
		t.Fatal(err)
	}
	var back Report
	raw, _ := os.ReadFile(jsonPath)
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Scenarios) != len(report.Scenarios) {
		t.Fatalf("JSON does not read back: %v", err)
	}
	md, _ := os.ReadFile(mdPath)
	for _, s := range report.Scenarios {
		if !strings.Contains(string(md), "| "+s.ID+" |") {
			t.Errorf("Markdown lacks a row for %s", s.ID)
		}
	}

	doc := filepath.Join(dir, "benchmarks.md")
	if err := os.WriteFile(doc, []byte("# Benchmarks\n\nintro\n\n"+DocBegin+"\nold\n"+DocEnd+"\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := report.UpdateDoc(doc); err != nil {
		t.Fatal(err)
	}
	updated, _ := os.ReadFile(doc)
	if s := string(updated); strings.Contains(s, "\nold\n") || !strings.HasPrefix(s, "# Benchmarks\n\nintro\n\n") || !strings.HasSuffix(s, DocEnd+"\n\nafter\n") || !strings.Contains(s, "### Issue 7's goals") {
		t.Errorf("UpdateDoc wrote:\n%s", s)
	}
}

func TestStats(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median even = %v", got)
	}
	sorted := make([]float64, 100)
	for i := range sorted {
		sorted[i] = float64(i + 1)
	}
	if p50, p99 := percentile(sorted, 50), percentile(sorted, 99); p50 != 50 || p99 != 99 {
		t.Errorf("percentiles = %v, %v", p50, p99)
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("percentile of one = %v", got)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=200,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_xadd:calls=10,usec=30,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n"
	got := parseCommandStats(info)
	if got["evalsha"] != (commandStat{calls: 10, usec: 200}) || got["xadd"].calls != 10 || got["config|resetstat"].calls != 1 {
		t.Errorf("parsed %+v", got)
	}
	if !measurementCommand("config|resetstat") || !measurementCommand("info") || measurementCommand("xadd") {
		t.Error("measurementCommand")
	}
	if !scriptCommand("evalsha") || scriptCommand("xadd") {
		t.Error("scriptCommand")
	}
}

func TestCostPlus(t *testing.T) {
	a := Cost{Commands: 2, Scripts: 1, ServerCPU: 10, Breakdown: []CommandCost{{Command: "evalsha", Calls: 1, Usec: 8}, {Command: "publish", Calls: 1, Usec: 1}}}
	b := Cost{Commands: 3, Scripts: 1, ServerCPU: 5, Breakdown: []CommandCost{{Command: "evalsha", Calls: 1, Usec: 4}, {Command: "xadd", Calls: 1, Usec: 1}}}
	sum := a.plus(b)
	if sum.Commands != 5 || sum.Scripts != 2 || sum.ServerCPU != 15 || len(sum.Breakdown) != 3 || sum.Breakdown[0] != (CommandCost{Command: "evalsha", Calls: 2, Usec: 12}) {
		t.Errorf("plus = %+v", sum)
	}
}

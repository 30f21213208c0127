package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Report is a run's results.
type Report struct {
	// Started is when the run started (UTC); Seconds how long it took.
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	// Command is the command line that ran it.
	Command string `json:"command"`
	// Quick reports a quick (smoke-test) run.
	Quick bool `json:"quick"`
	// Rounds, Scale, Rate and Seed are the run's options.
	Rounds int     `json:"rounds"`
	Scale  float64 `json:"scale"`
	Rate   int     `json:"rate"`
	Seed   uint64  `json:"seed"`
	// Machine describes the machine and server.
	Machine Machine `json:"machine"`
	// Orders are the scenario orders of the rounds.
	Orders [][]string `json:"orders"`
	// Scenarios are the results, in definition order.
	Scenarios []*ScenarioResult `json:"scenarios"`
	// Goals checks the figures against issue 7's goals.
	Goals []GoalCheck `json:"goals"`
}

// GoalCheck is one goal checked against one scenario's median.
type GoalCheck struct {
	// Goal states the goal; Anchors the figures measured for the others on
	// this machine.
	Goal    string `json:"goal"`
	Anchors string `json:"anchors"`
	// Scenario is the scenario checked.
	Scenario string `json:"scenario"`
	// Measured is its median; Target the goal's bound, in Unit.
	Measured float64 `json:"measured"`
	Target   float64 `json:"target"`
	Unit     string  `json:"unit"`
	// AtMost says the goal is an upper bound (else a lower bound).
	AtMost bool `json:"at_most"`
	// Met says the goal is met; Miss is by how much it is missed, as a
	// fraction of Target (0 when met).
	Met  bool    `json:"met"`
	Miss float64 `json:"miss"`
	// Dominant names the commands that dominate the figure (cost goals).
	Dominant string `json:"dominant,omitempty"`
}

// Anchors measured on this kind of machine (Redis 7.0.15), from issue 7.
const (
	anchorThroughputAppend  = "BullMQ 6.7 27.7k/s · asynq 0.26 44.8k/s · raw XADD 135k/s"
	anchorThroughputProcess = "BullMQ 15.7k/s · asynq 8.5k/s · raw group 407k/s"
	anchorCommands          = "BullMQ 33 · asynq 18 per job"
	anchorScripts           = "BullMQ 2 · asynq 3 per job"
	anchorServerCPU         = "BullMQ 74 µs · asynq 82 µs per job"
	anchorMemory            = "BullMQ 1,131 B per retained job · 125 B per stream entry"
	anchorLatency           = "—"
)

type goalDef struct {
	goal, anchors, unit string
	target              float64
	atMost              bool
	scenarios           []string
	value               func(*Summary) (float64, bool)
	dominant            func(*Summary) string
	// vsAsynq makes the measured value the ratio of value to the same
	// figure of the scenario's asynq reference, in the same run.
	vsAsynq bool
}

var (
	e2eScenarios = []string{
		"a2redis/event-cursors/handlers=16/sessions=1", "a2redis/event-cursors/handlers=16/sessions=100",
		"a2redis/ordered/lanes=16/sessions=1", "a2redis/latency/claim",
	}
	throughput = func(s *Summary) (float64, bool) { return s.Throughput, true }
	// workerE2E are the worker runtime's scenarios whose cost is counted
	// end to end.
	workerE2E = []string{
		"a2redis/worker/event-cursors/sessions=1", "a2redis/worker/event-cursors/sessions=1000",
		"a2redis/worker/ordered/lanes=1", "a2redis/worker/ordered/lanes=16",
		"a2redis/worker/typed-log/sessions=100", "a2redis/worker/latency",
	}
)

func goalDefs() []goalDef {
	return []goalDef{
		{
			goal: "append ≥ 60k events/s", anchors: anchorThroughputAppend, unit: "events/s", target: 60_000,
			scenarios: []string{"a2redis/append-1/sessions=1", "a2redis/append-1/sessions=100"}, value: throughput,
		},
		{
			goal: "event-cursor processing ≥ 40k events/s", anchors: anchorThroughputProcess, unit: "events/s", target: 40_000,
			scenarios: []string{
				"a2redis/event-cursors/handlers=16/sessions=1", "a2redis/event-cursors/handlers=16/sessions=100",
				"a2redis/event-cursors/handlers=64/sessions=1", "a2redis/event-cursors/handlers=64/sessions=100",
			},
			value: throughput,
		},
		{
			goal: "ordered over 16 lanes ≥ 20k events/s", anchors: anchorThroughputProcess, unit: "events/s", target: 20_000,
			scenarios: []string{"a2redis/ordered/lanes=16/sessions=1", "a2redis/ordered/lanes=16/sessions=100"}, value: throughput,
		},
		{
			goal: "≤ 15 commands per event, end to end", anchors: anchorCommands, unit: "commands", target: 15, atMost: true,
			scenarios: e2eScenarios,
			value:     func(s *Summary) (float64, bool) { return s.E2E.Commands, true },
			dominant:  func(s *Summary) string { return topCommands(s.E2E, 4, false) },
		},
		{
			goal: "≤ 2 script calls per event, end to end", anchors: anchorScripts, unit: "scripts", target: 2, atMost: true,
			scenarios: e2eScenarios,
			value:     func(s *Summary) (float64, bool) { return s.E2E.Scripts, true },
			dominant:  func(s *Summary) string { return topScripts(s.E2E) },
		},
		{
			goal: "≤ 30 µs server CPU per event, end to end", anchors: anchorServerCPU, unit: "µs", target: 30, atMost: true,
			scenarios: e2eScenarios,
			value:     func(s *Summary) (float64, bool) { return s.E2E.ServerCPU, true },
			dominant:  func(s *Summary) string { return topCommands(s.E2E, 4, true) },
		},
		{
			goal: "≤ 400 B per retained, handled event", anchors: anchorMemory, unit: "B", target: 400, atMost: true,
			scenarios: []string{
				"a2redis/event-cursors/handlers=16/sessions=1", "a2redis/event-cursors/handlers=16/sessions=100",
				"a2redis/ordered/lanes=16/sessions=1",
			},
			value: func(s *Summary) (float64, bool) {
				if s.MemHandled == nil {
					return 0, false
				}
				return *s.MemHandled, true
			},
		},
		{
			goal: "p50 < 1 ms at the fixed rate", anchors: anchorLatency, unit: "ms", target: 1, atMost: true,
			scenarios: []string{"a2redis/latency/feed", "a2redis/latency/claim", "a2redis/worker/latency"},
			value: func(s *Summary) (float64, bool) {
				if s.Latency == nil {
					return 0, false
				}
				return s.Latency.P50, true
			},
		},
		{
			goal: "p99 < 3 ms at the fixed rate", anchors: anchorLatency, unit: "ms", target: 3, atMost: true,
			scenarios: []string{"a2redis/latency/feed", "a2redis/latency/claim", "a2redis/worker/latency"},
			value: func(s *Summary) (float64, bool) {
				if s.Latency == nil {
					return 0, false
				}
				return s.Latency.P99, true
			},
		},
		{
			goal: "worker event-cursor runtime ≥ 3× asynq's Server (same run)", anchors: anchorThroughputProcess, unit: "× asynq", target: 3,
			scenarios: []string{"a2redis/worker/event-cursors/sessions=1", "a2redis/worker/event-cursors/sessions=1000"},
			value:     throughput, vsAsynq: true,
		},
		{
			goal: "worker single ordered lane ≥ 1.5× asynq Concurrency 1 (same run)", anchors: anchorThroughputProcess, unit: "× asynq", target: 1.5,
			scenarios: []string{"a2redis/worker/ordered/lanes=1"},
			value:     throughput, vsAsynq: true,
		},
		{
			goal: "worker: ≤ 12 commands per handled event, end to end", anchors: anchorCommands, unit: "commands", target: 12, atMost: true,
			scenarios: workerE2E,
			value:     func(s *Summary) (float64, bool) { return s.E2E.Commands, true },
			dominant:  func(s *Summary) string { return topCommands(s.E2E, 4, false) },
		},
		{
			goal: "worker: ≤ 2 script calls per handled event, end to end", anchors: anchorScripts, unit: "scripts", target: 2, atMost: true,
			scenarios: workerE2E,
			value:     func(s *Summary) (float64, bool) { return s.E2E.Scripts, true },
			dominant:  func(s *Summary) string { return topScripts(s.E2E) },
		},
	}
}

func checkGoals(r *Report) []GoalCheck {
	byID := r.byID()
	var out []GoalCheck
	for _, g := range goalDefs() {
		for _, id := range g.scenarios {
			res := byID[id]
			if res == nil || res.Summary == nil {
				continue
			}
			v, ok := g.value(res.Summary)
			if !ok {
				continue
			}
			if g.vsAsynq {
				ref := byID[res.Asynq]
				if ref == nil || ref.Summary == nil {
					continue
				}
				rv, ok := g.value(ref.Summary)
				if !ok || rv == 0 {
					continue
				}
				v /= rv
			}
			c := GoalCheck{Goal: g.goal, Anchors: g.anchors, Scenario: id, Measured: v, Target: g.target, Unit: g.unit, AtMost: g.atMost}
			if g.atMost {
				c.Met = v <= g.target
				if !c.Met {
					c.Miss = (v - g.target) / g.target
				}
			} else {
				c.Met = v >= g.target
				if !c.Met {
					c.Miss = (g.target - v) / g.target
				}
			}
			if g.dominant != nil {
				c.Dominant = g.dominant(res.Summary)
			}
			out = append(out, c)
		}
	}
	return out
}

// topCommands lists the n commands with the most calls (byTime: the most
// server time) per event.
func topCommands(c Cost, n int, byTime bool) string {
	list := append([]CommandCost(nil), c.Breakdown...)
	if byTime {
		sortByUsec(list)
	}
	var parts []string
	for _, cc := range list[:min(n, len(list))] {
		parts = append(parts, fmt.Sprintf("%s %.2f× %.1f µs", strings.ToUpper(cc.Command), cc.Calls, cc.Usec))
	}
	return strings.Join(parts, " · ")
}

func topScripts(c Cost) string {
	var parts []string
	for _, cc := range c.Breakdown {
		if scriptCommand(cc.Command) {
			parts = append(parts, fmt.Sprintf("%s %.2f×", strings.ToUpper(cc.Command), cc.Calls))
		}
	}
	return strings.Join(parts, " · ")
}

func sortByUsec(list []CommandCost) {
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && list[j].Usec > list[j-1].Usec; j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

func (r *Report) byID() map[string]*ScenarioResult {
	m := make(map[string]*ScenarioResult, len(r.Scenarios))
	for _, s := range r.Scenarios {
		m[s.ID] = s
	}
	return m
}

// ReadReport reads a report WriteJSON wrote, recomputing its summaries and
// goal checks from the runs (so a report can be rendered again with newer
// rendering code).
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("a2bench: %s: %w", path, err)
	}
	for _, sc := range r.Scenarios {
		sc.summarize()
	}
	r.Goals = checkGoals(&r)
	return &r, nil
}

// WriteJSON writes the report as indented JSON, creating the directory.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// WriteMarkdown writes Markdown() to path, creating the directory.
func (r *Report) WriteMarkdown(path string) error {
	return writeFile(path, []byte(r.Markdown()))
}

func writeFile(path string, b []byte) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b, 0o644)
}

// Doc markers: UpdateDoc replaces what lies between them.
const (
	// DocBegin opens the generated section.
	DocBegin = "<!-- a2bench:begin -->"
	// DocEnd closes it.
	DocEnd = "<!-- a2bench:end -->"
)

// UpdateDoc replaces the text between DocBegin and DocEnd in the Markdown
// file at path with the report.
func (r *Report) UpdateDoc(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, DocBegin), strings.Index(doc, DocEnd)
	if i < 0 || j < i {
		return errors.New("a2bench: " + path + " lacks the " + DocBegin + " … " + DocEnd + " markers")
	}
	doc = doc[:i+len(DocBegin)] + "\n" + r.Markdown() + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}

// Markdown renders the report: run and machine, results, ratios, goals and
// where a2redis's commands go.
func (r *Report) Markdown() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := r.Machine
	kind := "full run"
	if r.Quick {
		kind = "**quick run (smoke test: small counts, one round — not a measurement)**"
	}
	w("Run of %s UTC, %s: %d round(s), scale %g, latency rate %d events/s, order seed %d, %.0f s in all.\n\n",
		r.Started.Format("2006-01-02 15:04"), kind, r.Rounds, r.Scale, r.Rate, r.Seed, r.Seconds)
	w("- Command: `%s`\n", r.Command)
	w("- Machine: %d CPUs (nproc), %s, %s/%s; %s; Redis %s (%s)\n", m.NProc, m.CPUModel, m.OS, m.Arch, m.GoVersion, m.RedisVersion, m.Server)
	w("- Libraries: rueidis %s, asynq %s (go-redis %s)\n", m.Modules["github.com/redis/rueidis"], m.Modules["github.com/hibiken/asynq"], m.Modules["github.com/redis/go-redis/v9"])
	w("- Load average (1/5/15 min): %s at the start, %s at the end; client and server share the CPUs\n\n", m.LoadAvgStart, m.LoadAvgEnd)

	w("### Results\n\n")
	w("Medians over the rounds. Processing rows give *process / end to end* costs (end to end adds the fill: appending or enqueueing the backlog, 1 event per call, 64 in flight). ")
	w("Latency: per event for the latency rows; per call under full load (†) for append rows. Memory: used_memory growth per event after appending, and after one consumer handled everything.\n\n")
	w("| scenario | events/s | min–max (spread) | p50 ms | p99 ms | commands/ev | scripts/ev | server µs/ev | client µs/ev | B/ev appended | B/ev handled |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range r.Scenarios {
		sm := s.Summary
		if sm == nil {
			w("| %s | failed: %s | | | | | | | | | |\n", s.ID, firstError(s))
			continue
		}
		p50, p99 := "—", "—"
		if sm.Latency != nil {
			mark := ""
			if s.Kind != KindLatency {
				mark = " †"
			}
			p50, p99 = fmt.Sprintf("%.2f%s", sm.Latency.P50, mark), fmt.Sprintf("%.2f%s", sm.Latency.P99, mark)
		}
		pair := func(f func(Cost) float64, format string) string {
			if s.Kind == KindProcess {
				return fmt.Sprintf(format+" / "+format, f(sm.Cost), f(sm.E2E))
			}
			return fmt.Sprintf(format, f(sm.Cost))
		}
		handled := "—"
		if sm.MemHandled != nil {
			handled = fmt.Sprintf("%.0f", *sm.MemHandled)
		}
		appended := fmt.Sprintf("%.0f", sm.MemRetained)
		if s.Kind == KindLatency {
			appended = "—"
		}
		w("| %s | %s | %s–%s (%.0f%%) | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.ID, rate(sm.Throughput), rate(sm.ThroughputMin), rate(sm.ThroughputMax), sm.Spread*100, p50, p99,
			pair(func(c Cost) float64 { return c.Commands }, "%.1f"),
			pair(func(c Cost) float64 { return c.Scripts }, "%.2f"),
			pair(func(c Cost) float64 { return c.ServerCPU }, "%.1f"),
			pair(func(c Cost) float64 { return c.ClientCPU }, "%.1f"),
			appended, handled)
	}
	w("\n")
	r.writeScenarioTitles(&b)
	r.writeRatios(&b)
	r.writeSmallSessions(&b)
	r.writeGoals(&b)
	r.writeDominant(&b)
	return b.String()
}

func (r *Report) writeScenarioTitles(b *strings.Builder) {
	fmt.Fprintf(b, "<details><summary>What each scenario does</summary>\n\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(b, "- `%s`: %s", s.ID, s.Title)
		if sm := s.Summary; sm != nil {
			fmt.Fprintf(b, " (%d events", sm.Events)
			if sm.Latency != nil && s.Kind == KindLatency {
				fmt.Fprintf(b, "; latency: %s", sm.Latency.What)
			}
			fmt.Fprintf(b, ")")
		}
		fmt.Fprintf(b, "\n")
	}
	fmt.Fprintf(b, "\n</details>\n\n")
}

func (r *Report) writeRatios(b *strings.Builder) {
	byID := r.byID()
	fmt.Fprintf(b, "### a2redis against the raw-Streams ceiling and asynq\n\n")
	fmt.Fprintf(b, "Each a2redis median divided by the reference's median (events/s: higher is better; everything else: lower is better). Costs are end to end for processing rows. ")
	fmt.Fprintf(b, "References: appends → `streams/xadd`, `asynq/enqueue`; processing → `streams/group`, `asynq/process` (same concurrency, else 16); latency → `streams/latency`, `asynq/latency`. ")
	fmt.Fprintf(b, "Memory: B/ev after handling against the stream (which keeps its entries too); B/ev appended (pending work) against asynq, which deletes a task once done.\n\n")
	for _, ref := range []struct {
		title string
		pick  func(*ScenarioResult) string
		asynq bool
	}{
		{"÷ raw Streams", func(s *ScenarioResult) string { return s.Ceiling }, false},
		{"÷ asynq", func(s *ScenarioResult) string { return s.Asynq }, true},
	} {
		fmt.Fprintf(b, "| a2redis scenario %s | events/s | p50 | p99 | commands | scripts | server µs | client µs | B/ev |\n", ref.title)
		fmt.Fprintf(b, "|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range r.Scenarios {
			if s.System != SystemA2 || s.Summary == nil {
				continue
			}
			sm, rs := s.Summary, summaryOf(byID[ref.pick(s)])
			if rs == nil {
				fmt.Fprintf(b, "| %s | — | — | — | — | — | — | — | — |\n", s.ID)
				continue
			}
			thr := "—"
			if s.Kind != KindLatency {
				thr = ratio(sm.Throughput, rs.Throughput)
			}
			p50, p99 := "—", "—"
			if s.Kind == KindLatency && sm.Latency != nil && rs.Latency != nil {
				p50, p99 = ratio(sm.Latency.P50, rs.Latency.P50), ratio(sm.Latency.P99, rs.Latency.P99)
			}
			scripts := "—"
			if ref.asynq {
				scripts = ratio(sm.E2E.Scripts, rs.E2E.Scripts)
			}
			mem := "—"
			switch {
			case s.Kind == KindLatency:
			case ref.asynq:
				mem = ratio(sm.MemRetained, rs.MemRetained)
			case sm.MemHandled != nil && rs.MemHandled != nil:
				mem = ratio(*sm.MemHandled, *rs.MemHandled)
			default:
				mem = ratio(sm.MemRetained, rs.MemRetained)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.ID, thr, p50, p99,
				ratio(sm.E2E.Commands, rs.E2E.Commands), scripts,
				ratio(sm.E2E.ServerCPU, rs.E2E.ServerCPU), ratio(sm.E2E.ClientCPU, rs.E2E.ClientCPU), mem)
		}
		fmt.Fprintf(b, "\n")
	}
}

// writeSmallSessions renders the small-session rows (issue 33) beside
// their asynq references: the session shapes, then the churn.
func (r *Report) writeSmallSessions(b *strings.Builder) {
	byID := r.byID()
	var shapes, churn []*ScenarioResult
	for _, s := range r.Scenarios {
		switch {
		case strings.HasPrefix(s.ID, "a2redis/worker/small-sessions/"):
			shapes = append(shapes, s)
		case strings.HasPrefix(s.ID, "a2redis/worker/churn/"):
			churn = append(churn, s)
		}
	}
	if len(shapes) == 0 && len(churn) == 0 {
		return
	}
	fmt.Fprintf(b, "### Small sessions and churn (issue 33)\n\n")
	if len(shapes) > 0 {
		fmt.Fprintf(b, "The worker runtime with its default settings over many sessions of a few events each (a backlog appended 1 event per call, then drained), ")
		fmt.Fprintf(b, "beside asynq's Server draining as many tasks (÷ asynq: the a2redis figure divided by its reference's, same run). Costs per event, end to end; ")
		fmt.Fprintf(b, "per session they are k times these.\n\n")
		fmt.Fprintf(b, "| scenario | sessions × events | events/s | sessions/s | ÷ asynq (events/s) | commands/ev | scripts/ev | server µs/ev | ÷ asynq (server µs) | B/ev handled | asynq reference |\n")
		fmt.Fprintf(b, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, s := range shapes {
			sm := s.Summary
			if sm == nil {
				fmt.Fprintf(b, "| %s | failed: %s | | | | | | | | | |\n", s.ID, firstError(s))
				continue
			}
			sessions, k := sm.Notes["sessions"], sm.Notes["events_per_session"]
			perSession := "—"
			if k > 0 {
				perSession = rate(sm.Throughput / k)
			}
			handled := "—"
			if sm.MemHandled != nil {
				handled = fmt.Sprintf("%.0f", *sm.MemHandled)
			}
			thr, cpu := "—", "—"
			if rs := summaryOf(byID[s.Asynq]); rs != nil {
				thr, cpu = ratio(sm.Throughput, rs.Throughput), ratio(sm.E2E.ServerCPU, rs.E2E.ServerCPU)
			}
			fmt.Fprintf(b, "| %s | %s × %.0f | %s | %s | %s | %.1f | %.2f | %.1f | %s | %s | `%s` |\n",
				s.ID, thousands(int(sessions)), k, rate(sm.Throughput), perSession, thr,
				sm.E2E.Commands, sm.E2E.Scripts, sm.E2E.ServerCPU, cpu, handled, s.Asynq)
		}
		fmt.Fprintf(b, "\n")
	}
	if len(churn) > 0 {
		fmt.Fprintf(b, "Churn: sessions of 1 event created at a fixed rate, handled by a worker with default settings and dropped by its retention; ")
		fmt.Fprintf(b, "measured from the first append until every session was dropped, so the per-session costs are whole lives (asynq's reference deletes each task once done). ")
		fmt.Fprintf(b, "Memory: INFO used_memory (in parentheses: less client buffers and script caches) and the key count, at the start, ")
		fmt.Fprintf(b, "when the last session was handled, and once every session was dropped.\n\n")
		fmt.Fprintf(b, "| scenario | sessions | sessions/s | p50 ms | p99 ms | commands/session | scripts/session | server µs/session | client µs/session | used_memory start | when the last was handled | after the drops |\n")
		fmt.Fprintf(b, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range churn {
			sm := s.Summary
			if sm == nil {
				fmt.Fprintf(b, "| %s | failed: %s | | | | | | | | | | |\n", s.ID, firstError(s))
				continue
			}
			p50, p99 := "—", "—"
			if sm.Latency != nil {
				p50, p99 = fmt.Sprintf("%.2f", sm.Latency.P50), fmt.Sprintf("%.2f", sm.Latency.P99)
			}
			start, steady, end := "—", "—", "—"
			if t := sm.Memory; t != nil {
				start, steady, end = memPoint(t.Start), memPoint(t.Steady), memPoint(t.End)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.1f | %.2f | %.1f | %.1f | %s | %s | %s |\n",
				s.ID, thousands(sm.Events), rate(sm.Throughput), p50, p99,
				sm.E2E.Commands, sm.E2E.Scripts, sm.E2E.ServerCPU, sm.E2E.ClientCPU, start, steady, end)
			if rs := summaryOf(byID[s.Asynq]); rs != nil {
				lp50, lp99 := "—", "—"
				if sm.Latency != nil && rs.Latency != nil {
					lp50, lp99 = ratio(sm.Latency.P50, rs.Latency.P50), ratio(sm.Latency.P99, rs.Latency.P99)
				}
				fmt.Fprintf(b, "| ÷ `%s` (per task) | | | %s | %s | %s | %s | %s | %s | | | |\n", s.Asynq, lp50, lp99,
					ratio(sm.E2E.Commands, rs.E2E.Commands), ratio(sm.E2E.Scripts, rs.E2E.Scripts),
					ratio(sm.E2E.ServerCPU, rs.E2E.ServerCPU), ratio(sm.E2E.ClientCPU, rs.E2E.ClientCPU))
			}
		}
		fmt.Fprintf(b, "\n")
	}
}

// memPoint formats a memory reading: used_memory (the dataset's share)
// and the key count.
func memPoint(p MemoryPoint) string {
	return fmt.Sprintf("%s (%s), %s keys", megabytes(p.UsedMemory), megabytes(p.Dataset), thousands(int(p.Keys)))
}

func megabytes(v float64) string {
	return fmt.Sprintf("%.2f MB", v/1e6)
}

func (r *Report) writeGoals(b *strings.Builder) {
	fmt.Fprintf(b, "### Issue 7's goals\n\n")
	fmt.Fprintf(b, "| goal | anchors (this machine) | scenario | measured | verdict | dominated by (per event) |\n")
	fmt.Fprintf(b, "|---|---|---|--:|---|---|\n")
	for _, g := range r.Goals {
		verdict := "meets"
		if !g.Met {
			word := "short by"
			if g.AtMost {
				word = "over by"
			}
			verdict = fmt.Sprintf("**misses: %s %.0f%%**", word, g.Miss*100)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", g.Goal, g.Anchors, g.Scenario, goalValue(g), verdict, g.Dominant)
	}
	fmt.Fprintf(b, "\n")
}

func (r *Report) writeDominant(b *strings.Builder) {
	fmt.Fprintf(b, "### Where the server time and commands go (end to end, per event)\n\n")
	fmt.Fprintf(b, "From the run with the median throughput. Server CPU from INFO cpu; the rest from commandstats usec, which is wall time inside a command (on a loaded machine it can exceed CPU time). *Scripts* is the time inside EVALSHA/EVAL, *≈ commands in them* the time of the commands a script can run (every command but those sent directly: PUBLISH, XRANGE…; approximate), so scripts − commands ≈ the scripts' own Lua work. Calls: × per event, with their server µs.\n\n")
	fmt.Fprintf(b, "| scenario | server CPU µs | scripts µs | ≈ commands in them µs | calls (× per event, server µs) |\n|---|--:|--:|--:|---|\n")
	for _, s := range r.Scenarios {
		if s.Summary == nil || strings.Contains(s.ID, "append-100") {
			continue
		}
		e := s.Summary.E2E
		for _, m := range s.Runs {
			if m.Round == s.Summary.BreakdownRound && m.Error == "" {
				e = m.E2E()
			}
		}
		script, inner := scriptTime(e)
		st, in := "—", "—"
		if script > 0 {
			st, in = fmt.Sprintf("%.1f", script), fmt.Sprintf("%.1f", inner)
		}
		fmt.Fprintf(b, "| %s | %.1f | %s | %s | %s |\n", s.ID, e.ServerCPU, st, in, topCommands(e, 8, false))
	}
	fmt.Fprintf(b, "\n")
	fmt.Fprintf(b, "### a2redis memory per event by key kind\n\n")
	fmt.Fprintf(b, "MEMORY USAGE of the scenario's keys at its end (after handling, for processing rows), per event, by key kind (the name after the session's hash tag). It leaves out the keyspace's per-key overhead that used_memory counts.\n\n")
	fmt.Fprintf(b, "| scenario | used_memory B/ev | by key kind (B/ev) |\n|---|--:|---|\n")
	for _, s := range r.Scenarios {
		sm := s.Summary
		if sm == nil || len(sm.MemByKind) == 0 {
			continue
		}
		total := sm.MemRetained
		if sm.MemHandled != nil {
			total = *sm.MemHandled
		}
		fmt.Fprintf(b, "| %s | %.0f | %s |\n", s.ID, total, byKind(sm.MemByKind))
	}
	fmt.Fprintf(b, "\nCounters (medians; claims and wake-ups per event):\n\n")
	for _, s := range r.Scenarios {
		if s.Summary != nil && len(s.Summary.Notes) > 0 {
			fmt.Fprintf(b, "- `%s`: %s\n", s.ID, notes(s.Summary.Notes))
		}
	}
	fmt.Fprintf(b, "\n")
}

// directCommand reports a command a2redis sends itself rather than from a
// script.
func directCommand(name string) bool {
	switch name {
	case "publish", "spublish", "xrange", "xrevrange", "subscribe", "ssubscribe", "unsubscribe", "ping", "hello":
		return true
	}
	return strings.HasPrefix(name, "client")
}

// scriptTime returns the server time in scripts and, approximately, in the
// commands they ran, per event.
func scriptTime(c Cost) (script, inner float64) {
	for _, cc := range c.Breakdown {
		switch {
		case scriptCommand(cc.Command):
			script += cc.Usec
		case !directCommand(cc.Command):
			inner += cc.Usec
		}
	}
	return script, inner
}

func byKind(m map[string]float64) string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	for i := 1; i < len(kinds); i++ {
		for j := i; j > 0 && (m[kinds[j]] > m[kinds[j-1]] || m[kinds[j]] == m[kinds[j-1]] && kinds[j] < kinds[j-1]); j-- {
			kinds[j], kinds[j-1] = kinds[j-1], kinds[j]
		}
	}
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if m[k] >= 0.5 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
		}
	}
	return strings.Join(parts, " · ")
}

func notes(n map[string]float64) string {
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.4g", k, n[k])
	}
	return strings.Join(parts, ", ")
}

func goalValue(g GoalCheck) string {
	switch g.Unit {
	case "events/s":
		return rate(g.Measured) + "/s"
	case "ms":
		return fmt.Sprintf("%.2f ms", g.Measured)
	case "scripts":
		return fmt.Sprintf("%.2f", g.Measured)
	case "B":
		return fmt.Sprintf("%.0f B", g.Measured)
	case "µs":
		return fmt.Sprintf("%.1f µs", g.Measured)
	case "× asynq":
		return fmt.Sprintf("%.2f× asynq", g.Measured)
	}
	return fmt.Sprintf("%.1f", g.Measured)
}

func summaryOf(s *ScenarioResult) *Summary {
	if s == nil {
		return nil
	}
	return s.Summary
}

func firstError(s *ScenarioResult) string {
	for _, m := range s.Runs {
		if m.Error != "" {
			return strings.ReplaceAll(m.Error, "|", "/")
		}
	}
	return "no run"
}

// rate formats events per second: 45.2k, 812.
func rate(v float64) string {
	switch {
	case v >= 100_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func ratio(a, b float64) string {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.Abs(b) < 1e-9 {
		return "—"
	}
	switch r := a / b; {
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	default:
		return strconv.FormatFloat(r, 'g', 2, 64) + "×"
	}
}

package bench

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Cost is what a phase cost, per event of its scenario.
type Cost struct {
	// Commands is Redis commands per event: every INFO commandstats call,
	// commands run inside scripts included, the harness's own INFO and
	// CONFIG excluded.
	Commands float64 `json:"commands"`
	// Scripts is script calls (EVAL, EVALSHA, FCALL and their _RO forms)
	// per event.
	Scripts float64 `json:"scripts"`
	// ServerCPU is the server's CPU (used_cpu_user + used_cpu_sys) per
	// event, in microseconds.
	ServerCPU float64 `json:"server_cpu_us"`
	// ClientCPU is this process's CPU (rusage user + system) per event, in
	// microseconds: client, workers and, for asynq, its server.
	ClientCPU float64 `json:"client_cpu_us"`
	// Breakdown is the commands per event, most frequent first.
	Breakdown []CommandCost `json:"breakdown,omitempty"`
}

// CommandCost is one command's share of a phase, per event.
type CommandCost struct {
	// Command is the command's commandstats name (evalsha, xadd,
	// config|resetstat…).
	Command string `json:"command"`
	// Calls is its calls per event.
	Calls float64 `json:"calls"`
	// Usec is the server time spent in it per event, in microseconds (a
	// script's includes the commands it ran).
	Usec float64 `json:"usec"`
}

// plus adds two phases' costs (both per event of the same scenario).
func (c Cost) plus(o Cost) Cost {
	out := Cost{
		Commands:  c.Commands + o.Commands,
		Scripts:   c.Scripts + o.Scripts,
		ServerCPU: c.ServerCPU + o.ServerCPU,
		ClientCPU: c.ClientCPU + o.ClientCPU,
	}
	byName := map[string]int{}
	for _, list := range [][]CommandCost{c.Breakdown, o.Breakdown} {
		for _, cc := range list {
			if i, ok := byName[cc.Command]; ok {
				out.Breakdown[i].Calls += cc.Calls
				out.Breakdown[i].Usec += cc.Usec
				continue
			}
			byName[cc.Command] = len(out.Breakdown)
			out.Breakdown = append(out.Breakdown, cc)
		}
	}
	sortBreakdown(out.Breakdown)
	return out
}

// Latency summarizes delays, in milliseconds.
type Latency struct {
	// What says what was timed.
	What string `json:"what"`
	// Samples is how many delays were recorded.
	Samples int `json:"samples"`
	// P50, P99 and Max are the median, 99th percentile and largest delay.
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Measurement is one run of a scenario.
type Measurement struct {
	// Round is the round it ran in.
	Round int `json:"round"`
	// Events is the number of events measured (handled, for processing).
	Events int `json:"events"`
	// Seconds is the measured phase's duration.
	Seconds float64 `json:"seconds"`
	// Throughput is Events / Seconds.
	Throughput float64 `json:"events_per_sec"`
	// Latency is set where a delay per event or per call was timed.
	Latency *Latency `json:"latency,omitempty"`
	// Cost is the measured phase's cost (the processing phase of a
	// processing scenario).
	Cost Cost `json:"cost"`
	// Fill is a processing scenario's fill phase (appending its backlog),
	// per handled event.
	Fill *Cost `json:"fill,omitempty"`
	// MemRetained is used_memory growth per event after appending.
	MemRetained float64 `json:"mem_bytes_per_event_appended"`
	// MemHandled is used_memory growth per event after a consumer handled
	// them (processing scenarios).
	MemHandled *float64 `json:"mem_bytes_per_event_handled,omitempty"`
	// MemByKind is MEMORY USAGE per event by key kind, at the end (a2redis
	// scenarios).
	MemByKind map[string]float64 `json:"mem_bytes_per_event_by_key_kind,omitempty"`
	// Notes holds scenario-specific counts (fallback wake-ups, catch-ups…).
	Notes map[string]float64 `json:"notes,omitempty"`
	// Memory is the server's memory read at points of the run, for a
	// scenario that follows it through time (the churn row).
	Memory *MemoryTrace `json:"memory_trace,omitempty"`
	// Error is why the run failed.
	Error string `json:"error,omitempty"`
}

// E2E returns the end-to-end cost: fill + processing for a processing
// scenario, else the cost itself.
func (m Measurement) E2E() Cost {
	if m.Fill == nil {
		return m.Cost
	}
	return m.Fill.plus(m.Cost)
}

func (m Measurement) brief() string {
	if m.Error != "" {
		return "ERROR " + m.Error
	}
	s := fmt.Sprintf("%9.0f ev/s  %6.1f cmd/ev  %5.2f scr/ev  %6.1f srv-µs/ev", m.Throughput, m.E2E().Commands, m.E2E().Scripts, m.E2E().ServerCPU)
	if m.Latency != nil {
		s += fmt.Sprintf("  p50 %.2fms p99 %.2fms", m.Latency.P50, m.Latency.P99)
	}
	return s
}

// ScenarioResult is a scenario's runs and their summary.
type ScenarioResult struct {
	// ID names the scenario: system/workload/parameters.
	ID string `json:"id"`
	// System is a2redis, streams or asynq.
	System string `json:"system"`
	// Kind is append, process or latency.
	Kind string `json:"kind"`
	// Title describes the workload.
	Title string `json:"title"`
	// Ceiling and Asynq name the reference scenarios of an a2redis one.
	Ceiling string `json:"ceiling,omitempty"`
	Asynq   string `json:"asynq,omitempty"`
	// Runs are the rounds' measurements.
	Runs []Measurement `json:"runs"`
	// Summary is the medians over the successful runs.
	Summary *Summary `json:"summary,omitempty"`
}

// Summary is a scenario's medians over its successful runs.
type Summary struct {
	// Runs is how many runs succeeded.
	Runs int `json:"runs"`
	// Events is the median event count.
	Events int `json:"events"`
	// Throughput is the median; Min and Max its range; Spread is
	// (Max-Min)/Throughput.
	Throughput    float64 `json:"events_per_sec"`
	ThroughputMin float64 `json:"events_per_sec_min"`
	ThroughputMax float64 `json:"events_per_sec_max"`
	Spread        float64 `json:"spread"`
	// Latency holds the medians of the runs' percentiles.
	Latency *Latency `json:"latency,omitempty"`
	// Cost and E2E are the medians of the runs' costs (E2E: fill +
	// process); their breakdowns are the median-throughput run's.
	Cost Cost `json:"cost"`
	E2E  Cost `json:"e2e"`
	// BreakdownRound is the round whose run the breakdowns come from.
	BreakdownRound int `json:"breakdown_round"`
	// MemRetained and MemHandled are medians, bytes per event.
	MemRetained float64  `json:"mem_bytes_per_event_appended"`
	MemHandled  *float64 `json:"mem_bytes_per_event_handled,omitempty"`
	// MemByKind holds the medians of the runs' MemByKind.
	MemByKind map[string]float64 `json:"mem_bytes_per_event_by_key_kind,omitempty"`
	// Notes are the medians of the runs' notes.
	Notes map[string]float64 `json:"notes,omitempty"`
	// Memory holds the medians of the runs' memory traces.
	Memory *MemoryTrace `json:"memory_trace,omitempty"`
}

// MemoryTrace is the server's memory at points of a run: at its start,
// at its steady state and at its end (what each point is, the scenario's
// title says). The readings are INFO's, which the harness does not count
// as the scenario's commands.
type MemoryTrace struct {
	Start  MemoryPoint `json:"start"`
	Steady MemoryPoint `json:"steady"`
	End    MemoryPoint `json:"end"`
}

// MemoryPoint is one reading of a MemoryTrace.
type MemoryPoint struct {
	// UsedMemory is INFO memory's used_memory, in bytes.
	UsedMemory float64 `json:"used_memory"`
	// Dataset is used_memory less client buffers, replication and AOF
	// buffers and script caches (INFO memory's mem_clients_normal,
	// mem_clients_slaves, mem_replication_backlog, mem_aof_buffer and
	// used_memory_scripts), the same figure as the report's other memory
	// figures read from MEMORY STATS.
	Dataset float64 `json:"dataset_bytes"`
	// Keys is the database's key count (INFO keyspace).
	Keys float64 `json:"keys"`
}

func (r *ScenarioResult) summarize() {
	var ok []Measurement
	for _, m := range r.Runs {
		if m.Error == "" {
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 {
		return
	}
	pick := func(f func(Measurement) float64) float64 {
		v := make([]float64, len(ok))
		for i, m := range ok {
			v[i] = f(m)
		}
		return median(v)
	}
	s := &Summary{Runs: len(ok)}
	s.Events = int(pick(func(m Measurement) float64 { return float64(m.Events) }))
	s.Throughput = pick(func(m Measurement) float64 { return m.Throughput })
	s.ThroughputMin, s.ThroughputMax = math.Inf(1), math.Inf(-1)
	for _, m := range ok {
		s.ThroughputMin = min(s.ThroughputMin, m.Throughput)
		s.ThroughputMax = max(s.ThroughputMax, m.Throughput)
	}
	if s.Throughput > 0 {
		s.Spread = (s.ThroughputMax - s.ThroughputMin) / s.Throughput
	}
	if ok[0].Latency != nil {
		s.Latency = &Latency{
			What:    ok[0].Latency.What,
			Samples: int(pick(func(m Measurement) float64 { return float64(latencyOf(m).Samples) })),
			P50:     pick(func(m Measurement) float64 { return latencyOf(m).P50 }),
			P99:     pick(func(m Measurement) float64 { return latencyOf(m).P99 }),
			Max:     pick(func(m Measurement) float64 { return latencyOf(m).Max }),
		}
	}
	// The breakdown comes from the run closest to the median throughput.
	mid := ok[0]
	for _, m := range ok {
		if math.Abs(m.Throughput-s.Throughput) < math.Abs(mid.Throughput-s.Throughput) {
			mid = m
		}
	}
	s.BreakdownRound = mid.Round
	costOf := func(get func(Measurement) Cost) Cost {
		return Cost{
			Commands:  pick(func(m Measurement) float64 { return get(m).Commands }),
			Scripts:   pick(func(m Measurement) float64 { return get(m).Scripts }),
			ServerCPU: pick(func(m Measurement) float64 { return get(m).ServerCPU }),
			ClientCPU: pick(func(m Measurement) float64 { return get(m).ClientCPU }),
			Breakdown: get(mid).Breakdown,
		}
	}
	s.Cost = costOf(func(m Measurement) Cost { return m.Cost })
	s.E2E = costOf(Measurement.E2E)
	s.MemRetained = pick(func(m Measurement) float64 { return m.MemRetained })
	if ok[0].MemHandled != nil {
		v := pick(func(m Measurement) float64 {
			if m.MemHandled == nil {
				return 0
			}
			return *m.MemHandled
		})
		s.MemHandled = &v
	}
	s.Notes = medians(ok, func(m Measurement) map[string]float64 { return m.Notes })
	s.MemByKind = medians(ok, func(m Measurement) map[string]float64 { return m.MemByKind })
	if ok[0].Memory != nil {
		point := func(get func(MemoryTrace) MemoryPoint) MemoryPoint {
			of := func(m Measurement) MemoryPoint {
				if m.Memory == nil {
					return MemoryPoint{}
				}
				return get(*m.Memory)
			}
			return MemoryPoint{
				UsedMemory: pick(func(m Measurement) float64 { return of(m).UsedMemory }),
				Dataset:    pick(func(m Measurement) float64 { return of(m).Dataset }),
				Keys:       pick(func(m Measurement) float64 { return of(m).Keys }),
			}
		}
		s.Memory = &MemoryTrace{
			Start:  point(func(t MemoryTrace) MemoryPoint { return t.Start }),
			Steady: point(func(t MemoryTrace) MemoryPoint { return t.Steady }),
			End:    point(func(t MemoryTrace) MemoryPoint { return t.End }),
		}
	}
	r.Summary = s
}

// medians returns, per key, the median over the runs of a map-valued
// figure (a run without the key counts as 0); nil when no run has any.
func medians(runs []Measurement, get func(Measurement) map[string]float64) map[string]float64 {
	var out map[string]float64
	for _, m := range runs {
		for k := range get(m) {
			if _, done := out[k]; done {
				continue
			}
			if out == nil {
				out = map[string]float64{}
			}
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = get(r)[k]
			}
			out[k] = median(v)
		}
	}
	return out
}

func latencyOf(m Measurement) Latency {
	if m.Latency == nil {
		return Latency{}
	}
	return *m.Latency
}

// median returns the median of v (the mean of the middle two for an even
// count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted values,
// nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// recorder collects delays from many goroutines.
type recorder struct {
	mu      sync.Mutex
	samples []float64 // milliseconds
}

func newRecorder(n int) *recorder { return &recorder{samples: make([]float64, 0, n)} }

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, float64(d)/float64(time.Millisecond))
	r.mu.Unlock()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples)
}

// latency summarizes the recorded delays.
func (r *recorder) latency(what string) *Latency {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	r.mu.Unlock()
	if len(s) == 0 {
		return nil
	}
	sort.Float64s(s)
	return &Latency{What: what, Samples: len(s), P50: percentile(s, 50), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// Package bench measures a2redis side by side with raw Redis Streams (the
// ceiling a one-script operation can approach) and asynq, on one Redis
// server, in interleaved rounds: round r runs every scenario once, in a
// shuffled order, so drift on a shared machine hits every system alike.
//
// For every scenario it records throughput (median and spread over the
// rounds), latency where it applies, Redis commands and script calls per
// event (CONFIG RESETSTAT + INFO commandstats, commands run inside scripts
// included), server CPU per event (INFO cpu), client CPU per event (the
// process's rusage) and Redis memory per retained event (INFO memory), and
// the ratio of every a2redis figure to the raw-Streams ceiling and to asynq.
//
// It is a module of its own (github.com/a2redis/a2redis/bench), so asynq and
// go-redis never become dependencies of the library. The command is
// cmd/a2bench; Run is the same thing as a function (bench_test.go runs the
// quick mode through it).
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/rueidis"
)

// Defaults of Options.
const (
	// DefaultRounds is the number of interleaved rounds of a full run.
	DefaultRounds = 3
	// DefaultRate is the fixed rate of the latency scenarios, events/s.
	DefaultRate = 500
	// DefaultLatencyDuration is how long a full run's latency scenario
	// sends at DefaultRate.
	DefaultLatencyDuration = 5 * time.Second
	// QuickScale is the scale of event counts in quick mode.
	QuickScale = 0.08
	// QuickLatencyDuration is a quick run's latency duration.
	QuickLatencyDuration = time.Second
)

// Options configure a Run. The zero value is a full run against a spawned
// redis-server.
type Options struct {
	// URL, when set, is the Redis to use (redis:// or rediss://) instead of
	// spawning one. The run then deletes only its own keys (SCAN + UNLINK);
	// with a spawned server it flushes the database between scenarios.
	URL string
	// RedisServer is the redis-server binary to spawn. Default: found on
	// PATH.
	RedisServer string
	// Quick runs one round with small event counts (QuickScale) and short
	// latency scenarios: a smoke test, not a measurement.
	Quick bool
	// Rounds is the number of interleaved rounds. Default DefaultRounds
	// (1 when Quick).
	Rounds int
	// Scale multiplies every scenario's event count. Default 1 (QuickScale
	// when Quick).
	Scale float64
	// Rate is the latency scenarios' fixed rate, events/s. Default
	// DefaultRate.
	Rate int
	// LatencyDuration is how long a latency scenario sends. Default
	// DefaultLatencyDuration (QuickLatencyDuration when Quick).
	LatencyDuration time.Duration
	// Seed seeds the round orders. Default: random (the report records it).
	Seed uint64
	// Only, when non-empty, runs only the scenarios whose id contains one
	// of these substrings.
	Only []string
	// NoWarmup skips the unrecorded warm-up pass that loads scripts and
	// opens connections before round 1.
	NoWarmup bool
	// Command is the command line recorded in the report.
	Command string
	// Log receives progress lines. Default: discarded.
	Log io.Writer
}

func (o Options) withDefaults() Options {
	if o.Rounds <= 0 {
		o.Rounds = DefaultRounds
		if o.Quick {
			o.Rounds = 1
		}
	}
	if o.Scale <= 0 {
		o.Scale = 1
		if o.Quick {
			o.Scale = QuickScale
		}
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.LatencyDuration <= 0 {
		o.LatencyDuration = DefaultLatencyDuration
		if o.Quick {
			o.LatencyDuration = QuickLatencyDuration
		}
	}
	if o.Seed == 0 {
		o.Seed = mrand.Uint64() | 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// The systems compared.
const (
	// SystemA2 is a2redis.
	SystemA2 = "a2redis"
	// SystemStream is raw Redis Streams through rueidis: the ceiling.
	SystemStream = "streams"
	// SystemAsynq is asynq with default options.
	SystemAsynq = "asynq"
)

// The kinds of scenario.
const (
	// KindAppend measures writes only (append, XADD, Enqueue).
	KindAppend = "append"
	// KindProcess fills a backlog (measured as the fill phase), then
	// measures handling it; its end-to-end cost is fill + process.
	KindProcess = "process"
	// KindLatency sends at a fixed rate and measures each event's delay
	// from the send to its delivery; its cost is end to end.
	KindLatency = "latency"
)

// scenario is one measured workload.
type scenario struct {
	id, system, kind, title string
	// events is the event count at scale 1 (latency scenarios: computed
	// from the rate and duration).
	events int
	// ceiling and asynq name the reference scenarios of an a2redis one.
	ceiling, asynq string
	// count, when set, is the event count of a run, in place of events
	// (scaled for a throughput scenario): for a scenario whose count must
	// follow a shape that scales, such as sessions × events per session.
	count func(h *harness) int
	run   func(ctx context.Context, h *harness, n int) (Measurement, error)
}

// harness is what scenarios share: the Redis clients and the run's options.
type harness struct {
	opts      Options
	client    rueidis.Client // the load: a2redis and raw Streams
	admin     rueidis.Client // measurement and cleanup
	clientOpt rueidis.ClientOption
	asynqOpt  asynq.RedisConnOpt
	own       bool // the server is ours: FLUSHALL between scenarios
	runID     string
	seq       int
}

// name returns a fresh key prefix of this run.
func (h *harness) name(kind string) string {
	h.seq++
	return fmt.Sprintf("a2bench-%s-%s%d", h.runID, kind, h.seq)
}

func (h *harness) logf(format string, a ...any) {
	fmt.Fprintf(h.opts.Log, format+"\n", a...)
}

// scaled returns n scaled, at least min.
func (h *harness) scaled(n, min int) int {
	return max(int(math.Round(float64(n)*h.opts.Scale)), min)
}

// Run runs the benchmarks and returns the report. Without Options.URL it
// starts a redis-server of its own on a free loopback port (no persistence)
// and stops it by pid before returning, also when ctx is cancelled (the
// command cancels it on Ctrl-C).
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	started := time.Now()
	var idb [4]byte
	_, _ = rand.Read(idb[:])
	h := &harness{opts: opts, runID: hex.EncodeToString(idb[:])}

	var server *Server
	if opts.URL == "" {
		var err error
		if server, err = StartServer(opts.RedisServer); err != nil {
			return nil, err
		}
		defer server.Stop()
		h.own = true
		h.clientOpt = rueidis.ClientOption{InitAddress: []string{server.Addr}}
		h.asynqOpt = asynq.RedisClientOpt{Addr: server.Addr}
		h.logf("a2bench: redis-server pid %d on %s", server.Pid(), server.Addr)
	} else {
		var err error
		if h.clientOpt, err = rueidis.ParseURL(opts.URL); err != nil {
			return nil, fmt.Errorf("a2bench: --url: %w", err)
		}
		if h.asynqOpt, err = asynq.ParseRedisURI(opts.URL); err != nil {
			return nil, fmt.Errorf("a2bench: --url for asynq: %w", err)
		}
	}
	var err error
	if h.client, err = rueidis.NewClient(h.clientOpt); err != nil {
		return nil, fmt.Errorf("a2bench: connecting: %w", err)
	}
	defer h.client.Close()
	if h.admin, err = rueidis.NewClient(h.clientOpt); err != nil {
		return nil, fmt.Errorf("a2bench: connecting: %w", err)
	}
	defer h.admin.Close()
	if !h.own {
		// Leave nothing of ours on a shared server, even when interrupted.
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := h.cleanup(cctx); err != nil {
				h.logf("a2bench: final cleanup: %v", err)
			}
		}()
	}

	report := &Report{
		Started: started.UTC(),
		Command: opts.Command,
		Quick:   opts.Quick,
		Rounds:  opts.Rounds,
		Scale:   opts.Scale,
		Rate:    opts.Rate,
		Seed:    opts.Seed,
		Machine: describeMachine(ctx, h),
	}
	report.Machine.Server = "spawned redis-server, no persistence (--save '' --appendonly no), 127.0.0.1"
	if !h.own {
		report.Machine.Server = "--url " + redactURL(opts.URL)
	}

	scenarios := h.selected()
	if len(scenarios) == 0 {
		return nil, errors.New("a2bench: no scenario matches --only")
	}
	results := make(map[string]*ScenarioResult, len(scenarios))
	for _, s := range scenarios {
		r := &ScenarioResult{ID: s.id, System: s.system, Kind: s.kind, Title: s.title, Ceiling: s.ceiling, Asynq: s.asynq}
		results[s.id] = r
		report.Scenarios = append(report.Scenarios, r)
	}

	if !opts.NoWarmup {
		h.logf("a2bench: warm-up (not recorded)")
		saved := h.opts.Scale
		h.opts.Scale = 0.01
		for _, s := range scenarios {
			if s.kind == KindLatency {
				continue
			}
			if _, err := h.runOne(ctx, s); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				h.logf("a2bench: warm-up %s: %v", s.id, err)
			}
		}
		h.opts.Scale = saved
	}

	rng := mrand.New(mrand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	failed := 0
	for round := 1; round <= opts.Rounds; round++ {
		order := make([]*scenario, len(scenarios))
		copy(order, scenarios)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		ids := make([]string, len(order))
		for i, s := range order {
			ids[i] = s.id
		}
		report.Orders = append(report.Orders, ids)
		for i, s := range order {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			m, err := h.runOne(ctx, s)
			m.Round = round
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				m.Error = err.Error()
				failed++
			}
			results[s.id].Runs = append(results[s.id].Runs, m)
			h.logf("round %d/%d [%2d/%d] %-40s %s", round, opts.Rounds, i+1, len(order), s.id, m.brief())
		}
	}
	for _, r := range report.Scenarios {
		r.summarize()
	}
	report.Goals = checkGoals(report)
	report.Machine.LoadAvgEnd = loadAvg()
	report.Seconds = time.Since(started).Seconds()
	if failed > 0 {
		return report, fmt.Errorf("a2bench: %d scenario runs failed (see the report's errors)", failed)
	}
	return report, nil
}

// runOne runs a scenario on a clean database, with a deadline.
func (h *harness) runOne(ctx context.Context, s *scenario) (Measurement, error) {
	if err := h.cleanup(ctx); err != nil {
		return Measurement{}, err
	}
	runtime.GC()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	n := s.events
	switch {
	case s.count != nil:
		n = s.count(h)
	case s.kind != KindLatency:
		n = h.scaled(s.events, 200)
	}
	m, err := s.run(ctx, h, n)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return m, err
}

// selected returns the scenarios Options.Only selects, in definition order.
func (h *harness) selected() []*scenario {
	var out []*scenario
	for _, s := range h.scenarios() {
		if len(h.opts.Only) == 0 {
			out = append(out, s)
			continue
		}
		for _, o := range h.opts.Only {
			if o != "" && strings.Contains(s.id, o) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// scenarios lists every scenario.
func (h *harness) scenarios() []*scenario {
	latencyEvents := int(h.opts.LatencyDuration.Seconds() * float64(h.opts.Rate))
	var list []*scenario
	list = append(list, a2Scenarios(latencyEvents)...)
	list = append(list, workerScenarios(latencyEvents)...)
	list = append(list, smallScenarios()...)
	list = append(list, streamScenarios(latencyEvents)...)
	list = append(list, asynqScenarios(latencyEvents)...)
	return list
}

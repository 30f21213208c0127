// Command a2bench benchmarks a2redis side by side with raw Redis Streams and
// asynq on one Redis server, in interleaved rounds, and writes a Markdown
// table and a JSON file. Run it from the bench module:
//
//	cd bench && go run ./cmd/a2bench                 # full run (< 10 min on 2 cores)
//	cd bench && go run ./cmd/a2bench --quick         # smoke test (< 1 min)
//	cd bench && go run ./cmd/a2bench --doc ../docs/benchmarks.md
//	cd bench && go run ./cmd/a2bench --memory        # memory per session (and per asynq task) through a life
//
// Without --url it starts a redis-server of its own (found on PATH) on a
// free loopback port, without persistence, and stops it by pid at exit,
// also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/a2redis/a2redis/bench"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		opts    bench.Options
		only    string
		jsonOut string
		mdOut   string
		doc     string
		render  string
		memory  bool
		perRow  int
	)
	flag.StringVar(&opts.URL, "url", "", "use this Redis (redis://host:port) instead of spawning redis-server; only this run's keys are deleted")
	flag.StringVar(&opts.RedisServer, "redis-server", "", "redis-server binary to spawn (default: found on PATH)")
	flag.BoolVar(&opts.Quick, "quick", false, "smoke test: one round, small counts, short latency runs (< 1 min)")
	flag.IntVar(&opts.Rounds, "rounds", 0, fmt.Sprintf("interleaved rounds (default %d, quick 1)", bench.DefaultRounds))
	flag.Float64Var(&opts.Scale, "scale", 0, fmt.Sprintf("multiply every event count (default 1, quick %g)", bench.QuickScale))
	flag.IntVar(&opts.Rate, "rate", 0, fmt.Sprintf("latency scenarios' fixed rate, events/s (default %d)", bench.DefaultRate))
	flag.DurationVar(&opts.LatencyDuration, "latency-duration", 0, fmt.Sprintf("how long each latency scenario sends (default %v, quick %v)", bench.DefaultLatencyDuration, bench.QuickLatencyDuration))
	flag.Uint64Var(&opts.Seed, "seed", 0, "seed of the round orders (default random; recorded in the report)")
	flag.StringVar(&only, "only", "", "comma-separated substrings: run only scenarios whose id contains one")
	flag.BoolVar(&opts.NoWarmup, "no-warmup", false, "skip the unrecorded warm-up pass")
	flag.StringVar(&jsonOut, "json", "results/latest.json", "JSON output path (empty: none)")
	flag.StringVar(&mdOut, "md", "results/latest.md", "Markdown output path (empty: none)")
	flag.StringVar(&doc, "doc", "", "also replace the results section of this Markdown file (e.g. ../docs/benchmarks.md)")
	flag.StringVar(&render, "render", "", "run nothing: render this JSON report again (to --md and --doc)")
	flag.BoolVar(&memory, "memory", false, "run nothing else: measure memory per session through its life (a2redis) and per task (asynq) on a spawned server, print a Markdown table")
	flag.IntVar(&perRow, "memory-sessions", 500, "with --memory: sessions (and asynq tasks) per row")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the clients, the worker runtime, asynq's server) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if memory {
		rows, err := bench.MeasureMemory(context.Background(), bench.MemoryOptions{RedisServer: opts.RedisServer, Sessions: perRow,
			Log: func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }})
		fmt.Print(bench.MemoryMarkdown(rows))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "a2bench: unexpected arguments %q\n", flag.Args())
		return 2
	}
	if only != "" {
		opts.Only = strings.Split(only, ",")
	}
	opts.Command = commandLine()
	opts.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// A second Ctrl-C kills the process at once; the server's
		// Pdeathsig (Linux) still takes it down.
		stop()
	}()
	start := time.Now()
	var report *bench.Report
	var err error
	if render != "" {
		report, err = bench.ReadReport(render)
		jsonOut = ""
	} else {
		report, err = bench.Run(ctx, opts)
	}
	if report == nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "a2bench: interrupted; the server was stopped")
			return 130
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 0
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if jsonOut != "" {
		if werr := report.WriteJSON(jsonOut); werr != nil {
			fmt.Fprintln(os.Stderr, "a2bench:", werr)
			code = 1
		}
	}
	if mdOut != "" {
		if werr := report.WriteMarkdown(mdOut); werr != nil {
			fmt.Fprintln(os.Stderr, "a2bench:", werr)
			code = 1
		}
	}
	if doc != "" {
		if werr := report.UpdateDoc(doc); werr != nil {
			fmt.Fprintln(os.Stderr, "a2bench:", werr)
			code = 1
		}
	}
	fmt.Print(report.Markdown())
	fmt.Fprintf(os.Stderr, "a2bench: done in %.0f s; wrote %s %s %s\n", time.Since(start).Seconds(), jsonOut, mdOut, doc)
	return code
}

// commandLine is how this run was started, for the report.
func commandLine() string {
	args := []string{"go run ./cmd/a2bench"}
	for _, a := range os.Args[1:] {
		if i := strings.Index(a, "://"); i >= 0 {
			if u, err := url.Parse(a[strings.LastIndex(a[:i], "=")+1:]); err == nil {
				a = a[:strings.LastIndex(a[:i], "=")+1] + u.Redacted()
			}
		}
		if strings.ContainsAny(a, " '\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args = append(args, a)
	}
	return "cd bench && " + strings.Join(args, " ")
}

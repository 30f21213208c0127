package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// The test binary doubles as a worker process for the subprocess tests:
// with envTestWorker set, TestMain runs testWorkerMain instead of the
// tests. The process runs a worker on TW_URL / TW_PREFIX until SIGTERM,
// records every handler run in Redis (fxRuns), prints "started" once
// running and, at exit, its outcome counts as JSON. With TW_CRASH naming a
// consumer, that consumer's handler exits the process (exitCrash) on an
// event whose payload is "crash". With TW_RATE ("starts/per", e.g.
// "40/1s") the "ev" consumer is rate-limited (worker.RateLimit) and its
// handler returns no event; with TW_RUNLOG every run is listed in
// fxRunLog even when the records go to the target itself.
const envTestWorker = "A2REDIS_TESTWORKER"

// exitCrash is the exit status of a test worker whose handler crashed it.
const exitCrash = 3

// The consumers of the subprocess tests: an event consumer (which returns
// an event for odd indexes), a lane consumer, and a typed log consumer.
var processConsumers = []a2redis.Consumer{
	{Name: "ev"}, {Name: "ln"},
	{Name: "audit", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"t.audit"}}},
}

// fxRuns is the hash counting handler runs per head, fxRunsBy the same per
// process, fxOrder the list of a lane's runs in start order. They share one
// hash tag, so a run's records are written by one script (fxRecord): a
// process killed while it records leaves all of them or none, on a cluster
// too.
func fxRuns(prefix string) string       { return "{" + prefix + "-fx}:runs" }
func fxRunsBy(prefix, id string) string { return "{" + prefix + "-fx}:runs:" + id }
func fxOrder(prefix, session, lane string) string {
	return "{" + prefix + "-fx}:order:" + session + "/" + lane
}

// fxRunLog lists every run, with TW_FX_URL: "head process attempt ms"
// (head as headName, ms the Unix time the handler started).
func fxRunLog(prefix string) string { return "{" + prefix + "-fx}:runlog" }

// fxRecord writes a run's records at once: KEYS runs, runs-by, then the
// lane's order list and the run log when given (ARGV[2] and ARGV[3] say
// which); ARGV[1] the head, ARGV[4] the index, ARGV[5] the log line.
var fxRecord = rueidis.NewLuaScript(`
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
local k = 3
if ARGV[2] == '1' then redis.call('RPUSH', KEYS[k], ARGV[4]); k = k + 1 end
if ARGV[3] == '1' then redis.call('RPUSH', KEYS[k], ARGV[5]) end
return 1`)

func testWorkerMain() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	client, err := redisstore.Dial(ctx, os.Getenv("TW_URL"))
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	prefix, id := os.Getenv("TW_PREFIX"), os.Getenv("TW_ID")
	// The run records (fxRuns...) go to TW_FX_URL when set: a server the
	// chaos test does not kill, so no record is lost with a master.
	fx := client
	if u := os.Getenv("TW_FX_URL"); u != "" {
		if fx, err = redisstore.Dial(ctx, u); err != nil {
			return fail(err)
		}
		defer fx.Close()
	}
	cfg := redisstore.Config{Prefix: prefix, Consumers: processConsumers}
	if os.Getenv("TW_DURABLE") != "" {
		cfg.Durability = redisstore.Durability{Replicas: 1}
	}
	store, err := redisstore.New(ctx, client, cfg)
	if err != nil {
		return fail(err)
	}
	ttl, _ := time.ParseDuration(os.Getenv("TW_TTL"))
	minDelay, _ := time.ParseDuration(os.Getenv("TW_DELAY_MIN"))
	maxDelay, _ := time.ParseDuration(os.Getenv("TW_DELAY_MAX"))
	concurrency, _ := strconv.Atoi(os.Getenv("TW_CONCURRENCY"))
	heartbeat, _ := time.ParseDuration(os.Getenv("TW_HEARTBEAT"))
	maxFailures, _ := strconv.Atoi(os.Getenv("TW_MAX_FAILURES"))
	// TW_SLOW: how long a t.slow handler sleeps (default 2s).
	slow, err := time.ParseDuration(cmp.Or(os.Getenv("TW_SLOW"), "2s"))
	if err != nil {
		return fail(fmt.Errorf("TW_SLOW: %v", err))
	}
	var evOpts []worker.HandlerOption
	rated := os.Getenv("TW_RATE") != ""
	if rated {
		n, per, _ := strings.Cut(os.Getenv("TW_RATE"), "/")
		starts, err := strconv.Atoi(n)
		if err != nil {
			return fail(fmt.Errorf("TW_RATE: %v", err))
		}
		window, err := time.ParseDuration(per)
		if err != nil {
			return fail(fmt.Errorf("TW_RATE: %v", err))
		}
		evOpts = append(evOpts, worker.RateLimit(starts, window))
	}
	runLog := fx != client || os.Getenv("TW_RUNLOG") != ""

	var mu sync.Mutex
	counts := map[worker.OutcomeKind]int{}
	handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
		field := headName(h)
		keys := []string{fxRuns(prefix), fxRunsBy(prefix, id)}
		lane, logged := "0", "0"
		if h.Kind == a2redis.LaneCursor {
			keys, lane = append(keys, fxOrder(prefix, h.Session, h.Lane)), "1"
		}
		if runLog {
			keys, logged = append(keys, fxRunLog(prefix)), "1"
		}
		line := fmt.Sprintf("%s %s %d %d", field, id, h.Attempts, time.Now().UnixMilli())
		if err := fxRecord.Exec(context.WithoutCancel(ctx), fx, keys, []string{field, lane, logged, strconv.FormatInt(h.Index, 10), line}).Error(); err != nil {
			return nil, err
		}
		if crash := os.Getenv("TW_CRASH"); crash != "" && h.Consumer == crash && string(h.Payload) == `"crash"` {
			os.Exit(exitCrash) // a handler that takes its process down
		}
		if h.Type == "t.slow" {
			time.Sleep(slow) // deaf to its context, like a stuck call
		} else {
			d := minDelay
			if maxDelay > minDelay {
				d += time.Duration(rand.Int64N(int64(maxDelay - minDelay)))
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if h.Consumer == "ev" && h.Index%2 == 1 && !rated {
			return []a2redis.Event{{Type: "ev.done", Payload: json.RawMessage(strconv.Quote(id))}}, nil
		}
		return nil, nil
	}
	// TW_HANDLE names the consumers handled (default all three).
	var handles []worker.HandlerSpec
	for _, name := range strings.Split(cmp.Or(os.Getenv("TW_HANDLE"), "ev,ln,audit"), ",") {
		if name == "ev" {
			handles = append(handles, worker.Handle(name, handler, evOpts...))
		} else {
			handles = append(handles, worker.Handle(name, handler))
		}
	}
	w, err := worker.New(store, worker.Config{
		ID: id, TTL: ttl, Concurrency: concurrency, HeartbeatTTL: heartbeat, MaxFailures: maxFailures,
		Hooks: worker.Hooks{
			OnStart: func(context.Context) { fmt.Println("started") },
			OnOutcome: func(_ context.Context, o worker.Outcome) {
				mu.Lock()
				counts[o.Kind]++
				mu.Unlock()
			},
		},
	}, handles...)
	if err != nil {
		return fail(err)
	}
	// Run until SIGTERM, then Shutdown within shutdownDeadline, timed.
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.WithoutCancel(ctx)) }()
	var st procStats
	select {
	case err := <-ran:
		return fail(fmt.Errorf("Run returned before SIGTERM: %v", err))
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownDeadline)
	start := time.Now()
	if err := w.Shutdown(sctx); err != nil {
		st.ShutdownErr = err.Error()
	}
	st.ShutdownTook = time.Since(start)
	cancel()
	if err := <-ran; err != nil {
		return fail(err)
	}
	client.Close()
	st.Leaked = libraryGoroutines()
	st.Scripts = map[string]int64{}
	for name, sc := range scripts.All() {
		if n := sc.Runs(); n > 0 {
			st.Scripts[name] = n
		}
	}
	raw, _ := json.Marshal(st)
	fmt.Println("stats " + string(raw))
	mu.Lock()
	defer mu.Unlock()
	raw, _ = json.Marshal(counts)
	fmt.Println(string(raw))
	return 0
}

// shutdownDeadline bounds a worker process's Shutdown after SIGTERM.
const shutdownDeadline = 20 * time.Second

// procStats is what a worker process reports of its stop (the line
// "stats {json}" before its outcome counts): Shutdown's error ("" when it
// returned in time) and duration, and the goroutines of the library
// (a2redis packages) still running after Shutdown returned and the client
// was closed, by their top a2redis function.
type procStats struct {
	ShutdownErr  string         `json:"shutdown_err"`
	ShutdownTook time.Duration  `json:"shutdown_took"`
	Leaked       map[string]int `json:"leaked"`
	// Scripts counts the process's script calls by script name.
	Scripts map[string]int64 `json:"scripts"`
}

// libraryGoroutines returns the goroutines (other than this one) with an
// a2redis frame outside the test's own package, by their first such frame,
// waiting up to 2s for them to end.
func libraryGoroutines() map[string]int {
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		out := map[string]int{}
		for i, g := range strings.Split(string(buf), "\n\n") {
			if i == 0 {
				continue // this goroutine
			}
			for _, line := range strings.Split(g, "\n") {
				if strings.HasPrefix(line, "github.com/a2redis/a2redis/") && !strings.HasPrefix(line, "github.com/a2redis/a2redis/worker_test.") {
					fn, _, _ := strings.Cut(line, "(")
					out[fn]++
					break
				}
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package conformance

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2redis/a2redis/conformance/internal/model"
	"github.com/a2redis/a2redis/redisstore"
)

// Environment variables of the differential test.
const (
	// EnvSeed runs only this seed (every differential run honours it, so
	// a printed reproduction command reruns exactly the failing seed).
	EnvSeed = "A2REDIS_DIFF_SEED"
	// EnvOps sets the operations per seed (every differential run).
	EnvOps = "A2REDIS_DIFF_OPS"
	// EnvSoak runs seeds for this long (a Go duration, e.g. 10m); only the
	// conformance package's TestDifferential reads it, like its -soak flag.
	EnvSoak = "A2REDIS_SOAK"
)

// DifferentialOptions size a differential run. Zero fields take the
// defaults; EnvSeed and EnvOps override both.
type DifferentialOptions struct {
	// Seeds is how many seeds to run. Default 8.
	Seeds int
	// FirstSeed is the first seed; seeds run FirstSeed, FirstSeed+1, …
	// Default 1.
	FirstSeed int64
	// Ops is how many operations each seed runs. Default 150.
	Ops int
	// Soak, when positive, runs consecutive seeds until it elapses,
	// however many that is.
	Soak time.Duration
	// Parallel is how many seeds run at once. Default 2.
	Parallel int
	// Repro renders the one-line command that reruns one seed; default a
	// command naming the test and the EnvSeed/EnvOps variables.
	Repro func(seed int64, ops int) string
	// ShrinkBudget bounds the time spent shrinking a failing sequence.
	// Default 90s.
	ShrinkBudget time.Duration
}

func (o *DifferentialOptions) defaults(t *testing.T) {
	if v := os.Getenv(EnvSeed); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvSeed, v, err)
		}
		o.FirstSeed, o.Seeds = seed, 1
	}
	if v := os.Getenv(EnvOps); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvOps, v, err)
		}
		o.Ops = n
	}
	if o.Seeds == 0 {
		o.Seeds = 8
	}
	if o.FirstSeed == 0 {
		o.FirstSeed = 1
	}
	if o.Ops == 0 {
		o.Ops = 150
	}
	if o.Parallel == 0 {
		o.Parallel = 2
	}
	if o.ShrinkBudget == 0 {
		o.ShrinkBudget = 90 * time.Second
	}
	if o.Repro == nil {
		name := t.Name()
		o.Repro = func(seed int64, ops int) string {
			return fmt.Sprintf("%s=%d %s=%d go test -run '%s' -count=1 <this package>", EnvSeed, seed, EnvOps, ops, name)
		}
	}
}

func init() {
	contract("Differential/AgainstTheModel", func(t *testing.T, e *env) {
		differential(t, e.tg, DifferentialOptions{Seeds: 4, Ops: 120, ShrinkBudget: 30 * time.Second})
	})
}

// Differential drives the Redis store and the in-memory model
// (conformance/internal/model) with the same seeded operation sequences —
// appends with targets and causes, claims by several holders, completions with returned
// events, failures, renewals, clock jumps past leases, redrives, wake-ups of
// log cursors, clears, reclaims, snapshots and presence — and compares every
// result and, at the end, every session's full state. A failing seed is
// shrunk (delta debugging over its operations, each trial on a fresh
// prefix) and reported with a one-line reproduction command.
func Differential(t *testing.T, newTarget func(t *testing.T) Target, opts DifferentialOptions) {
	differential(t, newTarget(t), opts)
}

func differential(t *testing.T, tg Target, opts DifferentialOptions) {
	opts.defaults(t)
	start := time.Now()
	var next atomic.Int64
	next.Store(opts.FirstSeed)
	var total, seeds atomic.Int64
	var failed atomic.Bool
	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for range opts.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				seed := next.Add(1) - 1
				if opts.Soak > 0 {
					if time.Since(start) >= opts.Soak {
						return
					}
				} else if seed >= opts.FirstSeed+int64(opts.Seeds) {
					return
				}
				ops := newGenerator(seed).generate(opts.Ops)
				r := runOps(t, tg, ops)
				total.Add(int64(r.ran))
				seeds.Add(1)
				mu.Lock()
				for k, n := range r.outcomes {
					outcomes[k] += n
				}
				mu.Unlock()
				if r.failure == "" {
					continue
				}
				if failed.Swap(true) {
					return
				}
				short, shortFailure := shrink(t, tg, ops, opts.ShrinkBudget)
				var b strings.Builder
				fmt.Fprintf(&b, "differential seed %d failed at operation %d of %d:\n%s\n", seed, r.ran, len(ops), r.failure)
				fmt.Fprintf(&b, "reproduce: %s\n", opts.Repro(seed, opts.Ops))
				fmt.Fprintf(&b, "shortest failing sequence (%d operations, each run from a fresh prefix):\n", len(short))
				for i, o := range short {
					fmt.Fprintf(&b, "  %3d. %s\n", i+1, o)
				}
				fmt.Fprintf(&b, "which fails with:\n%s", shortFailure)
				t.Error(b.String())
			}
		}()
	}
	wg.Wait()
	t.Logf("differential: %d operations over %d seeds in %v", total.Load(), seeds.Load(), time.Since(start).Round(time.Millisecond))
	if testing.Verbose() {
		names := make([]string, 0, len(outcomes))
		for k := range outcomes {
			names = append(names, k)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, k := range names {
			fmt.Fprintf(&b, " %s=%d", k, outcomes[k])
		}
		t.Logf("outcomes:%s", b.String())
	}
}

// result is how a run of a sequence went.
type result struct {
	ran      int            // operations run (the failing one included)
	failure  string         // empty when the store and the model agreed throughout
	outcomes map[string]int // how the operations ended, by kind and outcome
}

var runSeq atomic.Int64

// runOps runs ops on a fresh store (its own prefix, clock and id counter)
// and a fresh model, comparing as it goes, then compares the full state of
// every session the model knows.
func runOps(t *testing.T, tg Target, ops []op) result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	clock := NewClock()
	var sn, mn int
	cfg := redisstore.Config{}
	if tg.Config != nil {
		tg.Config(&cfg)
	}
	cfg.Prefix = fmt.Sprintf("%s-%d", Prefix(t), runSeq.Add(1))
	cfg.Clock = clock.Now
	cfg.IDs = func() string { sn++; return fmt.Sprintf("g%d", sn) }
	cfg.PublishWait = -1
	cfg.Observer = traceObserver{}
	store, err := redisstore.New(ctx, tg.Client, cfg)
	if err != nil {
		return result{failure: fmt.Sprintf("redisstore.New: %v", err)}
	}
	m := model.New(model.Config{Clock: clock.Now, IDs: func() string { mn++; return fmt.Sprintf("g%d", mn) }, Trace: traceContext})
	outcomes := map[string]int{}
	state := func(when string) string {
		for _, s := range m.Sessions() {
			for _, o := range stateOps(s) {
				if d, _ := compare(ctx, o, store, m); d != "" {
					return fmt.Sprintf("%s state of session %q: %s\n%s", when, s, o, d)
				}
			}
		}
		return ""
	}
	for i, o := range ops {
		if o.Kind == opAdvance {
			clock.Advance(o.Advance)
			continue
		}
		d, outcome := compare(ctx, o, store, m)
		if d != "" {
			return result{ran: i + 1, failure: fmt.Sprintf("#%d %s\n%s", i+1, o, d), outcomes: outcomes}
		}
		outcomes[o.Kind+":"+outcome]++
		// The ready index after every operation: a session is listed
		// exactly when the model says it has work, due exactly when it is
		// claimable now, and, when its work is held, at the time the
		// earliest hold ends or earlier (a lease that moved on keeps its
		// earlier end listed: early is safe).
		// The consumer registry after every operation.
		if d, _ := compare(ctx, op{Kind: opConsumersRead}, store, m); d != "" {
			return result{ran: i + 1, failure: fmt.Sprintf("#%d %s\nthen the consumer registry: %s", i+1, o, d), outcomes: outcomes}
		}
		checked := m.Sessions()
		if o.Kind == opDrop {
			// A dropped session is not the model's any more: the index
			// must not list it either.
			checked = append(checked, o.Session)
		}
		for _, s := range checked {
			if d := compareReady(ctx, s, store, m); d != "" {
				return result{ran: i + 1, failure: fmt.Sprintf("#%d %s\nthen the ready index for session %q: %s", i+1, o, s, d), outcomes: outcomes}
			}
			if d := compareDead(ctx, s, store, m); d != "" {
				return result{ran: i + 1, failure: fmt.Sprintf("#%d %s\nthen the dead index for session %q: %s", i+1, o, s, d), outcomes: outcomes}
			}
			// The heads in flight per consumer (what per-session limits
			// count) after every operation.
			if d := compareInFlight(ctx, s, store, m); d != "" {
				return result{ran: i + 1, failure: fmt.Sprintf("#%d %s\nthen the heads in flight of session %q: %s", i+1, o, s, d), outcomes: outcomes}
			}
		}
		if (i+1)%100 == 0 {
			if d := state(fmt.Sprintf("after operation %d, the", i+1)); d != "" {
				return result{ran: i + 1, failure: d, outcomes: outcomes}
			}
		}
	}
	if d := state("the final"); d != "" {
		return result{ran: len(ops), failure: d, outcomes: outcomes}
	}
	return result{ran: len(ops), outcomes: outcomes}
}

// outcomeOf names how an operation ended, for the coverage summary.
func outcomeOf(res any, err error) string {
	if err != nil {
		class := errorClass(err)
		if strings.HasPrefix(class, "superseded") {
			return "superseded"
		}
		return class
	}
	switch r := res.(type) {
	case redisstore.TrimResult:
		if r.Removed > 0 {
			return "trimmed"
		}
		return "nothing"
	case redisstore.RetentionResult:
		switch {
		case r.Ended > 0:
			return "ended"
		case r.Dropped > 0:
			return "dropped"
		case len(r.Idle) > 0:
			return "dry-run"
		case len(r.Trimmed) > 0:
			return "trimmed"
		}
		return "none-idle"
	case redisstore.AppendResult:
		switch {
		case r.Replayed:
			return "replayed"
		case len(r.Events) == 0:
			return "empty"
		}
		return "appended"
	case redisstore.ClaimResult:
		if r.Outcome == redisstore.Claimed && len(r.DeadLettered) > 0 {
			return "dead-lettered"
		}
		return string(r.Outcome)
	case redisstore.CompleteResult:
		if r.Replayed {
			return "replayed"
		}
		return string(r.Outcome)
	case []redisstore.CompleteResult:
		// The distinct outcomes, so the report stays short.
		seen := map[string]bool{}
		var words []string
		for _, one := range r {
			if w := outcomeOf(one, nil); !seen[w] {
				seen[w] = true
				words = append(words, w)
			}
		}
		sort.Strings(words)
		return "[" + strings.Join(words, "+") + "]"
	case redisstore.CompleteAndClaimResult:
		return outcomeOf(r.Results, nil) + " next " + string(r.Next.Outcome)
	case redisstore.FailResult:
		return string(r.Outcome)
	case redisstore.RenewResult:
		switch {
		case len(r.Renewed) > 0:
			return "renewed"
		case len(r.Superseded) > 0:
			return "superseded"
		case len(r.Lapsed) > 0:
			return "lapsed"
		}
		return "none"
	case []redisstore.ReleaseOutcome:
		seen := map[string]bool{}
		var words []string
		for _, one := range r {
			if w := string(one); !seen[w] {
				seen[w] = true
				words = append(words, w)
			}
		}
		sort.Strings(words)
		return "[" + strings.Join(words, "+") + "]"
	case redisstore.RedriveResult:
		return fmt.Sprintf("redriven=%v", r.Redriven)
	case redisstore.CancelResult:
		return fmt.Sprintf("%s attempts=%d", r.Outcome, r.Attempts)
	case redisstore.ClearResult:
		return fmt.Sprintf("cleared=%v", r.Cleared)
	case redisstore.ReclaimResult:
		if r.Deleted > 0 {
			return "deleted"
		}
		return "nothing"
	case redisstore.DropResult:
		return fmt.Sprintf("dropped=%v", r.Dropped)
	case redisstore.WakeLogResult:
		if r.Cursor.Head > 0 {
			return "head"
		}
		return "idle"
	}
	return "ok"
}

// stateOps are the reads that make up a session's observable state.
func stateOps(session string) []op {
	out := []op{
		{Kind: opBounds, Session: session},
		{Kind: opRead, Session: session},
		{Kind: opCursors, Session: session},
		{Kind: opDeadLetters, Session: session},
		{Kind: opPresenceRead, Session: session},
	}
	for _, r := range genReducers {
		out = append(out, op{Kind: opReadState, Session: session, Reducer: r})
	}
	return out
}

// compare runs o on both sides and describes any difference, or names the
// outcome both agree on.
func compare(ctx context.Context, o op, store, m api) (difference, outcome string) {
	sr, serr := o.run(ctx, store)
	mr, merr := o.run(ctx, m)
	se, me := errorClass(serr), errorClass(merr)
	if se != me {
		return fmt.Sprintf("  redis error: %s\n  model error: %s", orNone(se), orNone(me)), ""
	}
	if serr != nil {
		return "", outcomeOf(nil, serr)
	}
	sr, mr = canonical(sr), canonical(mr)
	if render(sr) != render(mr) {
		return describe(sr, mr), ""
	}
	return "", outcomeOf(sr, nil)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// shrink delta-debugs a failing sequence: it removes ever smaller chunks
// of operations while the rest still fails, each trial on a fresh prefix,
// within budget.
func shrink(t *testing.T, tg Target, ops []op, budget time.Duration) ([]op, string) {
	deadline := time.Now().Add(budget)
	r := runOps(t, tg, ops)
	if r.failure == "" {
		return ops, "(the sequence passed when run again: the failure is not deterministic)"
	}
	failure := r.failure
	ops = ops[:r.ran] // nothing after the first difference matters
	n := 2
	for len(ops) >= 2 && time.Now().Before(deadline) {
		chunk := (len(ops) + n - 1) / n
		reduced := false
		for start := 0; start < len(ops) && time.Now().Before(deadline); start += chunk {
			end := min(start+chunk, len(ops))
			trial := append(append([]op(nil), ops[:start]...), ops[end:]...)
			if r := runOps(t, tg, trial); r.failure != "" {
				ops, failure = trial[:r.ran], r.failure
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if chunk == 1 {
				break
			}
			n = min(n*2, len(ops))
		}
	}
	return ops, failure
}

// compareDead describes how the store's dead index entry for session
// departs from the model's (its dead letters' count, consumers and the
// time since which it has held them), or returns "".
func compareDead(ctx context.Context, session string, store, m api) string {
	got, listed, err := store.DeadAt(ctx, session)
	if err != nil {
		return "redis: " + err.Error()
	}
	want, held, err := m.DeadAt(ctx, session)
	if err != nil {
		return "model: " + err.Error()
	}
	got.Shard = 0
	switch {
	case listed != held:
		return fmt.Sprintf("redis lists %v, the model holds dead letters %v (redis %+v, model %+v)", listed, held, got, want)
	case !held:
		return ""
	case got.Count != want.Count || !got.Since.Equal(want.Since) || got.Complete != want.Complete ||
		strings.Join(got.Consumers, "\x00") != strings.Join(want.Consumers, "\x00"):
		return fmt.Sprintf("redis lists %+v, the model %+v", got, want)
	}
	return ""
}

// compareReady describes how the store's ready index for session departs
// from the model's ready state, or returns "".
func compareReady(ctx context.Context, session string, store, m api) string {
	got, err := store.ReadyAt(ctx, session)
	if err != nil {
		return "redis: " + err.Error()
	}
	want, err := m.ReadyAt(ctx, session)
	if err != nil {
		return "model: " + err.Error()
	}
	switch {
	case got.Listed != want.Listed:
		return fmt.Sprintf("redis lists %v, the model %v (redis %+v, model %+v)", got.Listed, want.Listed, got, want)
	case !want.Listed:
		return ""
	case want.Due && !got.Due:
		return fmt.Sprintf("the model has work now, redis lists it at %d", got.At.UnixMilli())
	case !want.Due && got.At.After(want.At):
		return fmt.Sprintf("the model's earliest hold ends at %d, redis lists it later, at %d", want.At.UnixMilli(), got.At.UnixMilli())
	}
	return ""
}

// compareInFlight describes how the store's count of heads in flight per
// consumer for session departs from the model's, or returns "".
func compareInFlight(ctx context.Context, session string, store, m api) string {
	got, err := store.InFlight(ctx, session)
	if err != nil {
		return "redis: " + err.Error()
	}
	want, err := m.InFlight(ctx, session)
	if err != nil {
		return "model: " + err.Error()
	}
	if !maps.Equal(got, want) {
		return fmt.Sprintf("redis counts %v, the model %v", got, want)
	}
	return ""
}

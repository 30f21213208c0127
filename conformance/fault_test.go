package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/conformance/internal/model"
	"github.com/a2redis/a2redis/internal/faultproxy"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Fault injection: a store whose connection dies mid-way. A write that fails
// on the transport fails with an error, and afterwards the session's state
// is exactly the state before the write or the state after it — never
// half-applied. Writes that succeed, and contract refusals, agree with the
// model as always.

// faultStep is one operation a fault worker ran: its clock time and the
// ids the store's id source handed out for it, so a model can replay it.
type faultStep struct {
	o   op
	at  time.Time
	ids []string
}

// world is one history the store may have: the committed operations and
// a model that ran them. A write that failed on the transport with no
// observable effect either way (a presence tombstone, say) leaves two
// worlds; later results rule out the wrong one.
type world struct {
	log  []faultStep
	live *model.Store
}

// faultWorker drives one session of a store through random operations and
// checks each against the model.
type faultWorker struct {
	t       *testing.T
	session string
	store   *redisstore.Store
	clock   *Clock
	gen     *generator
	ids     []string // handed out during the current operation
	pending []string // those ids, for a live model to take in turn
	mu      sync.Mutex
	worlds  []world
	// counts
	ok, refused, lostBefore, lostAfter int
	// onLost, when set, is called as an operation fails on the transport,
	// before the worker reads the state back.
	onLost func()
}

func newFaultWorker(t *testing.T, client rueidis.Client, prefix, session string, seed int64) *faultWorker {
	w := &faultWorker{t: t, session: session, clock: NewClock(), gen: newGenerator(seed)}
	w.gen.sessions = []string{session}
	// The generator's own model drifts from the store when a write fails
	// on the transport; without limits, its proposals stay valid anyway.
	w.gen.noLimits = true
	w.gen.noRegistry = true // one prefix, several sequences at once
	var n atomic.Int64
	store, err := redisstore.New(context.Background(), client, redisstore.Config{
		Prefix: prefix, Clock: w.clock.Now, PublishWait: -1,
		// One try per call: these tests check what one try leaves behind
		// (retry_fault_test.go covers the store's own retries).
		Retries: redisstore.RetryPolicy{Attempts: 1},
		IDs: func() string {
			id := fmt.Sprintf("%s-g%d", session, n.Add(1))
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.mu.Unlock()
			return id
		},
	})
	if err != nil {
		t.Fatalf("store: %v", err)
	}
	w.store = store
	w.worlds = []world{{live: w.replay(nil, nil)}}
	return w
}

// replay builds a model from log (and extra). Once built, the model runs
// live: on the worker's clock, taking the ids the store handed out for the
// operation at hand.
func (w *faultWorker) replay(log []faultStep, extra *faultStep) *model.Store {
	var now time.Time
	var queue []string
	live := false
	m := model.New(model.Config{
		Clock: func() time.Time {
			if live {
				return w.clock.Now()
			}
			return now
		},
		IDs: func() string {
			q := &queue
			if live {
				q = &w.pending
			}
			if len(*q) == 0 {
				return "unrecorded-id"
			}
			id := (*q)[0]
			*q = (*q)[1:]
			return id
		},
	})
	steps := log
	if extra != nil {
		steps = append(steps[:len(steps):len(steps)], *extra)
	}
	for _, s := range steps {
		now, queue = s.at, append([]string(nil), s.ids...)
		_, _ = s.o.run(context.Background(), m)
	}
	live = true
	return m
}

// lost reports an error of the transport (or of a deadline): the write may
// or may not have committed; an a2redis.ErrUnavailable (nothing committed)
// counts too, as the state before is one the check accepts. Any other
// Redis error reply or a contract error is not
// one.
func lost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, a2redis.ErrUnavailable) {
		return true
	}
	var reply *rueidis.RedisError
	return !errors.As(err, &reply) && strings.HasPrefix(errorClass(err), "error: ")
}

// step runs the next operation; it returns false when the test failed.
func (w *faultWorker) step(ctx context.Context) bool {
	o := w.gen.next()
	w.gen.apply(o) // the generator's own model only proposes arguments
	switch o.Kind {
	case opReclaim, opReclaimPage, opDrop, opRetention, opTrim:
		return true // several scripts: not one atomic write
	case opAdvance:
		w.clock.Advance(o.Advance)
		return true
	}
	w.mu.Lock()
	w.ids = nil
	w.mu.Unlock()
	at := w.clock.Now()
	opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	res, err := o.run(opCtx, w.store)
	cancel()
	w.mu.Lock()
	s := faultStep{o: o, at: at, ids: append([]string(nil), w.ids...)}
	w.mu.Unlock()
	if !lost(err) {
		// Committed, or refused by the contract: the model must agree (in
		// at least one possible world).
		var kept []world
		var first string
		for _, wd := range w.worlds {
			w.pending = append([]string(nil), s.ids...)
			mres, merr := o.run(ctx, wd.live)
			d := ""
			if se, me := errorClass(err), errorClass(merr); se != me {
				d = fmt.Sprintf("  redis error: %s\n  model error: %s", orNone(se), orNone(me))
			} else if err == nil && render(canonical(res)) != render(canonical(mres)) {
				d = describe(canonical(res), canonical(mres))
			}
			if d == "" {
				kept = append(kept, world{log: append(wd.log[:len(wd.log):len(wd.log)], s), live: wd.live})
			} else if first == "" {
				first = d
			}
		}
		if len(kept) == 0 {
			w.t.Errorf("%s: %s\n%s", w.session, o, first)
			return false
		}
		w.worlds = kept
		if err == nil {
			w.ok++
		} else {
			w.refused++
		}
		return true
	}
	// The write's fate is unknown: the state must be exactly before or
	// after it.
	if w.onLost != nil {
		w.onLost()
	}
	for attempt := 0; ; attempt++ {
		var kept []world
		var diffs []string
		var readErr error
		befores, afters := 0, 0
		for _, wd := range w.worlds {
			same, err := w.sameState(ctx, wd.live)
			if err != nil {
				readErr = err
				break
			}
			if same == "" {
				kept = append(kept, wd)
				befores++
			}
			after := world{log: append(wd.log[:len(wd.log):len(wd.log)], s), live: w.replay(wd.log, &s)}
			sameAfter, err := w.sameState(ctx, after.live)
			if err != nil {
				readErr = err
				break
			}
			if sameAfter == "" {
				kept = append(kept, after)
				afters++
			}
			diffs = append(diffs, "versus before:\n"+same, "versus after:\n"+sameAfter)
		}
		if readErr == nil {
			if len(kept) == 0 {
				w.t.Errorf("%s: after %s failed on the transport (%v), the state is neither before nor after it:\n%s", w.session, o, err, strings.Join(diffs[:2], "\n"))
				return false
			}
			if len(kept) > 16 {
				kept = kept[:16]
			}
			w.worlds = kept
			if afters > 0 {
				w.lostAfter++
			} else {
				w.lostBefore++
			}
			return true
		}
		if attempt > 200 || ctx.Err() != nil {
			w.t.Errorf("%s: cannot read the state back after %s: %v", w.session, o, readErr)
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameState compares the session's observable state with m's: "" when
// equal, else the difference; an error when a read failed.
func (w *faultWorker) sameState(ctx context.Context, m *model.Store) (string, error) {
	for _, o := range stateOps(w.session) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		sr, serr := o.run(rctx, w.store)
		cancel()
		if lost(serr) {
			return "", serr
		}
		mr, merr := o.run(ctx, m)
		if errorClass(serr) != errorClass(merr) {
			return fmt.Sprintf("%s: redis error %s, model error %s", o, orNone(errorClass(serr)), orNone(errorClass(merr))), nil
		}
		if serr == nil && render(canonical(sr)) != render(canonical(mr)) {
			return fmt.Sprintf("%s:\n%s", o, describe(canonical(sr), canonical(mr))), nil
		}
	}
	return "", nil
}

// rawDo sends one command on a connection of its own and returns the first
// reply line.
func rawDo(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func faultClient(t *testing.T, addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// runFaultWorkers runs workers (one session each) while chaos runs: each
// runs at least ops operations and goes on until chaos returns (at most
// 50×ops). chaos may wait on the workers' progress: the operations done and
// those that failed on the transport so far (counted as they fail, before
// the worker reads the state back), summed over the workers.
func runFaultWorkers(t *testing.T, client rueidis.Client, workers, ops int, chaos func(progress func() (done, lost int64))) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := Prefix(t)
	ws := make([]*faultWorker, workers)
	for i := range ws {
		ws[i] = newFaultWorker(t, client, prefix, fmt.Sprintf("s%d", i), int64(100+i))
	}
	var done, lostOps atomic.Int64
	progress := func() (int64, int64) { return done.Load(), lostOps.Load() }
	for _, w := range ws {
		w.onLost = func() { lostOps.Add(1) }
	}
	var chaosDone atomic.Bool
	go func() {
		defer chaosDone.Store(true)
		chaos(progress)
	}()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; (i < ops || !chaosDone.Load()) && i < 50*ops; i++ {
				if !w.step(ctx) {
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	for !chaosDone.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	var ok, refused, before, after int
	matched := make([]*model.Store, len(ws))
	for i, w := range ws {
		ok, refused, before, after = ok+w.ok, refused+w.refused, before+w.lostBefore, after+w.lostAfter
		if t.Failed() {
			continue
		}
		var d string
		var err error
		for _, wd := range w.worlds {
			if d, err = w.sameState(ctx, wd.live); err == nil && d == "" {
				matched[i] = wd.live
				break
			}
		}
		if err != nil || d != "" {
			t.Errorf("%s: final state: %v %s", w.session, err, d)
		}
	}
	// The ready index: an update lost with a killed connection leaves a
	// session's entry behind its state (never ahead of the session's own
	// record); one repair pass lists every session with work again. (A lost
	// removal may leave a session with none listed: early, which the claim
	// that visits it mends, and which the repair leaves alone.)
	if !t.Failed() {
		stale := 0
		for i, w := range ws {
			if compareReady(ctx, w.session, w.store, matched[i]) != "" {
				stale++
			}
		}
		st, err := ws[0].store.RepairReady(ctx)
		if err != nil {
			t.Fatalf("repair: %v", err)
		}
		for i, w := range ws {
			want, err := matched[i].ReadyAt(ctx, w.session)
			if err != nil {
				t.Fatal(err)
			}
			if d := compareReady(ctx, w.session, w.store, matched[i]); d != "" && want.Listed {
				t.Errorf("%s: ready index after the repair: %s", w.session, d)
			}
		}
		t.Logf("ready index: %d of %d sessions stale before the repair (%+v), 0 after", stale, len(ws), st)
	}
	t.Logf("%d operations succeeded, %d refused by the contract, %d failed on the transport (%d had not committed, %d had)", ok, refused, before+after, before, after)
	if before+after == 0 {
		t.Errorf("the chaos never hit an operation: the test proved nothing")
	}
}

// waitFor polls cond until it holds or a minute passes (then fails t).
func waitFor(t *testing.T, what string, cond func() bool) bool {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return false
		}
	}
	return true
}

// TestFaultsKilledConnections cuts the store's connection at every 5th
// script call (60 times, then the workers go on unharmed) while four
// sessions run random writes: in turn after the server ran the call and
// before its reply reached the store (the write committed unseen) and
// before the server got it (nothing ran). The faults come at chosen calls,
// so every run has them.
func TestFaultsKilledConnections(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	proxy, err := faultproxy.Start(srv.Addr(), faultproxy.Rule{Commands: []string{"EVALSHA", "EVAL"}, Every: 5, Limit: 60,
		Faults: []faultproxy.Fault{faultproxy.DropReply, faultproxy.DropCommand}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	client := faultClient(t, proxy.Addr())
	runFaultWorkers(t, client, 4, 250, func(func() (int64, int64)) {})
	if f := proxy.Stats().Faults; f != 60 {
		t.Errorf("the proxy made %d faults in %d script calls, want 60", f, proxy.Stats().Counted)
	} else {
		t.Logf("the proxy cut %d of %d script calls", f, proxy.Stats().Counted)
	}
}

// TestFaultsServerRestart stops the server (SIGTERM) and starts it again
// on the same port while sessions run, three times: each stop comes after
// the workers ran some operations, and each restart once an operation
// failed on the stopped server. The server keeps an AOF with fsync always,
// so every acknowledged write survives and the script cache does not
// (EVALSHA falls back to EVAL).
func TestFaultsServerRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t, "--appendonly", "yes", "--appendfsync", "always")
	client := faultClient(t, srv.Addr())
	runFaultWorkers(t, client, 3, 150, func(progress func() (int64, int64)) {
		for range 3 {
			done, _ := progress()
			if !waitFor(t, "operations before the stop", func() bool { d, _ := progress(); return d >= done+20 }) {
				return
			}
			_, lost := progress()
			srv.Stop()
			ok := waitFor(t, "an operation failed on the stopped server", func() bool { _, l := progress(); return l > lost })
			srv.Restart()
			if !ok {
				return
			}
		}
	})
}

// TestFaultsDeadline: a context deadline shorter than the call returns
// context.DeadlineExceeded promptly, for writes and reads alike, while the
// server holds the command (stopped by SIGSTOP until the three calls
// returned, so none can meet a server that answers); the write held then
// either commits or not, never half.
func TestFaultsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	client := faultClient(t, srv.Addr())
	w := newFaultWorker(t, client, Prefix(t), "s", 7)
	ctx := context.Background()
	for range 30 {
		if !w.step(ctx) {
			return
		}
	}
	// Held until the calls returned: not CLIENT PAUSE ALL, which ends only
	// by its own timeout (CLIENT UNPAUSE from a fresh connection is paused
	// too), so a call that starts late on a loaded machine could find the
	// server answering.
	srv.Freeze()
	w.clock.Advance(time.Second)
	held := op{Kind: opAppend, Session: "s", Events: []a2redis.Event{evID("held", "a", to("c1"))}}
	s := faultStep{o: held, at: w.clock.Now()}
	for name, call := range map[string]func(ctx context.Context) error{
		"append": func(ctx context.Context) error { _, err := held.run(ctx, w.store); return err },
		"read":   func(ctx context.Context) error { _, err := w.store.Read(ctx, "s", 0, 0); return err },
		"claim": func(ctx context.Context) error {
			_, err := w.store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "other", Holder: "h", TTL: time.Second})
			return err
		},
	} {
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		err := call(dctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s under a 100ms deadline against a paused server: %v, want context.DeadlineExceeded", name, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s returned after %v, not promptly", name, took)
		}
	}
	srv.Thaw()
	// The held append reached the server: whether it ran is open, but
	// nothing is half-written.
	after := w.replay(w.worlds[0].log, &s)
	deadline := time.Now().Add(5 * time.Second)
	for {
		before, err1 := w.sameState(ctx, w.worlds[0].live)
		afterDiff, err2 := w.sameState(ctx, after)
		if err1 == nil && err2 == nil && (before == "" || afterDiff == "") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the state after a timed-out append is neither before nor after it:\n%s\n%s (%v %v)", before, afterDiff, err1, err2)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFaultsCoalescedAppends: sixteen producers append to one session, so
// their appends coalesce into shared rounds, while a fault proxy cuts the
// store's connection at every 10th script call (in turn after the server
// ran it and before it got it). A producer retries a failed append with the
// same ids until it succeeds. In the end every batch is in the log exactly
// once, contiguous, at the indexes its successful call reported.
func TestFaultsCoalescedAppends(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	proxy, err := faultproxy.Start(srv.Addr(), faultproxy.Rule{Commands: []string{"EVALSHA", "EVAL"}, Every: 10,
		Faults: []faultproxy.Fault{faultproxy.DropReply, faultproxy.DropCommand}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	client := faultClient(t, proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The producers retry, not the store (see TestRetriesKilledConnections).
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: Prefix(t), Retries: redisstore.RetryPolicy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawDo(srv.Addr(), "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const producers, batches = 16, 150
	var failures, appended atomic.Int64
	reported := make([]map[string]int64, producers)
	var wg sync.WaitGroup
	for p := range producers {
		reported[p] = map[string]int64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				batch := make([]a2redis.Event, 1+(p+b)%3)
				for i := range batch {
					batch[i] = a2redis.Event{ID: fmt.Sprintf("p%d-b%d-%d", p, b, i), Type: "t"}
				}
				for {
					if ctx.Err() != nil {
						t.Errorf("producer %d: gave up: %v", p, ctx.Err())
						return
					}
					res, err := store.Append(ctx, "s", batch, redisstore.AppendOptions{})
					if err != nil {
						failures.Add(1)
						continue
					}
					for i, ev := range res.Events {
						if ev.ID != batch[i].ID || (i > 0 && ev.Index != res.Events[0].Index+int64(i)) {
							t.Errorf("producer %d batch %d: stored %v", p, b, res.Events)
						}
						reported[p][ev.ID] = ev.Index
					}
					appended.Add(1)
					break
				}
			}
		}()
	}
	wg.Wait()
	// A producer waits for each append before its next, so a round carries
	// at most one append per producer: at least `batches` script calls,
	// every 10th of them cut, and a cut call fails every append of its round.
	if f := proxy.Stats().Faults; f < batches/10 || failures.Load() == 0 {
		t.Fatalf("%d faults made, %d appends failed: want at least %d and some", f, failures.Load(), batches/10)
	}
	var log []a2redis.StoredEvent
	for {
		log, err = store.Read(ctx, "s", 0, 0)
		if err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := 0
	for _, r := range reported {
		want += len(r)
	}
	if len(log) != want {
		t.Fatalf("the log holds %d events, the producers stored %d", len(log), want)
	}
	for _, ev := range log {
		var p, b, i int
		if _, err := fmt.Sscanf(ev.ID, "p%d-b%d-%d", &p, &b, &i); err != nil {
			t.Fatalf("unexpected event %q", ev.ID)
		}
		if reported[p][ev.ID] != ev.Index {
			t.Fatalf("event %s at %d, its append reported %d", ev.ID, ev.Index, reported[p][ev.ID])
		}
	}
	calls, err := redistest.CommandCalls(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	scripts := calls["evalsha"] + calls["eval"]
	if scripts >= appended.Load() {
		t.Errorf("%d script calls for %d appends: nothing coalesced", scripts, appended.Load())
	}
	t.Logf("%d appends in %d script calls; %d failed on the transport and were retried", appended.Load(), scripts, failures.Load())
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// Issue 22, the chaos test: three worker processes (the test binary in
// worker mode, Durability{Replicas: 1}) run an event consumer (ev), a lane
// consumer (ln, two lanes per session) and a typed log consumer (audit) on
// a private 3-master cluster with a replica per master, while the test
// appends with Durability{Replicas: 1} (each batch sent again with its ids
// until acknowledged) and, one after the other:
//
//  1. a session's slot migrates key by key in random order (MigrateSlot);
//  2. `redis-cli --cluster reshard` moves the first slots of a master
//     (chosen to hold sessions) to another;
//  3. a graceful CLUSTER FAILOVER swaps a master and its replica;
//  4. a master is SIGKILLed, its replica takes over, and the node is
//     restarted (it rejoins as a replica);
//  5. worker p1 is SIGKILLed, and worker p2 is SIGSTOPped for longer than
//     its lease, then SIGCONTed.
//
// Then appends stop, the survivors drain the work and stop with SIGTERM.
// What is counted, per head (session, consumer, lane, index) of every
// acknowledged event: lost = never run; duplicates = run more than once.
// A duplicate is expected only for a head that p1 or p2 ran (p1's
// in-flight heads when it was killed, p2's when it was stopped past its
// lease: another process takes them over); any other duplicate, every
// lost head, a lane run out of index order, a cursor left with a head (a
// wedged lane), a dead letter, a panic in any process, a Shutdown that
// missed its deadline and a library goroutine left after it fail the test.
func TestChaosDurableCluster(t *testing.T) {
	redistest.Chaos(t)
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 3 * time.Second})
	// A budget a slow reshard and failover on a loaded machine fit in.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	addrs := cl.Addrs()
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	clusterURL := "redis://" + addrs[0] + "?" + q.Encode()
	client := cl.Client(t)
	prefix := redistest.Prefix(t)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: processConsumers,
		Durability: redisstore.Durability{Replicas: 1}})
	require.NoError(t, err)
	e := &processEnv{env: &env{t: t, ctx: ctx, store: store, client: client, prefix: prefix}, url: clusterURL}
	// The handlers' run records live on a server of their own, which no
	// chaos step touches.
	fxAddr, _ := redistest.Spawn(t)
	fxClient := singleNode(t, fxAddr)
	fx := &processEnv{env: &env{t: t, ctx: ctx, store: store, client: fxClient, prefix: prefix}}

	// Sessions: four in the first slots of masters[0] (the reshard moves
	// them), one on a slot of its own for the key-by-key migration, seven
	// anywhere.
	const reshardSlots = 64
	reshardFrom, reshardTo := cl.NodeID(masters[0]), cl.NodeID(masters[1])
	fromSlots, err := cl.SlotsOf(ctx, reshardFrom)
	require.NoError(t, err)
	inReshard := map[int]bool{}
	for _, s := range fromSlots[:reshardSlots] {
		inReshard[s] = true
	}
	slotOf := func(s string) int { return redistest.KeySlot(keys.For(prefix, s).Count()) }
	var sessions []string
	for i := 0; len(sessions) < 4; i++ {
		if s := fmt.Sprintf("r%d", i); inReshard[slotOf(s)] {
			sessions = append(sessions, s)
		}
	}
	migrated := ""
	for i := 0; migrated == ""; i++ {
		if s := fmt.Sprintf("m%d", i); !inReshard[slotOf(s)] {
			migrated = s
		}
	}
	sessions = append(sessions, migrated)
	for i := range 7 {
		sessions = append(sessions, fmt.Sprintf("s%d", i))
	}

	// Appenders: a batch of two events per session every 150ms, each
	// retried with its ids until acknowledged.
	var (
		mu          sync.Mutex
		acked       = map[string]bool{} // head names of acknowledged events
		ackedEvents atomic.Int64
		notRepl     atomic.Int64 // tries reported ErrNotReplicated (sent again)
		otherErrs   atomic.Int64 // tries failed otherwise (sent again)
		gaveUp      atomic.Int64
		stopAppend  atomic.Bool
		appenders   sync.WaitGroup
	)
	for _, session := range sessions {
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			for n := 0; !stopAppend.Load(); n++ {
				batch := make([]a2redis.Event, 2)
				for j := range batch {
					typ := "t.plain"
					if (n+j)%2 == 0 {
						typ = "t.audit"
					}
					batch[j] = a2redis.Event{ID: fmt.Sprintf("%s-%d-%d", session, n, j), Type: typ,
						Targets: []a2redis.Target{{Consumer: "ev"}, {Consumer: "ln", Lane: fmt.Sprintf("L%d", j)}}}
				}
				var res redisstore.AppendResult
				var err error
				deadline := time.Now().Add(40 * time.Second)
				for {
					actx, cancel := context.WithTimeout(ctx, 15*time.Second)
					res, err = store.Append(actx, session, batch, redisstore.AppendOptions{})
					cancel()
					if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
						break
					}
					if errors.Is(err, a2redis.ErrNotReplicated) {
						notRepl.Add(1)
					} else {
						otherErrs.Add(1)
					}
					time.Sleep(50 * time.Millisecond)
				}
				if err != nil {
					gaveUp.Add(1)
					t.Logf("append %s gave up: %v", batch[0].ID, err)
					continue
				}
				mu.Lock()
				for j, ev := range res.Events {
					acked[fmt.Sprintf("%s/ev//%d", session, ev.Index)] = true
					acked[fmt.Sprintf("%s/ln/L%d/%d", session, j, ev.Index)] = true
					if ev.Type == "t.audit" {
						acked[fmt.Sprintf("%s/audit/audit/%d", session, ev.Index)] = true
					}
				}
				mu.Unlock()
				ackedEvents.Add(int64(len(res.Events)))
				time.Sleep(time.Duration(100+rand.IntN(100)) * time.Millisecond)
			}
		}()
	}

	const ttl = 3 * time.Second
	env := []string{"TW_TTL=" + ttl.String(), "TW_CONCURRENCY=8", "TW_DELAY_MIN=1ms", "TW_DELAY_MAX=6ms", "TW_HEARTBEAT=1s", "TW_DURABLE=1", "TW_FX_URL=redis://" + fxAddr}
	procs := []*proc{
		startProc(t, clusterURL, prefix, "p0", env...),
		startProc(t, clusterURL, prefix, "p1", env...),
		startProc(t, clusterURL, prefix, "p2", env...),
	}
	runs := fxRuns(prefix)
	hlen := func() int {
		n, err := fxClient.Do(ctx, fxClient.B().Hlen().Key(runs).Build()).AsInt64()
		require.NoError(t, err)
		return int(n)
	}
	e.eventually("work running", func() bool { return hlen() > 50 })
	steps := map[string]string{}
	step := func(name string, f func() error) {
		start := time.Now()
		before, appended := hlen(), ackedEvents.Load()
		err := f()
		steps[name] = fmt.Sprintf("%v, %d events acknowledged and %d heads run meanwhile", time.Since(start).Round(time.Millisecond), ackedEvents.Load()-appended, hlen()-before)
		require.NoError(t, err, "chaos step %s", name)
		time.Sleep(500 * time.Millisecond)
	}

	// 1. A slot migrated key by key, in random order.
	step("migrate", func() error {
		slot := slotOf(migrated)
		owner, err := cl.Owner(ctx, slot)
		if err != nil {
			return err
		}
		to := masters[0]
		for _, m := range masters {
			if m != owner {
				to = m
				break
			}
		}
		st, err := cl.MigrateSlot(ctx, slot, to, redistest.MigrateOptions{Pause: 5 * time.Millisecond})
		steps["migrate keys"] = fmt.Sprint(st.Keys)
		return err
	})
	// 2. redis-cli --cluster reshard of the first slots of masters[0].
	step("reshard", func() error {
		if err := cl.Reshard(ctx, reshardFrom, reshardTo, reshardSlots, "--cluster-pipeline", "1"); err != nil {
			return err
		}
		moved := 0
		for _, s := range sessions[:4] {
			if o, err := cl.Owner(ctx, slotOf(s)); err == nil && o == cl.AddrOf(reshardTo) {
				moved++
			}
		}
		steps["reshard sessions moved"] = fmt.Sprintf("%d of 4", moved)
		return nil
	})
	// 3. A graceful failover of masters[2] to its replica.
	step("failover", func() error {
		rs, err := cl.ReplicasOf(ctx, masters[2])
		if err != nil {
			return err
		}
		return cl.Failover(ctx, rs[0], redistest.FailoverGraceful)
	})
	// 4. A master SIGKILLed (the one with the most sessions), its replica
	// promoted, the node restarted.
	var killAt, promotedAt, settledAt time.Time
	onVictim := map[string]bool{}
	step("master kill", func() error {
		now, err := cl.Masters(ctx)
		if err != nil {
			return err
		}
		victim, most := now[0], -1
		for _, m := range now {
			n := 0
			for _, s := range sessions {
				if o, err := cl.Owner(ctx, slotOf(s)); err == nil && o == m {
					n++
				}
			}
			if n > most {
				victim, most = m, n
			}
		}
		rs, err := cl.ReplicasOf(ctx, victim)
		if err != nil {
			return err
		}
		steps["master kill sessions"] = fmt.Sprint(most)
		for _, s := range sessions {
			if o, err := cl.Owner(ctx, slotOf(s)); err == nil && o == victim {
				onVictim[s] = true
			}
		}
		if err := cl.WaitSettled(ctx); err != nil {
			return err
		}
		killAt = time.Now()
		if err := cl.Kill(victim); err != nil {
			return err
		}
		if err := cl.WaitPromoted(ctx, rs[0]); err != nil {
			return err
		}
		promotedAt = time.Now()
		time.Sleep(time.Second)
		err = cl.Restart(ctx, victim)
		settledAt = time.Now()
		return err
	})
	// 5. Worker p1 SIGKILLed; p2 SIGSTOPped past its lease, then resumed.
	killed, paused := procs[1], procs[2]
	step("worker kill+stop", func() error {
		if err := killed.cmd.Process.Kill(); err != nil {
			return err
		}
		<-killed.waited
		if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(ttl + 1500*time.Millisecond)
		return paused.cmd.Process.Signal(syscall.SIGCONT)
	})
	stopAppend.Store(true)
	appenders.Wait()

	mu.Lock()
	want := len(acked)
	mu.Unlock()
	drainStart := time.Now()
	unrun := func() []string {
		total := fx.hash(runs)
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for head := range acked {
			if total[head] == 0 {
				out = append(out, head)
			}
		}
		sort.Strings(out)
		return out
	}
	for deadline := time.Now().Add(eventuallyWait); len(unrun()) > 0 || !e.idle(); time.Sleep(20 * time.Millisecond) {
		if time.Now().Before(deadline) {
			continue
		}
		// What a wedge looks like, for the next reader: the heads that
		// never ran, their sessions' cursors, the index, the processes.
		left := unrun()
		t.Logf("drain timed out after %v: %d acknowledged heads never ran (first %d: %v)", time.Since(drainStart), len(left), min(len(left), 20), left[:min(len(left), 20)])
		seen := map[string]bool{}
		for _, head := range left {
			session, _, _ := strings.Cut(head, "/")
			if seen[session] || len(seen) >= 5 {
				continue
			}
			seen[session] = true
			cs, err := store.Cursors(ctx, session)
			t.Logf("session %s cursors (err %v):", session, err)
			for _, c := range cs {
				t.Logf("  %+v", c)
			}
		}
		if stats, err := store.ReadyStats(ctx); err == nil {
			t.Logf("ready index: %+v", stats)
		}
		for _, p := range procs {
			errs := p.stderr.String()
			t.Logf("process %s stderr (last 2000 bytes): %s", p.id, errs[max(0, len(errs)-2000):])
		}
		t.Fatalf("timed out waiting for every acknowledged head run and nothing left")
	}
	drained := time.Since(drainStart)
	procs[0].stop(t)
	paused.stop(t)

	total := fx.hash(runs)
	byKilled, byPaused := fx.hash(fxRunsBy(prefix, killed.id)), fx.hash(fxRunsBy(prefix, paused.id))
	// Every run: head, process, attempt, start time.
	type run struct {
		proc    string
		attempt int64
		at      time.Time
	}
	runsOf := map[string][]run{}
	rawLog, err := fxClient.Do(ctx, fxClient.B().Lrange().Key(fxRunLog(prefix)).Start(0).Stop(-1).Build()).AsStrSlice()
	require.NoError(t, err)
	for _, line := range rawLog {
		var head, proc string
		var attempt, ms int64
		_, err := fmt.Sscanf(line, "%s %s %d %d", &head, &proc, &attempt, &ms)
		require.NoError(t, err, line)
		runsOf[head] = append(runsOf[head], run{proc, attempt, time.UnixMilli(ms)})
	}
	// A duplicate (a head run more than once) is expected when one of its
	// runs was in p1 (killed: its in-flight heads are taken over after the
	// lease) or p2 (stopped past its lease: taken over, and it may still
	// start a head it had claimed once it resumes, a zombie run whose
	// completion is refused), or when its session lived on the killed
	// master and its first run started between 2s before the kill and the
	// end of that step (the killed node restarted and the cluster agreed
	// again): a completion the master applied and its replica never
	// acknowledged (reported ErrNotReplicated, so the worker went on) is
	// gone with the master, or the completion waited on the reorganising
	// cluster past the lease; either way the head runs again. Any other
	// duplicate fails the test.
	lost, byWorkerKill, byMasterKill, otherDups, extra := 0, 0, 0, 0, 0
	for head := range acked {
		rs := runsOf[head]
		switch n := total[head]; {
		case n == 0:
			lost++
		case n == 1:
		case byKilled[head] > 0 || byPaused[head] > 0:
			byWorkerKill++
		case onVictim[strings.SplitN(head, "/", 2)[0]] && len(rs) > 0 && !rs[0].at.Before(killAt.Add(-2*time.Second)) && rs[0].at.Before(settledAt):
			byMasterKill++
		default:
			otherDups++
			t.Errorf("%s ran %d times, never in p1 or p2: %v (master killed at %v, promotion at %v, settled at %v)", head, n, rs, killAt, promotedAt, settledAt)
		}
	}
	for head, n := range total {
		if !acked[head] {
			extra += n // heads of batches never acknowledged (still appended)
		}
	}
	// Lanes in order: the run of each lane head that counted (its last at
	// its highest attempt) started after the one of the head before it.
	type counted struct {
		index int64
		at    time.Time
	}
	laneRuns := map[string][]counted{}
	for head, rs := range runsOf {
		parts := strings.Split(head, "/")
		if len(parts) != 4 || parts[1] != "ln" {
			continue
		}
		var index int64
		_, err := fmt.Sscan(parts[3], &index)
		require.NoError(t, err, head)
		best := rs[0]
		for _, r := range rs[1:] {
			if r.attempt >= best.attempt {
				best = r
			}
		}
		key := parts[0] + "/" + parts[2]
		laneRuns[key] = append(laneRuns[key], counted{index, best.at})
	}
	outOfOrder, wedged, deadLettered := 0, 0, 0
	for key, seq := range laneRuns {
		sort.Slice(seq, func(i, j int) bool { return seq[i].index < seq[j].index })
		for i := 1; i < len(seq); i++ {
			if seq[i].at.Before(seq[i-1].at) {
				outOfOrder++
				t.Errorf("lane %s: head %d's counted run started before head %d's", key, seq[i].index, seq[i-1].index)
				break
			}
		}
	}
	for _, session := range sessions {
		for _, c := range fx.cursors(session) {
			if c.Head != 0 {
				wedged++
				t.Errorf("%s %s/%s left with head %d", session, c.Consumer, c.Lane, c.Head)
			}
			if !c.DeadLetteredAt.IsZero() {
				deadLettered++
			}
		}
	}
	panics := 0
	for _, p := range procs {
		if strings.Contains(p.stderr.String(), "panic") {
			panics++
			t.Errorf("worker %s panicked: %s", p.id, p.stderr.String())
		}
	}
	var shutdowns []string
	for _, p := range []*proc{procs[0], paused} {
		shutdowns = append(shutdowns, fmt.Sprintf("%s %v", p.id, p.stats.ShutdownTook.Round(time.Millisecond)))
		assert.Empty(t, p.stats.ShutdownErr, "worker %s: Shutdown missed its %v deadline", p.id, shutdownDeadline)
		assert.Empty(t, p.stats.Leaked, "worker %s: library goroutines left after Shutdown", p.id)
		// A completion refused (OutcomeSuperseded) or a renewal that found the
		// claim gone (OutcomeLeaseLost) is what a takeover leaves a process that
		// was slow. OutcomeWriteFailed is a write the store could not confirm:
		// p2's, timed out while it was stopped, or one under the killed
		// master (a completion with events reported ErrNotReplicated);
		// what became of such heads is in the counts above (a head whose
		// completion was lost runs again, and is counted).
		allowed := []worker.OutcomeKind{worker.OutcomeCompleted, worker.OutcomeLeaseLost, worker.OutcomeSuperseded, worker.OutcomeWriteFailed}
		for kind := range p.outcome {
			assert.Contains(t, allowed, kind, "%s: %v", p.id, p.outcome)
		}
	}
	t.Logf("chaos: steps %v", steps)
	t.Logf("chaos counts: events acknowledged %d (heads %d); tries sent again: %d not replicated, %d other errors; gave up %d | lost %d; duplicates: %d of heads p1 or p2 ran (p1 ran %d heads, p2 %d), %d after the master kill, %d other; runs of heads of unacknowledged batches %d | lanes out of order %d, wedged %d, dead-lettered %d, panics %d | drain %v; Shutdown took %v; outcomes p0 %v, p2 %v",
		ackedEvents.Load(), want, notRepl.Load(), otherErrs.Load(), gaveUp.Load(), lost, byWorkerKill, len(byKilled), len(byPaused), byMasterKill, otherDups, extra,
		outOfOrder, wedged, deadLettered, panics, drained.Round(time.Millisecond), shutdowns, procs[0].outcome, paused.outcome)
	assert.Zero(t, lost, "acknowledged heads never run")
	assert.Zero(t, otherDups)
	assert.Zero(t, gaveUp.Load())
	assert.Zero(t, deadLettered)
	assert.Zero(t, outOfOrder)
	assert.Zero(t, wedged)
	assert.Zero(t, panics)
	assert.Positive(t, len(byKilled), "p1 ran nothing before it was killed: the kill proved nothing")
}

// singleNode is a client of one server.
func singleNode(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// The store while Redis Cluster slots migrate under live traffic (issue 13):
// appends (caller and generated ids, each retried with the same ids until
// it is acknowledged), an ordered lane consumer claiming through the ready
// index (ClaimNext, CompleteAndClaim) and an event consumer claiming per
// session (ClaimAvailable, CompleteAttempts), while slots move. Afterwards
// every acknowledged event must be in the log once, handled (completed)
// once by each consumer, lane heads in index order, and no cursor may be
// left with a head.

const (
	migLaneConsumer  = "lanes"
	migEventConsumer = "events"
	migLanes         = 2
	migTTL           = 3 * time.Second
	migDrain         = 30 * time.Second
	migRepairPass    = 10 * time.Second
)

// TestSlotMigrationRandomOrder moves the slot of every session, and of every
// ready-index shard, to another node by hand (MigrateSlot), one key at a
// time in random order with a pause between keys, so that appends, claims
// and completions run against half-migrated slots.
func TestSlotMigrationRandomOrder(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	cl := redistest.SpawnCluster(t)
	sessions := make([]string, 16)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("mig-%02d", i)
	}
	r := newMigRig(t, cl, sessions)

	// Every session's slot and every ready shard's slot, in random order.
	slotSet := map[int]string{}
	for _, s := range sessions {
		slotSet[r.slotOf[s]] = "session"
	}
	for shard := range r.store.ReadyShards() {
		slot := redistest.KeySlot(keys.ReadyFor(r.prefix, shard).Index())
		if _, ok := slotSet[slot]; !ok {
			slotSet[slot] = "shard"
		}
	}
	var slots []int
	for slot := range slotSet {
		slots = append(slots, slot)
	}
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	rnd.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
	before := r.owners(slots)

	r.run(func(ctx context.Context) {
		time.Sleep(300 * time.Millisecond) // let the sessions fill first
		addrs := cl.Addrs()
		for _, slot := range slots {
			var to string
			for to == "" || to == before[slot] {
				to = addrs[rnd.IntN(len(addrs))]
			}
			r.moving[slot].Add(1)
			st, err := cl.MigrateSlot(ctx, slot, to, redistest.MigrateOptions{Pause: 4 * time.Millisecond, Rand: rnd})
			r.moving[slot].Add(-1)
			r.migratedKeys.Add(int64(st.Keys))
			if err != nil {
				r.noteMigrateError(err)
				continue
			}
			if slotSet[slot] == "session" {
				r.movedSessions.Add(1)
			} else {
				r.movedShards.Add(1)
			}
		}
	})

	after := r.owners(slots)
	changed := 0
	for _, slot := range slots {
		if after[slot] != before[slot] {
			changed++
		}
	}
	r.report(fmt.Sprintf("slots=%d changed owner=%d", len(slots), changed))
	if changed != len(slots) {
		t.Errorf("%d of %d slots changed owner: the migration did not happen", changed, len(slots))
	}
}

// TestSlotMigrationReshard runs the same workload while `redis-cli
// --cluster reshard` moves every slot of one node (a third of them) to
// another and back, so that every session (all chosen on that node) moves
// twice.
func TestSlotMigrationReshard(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	cl := redistest.SpawnCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// redis-cli takes the source's lowest slots: the node of slot 0 gives
	// all of them but its last (a master left with none turns into a
	// replica of the node that took them: cluster-allow-replica-migration)
	// and the second move brings the same ones back.
	zero, err := cl.Owner(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	from := cl.NodeID(zero)
	to := ""
	for _, id := range cl.NodeIDs() {
		if id != from && to == "" {
			to = id
		}
	}
	fromSlots, err := cl.SlotsOf(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	fromSlots = fromSlots[:len(fromSlots)-1]
	onFrom := map[int]bool{}
	for _, s := range fromSlots {
		onFrom[s] = true
	}
	// Sessions whose slots are on the node that gives its slots away.
	prefix := redistest.Prefix(t)
	var sessions []string
	for i := 0; len(sessions) < 16; i++ {
		s := fmt.Sprintf("mig-%03d", i)
		if onFrom[redistest.KeySlot(keys.For(prefix, s).Count())] {
			sessions = append(sessions, s)
		}
	}
	r := newMigRigPrefix(t, cl, prefix, sessions)
	var slots []int
	for _, s := range sessions {
		slots = append(slots, r.slotOf[s])
	}
	shardSlots := 0
	for shard := range r.store.ReadyShards() {
		if onFrom[redistest.KeySlot(keys.ReadyFor(r.prefix, shard).Index())] {
			shardSlots++
		}
	}
	before := r.owners(slots)

	var sampled atomic.Int64
	r.run(func(ctx context.Context) {
		time.Sleep(300 * time.Millisecond)
		// Mark the slots some node shows open, for the overlap count.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var marked []int
			for {
				open, err := cl.OpenSlots(ctx)
				if err == nil {
					for _, s := range marked {
						r.moving[s].Store(0)
					}
					marked = open
					for _, s := range marked {
						r.moving[s].Store(1)
						sampled.Add(1)
					}
				}
				select {
				case <-stop:
					for _, s := range marked {
						r.moving[s].Store(0)
					}
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
		for _, step := range [][2]string{{from, to}, {to, from}} {
			// One key per MIGRATE: a session's slot stays half-moved longer.
			if err := cl.Reshard(ctx, step[0], step[1], len(fromSlots), "--cluster-pipeline", "1"); err != nil {
				r.noteMigrateError(err)
				return
			}
			middle := r.owners(slots)
			moved := 0
			for _, s := range slots {
				if middle[s] == cl.AddrOf(step[1]) {
					moved++
				}
			}
			r.movedSessions.Add(int64(moved))
			r.movedShards.Add(int64(shardSlots))
			r.reshards.Add(1)
		}
	})

	after := r.owners(slots)
	back := 0
	for _, s := range slots {
		if after[s] == before[s] {
			back++
		}
	}
	r.report(fmt.Sprintf("reshards=%d of 2 (%d slots each) open slots sampled=%d sessions back home=%d", r.reshards.Load(), len(fromSlots), sampled.Load(), back))
	if r.reshards.Load() != 2 || r.movedSessions.Load() != int64(2*len(sessions)) {
		t.Errorf("%d reshards moved %d session slots, want 2 moving %d: the migration did not happen", r.reshards.Load(), r.movedSessions.Load(), 2*len(sessions))
	}
}

// headKey names one head: a consumer's cursor at an index.
type headKey struct {
	session, consumer, lane string
	index                   int64
}

// headLog is what the workers did with one head.
type headLog struct {
	id            string // the event id the claims returned
	firstClaim    int64  // sequence number when it was first handed to a handler
	claims        int
	completed     int   // completions that reported Completed
	completeStart int64 // sequence number before the first try of the first successful completion
}

// migRig is one migration test's store, workload and tallies.
type migRig struct {
	t        *testing.T
	ctx      context.Context
	cl       *redistest.ClusterInstance
	client   *redistest.CountingClient
	store    *redisstore.Store
	prefix   string
	sessions []string
	slotOf   map[string]int

	moving [redistest.ClusterSlots]atomic.Int32 // slots being moved now
	seq    atomic.Int64                         // orders claims and completions

	stopAppend, stopWork atomic.Bool

	mu          sync.Mutex
	acked       map[string]map[string]int64 // session → id → acknowledged index
	ackedLane   map[string]map[int64]string // session → acknowledged index → its lane
	unconfirmed map[string][]string         // session → ids of batches given up on
	heads       map[headKey]*headLog
	errSamples  map[string]int // error text (shortened) → count
	migrateErrs []string

	appended, appendBatches                 atomic.Int64
	ops, overlapped, unavailable, otherErrs atomic.Int64
	finalErrs, stuckCompletions             atomic.Int64
	takeovers, superseded, replays          atomic.Int64
	repairs, repairSent, busyKeys           atomic.Int64
	migratedKeys, movedSessions             atomic.Int64
	movedShards, reshards                   atomic.Int64
	// Writes reported a2redis.ErrNotReplicated (with Config.Durability),
	// and appends that, sent again after one, were replayed, or were
	// stored afresh: the write the master had applied was gone.
	notReplicated, notReplicatedReplayed, notReplicatedLost atomic.Int64
	// RepairReady passes migRepairPass cut.
	repairsCut atomic.Int64
}

// newMigRig is newMigRigPrefix on a prefix of its own.
func newMigRig(t *testing.T, cl *redistest.ClusterInstance, sessions []string, tweaks ...func(*redisstore.Config)) *migRig {
	return newMigRigPrefix(t, cl, redistest.Prefix(t), sessions, tweaks...)
}

// newMigRigPrefix makes the rig's store on cl, tweaks applied to its
// config.
func newMigRigPrefix(t *testing.T, cl *redistest.ClusterInstance, prefix string, sessions []string, tweaks ...func(*redisstore.Config)) *migRig {
	t.Helper()
	// The rig's whole budget: its workers and the drain run on this
	// context, so it must outlast a slow migration with room for the drain
	// (a loaded CI machine once took 3 minutes for a reshard, and a
	// 3-minute budget then left the drain nothing: 2,001 heads "wedged").
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	client := redistest.NewCountingClient(cl.Client(t))
	cfg := redisstore.Config{
		Prefix:      prefix,
		PublishWait: -1,
		Consumers:   []a2redis.Consumer{{Name: migLaneConsumer}, {Name: migEventConsumer}},
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	store, err := redisstore.New(ctx, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &migRig{
		t: t, ctx: ctx, cl: cl, client: client, store: store, prefix: prefix, sessions: sessions,
		slotOf:      map[string]int{},
		acked:       map[string]map[string]int64{},
		ackedLane:   map[string]map[int64]string{},
		unconfirmed: map[string][]string{},
		heads:       map[headKey]*headLog{},
		errSamples:  map[string]int{},
	}
	for _, s := range sessions {
		r.slotOf[s] = redistest.KeySlot(keys.For(prefix, s).Count())
		r.acked[s] = map[string]int64{}
		r.ackedLane[s] = map[int64]string{}
	}
	return r
}

// owners returns the address of each slot's owner.
func (r *migRig) owners(slots []int) map[int]string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := map[int]string{}
	for _, s := range slots {
		addr, err := r.cl.Owner(ctx, s)
		if err != nil {
			r.t.Fatalf("owner of slot %d: %v", s, err)
		}
		out[s] = addr
	}
	return out
}

func (r *migRig) noteMigrateError(err error) {
	if errors.Is(err, redistest.ErrBusyKey) {
		r.busyKeys.Add(1)
	}
	r.mu.Lock()
	r.migrateErrs = append(r.migrateErrs, err.Error())
	r.mu.Unlock()
}

// movingNow reports whether the session's slot is being moved.
func (r *migRig) movingNow(session string) bool {
	slot, ok := r.slotOf[session]
	return ok && r.moving[slot].Load() > 0
}

// op runs one store call on session, counting it, whether it overlapped a
// move of its slot, and its error.
func (r *migRig) op(name, session string, fn func() error) error {
	r.ops.Add(1)
	during := r.movingNow(session)
	err := fn()
	if during || r.movingNow(session) {
		r.overlapped.Add(1)
	}
	r.noteErr(name, err)
	return err
}

func (r *migRig) noteErr(name string, err error) {
	if err == nil {
		return
	}
	if errors.Is(err, a2redis.ErrNotReplicated) {
		r.notReplicated.Add(1)
	}
	if errors.Is(err, a2redis.ErrUnavailable) {
		r.unavailable.Add(1)
	} else {
		r.otherErrs.Add(1)
	}
	if !transient(err) {
		r.finalErrs.Add(1)
	}
	text := name + ": " + redistest.ErrorNoise.ReplaceAllString(err.Error(), "…")
	if len(text) > 200 {
		text = text[:200]
	}
	r.mu.Lock()
	if len(r.errSamples) < 40 || r.errSamples[text] > 0 {
		r.errSamples[text]++
	}
	r.mu.Unlock()
}

// transient reports whether repeating the same request may succeed: the
// server refused it for now, or the connection failed. A reply of the
// server or the store's contract (a Lua error, ErrPartialDuplicateBatch,
// ErrUnexpectedReply, …) is final.
func transient(err error) bool {
	if errors.Is(err, a2redis.ErrUnavailable) {
		return true
	}
	for _, final := range []error{a2redis.ErrPartialDuplicateBatch, a2redis.ErrSupersededAttempt, a2redis.ErrSessionCleared,
		a2redis.ErrLayoutMismatch, a2redis.ErrRangeGap, a2redis.ErrInvalidArgument, a2redis.ErrNoEvent, a2redis.ErrUnexpectedReply} {
		if errors.Is(err, final) {
			return false
		}
	}
	var re *rueidis.RedisError
	return !errors.As(err, &re)
}

// run runs the workload while migrate runs, stops appending once it
// returned, and lets the workers drain what was acknowledged (at most
// migDrain; what is left then is wedged, for report to count).
func (r *migRig) run(migrate func(ctx context.Context)) {
	ctx := r.ctx
	var appenders, workers sync.WaitGroup
	for i, s := range r.sessions {
		appenders.Add(1)
		go func() { defer appenders.Done(); r.appender(s, i%2 == 0) }()
	}
	for w := range 3 {
		workers.Add(2)
		go func() { defer workers.Done(); r.laneWorker(fmt.Sprint("lane-", w)) }()
		go func() { defer workers.Done(); r.eventWorker(fmt.Sprint("event-", w)) }()
	}
	workers.Add(1)
	go func() { defer workers.Done(); r.repairer() }()

	start := time.Now()
	migrate(ctx)
	migrated := time.Since(start)
	r.stopAppend.Store(true)
	appenders.Wait()

	drainStart := time.Now()
	for time.Since(drainStart) < migDrain && !r.drained() {
		time.Sleep(20 * time.Millisecond)
	}
	drained := time.Since(drainStart)
	r.stopWork.Store(true)
	workers.Wait()
	r.t.Logf("migration %v, drain %v", migrated.Round(time.Millisecond), drained.Round(time.Millisecond))
}

// appender appends batches of 1–3 events to session, each event on one of
// the session's lanes and for the event consumer, with caller ids
// (explicit) or generated ones; a failed batch is sent again with the same
// ids until it is acknowledged.
func (r *migRig) appender(session string, explicit bool) {
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	n := 0
	for !r.stopAppend.Load() && r.ctx.Err() == nil {
		batch := make([]a2redis.Event, 1+rnd.IntN(3))
		for i := range batch {
			lane := fmt.Sprint("L", rnd.IntN(migLanes))
			batch[i] = a2redis.Event{
				Type:    lane,
				Targets: []a2redis.Target{{Consumer: migLaneConsumer, Lane: lane}, {Consumer: migEventConsumer}},
			}
			if explicit {
				batch[i].ID = fmt.Sprintf("%s-e%d", session, n)
				n++
			}
		}
		r.appendBatches.Add(1)
		var res redisstore.AppendResult
		var giveUp time.Time
		notReplicated := false
		for {
			err := r.op("append", session, func() (err error) {
				res, err = r.store.Append(r.ctx, session, batch, redisstore.AppendOptions{})
				return err
			})
			if err == nil {
				switch {
				case notReplicated && res.Replayed:
					r.notReplicatedReplayed.Add(1)
				case notReplicated:
					r.notReplicatedLost.Add(1)
				}
				break
			}
			notReplicated = notReplicated || errors.Is(err, a2redis.ErrNotReplicated)
			var be *a2redis.BatchError
			if errors.As(err, &be) {
				if withIDs := be.WithIDs(batch); withIDs != nil {
					batch = withIDs
				}
			}
			if r.stopAppend.Load() && giveUp.IsZero() {
				giveUp = time.Now().Add(10 * time.Second)
			}
			if !transient(err) || r.ctx.Err() != nil || (!giveUp.IsZero() && time.Now().After(giveUp)) {
				r.mu.Lock()
				for _, e := range batch {
					if e.ID != "" {
						r.unconfirmed[session] = append(r.unconfirmed[session], e.ID)
					}
				}
				r.mu.Unlock()
				res = redisstore.AppendResult{}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if len(res.Events) > 0 {
			r.mu.Lock()
			for _, e := range res.Events {
				r.acked[session][e.ID] = e.Index
				r.ackedLane[session][e.Index] = e.Type
			}
			r.mu.Unlock()
			r.appended.Add(int64(len(res.Events)))
		}
		time.Sleep(time.Duration(60+rnd.IntN(60)) * time.Millisecond)
	}
}

// claimed records heads handed to this worker's handler.
func (r *migRig) claimed(session string, heads []a2redis.HeadEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range heads {
		k := headKey{session, h.Consumer, h.Lane, h.Index}
		hl := r.heads[k]
		if hl == nil {
			hl = &headLog{id: h.ID, firstClaim: r.seq.Add(1)}
			r.heads[k] = hl
		}
		hl.claims++
		if h.Attempts > 1 {
			r.takeovers.Add(1)
		}
	}
}

// completed records the results of completions whose first try started at
// sequence number start.
func (r *migRig) completed(session string, done []redisstore.Attempt, results []redisstore.CompleteResult, start int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, res := range results {
		h := done[i].Head
		if res.Outcome != redisstore.Completed {
			r.superseded.Add(1)
			continue
		}
		if res.Replayed {
			r.replays.Add(1)
		}
		hl := r.heads[headKey{session, h.Consumer, h.Lane, h.Index}]
		if hl.completed == 0 {
			hl.completeStart = start
		}
		hl.completed++
	}
}

func migCompletions(heads []a2redis.HeadEvent) []redisstore.Attempt {
	out := make([]redisstore.Attempt, len(heads))
	for i, h := range heads {
		out[i] = redisstore.AttemptOf(h)
	}
	return out
}

// laneWorker claims the lane consumer's heads through the ready index and
// completes each lane's heads in a chain (CompleteAndClaim), ending a chain
// after a few links with a plain CompleteAttempts.
func (r *migRig) laneWorker(holder string) {
	only := []a2redis.Consumer{{Name: migLaneConsumer}}
	for !r.stopWork.Load() && r.ctx.Err() == nil {
		r.ops.Add(1)
		next, err := r.store.ClaimNext(r.ctx, redisstore.ClaimNextRequest{Holder: holder, TTL: migTTL, Consumers: only, Limit: 4})
		if next.Session != "" && r.movingNow(next.Session) {
			r.overlapped.Add(1)
		}
		r.noteErr("ClaimNext", err)
		if err != nil || next.Outcome != redisstore.Claimed {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		session, heads := next.Session, next.Heads
		for link := 0; len(heads) > 0 && r.ctx.Err() == nil; link++ {
			r.claimed(session, heads)
			done := migCompletions(heads)
			req := redisstore.CompleteAttemptsRequest{Session: session, Attempts: done, Consumers: only}
			chain := link < 16 && !r.stopWork.Load()
			start := r.seq.Add(1)
			var results []redisstore.CompleteResult
			heads = nil
			for {
				err := r.op("lane completion", session, func() error {
					if !chain {
						res, err := r.store.CompleteAttempts(r.ctx, req)
						results = res
						return err
					}
					res, err := r.store.CompleteAndClaim(r.ctx, req, redisstore.NextClaim{Holder: holder, TTL: migTTL})
					results = res.Results
					if err == nil && res.Next.Outcome == redisstore.Claimed {
						heads = res.Next.Heads
					}
					return err
				})
				if err == nil {
					r.completed(session, done, results, start)
					break
				}
				if !transient(err) || r.ctx.Err() != nil || r.stopWork.Load() {
					r.stuckCompletions.Add(1)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

// eventWorker claims the event consumer's heads of random sessions
// (ClaimAvailable) and completes them in one call (CompleteAttempts).
func (r *migRig) eventWorker(holder string) {
	only := []a2redis.Consumer{{Name: migEventConsumer}}
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for !r.stopWork.Load() && r.ctx.Err() == nil {
		session := r.sessions[rnd.IntN(len(r.sessions))]
		var claim redisstore.ClaimResult
		err := r.op("ClaimAvailable", session, func() (err error) {
			claim, err = r.store.ClaimAvailable(r.ctx, redisstore.ClaimRequest{Session: session, Holder: holder, TTL: migTTL, Consumers: only, Limit: 32})
			return err
		})
		if err != nil || claim.Outcome != redisstore.Claimed {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		r.claimed(session, claim.Heads)
		done := migCompletions(claim.Heads)
		start := r.seq.Add(1)
		for {
			var results []redisstore.CompleteResult
			err := r.op("CompleteAttempts", session, func() (err error) {
				results, err = r.store.CompleteAttempts(r.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done, Consumers: only})
				return err
			})
			if err == nil {
				r.completed(session, done, results, start)
				break
			}
			if !transient(err) || r.ctx.Err() != nil || r.stopWork.Load() {
				r.stuckCompletions.Add(1)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// repairer runs the ready index's repair every second, as the worker
// runtime's TryRepairReady would (every 30s by default), each pass within
// migRepairPass (counted in repairsCut when that cut it).
func (r *migRig) repairer() {
	for !r.stopWork.Load() && r.ctx.Err() == nil {
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(r.ctx, migRepairPass)
		st, err := r.store.RepairReady(ctx)
		if ctx.Err() != nil && r.ctx.Err() == nil {
			r.repairsCut.Add(1)
		}
		cancel()
		r.noteErr("RepairReady", err)
		r.repairs.Add(1)
		r.repairSent.Add(int64(st.Sent))
	}
}

// drained reports whether every acknowledged event was completed by both
// consumers.
func (r *migRig) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, lanes := range r.ackedLane {
		for index, lane := range lanes {
			for _, k := range []headKey{{s, migEventConsumer, "", index}, {s, migLaneConsumer, lane, index}} {
				if hl := r.heads[k]; hl == nil || hl.completed == 0 {
					return false
				}
			}
		}
	}
	return true
}

// check reads one session's final state within a few seconds.
func (r *migRig) check() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// dumpSession logs a wedged session's runnable set, live count and ready
// record, raw.
func (r *migRig) dumpSession(session string) {
	ctx, cancel := r.check()
	defer cancel()
	k := keys.For(r.prefix, session)
	c := r.client
	runnable, err1 := c.Do(ctx, c.B().Zrange().Key(k.Runnable()).Min("0").Max("-1").Withscores().Build()).AsZScores()
	live, err2 := c.Do(ctx, c.B().Get().Key(k.Live()).Build()).ToString()
	listed, err3 := c.Do(ctx, c.B().Get().Key(k.Listed()).Build()).ToString()
	r.t.Logf("wedged session %s: runnable=%v (%v) live=%q (%v) listed=%q (%v)", session, runnable, err1, live, err2, listed, err3)
}

// report checks the outcome and logs the counts in one line.
func (r *migRig) report(extra string) {
	t := r.t
	var lost, logDups, unackedStored, halfApplied, unreadable int
	var doubleDone, orderViolations, unhandled, misdelivered int
	var wedgedCursors, deadLettered, unlistedWork, stuckSessions, directlyClaimable int
	ackedTotal := 0

	// The repair the worker runtime runs, then the index must list every
	// session with work left.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if _, err := r.store.RepairReady(ctx); err != nil {
		t.Logf("RepairReady: %v", err)
		unreadable++
	}
	open, err := r.cl.OpenSlots(ctx)
	if err != nil {
		t.Logf("open slots: %v", err)
	}
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	byIndex := map[string]map[int64]a2redis.StoredEvent{}
	for _, s := range r.sessions {
		ackedTotal += len(r.acked[s])
		ctx, cancel := r.check()
		events, err := r.store.Read(ctx, s, 0, 0)
		var b redisstore.Bounds
		if err == nil {
			b, err = r.store.Bounds(ctx, s)
		}
		var cursors []a2redis.Cursor
		if err == nil {
			cursors, err = r.store.Cursors(ctx, s)
		}
		var ready redisstore.ReadyState
		if err == nil {
			ready, err = r.store.ReadyAt(ctx, s)
		}
		cancel()
		if err != nil {
			// A slot left half-moved: nothing of it can be checked.
			unreadable++
			t.Logf("session %s (slot %d, left open: %v): unreadable: %v", s, r.slotOf[s], slices.Contains(open, r.slotOf[s]), err)
			continue
		}
		byIndex[s] = map[int64]a2redis.StoredEvent{}
		seen := map[string]int{}
		for _, e := range events {
			byIndex[s][e.Index] = e
			seen[e.ID]++
			if seen[e.ID] == 2 {
				logDups++
			}
			if _, ok := r.acked[s][e.ID]; !ok && !slices.Contains(r.unconfirmed[s], e.ID) {
				unackedStored++
			}
		}
		for id, index := range r.acked[s] {
			if e, ok := byIndex[s][index]; !ok || e.ID != id {
				lost++
				if lost <= 5 {
					t.Logf("lost: session %s id %s acknowledged at %d (the log has %q there)", s, id, index, e.ID)
				}
			}
		}
		if n := int64(len(events)); b.Head != n {
			halfApplied++
			t.Logf("half-applied: session %s: its counter says %d events, its log has %d", s, b.Head, n)
		}

		// Each stored event: handled once per consumer, lanes in order.
		lastOf := map[string]*headLog{}
		indexes := make([]int64, 0, len(byIndex[s]))
		for i := range byIndex[s] {
			indexes = append(indexes, i)
		}
		sort.Slice(indexes, func(i, j int) bool { return indexes[i] < indexes[j] })
		for _, i := range indexes {
			e := byIndex[s][i]
			for _, k := range []headKey{{s, migEventConsumer, "", i}, {s, migLaneConsumer, e.Type, i}} {
				hl := r.heads[k]
				switch {
				case hl == nil || hl.completed == 0:
					unhandled++
				case hl.completed > 1:
					doubleDone++
				}
				if hl != nil && hl.id != e.ID {
					misdelivered++
				}
				if k.lane == "" || hl == nil {
					continue
				}
				if prev := lastOf[k.lane]; prev != nil && prev.completed > 0 && hl.firstClaim < prev.completeStart {
					orderViolations++
					t.Logf("order: session %s lane %s index %d was claimed before its predecessor's completion began", s, k.lane, i)
				}
				lastOf[k.lane] = hl
			}
		}

		withWork := false
		for _, c := range cursors {
			if c.Head == 0 {
				continue
			}
			withWork = true
			if c.DeadLettered() {
				deadLettered++
			} else {
				wedgedCursors++
			}
			if wedgedCursors+deadLettered <= 5 {
				t.Logf("wedged: session %s cursor %+v", s, c)
			}
		}
		if withWork {
			stuckSessions++
			if stuckSessions <= 3 {
				r.dumpSession(s)
			}
			if !ready.Listed {
				unlistedWork++
			}
			// Diagnosis: could a claim naming the session take them?
			ctx, cancel := r.check()
			claim, err := r.store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: s, Holder: "diagnosis", TTL: time.Minute, Limit: 1000})
			cancel()
			if err == nil {
				directlyClaimable += len(claim.Heads)
			}
		}
	}
	for k, hl := range r.heads {
		if events, ok := byIndex[k.session]; ok && hl.claims > 0 {
			if _, ok := events[k.index]; !ok {
				misdelivered++
			}
		}
	}
	duplicated := logDups + doubleDone + orderViolations
	wedged := wedgedCursors + deadLettered
	var errs []string
	for text, n := range r.errSamples {
		errs = append(errs, fmt.Sprintf("%6dx %s", n, text))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(errs)))
	if len(errs) > 12 {
		errs = errs[:12]
	}
	keysMoved := fmt.Sprint(r.migratedKeys.Load())
	if r.reshards.Load() > 0 {
		keysMoved = "(redis-cli's)"
	}
	t.Logf("runs=1 sessions=%d sessions moved=%d shard slots moved=%d keys migrated=%s %s | appended=%d (batches %d) acked=%d | lost=%d duplicated=%d (log dups %d, double completions %d, lane order %d) wedged=%d (cursors with a head %d, dead %d, in %d sessions, unlisted %d, heads a direct ClaimAvailable took %d) unreadable sessions=%d slots left open=%d unhandled=%d misdelivered=%d half-applied=%d unacked stored=%d | ops=%d overlapped a move=%d errors: unavailable=%d other=%d final=%d stuck completions=%d busykey=%d migrate errors=%d | takeovers=%d superseded=%d replays=%d repairs=%d (sent %d) | refusals the store got: non-local key=%d TRYAGAIN=%d ASK/MOVED=%d CLUSTERDOWN=%d",
		len(r.sessions), r.movedSessions.Load(), r.movedShards.Load(), keysMoved, extra,
		r.appended.Load(), r.appendBatches.Load(), ackedTotal,
		lost, duplicated, logDups, doubleDone, orderViolations, wedged, wedgedCursors, deadLettered, stuckSessions, unlistedWork, directlyClaimable,
		unreadable, len(open), unhandled, misdelivered, halfApplied, unackedStored,
		r.ops.Load(), r.overlapped.Load(), r.unavailable.Load(), r.otherErrs.Load(), r.finalErrs.Load(), r.stuckCompletions.Load(), r.busyKeys.Load(), len(r.migrateErrs),
		r.takeovers.Load(), r.superseded.Load(), r.replays.Load(), r.repairs.Load(), r.repairSent.Load(),
		r.client.NonLocal.Load(), r.client.TryAgain.Load(), r.client.AskMoved.Load(), r.client.ClusterDown.Load())
	if len(errs) > 0 {
		t.Logf("errors callers saw (first kinds):\n  %s", strings.Join(errs, "\n  "))
	}
	for i, e := range r.migrateErrs {
		if i < 5 {
			t.Logf("migration error: %s", e)
		}
	}
	switch {
	case ackedTotal == 0:
		t.Error("nothing was appended")
	case r.overlapped.Load() == 0 && r.client.Refusals() == 0:
		t.Error("no operation ran while a slot was being moved, none was refused: the test proved nothing")
	}
	if lost > 0 || duplicated > 0 || wedged > 0 || unreadable > 0 || unhandled > 0 || misdelivered > 0 || halfApplied > 0 || unlistedWork > 0 {
		t.Errorf("lost=%d duplicated=%d wedged=%d unreadable=%d unhandled=%d misdelivered=%d half-applied=%d unlisted=%d, want all 0",
			lost, duplicated, wedged, unreadable, unhandled, misdelivered, halfApplied, unlistedWork)
	}
	if len(r.migrateErrs) > 0 {
		t.Errorf("%d slot moves failed (%d BUSYKEY): %s", len(r.migrateErrs), r.busyKeys.Load(), r.migrateErrs[0])
	}
}

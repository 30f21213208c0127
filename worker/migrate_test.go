package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// The worker runtime while Redis Cluster slots migrate (issue 13): two
// workers (each with its own client and store, as two processes would be)
// run a lane consumer and an event consumer on one prefix of a private
// cluster while appenders add events to sessions (each batch retried with
// the same ids until it is acknowledged). Meanwhile MigrateSlot moves every
// session's slot, and every ready-index shard's slot, to one node (hub),
// one key at a time in random order; then `redis-cli --cluster reshard`
// moves all of hub's slots but one to another node and as many back, so
// every session moves three times and every shard at least once.
// Afterwards every acknowledged event must have been handled once by each
// consumer, each lane strictly in order, with nothing left on any cursor.

const (
	wmLaneConsumer  = "lanes"
	wmEventConsumer = "events"
	wmSessions      = 20
	wmLanes         = 3
	wmMaxPerSession = 150 // events: at most 3000 in all
	wmDrain         = 30 * time.Second
	wmEcho          = "echo" // the type of the events the event consumer returns
)

// wmKey names one (consumer, event) pair.
type wmKey struct {
	consumer, session string
	index             int64
}

// wmCall is one handler invocation; start and end are numbers of one
// sequence shared by every handler, so calls can be ordered.
type wmCall struct {
	start, end int64 // end is 0 while it runs (or when it failed)
	ok         bool
	id         string // the event id the head carried
	attempt    int64
	worker     string
	echoed     bool // it returned an event
}

// wmRig is the test's workload and tallies.
type wmRig struct {
	t        *testing.T
	ctx      context.Context
	cl       *redistest.ClusterInstance
	prefix   string
	sessions []string
	slotOf   map[string]int
	store    *redisstore.Store // the appenders' and the checks' store
	clients  []*redistest.CountingClient

	moving [redistest.ClusterSlots]atomic.Int32 // slots some node shows open
	seq    atomic.Int64

	stopAppend atomic.Bool

	mu          sync.Mutex
	acked       map[string]map[string]int64 // session → id → acknowledged index
	calls       map[wmKey][]wmCall
	outcomes    map[wmKey]map[worker.OutcomeKind]int
	kinds       map[worker.OutcomeKind]int
	laneBusy    map[string]int // session/lane → its handlers running now
	concurrent  int            // a lane handler started while another of its lane ran
	mismatched  int            // a lane head whose lane is not its event's type
	runtimeErrs map[string]int // worker → runtime errors (ErrorHandler, head nil)
	errSamples  map[string]int
	handlerErrs int

	appended, batches, givenUp, appendErrs atomic.Int64
	overlapped                             atomic.Int64 // handler calls and appends while their slot was open
}

// TestWorkerSurvivesReshard: see the comment above the constants.
func TestWorkerSurvivesReshard(t *testing.T) {
	redistest.Chaos(t)
	t.Parallel()
	cl := redistest.SpawnCluster(t)
	// A budget a slow reshard on a loaded machine fits in (a reshard once
	// took 3 minutes under CI load, the whole of another rig's budget).
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The sessions start on the node of slot 0 (home); hub is where
	// MigrateSlot takes them and the shards, and the reshard moves the
	// slots of hub to the third node (other) and back.
	zero, err := cl.Owner(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	home := cl.NodeID(zero)
	var hub, other string
	for _, id := range cl.NodeIDs() {
		switch {
		case id == home:
		case hub == "":
			hub = id
		default:
			other = id
		}
	}
	homeSlots, err := cl.SlotsOf(ctx, home)
	if err != nil {
		t.Fatal(err)
	}
	onHome := map[int]bool{}
	for _, s := range homeSlots {
		onHome[s] = true
	}
	prefix := redistest.Prefix(t)
	var sessions []string
	for i := 0; len(sessions) < wmSessions; i++ {
		s := fmt.Sprintf("wm-%03d", i)
		if onHome[redistest.KeySlot(keys.For(prefix, s).Count())] {
			sessions = append(sessions, s)
		}
	}
	r := newWMRig(t, ctx, cl, prefix, sessions)
	consumers := []a2redis.Consumer{{Name: wmLaneConsumer}, {Name: wmEventConsumer}}
	var shardSlots []int
	for shard := range r.store.ReadyShards() {
		if slot := redistest.KeySlot(keys.ReadyFor(prefix, shard).Index()); !slices.Contains(shardSlots, slot) {
			shardSlots = append(shardSlots, slot)
		}
	}
	tracked := slices.Concat(r.sessionSlots(), shardSlots)
	stages := []map[int]string{r.owners(tracked)} // the owner of each tracked slot after each stage

	// Two workers, each with its own client and store.
	type runningWorker struct {
		id  string
		w   *worker.Worker
		err chan error
	}
	var workers []*runningWorker
	for _, id := range []string{"w1", "w2"} {
		store := r.newStore(consumers)
		w, err := worker.New(store, worker.Config{
			ID:     id,
			Logger: quiet(),
			Hooks:  worker.Hooks{OnOutcome: r.outcome},
			ErrorHandler: func(_ context.Context, head *a2redis.HeadEvent, err error) {
				r.workerError(id, head, err)
			},
		},
			worker.Handle(wmLaneConsumer, r.handler(id, wmLaneConsumer)),
			worker.Handle(wmEventConsumer, r.handler(id, wmEventConsumer)),
		)
		if err != nil {
			t.Fatal(err)
		}
		rw := &runningWorker{id: id, w: w, err: make(chan error, 1)}
		go func() { rw.err <- w.Run(ctx) }()
		workers = append(workers, rw)
	}
	stopped := false
	stopWorkers := func() map[string]error {
		out := map[string]error{}
		if stopped {
			return out
		}
		stopped = true
		for _, rw := range workers {
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = rw.w.Shutdown(sctx)
			scancel()
			select {
			case err := <-rw.err:
				out[rw.id] = err
			case <-time.After(30 * time.Second):
				out[rw.id] = errors.New("Run did not return")
			}
		}
		return out
	}
	defer stopWorkers()

	var appenders sync.WaitGroup
	for i, s := range sessions {
		appenders.Go(func() { r.appender(s, i%2 == 0) })
	}
	sampleStop := r.sampleOpenSlots()

	// The moves. First MigrateSlot takes every session's slot and every
	// shard's slot not on hub there, one key at a time in random order;
	// then redis-cli moves all of hub's slots but its last (a master left
	// with none turns into a replica) to other, and as many back (it takes
	// the lowest slots: the sessions' among them). Only one node imports
	// at a time: MigrateSlot moving slots there and back between all three
	// nodes in quick succession (no traffic needed) left Redis 7.0.15, in
	// about one of 200 moves, with two nodes each sure the other owned a
	// slot, for good (it looks like a configEpoch collision of two
	// importers).
	start := time.Now()
	var migrateErrs []string
	failed := func(format string, args ...any) {
		migrateErrs = append(migrateErrs, fmt.Sprintf("at %v: ", time.Since(start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
	reshards, reshardSlots, byHand := 0, 0, 0
	time.Sleep(300 * time.Millisecond) // let the sessions fill first
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var toHub []int
	for _, slot := range tracked {
		if stages[0][slot] != cl.AddrOf(hub) && !slices.Contains(toHub, slot) {
			toHub = append(toHub, slot)
		}
	}
	rnd.Shuffle(len(toHub), func(i, j int) { toHub[i], toHub[j] = toHub[j], toHub[i] })
	for _, slot := range toHub {
		if _, err := cl.MigrateSlot(ctx, slot, cl.AddrOf(hub), redistest.MigrateOptions{Pause: 4 * time.Millisecond, Rand: rnd}); err != nil {
			failed("MigrateSlot %d: %v", slot, err)
			break
		}
		byHand++
	}
	if len(migrateErrs) == 0 {
		stages = append(stages, r.owners(tracked))
		hubSlots, err := cl.SlotsOf(ctx, hub)
		if err != nil {
			t.Fatal(err)
		}
		reshardSlots = len(hubSlots) - 1
		for _, step := range [][2]string{{hub, other}, {other, hub}} {
			// One key per MIGRATE: a session's slot stays half-moved longer.
			if err := cl.Reshard(ctx, step[0], step[1], reshardSlots, "--cluster-pipeline", "1"); err != nil {
				failed("Reshard: %v", err)
				break
			}
			reshards++
			stages = append(stages, r.owners(tracked))
		}
	}
	moveTime := time.Since(start)
	sampleStop()

	// Stop appending, then wait until both consumers handled every
	// acknowledged event.
	r.stopAppend.Store(true)
	appenders.Wait()
	drainStart := time.Now()
	for time.Since(drainStart) < wmDrain && !r.drained() {
		time.Sleep(20 * time.Millisecond)
	}
	drainTime := time.Since(drainStart)

	// What the cursors and the index say is left.
	wedgedCursors, dead := 0, 0
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	logs := map[string][]a2redis.StoredEvent{}
	unreadable := 0
	for _, s := range sessions {
		cs, err := r.store.Cursors(cctx, s)
		if err == nil {
			logs[s], err = r.store.Read(cctx, s, 0, 0)
		}
		if err != nil {
			unreadable++
			t.Logf("session %s: unreadable: %v", s, err)
			continue
		}
		for _, c := range cs {
			if c.Head == 0 {
				continue
			}
			if c.DeadLettered() {
				dead++
			} else {
				wedgedCursors++
			}
			if wedgedCursors+dead <= 5 {
				t.Logf("wedged: session %s cursor %+v", s, c)
			}
		}
	}
	var due, held int64
	if stats, err := r.store.ReadyStats(cctx); err != nil {
		t.Logf("ReadyStats: %v", err)
		unreadable++
	} else {
		for _, st := range stats {
			due, held = due+st.Due, held+st.Held
		}
	}
	runErrs := stopWorkers()

	r.report(wmReport{
		logs: logs, unreadable: unreadable, wedgedCursors: wedgedCursors, dead: dead, due: due, held: held,
		runErrs: runErrs, migrateErrs: migrateErrs, moveTime: moveTime, drainTime: drainTime,
		reshards: reshards, reshardSlots: reshardSlots, byHand: byHand, shardSlots: shardSlots, stages: stages,
	})
}

func newWMRig(t *testing.T, ctx context.Context, cl *redistest.ClusterInstance, prefix string, sessions []string) *wmRig {
	r := &wmRig{
		t: t, ctx: ctx, cl: cl, prefix: prefix, sessions: sessions, slotOf: map[string]int{},
		acked: map[string]map[string]int64{}, calls: map[wmKey][]wmCall{},
		outcomes: map[wmKey]map[worker.OutcomeKind]int{}, kinds: map[worker.OutcomeKind]int{},
		laneBusy: map[string]int{}, runtimeErrs: map[string]int{}, errSamples: map[string]int{},
	}
	for _, s := range sessions {
		r.slotOf[s] = redistest.KeySlot(keys.For(prefix, s).Count())
		r.acked[s] = map[string]int64{}
	}
	r.store = r.newStore([]a2redis.Consumer{{Name: wmLaneConsumer}, {Name: wmEventConsumer}})
	return r
}

// newStore returns a store on the rig's prefix with a client of its own.
func (r *wmRig) newStore(consumers []a2redis.Consumer) *redisstore.Store {
	r.t.Helper()
	c := redistest.NewCountingClient(r.cl.Client(r.t))
	r.clients = append(r.clients, c)
	s, err := redisstore.New(r.ctx, c, redisstore.Config{Prefix: r.prefix, Consumers: consumers})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *wmRig) sessionSlots() []int {
	var out []int
	for _, s := range r.sessions {
		out = append(out, r.slotOf[s])
	}
	return out
}

// owners returns the address of each slot's owner.
func (r *wmRig) owners(slots []int) map[int]string {
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

// sampleOpenSlots marks the slots some node shows migrating or importing,
// until the returned function is called.
func (r *wmRig) sampleOpenSlots() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var marked []int
		unmark := func() {
			for _, s := range marked {
				r.moving[s].Store(0)
			}
		}
		defer unmark()
		for {
			if open, err := r.cl.OpenSlots(r.ctx); err == nil {
				unmark()
				marked = open
				for _, s := range marked {
					r.moving[s].Store(1)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (r *wmRig) movingNow(session string) bool {
	slot, ok := r.slotOf[session]
	return ok && r.moving[slot].Load() > 0
}

// handler records every invocation of consumer's handler in worker id; the
// event consumer returns an event for every fourth index (a completion
// that appends, CompleteAttempt, instead of a batched one).
func (r *wmRig) handler(id, consumer string) worker.Handler {
	return func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
		if r.movingNow(h.Session) {
			r.overlapped.Add(1)
		}
		k := wmKey{consumer, h.Session, h.Index}
		lane := h.Session + "/" + h.Lane
		r.mu.Lock()
		call := wmCall{start: r.seq.Add(1), id: h.ID, attempt: h.Attempts, worker: id}
		i := len(r.calls[k])
		r.calls[k] = append(r.calls[k], call)
		if consumer == wmLaneConsumer {
			if r.laneBusy[lane] > 0 {
				r.concurrent++
			}
			r.laneBusy[lane]++
			if h.Lane != h.Type {
				r.mismatched++
			}
		}
		r.mu.Unlock()
		defer func() {
			if consumer == wmLaneConsumer {
				r.mu.Lock()
				r.laneBusy[lane]--
				r.mu.Unlock()
			}
		}()
		select {
		case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		var out []a2redis.Event
		if consumer == wmEventConsumer && h.Index%4 == 0 {
			out = []a2redis.Event{{Type: wmEcho}}
		}
		r.mu.Lock()
		c := &r.calls[k][i]
		c.end, c.ok, c.echoed = r.seq.Add(1), true, len(out) > 0
		r.mu.Unlock()
		return out, nil
	}
}

func (r *wmRig) outcome(_ context.Context, o worker.Outcome) {
	k := wmKey{o.Head.Consumer, o.Head.Session, o.Head.Index}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes[k] == nil {
		r.outcomes[k] = map[worker.OutcomeKind]int{}
	}
	r.outcomes[k][o.Kind]++
	r.kinds[o.Kind]++
}

// wmNoise matches the parts of error texts that differ between sessions,
// heads and addresses.
var wmNoise = regexp.MustCompile(`"wm-[0-9]+"|[0-9]+ (heads|claims|unstarted claims)|[0-9.]+:[0-9]+|script: [0-9a-f]+`)

func (r *wmRig) workerError(id string, head *a2redis.HeadEvent, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if head != nil {
		r.handlerErrs++
	} else {
		r.runtimeErrs[id]++
	}
	text := wmNoise.ReplaceAllString(err.Error(), "…")
	if len(text) > 200 {
		text = text[:200]
	}
	if len(r.errSamples) < 20 || r.errSamples[text] > 0 {
		r.errSamples[text]++
	}
}

// appender appends batches of 1–3 events to session, each on one of the
// session's lanes and for the event consumer, with caller ids (explicit)
// or generated ones; a failed batch is sent again with the same ids
// (BatchError.WithIDs) until it is acknowledged.
func (r *wmRig) appender(session string, explicit bool) {
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	n := 0
	for !r.stopAppend.Load() && r.ctx.Err() == nil && n < wmMaxPerSession {
		batch := make([]a2redis.Event, min(1+rnd.IntN(3), wmMaxPerSession-n))
		for i := range batch {
			lane := fmt.Sprint("L", rnd.IntN(wmLanes))
			batch[i] = a2redis.Event{
				Type:    lane,
				Targets: []a2redis.Target{{Consumer: wmLaneConsumer, Lane: lane}, {Consumer: wmEventConsumer}},
			}
			if explicit {
				batch[i].ID = fmt.Sprintf("%s-e%d", session, n+i)
			}
		}
		n += len(batch)
		r.batches.Add(1)
		var giveUp time.Time
		for {
			if r.movingNow(session) {
				r.overlapped.Add(1)
			}
			res, err := r.store.Append(r.ctx, session, batch, redisstore.AppendOptions{})
			if err == nil {
				r.mu.Lock()
				for _, e := range res.Events {
					r.acked[session][e.ID] = e.Index
				}
				r.mu.Unlock()
				r.appended.Add(int64(len(res.Events)))
				break
			}
			r.appendErrs.Add(1)
			var be *a2redis.BatchError
			if errors.As(err, &be) {
				if withIDs := be.WithIDs(batch); withIDs != nil {
					batch = withIDs
				}
			}
			if r.stopAppend.Load() && giveUp.IsZero() {
				giveUp = time.Now().Add(15 * time.Second)
			}
			if r.ctx.Err() != nil || (!giveUp.IsZero() && time.Now().After(giveUp)) {
				r.givenUp.Add(int64(len(batch)))
				r.t.Logf("append to %s given up: %v", session, err)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(200+rnd.IntN(200)) * time.Millisecond)
	}
}

// drained reports whether both consumers completed every acknowledged
// event.
func (r *wmRig) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, ids := range r.acked {
		for _, index := range ids {
			for _, c := range []string{wmLaneConsumer, wmEventConsumer} {
				if r.outcomes[wmKey{c, s, index}][worker.OutcomeCompleted] == 0 {
					return false
				}
			}
		}
	}
	return true
}

// wmReport is what the test gathered after the drain.
type wmReport struct {
	logs                            map[string][]a2redis.StoredEvent
	unreadable, wedgedCursors, dead int
	due, held                       int64
	runErrs                         map[string]error
	migrateErrs                     []string
	moveTime, drainTime             time.Duration
	reshards, reshardSlots, byHand  int
	shardSlots                      []int
	// stages holds the owner of every session's and shard's slot at the
	// start and after each stage of the moves.
	stages []map[int]string
}

// report counts, logs them in one line and fails the test on any loss,
// duplicate, order break or wedge, or when the moves did not happen.
func (r *wmRig) report(p wmReport) {
	t := r.t
	r.mu.Lock()
	defer r.mu.Unlock()
	consumers := []string{wmLaneConsumer, wmEventConsumer}

	acked := 0
	handled := map[string]int{}
	lost, logLost, logDups := 0, 0, 0
	for _, s := range r.sessions {
		byIndex := map[int64]a2redis.StoredEvent{}
		seen := map[string]int{}
		for _, e := range p.logs[s] {
			byIndex[e.Index] = e
			if seen[e.ID]++; seen[e.ID] == 2 {
				logDups++
			}
		}
		for id, index := range r.acked[s] {
			acked++
			if e, ok := byIndex[index]; p.logs[s] != nil && (!ok || e.ID != id) {
				logLost++
			}
			for _, c := range consumers {
				if r.outcomes[wmKey{c, s, index}][worker.OutcomeCompleted] > 0 {
					handled[c]++
				} else {
					lost++
					if lost <= 5 {
						t.Logf("lost: %s never completed session %s #%d (id %s): calls %+v outcomes %v",
							c, s, index, id, r.calls[wmKey{c, s, index}], r.outcomes[wmKey{c, s, index}])
					}
				}
			}
		}
	}

	// Handler calls: more than one for an (consumer, event) is a
	// duplicate; say why it ran again.
	dupCalls, dupKeys := 0, 0
	why := map[string]int{}
	wrongID := 0
	for k, calls := range r.calls {
		for _, c := range calls {
			if e, ok := findEvent(p.logs[k.session], k.index); ok && e.ID != c.id {
				wrongID++
			}
		}
		if len(calls) < 2 {
			continue
		}
		dupKeys++
		dupCalls += len(calls) - 1
		var reason []string
		for _, c := range calls {
			reason = append(reason, fmt.Sprintf("attempt %d on %s ok=%v", c.attempt, c.worker, c.ok))
		}
		kinds := make([]string, 0, len(r.outcomes[k]))
		for kind, n := range r.outcomes[k] {
			kinds = append(kinds, fmt.Sprintf("%s×%d", kind, n))
		}
		sort.Strings(kinds)
		why[strings.Join(kinds, ",")]++
		if dupKeys <= 5 {
			t.Logf("duplicate: %s session %s #%d ran %d times (%s), outcomes %v", k.consumer, k.session, k.index, len(calls), strings.Join(reason, "; "), kinds)
		}
	}

	// The events the event consumer returned: each in the log once, with
	// its cause.
	echoDups, echoMissing, echoStray := 0, 0, 0
	for _, s := range r.sessions {
		byCause := map[int64]int{}
		for _, e := range p.logs[s] {
			if e.Type != wmEcho {
				continue
			}
			if e.Cause == nil || e.Cause.Consumer != wmEventConsumer {
				echoStray++
				continue
			}
			byCause[e.Cause.Index]++
		}
		for index, n := range byCause {
			if n > 1 {
				echoDups += n - 1
			}
			if !slices.ContainsFunc(r.calls[wmKey{wmEventConsumer, s, index}], func(c wmCall) bool { return c.echoed }) {
				echoStray++
			}
		}
		for k, calls := range r.calls {
			if k.session == s && k.consumer == wmEventConsumer && slices.ContainsFunc(calls, func(c wmCall) bool { return c.echoed }) &&
				r.outcomes[k][worker.OutcomeCompleted] > 0 && byCause[k.index] == 0 {
				echoMissing++
			}
		}
	}

	// Lane order: every call of a lane's event started after the first
	// successful return of the lane's previous event.
	orderBreaks := 0
	for _, s := range r.sessions {
		prev := map[string]int64{}
		for _, e := range p.logs[s] {
			if e.Type == wmEcho {
				continue
			}
			lane := e.Type
			before, hasPrev := prev[lane]
			prev[lane] = e.Index
			if !hasPrev {
				continue
			}
			var firstOK int64
			for _, c := range r.calls[wmKey{wmLaneConsumer, s, before}] {
				if c.ok && (firstOK == 0 || c.end < firstOK) {
					firstOK = c.end
				}
			}
			for _, c := range r.calls[wmKey{wmLaneConsumer, s, e.Index}] {
				if firstOK == 0 || c.start < firstOK {
					orderBreaks++
					if orderBreaks <= 5 {
						t.Logf("order: session %s lane %s #%d ran (attempt %d on %s) before #%d had returned successfully", s, lane, e.Index, c.attempt, c.worker, before)
					}
				}
			}
		}
	}

	// The moves: how often each session's and shard's slot changed
	// owner between stages.
	moves := func(slot int) int {
		n := 0
		for i := 1; i < len(p.stages); i++ {
			if p.stages[i][slot] != p.stages[i-1][slot] {
				n++
			}
		}
		return n
	}
	sessionMoves, sessionsMoved, fewest := 0, 0, -1
	for _, s := range r.sessions {
		n := moves(r.slotOf[s])
		sessionMoves += n
		if n > 0 {
			sessionsMoved++
		}
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	shardsMoved := 0
	for _, slot := range p.shardSlots {
		if moves(slot) > 0 {
			shardsMoved++
		}
	}
	slotsMoved := p.reshards*p.reshardSlots + p.byHand

	var tryAgain, askMoved, clusterDown, nonLocal int64
	for _, c := range r.clients {
		nonLocal += c.NonLocal.Load()
		tryAgain += c.TryAgain.Load()
		askMoved += c.AskMoved.Load()
		clusterDown += c.ClusterDown.Load()
	}
	runtimeErrs := 0
	for _, n := range r.runtimeErrs {
		runtimeErrs += n
	}
	var runErrs []string
	for id, err := range p.runErrs {
		if err != nil {
			runErrs = append(runErrs, fmt.Sprintf("%s: %v", id, err))
		}
	}
	kinds := make([]string, 0, len(r.kinds))
	for kind, n := range r.kinds {
		kinds = append(kinds, fmt.Sprintf("%s=%d", kind, n))
	}
	sort.Strings(kinds)
	duplicated := dupCalls + logDups + echoDups
	orders := orderBreaks + r.concurrent + r.mismatched
	wedged := p.wedgedCursors + p.dead

	t.Logf("acked=%d (batches %d, append retries %d, given up %d) handled: %s=%d %s=%d | lost=%d (never completed; missing from the log %d) "+
		"duplicated=%d (extra handler calls %d on %d heads, log dups %d, returned events twice %d) order breaks=%d (after-return %d, concurrent in a lane %d, wrong lane %d) "+
		"wedged=%d (cursors with a head %d, dead-lettered %d; index due=%d held=%d) unreadable=%d | runtime errors=%d %v handler errors=%d Run errors=%d outcomes: %s | "+
		"returned events: missing %d stray %d; wrong ids %d | slots moved=%d (reshard %d×%d, by hand %d) sessions moved=%d/%d (%d moves, each at least %d) shards moved=%d/%d | "+
		"store refusals TRYAGAIN=%d ASK/MOVED=%d CLUSTERDOWN=%d, scripts stopped half-way (non-local key)=%d, calls while their slot was open=%d | moves %v drain %v",
		acked, r.batches.Load(), r.appendErrs.Load(), r.givenUp.Load(), wmLaneConsumer, handled[wmLaneConsumer], wmEventConsumer, handled[wmEventConsumer],
		lost, logLost,
		duplicated, dupCalls, dupKeys, logDups, echoDups, orders, orderBreaks, r.concurrent, r.mismatched,
		wedged, p.wedgedCursors, p.dead, p.due, p.held, p.unreadable, runtimeErrs, r.runtimeErrs, r.handlerErrs, len(runErrs), strings.Join(kinds, " "),
		echoMissing, echoStray, wrongID, slotsMoved, p.reshards, p.reshardSlots, p.byHand,
		sessionsMoved, len(r.sessions), sessionMoves, fewest, shardsMoved, len(p.shardSlots),
		tryAgain, askMoved, clusterDown, nonLocal, r.overlapped.Load(), p.moveTime.Round(time.Millisecond), p.drainTime.Round(time.Millisecond))
	if len(why) > 0 {
		t.Logf("duplicates by the outcomes of their head: %v", why)
	}
	if len(r.errSamples) > 0 {
		var errs []string
		for text, n := range r.errSamples {
			errs = append(errs, fmt.Sprintf("%5dx %s", n, text))
		}
		sort.Sort(sort.Reverse(sort.StringSlice(errs)))
		t.Logf("errors the workers reported:\n  %s", strings.Join(errs, "\n  "))
	}

	if acked == 0 {
		t.Error("nothing was appended")
	}
	if lost > 0 || logLost > 0 || duplicated > 0 || orders > 0 || wedged > 0 || p.unreadable > 0 || echoMissing > 0 || echoStray > 0 || wrongID > 0 {
		t.Errorf("lost=%d (from the log %d) duplicated=%d order breaks=%d wedged=%d unreadable=%d returned events missing=%d stray=%d wrong ids=%d, want all 0",
			lost, logLost, duplicated, orders, wedged, p.unreadable, echoMissing, echoStray, wrongID)
	}
	// Every script declares its slot's never-written sentinel, so Redis
	// refuses a script on a migrating slot before it runs (TRYAGAIN, or
	// ASK then TRYAGAIN): a script stopped at a key that had moved ran
	// part-way, with its earlier writes kept.
	if nonLocal > 0 {
		t.Errorf("%d scripts were stopped half-way at a key that had moved (non-local key), want 0", nonLocal)
	}
	if r.givenUp.Load() > 0 {
		t.Errorf("%d events were never acknowledged (appends given up)", r.givenUp.Load())
	}
	if len(runErrs) > 0 {
		t.Errorf("Run returned errors: %s", strings.Join(runErrs, "; "))
	}
	if len(p.migrateErrs) > 0 {
		t.Errorf("%d slot moves failed:\n  %s", len(p.migrateErrs), strings.Join(p.migrateErrs[:min(len(p.migrateErrs), 8)], "\n  "))
	}
	// Every session moves to hub by hand, to other and back to hub by
	// the reshard.
	if p.reshards != 2 || fewest < 3 || shardsMoved != len(p.shardSlots) {
		t.Errorf("%d reshards of 2; every session moved at least %d times, want 3; %d of %d shards moved: the migration did not happen",
			p.reshards, fewest, shardsMoved, len(p.shardSlots))
	}
	if tryAgain+askMoved+clusterDown == 0 && r.overlapped.Load() == 0 {
		t.Error("no store call was refused and no handler or append ran while its slot was open: the test proved nothing")
	}
}

func findEvent(log []a2redis.StoredEvent, index int64) (a2redis.StoredEvent, bool) {
	i, ok := slices.BinarySearchFunc(log, index, func(e a2redis.StoredEvent, index int64) int {
		switch {
		case e.Index < index:
			return -1
		case e.Index > index:
			return 1
		}
		return 0
	})
	if !ok {
		return a2redis.StoredEvent{}, false
	}
	return log[i], true
}

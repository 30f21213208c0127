package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// The dispatcher finds and claims work: one goroutine waits for a
// wake-up, the time the index names, the end of a hold or a freed slot,
// then claims up to the free slots with ClaimNext (the sessions wake-ups
// named first, else the ready index); what it claimed enters the ledger
// (admitLocked), which starts the executor on it.
//
// Fairness is round robin across ready sessions: a claim takes heads of
// up to spread sessions (claimSpread), the free slots shared among them; a
// session that may have more after
// its claim goes behind every session already waiting, and while the ready
// index may list due work besides the woken sessions, claims alternate
// between the two (the index rotates the sessions it lists by itself:
// ClaimNext moves a session it claimed from behind the others). A lane
// head's slot passes to the lane's next head (CompleteAndClaim), at most
// chainQuantum heads in a row while another session waits (othersWaiting):
// then it goes back to the dispatcher. So no session
// waits behind more than one turn of a busy one per round of the sessions
// ahead of it — a claim, or a chain of at most chainQuantum heads per
// slot (docs/design-notes.md, "Fair share").

// wokenPerClaim is how many woken sessions one ClaimNext names, and
// maxWoken how many wait (beyond, the index is read instead).
const (
	wokenPerClaim = 4
	maxWoken      = 1024
	// claimSpread is the most sessions one claim takes heads of
	// (ClaimNextRequest.Spread), the free slots shared among them. The
	// dispatcher adapts its spread between 1 and this: it doubles while
	// the sessions of a claim give less than their shares (small sessions:
	// many to a round trip) and halves once every one gave its whole share
	// (sessions with more: larger claims and completions per session).
	claimSpread = 32
	// chainQuantum is how many heads of one lane a slot runs in a row,
	// each claimed with its predecessor's completion, while another
	// session waits: then the slot goes back to the
	// dispatcher and the lane waits its turn (round robin with a quantum:
	// a chain is cheap — one script call per head — and breaking it costs
	// a claim).
	chainQuantum = 16
	// claimLinger is how long a busy worker whose slots free one by one
	// waits for more to free before it claims (at most once per claim),
	// so that claims stay large under load.
	claimLinger = time.Millisecond
)

// inbox is what the dispatcher is told between two claims: the sessions
// wake-ups named, whether the index must be read again, and the earliest
// end of a hold this worker set. Wake-ups come from the subscriber's
// goroutine and holds from the handlers': they take its lock alone.
type inbox struct {
	mu       sync.Mutex
	woken    []string
	wokenSet map[string]bool
	dirty    bool      // the index may list due work this worker has not claimed
	holdAt   time.Time // the earliest end of a hold this worker set since the dispatcher last looked
	wake     chan struct{}

	hints shardHints // shards wake-ups named, for the next claim to read first
	// gapShards are the shards that reported a Gap (each does once
	// subscribed): tests wait for every shard before counting wake-ups.
	gapShards map[int]bool
}

func newInbox() inbox {
	return inbox{wokenSet: map[string]bool{}, gapShards: map[int]bool{}, wake: make(chan struct{}, 1)}
}

// add takes in a wake-up: its session, or (a gap, or too many waiting)
// the word to read the index.
func (b *inbox) add(n notify.WorkNotice) {
	b.mu.Lock()
	switch {
	case n.Gap || n.Session == "":
		b.dirty = true
		b.hints.add(n.Shard)
		if n.Gap {
			b.gapShards[n.Shard] = true
		}
	case b.wokenSet[n.Session]:
	case len(b.woken) < maxWoken:
		b.woken = append(b.woken, n.Session)
		b.wokenSet[n.Session] = true
	default:
		b.dirty = true
		b.hints.add(n.Shard)
	}
	b.mu.Unlock()
	signal(b.wake)
}

// markDirty asks the dispatcher to read the index again.
func (b *inbox) markDirty() {
	b.mu.Lock()
	b.dirty = true
	b.mu.Unlock()
	signal(b.wake)
}

// holdEnds makes the dispatcher look at the index again at `at` (the
// store's clock) at the latest.
func (b *inbox) holdEnds(at time.Time) {
	b.mu.Lock()
	if b.holdAt.IsZero() || at.Before(b.holdAt) {
		b.holdAt = at
	}
	b.mu.Unlock()
	signal(b.wake)
}

// collect hands the dispatcher the word to read the index (setting
// *dirty, and reporting marked) and the end of a hold (moving *nextAt
// earlier), and says how many woken sessions wait.
func (b *inbox) collect(dirty *bool, nextAt *time.Time) (woken int, marked bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dirty {
		*dirty, b.dirty, marked = true, false, true
	}
	if !b.holdAt.IsZero() {
		if nextAt.IsZero() || b.holdAt.Before(*nextAt) {
			*nextAt = b.holdAt
		}
		b.holdAt = time.Time{}
	}
	return len(b.woken), marked
}

// hasOther reports whether a session other than session waits in the
// queue.
func (b *inbox) hasOther(session string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.woken) > 1 || (len(b.woken) == 1 && b.woken[0] != session)
}

// take takes up to n woken sessions, oldest first.
func (b *inbox) take(n int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(len(b.woken), n)
	if n == 0 {
		return nil
	}
	sessions := slices.Clone(b.woken[:n])
	b.woken = b.woken[n:]
	for _, s := range sessions {
		delete(b.wokenSet, s)
	}
	return sessions
}

// takeShards takes the shards wake-ups named since the last claim.
func (b *inbox) takeShards() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hints.take()
}

// putBack returns the woken sessions a claim did not get to ahead of the
// others (they have not had their turn), and the session it claimed from
// when it may have more (the claim took all it could) behind them all:
// round robin across the sessions wake-ups named.
func (b *inbox) putBack(notTried []string, again []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var front []string
	for _, s := range notTried {
		if !b.wokenSet[s] {
			b.wokenSet[s] = true
			front = append(front, s)
		}
	}
	b.woken = append(front, b.woken...)
	for _, session := range again {
		if !b.wokenSet[session] {
			b.wokenSet[session] = true
			b.woken = append(b.woken, session)
		}
	}
}

// pending reports whether a wake-up waits for the dispatcher (tests).
func (b *inbox) pending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dirty || len(b.woken) > 0 || len(b.hints.list) > 0 || len(b.wake) > 0
}

// gaps returns how many shards reported a Gap so far (tests).
func (b *inbox) gaps() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.gapShards)
}

// queued returns the woken sessions waiting, in the order they will be
// named (tests).
func (b *inbox) queued() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.woken)
}

// watch follows the work channels until ctx ends.
func (w *Worker) watch(ctx context.Context, errc chan<- error) {
	ww := notify.NewWorkWatcher(w.store, notify.SubscriberOptions{})
	err := ww.Watch(ctx, func(n notify.WorkNotice) error {
		w.inbox.add(n)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		errc <- fmt.Errorf("worker: watching for work: %w", err)
	}
}

// othersWaiting reports whether a session other than session may be
// waiting for this worker's slots: woken and not claimed yet, or listed
// due in the index (its last read saw one, or it has news not read yet).
func (w *Worker) othersWaiting(session string) bool {
	return w.othersDue.Load() || w.inbox.hasOther(session)
}

// poke makes the dispatcher read the index again.
func (w *Worker) poke() { w.inbox.markDirty() }

// repairLoop runs the ready-index repair every RepairEvery (one worker per
// prefix and interval runs the pass).
func (w *Worker) repairLoop(ctx context.Context) {
	every := w.cfg.RepairEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ran, st, err := w.store.TryRepairReady(ctx, every)
		switch {
		case err != nil && ctx.Err() == nil:
			w.runtimeError(ctx, nil, fmt.Errorf("worker: repairing the ready index: %w", err))
		case ran:
			w.log.Debug("ready index repaired", "worker", w.cfg.ID, "sessions", st.Sessions, "sent", st.Sent)
			if st.Sent > 0 {
				w.poke()
			}
		}
		w.repairs.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retentionLoop runs the deployment's retention passes (Config.Retention):
// every RetentionEvery this worker tries, and one worker per prefix and
// interval runs the pass.
func (w *Worker) retentionLoop(ctx context.Context) {
	every := w.cfg.RetentionEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ran, r, err := w.store.TryRetention(ctx, *w.cfg.Retention, every)
		switch {
		case err != nil && ctx.Err() == nil:
			w.runtimeError(ctx, nil, fmt.Errorf("worker: retention pass: %w", err))
		case ran:
			w.log.Info("retention pass", "worker", w.cfg.ID, "scanned", r.Scanned, "idle", len(r.Idle),
				"ended", r.Ended, "dropped", r.Dropped, "changed", r.Changed, "dry_run", w.cfg.Retention.DryRun)
			if f := w.cfg.Hooks.OnRetention; f != nil {
				f(ctx, r)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dispatch is the claim loop: it waits for a wake-up, the time the index
// names, or a freed slot, then claims up to the free slots.
func (w *Worker) dispatch(ctx context.Context) {
	// dirty: the index may list due work this worker has not claimed.
	dirty := true
	// narrowed: the last claim that found nothing left out a consumer at
	// its MaxInFlight, so a freed slot may find that consumer work.
	narrowed := false
	lingered := false
	floor := max(1, w.cfg.Concurrency/4)
	var nextAt time.Time
	var errWait time.Duration
	// full: MaxWait passed with nothing else to do; the next claim reads
	// every index shard (what nothing announces: another process's lapsed
	// lease).
	full := false
	// indexTurn: the last claim took from a woken session while the index
	// may list due work too; the next reads the index first, so that
	// sessions the index alone knows of are not left waiting behind
	// woken ones.
	indexTurn := false
	spread := 1
	for ctx.Err() == nil {
		woken, marked := w.inbox.collect(&dirty, &nextAt)
		if marked {
			// News of the index this worker has not read yet: other
			// sessions may be due.
			w.othersDue.Store(true)
		}
		w.mu.Lock()
		served, limit, narrow := w.scopeLocked()
		busy := w.free < w.cfg.Concurrency
		w.mu.Unlock()
		if limit > 0 && limit < floor && busy && (dirty || woken > 0) && !lingered {
			// Busy, and slots free one by one: wait a moment for more.
			lingered = true
			sleep(ctx, claimLinger)
			continue
		}
		lingered = false
		var rateAt time.Time
		claimedRated := false
		if len(w.rated) > 0 {
			claimedRated, rateAt = w.claimRated(ctx, dirty || woken > 0)
		}
		used := max(1, min(limit, spread)) // the spread of this claim
		var sessions []string
		if limit > 0 && !(dirty && indexTurn) {
			sessions = w.inbox.take(max(wokenPerClaim, used))
		}
		indexTurn = false
		if limit > 0 && (dirty || len(sessions) > 0) {
			shards := w.inbox.takeShards()
			leaseFrom := time.Now()
			res, err := w.store.ClaimNext(w.wctx, redisstore.ClaimNextRequest{
				Holder: w.cfg.ID, TTL: w.cfg.TTL, Consumers: served, MaxFailures: w.cfg.MaxFailures,
				Limit: limit, Sessions: sessions, Shards: shards, AllShards: full, Spread: used,
			})
			if w.heldDespite(ctx, err, res.Session != "") {
				err = nil
			}
			full = false
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				w.runtimeError(ctx, nil, fmt.Errorf("worker: claiming: %w", err))
				// A refusal (a slot migrating, a failover) passes soon.
				most := 5 * time.Second
				if errors.Is(err, a2redis.ErrUnavailable) {
					most = 500 * time.Millisecond
				}
				errWait = min(max(2*errWait, 50*time.Millisecond), most)
				dirty = true
				sleep(ctx, errWait)
				continue
			}
			errWait = 0
			if res.Outcome == redisstore.Claimed {
				spread = adaptSpread(spread, used, res)
				if !w.admitClaim(ctx, res, leaseFrom, sessions, used) {
					// From the index: other sessions may be due too.
					dirty, nextAt = true, time.Time{}
					w.othersDue.Store(res.OthersDue)
				} else {
					// From a woken session: when the index may list
					// due work too, the next claim reads it first.
					indexTurn = dirty
				}
				continue
			}
			dirty, nextAt, narrowed = false, res.NextAt, narrow
			w.othersDue.Store(false) // the index listed nothing claimable now
		}
		if claimedRated {
			continue // a rate-limited consumer may have more: claim again
		}
		wait := w.cfg.MaxWait
		if !dirty && !nextAt.IsZero() {
			wait = min(max(nextAt.Sub(w.store.Now()), time.Millisecond), w.cfg.MaxWait)
		}
		if !rateAt.IsZero() {
			wait = min(wait, max(time.Until(rateAt), time.Millisecond))
		}
		t := time.NewTimer(wait)
		w.parked.Store(wait >= w.cfg.MaxWait && !dirty)
		select {
		case <-ctx.Done():
		case <-w.inbox.wake:
		case <-w.kick:
			if narrowed {
				dirty, narrowed = true, false
			}
		case <-t.C:
			dirty, nextAt, full = true, time.Time{}, wait >= w.cfg.MaxWait
			w.othersDue.Store(true) // a hold ended, or MaxWait: not read yet
		}
		t.Stop()
		w.parked.Store(false)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// scopeLocked returns the consumers the next claim serves and how many
// heads it may take: the free slots, and no consumer at its MaxInFlight
// (narrowed reports that one was left out).
func (w *Worker) scopeLocked() (served []a2redis.Consumer, limit int, narrowed bool) {
	if w.free <= 0 || w.stopping {
		return nil, 0, false
	}
	if !w.limited {
		return w.served, w.free, false
	}
	var open []a2redis.Consumer
	room, unlimited := 0, false
	for _, c := range w.order {
		if c.rate != nil {
			continue // claimed apart (claimRated)
		}
		if c.limit == 0 {
			open = append(open, c.spec)
			unlimited = true
			continue
		}
		if r := c.limit - c.running - len(c.queue); r > 0 {
			open = append(open, c.spec)
			room += r
		}
	}
	if len(open) == 0 {
		return nil, 0, true
	}
	served = open
	if len(open) == len(w.order) && w.served != nil {
		served = w.served
	}
	// One claim takes at most the store's MaxBatch heads.
	limit = min(w.free, w.store.MaxBatch())
	if !unlimited {
		limit = min(limit, room)
	}
	return served, limit, len(open) < len(w.order)
}

// tookShare reports whether a session's claim took its whole share of the
// limit (claimed and dead-lettered): the session may have more.
func tookShare(c redisstore.ClaimNextResult) bool {
	return len(c.Heads)+len(c.DeadLettered) >= c.Share
}

// adaptSpread returns the spread of the next claim after res, a claim
// made with spread (see claimSpread): doubled when every session gave
// less than its share, halved when the claim went to as many sessions as
// it could and every one gave its whole share.
func adaptSpread(current, spread int, res redisstore.ClaimNextResult) int {
	claims := res.Claims()
	full := 0
	for _, c := range claims {
		if tookShare(c) {
			full++
		}
	}
	switch {
	case full == 0:
		return min(current*2, claimSpread)
	case full == len(claims) && len(claims) >= spread:
		return max(current/2, 1)
	}
	return current
}

// admitClaim takes in what a ClaimNext claimed (from one session, or from
// several with Spread), and reports whether it came from sessions a
// wake-up named (not from reading the index). sessions are the woken
// sessions the call named, tried spread at a time.
func (w *Worker) admitClaim(ctx context.Context, res redisstore.ClaimNextResult, leaseFrom time.Time, sessions []string, spread int) bool {
	claims := res.Claims()
	last := -1
	var again []string
	for _, c := range claims {
		if i := slices.Index(sessions, c.Session); i >= 0 {
			last = max(last, i)
			// It may have left more: the session waits behind every other.
			if tookShare(c) {
				again = append(again, c.Session)
			}
		}
	}
	if last >= 0 {
		// ClaimNext stopped at the batch that gave work: the later named
		// sessions were not tried and keep their turn.
		tried := min(len(sessions), (last/spread+1)*spread)
		w.inbox.putBack(sessions[tried:], again)
	}
	w.mu.Lock()
	if w.stopping {
		var release []redisstore.ClaimNextResult
		for _, c := range claims {
			if len(c.Heads) > 0 {
				w.busy++
				release = append(release, c)
			}
		}
		w.mu.Unlock()
		for _, c := range release {
			w.releaseHeads(c.Session, c.Heads)
		}
	} else {
		for _, c := range claims {
			w.free -= len(c.Heads)
			t := new(turn) // the session's turn: this claim's heads share it
			for _, h := range c.Heads {
				w.admitLocked(c.Session, h, leaseFrom, t)
			}
		}
		w.mu.Unlock()
	}
	for _, c := range claims {
		for _, h := range c.DeadLettered {
			w.report(ctx, Outcome{Head: h, Kind: OutcomeDeadLettered, Failures: h.Failures})
		}
	}
	return last >= 0
}

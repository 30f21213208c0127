package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// The ready index: every session with work is listed in one shard of its
// prefix's index (keys.Ready) with the time it has work from. Each write
// script that changes a session's runnable set ends with a ready mark (see
// lua/include/util.lua's ready_mark); run pops it off the reply and the
// store sends it to the session's shard (lua/ready_index.lua), which keeps
// only the newest version per session.

// readyMarkPrefix starts the ready mark a tracked script appends to its
// reply; the mark alone means "nothing changed". The scripts have it as
// READY_MARK from the generated lua/include/layout.lua.
const readyMarkPrefix = scripts.ReadyMark

// popReadyMark removes a trailing ready mark from a script's reply and
// returns it without its prefix ("" when the script reported none or no
// change).
func popReadyMark(values []rueidis.RedisMessage) ([]rueidis.RedisMessage, string) {
	if len(values) == 0 {
		return values, ""
	}
	last := values[len(values)-1]
	if !last.IsString() {
		return values, ""
	}
	text, _ := last.ToString()
	if !strings.HasPrefix(text, readyMarkPrefix) {
		return values, ""
	}
	return values[:len(values)-1], text[len(readyMarkPrefix):]
}

// readyUpdate is one session's update for its shard. dead is its
// dead-letter state for the shard's dead index: "" for no change, "0" for
// none left, else "<count>,<since>,<complete>,<consumers>" (see
// keys.Session.Listed).
type readyUpdate struct {
	session, version, at, dead string
	due                        bool
}

// parseReadyMark parses a mark "<version>:<ready at>:<due>[:<dead>]".
func parseReadyMark(session, mark string) (readyUpdate, bool) {
	parts := strings.SplitN(mark, ":", 4)
	if len(parts) < 3 {
		return readyUpdate{}, false
	}
	u := readyUpdate{session: session, version: parts[0], at: parts[1], due: parts[2] == "1"}
	if len(parts) == 4 {
		u.dead = parts[3]
	}
	return u, true
}

// DefaultReadyWait bounds how long a write waits for its ready-index update
// after the script committed.
const DefaultReadyWait = time.Second

// DeadlineSlack bounds how long after its context's deadline a call of the
// store returns, whatever the server does: every wait (a command, a retry's
// backoff, the ready-index update, the wake-up's publish) ends by the
// deadline, and what is left is the store's own bookkeeping.
const DeadlineSlack = 50 * time.Millisecond

// noteReady sends a write's ready mark to the session's shard, waiting at
// most ReadyWait and never past the caller's deadline. The write has
// committed, so neither the caller's context nor a failure here fails it:
// an update that is refused, fails or misses the deadline is kept and sent
// again with this store's next update that gets through (or its next
// ClaimNext); RepairReady restores what a process took with it.
func (s *Store) noteReady(ctx context.Context, session, mark string, compacted bool) {
	u, ok := parseReadyMark(session, mark)
	if !ok {
		return
	}
	shard := keys.ReadyShard(session, s.cfg.ReadyShards)
	if s.rideAlong(shard, u) {
		if u.at == "" && !s.cfg.NoCompaction && !compacted {
			s.compactLog(ctx, session)
		}
		return
	}
	wait := waitWithin(ctx, s.cfg.ReadyWait)
	if wait <= 0 {
		s.late.keep(shard, u)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	// Refusals (the shard's slot migrating) are retried within ReadyWait;
	// ready_index applies only newer versions, so a repeat is harmless.
	err := s.retrying(ctx, true, func(ctx context.Context) error {
		return s.lines.send(ctx, shard, []readyUpdate{u}, func(ctx context.Context, updates []readyUpdate) error {
			return s.applyReady(ctx, shard, updates)
		})
	})
	if u.at == "" && !s.cfg.NoCompaction && !compacted {
		// The write left the session without work: rebuild a small log to
		// its size (see compactLog), unless the write did it itself
		// (complete_fast: withCompaction).
		defer s.compactLog(ctx, session)
	}
	if err != nil {
		s.late.keep(shard, u)
		return
	}
	s.flushLate(ctx)
}

// claimMarksRideKey marks a context whose claims' ready marks may ride
// (ClaimNext's: see deferClaimMark).
type claimMarksRideKey struct{}

// claimMarksRide returns ctx with its claims' ready marks riding.
func claimMarksRide(ctx context.Context) context.Context {
	return context.WithValue(ctx, claimMarksRideKey{}, true)
}

// deferClaimMark keeps the ready mark of a claim made for ClaimNext to
// ride with its shard's next call (readyLines.ride) instead of sending it
// and waiting, when the claim left the session held (claimed heads, no
// free one: listed at the earliest end of a claim or hold, after now),
// changed no dead letter and announces nothing; it reports whether it
// did. A claim that left free heads is sent at once: it moves its session
// behind the others (round robin), which this store's next claim must
// see.
func (s *Store) deferClaimMark(ctx context.Context, name, session, mark string) bool {
	if ctx.Value(claimMarksRideKey{}) == nil || (name != "claim_fast" && name != "claim") {
		return false
	}
	u, ok := parseReadyMark(session, mark)
	if !ok || u.due || u.dead != "" {
		return false
	}
	at, err := strconv.ParseInt(u.at, 10, 64)
	if err != nil || at <= s.now() {
		return false
	}
	s.lines.ride(keys.ReadyShard(session, s.cfg.ReadyShards), u)
	return true
}

// rideFor is how long a claim's update rides at most before its shard's
// line sends it on its own (see readyLines.ride): the time another process
// may meet a session this store claimed as listed at its earlier time.
const rideFor = 5 * time.Millisecond

// ridersRead bounds the entries more a ClaimNext reads of a shard for
// the claim updates riding for it (see ClaimNext).
const ridersRead = 64

// sendRiders sends the claim updates riding for shard.
func (s *Store) sendRiders(ctx context.Context, shard int) {
	_ = s.retrying(ctx, true, func(ctx context.Context) error {
		return s.lines.send(ctx, shard, nil, func(ctx context.Context, updates []readyUpdate) error {
			if len(updates) == 0 {
				return nil
			}
			return s.applyReady(ctx, shard, updates)
		})
	})
}

// sendDueRiders sends the riding claim updates that list their sessions
// at now or earlier (a claim that lapsed before its shard's next call):
// ClaimNext passes a riding session over only until then.
func (s *Store) sendDueRiders(ctx context.Context) {
	for _, shard := range s.lines.dueRiders(s.now()) {
		s.sendRiders(ctx, shard)
	}
}

// readyLines coalesces the ready-index updates a store's writes send to
// each shard: while one call to a shard is under way, the updates that come
// meanwhile wait and go together in the next call (group commit: each
// writer still waits until its own update is applied). A store has at most
// one call to a shard under way, so concurrent writes to sessions of one
// shard (a worker completing many small sessions) share script calls
// instead of sending one each.
type readyLines struct {
	mu    sync.Mutex
	lines map[int]*readyLine
	// rideFor bounds how long an update rides (see ride); flush sends a
	// shard's riders once it has passed. Set by New.
	rideFor time.Duration
	flush   func(shard int)
}

// readyLine is one shard's: the call under way (sem), the group that
// forms meanwhile, and the claims' updates that ride with the next call
// (see ride).
type readyLine struct {
	sem    chan struct{}
	next   *readyGroup
	riders map[string]readyUpdate
	// sending holds the riders the call under way took, until it is done:
	// their sessions are still passed over (the index lists them at their
	// earlier time until the call applies them).
	sending map[string]readyUpdate
	// timer sends the riders rideFor after the first of them came.
	timer *time.Timer
}

// ridersLimit bounds the updates a shard's line keeps riding; past it a
// claim's update is dropped (its session stays listed at its earlier
// time: safe, see ride).
const ridersLimit = 4096

// newestOf returns the newer of two updates of one session. When the
// older one changed the dead index and the newer says nothing of it, the
// newer carries the removal (a session holding dead letters sends its
// state with every update, so "" there is none left).
func newestOf(a, b readyUpdate) readyUpdate {
	if newerVersion(a.version, b.version) {
		a, b = b, a
	}
	if b.dead == "" && a.dead != "" {
		b.dead = "0"
	}
	return b
}

// ride keeps u, a claim's update, for the shard's next call, which any
// write of this store to a session of the shard sends (or ClaimNext, once
// u's time has come): the claim returns without waiting for it. A
// session's newer update in that call replaces it, so a session claimed
// and completed between two calls to its shard costs the index one
// update, not two. Until it goes, the index lists the session at its
// earlier time: listing work early is safe (a claim there finds the
// session busy and lists it again from its true state), and this store's
// ClaimNext passes the session over meanwhile (riding).
func (l *readyLines) ride(shard int, u readyUpdate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lineLocked(shard)
	if line.keepLocked(u) {
		l.armLocked(shard, line)
	}
}

// keepLocked keeps u among the line's riders, the newer of it and its
// session's rider there; a session not riding yet is refused past
// ridersLimit (its session stays listed at its earlier time: safe). It
// reports whether u was kept (l.mu held).
func (line *readyLine) keepLocked(u readyUpdate) bool {
	if line.riders == nil {
		line.riders = map[string]readyUpdate{}
	}
	if old, ok := line.riders[u.session]; ok {
		u = newestOf(old, u)
	} else if len(line.riders) >= ridersLimit {
		return false
	}
	line.riders[u.session] = u
	return true
}

// rideAlong keeps u riding when an update of its session already rides
// (or is being sent) and u neither announces work nor changes the dead
// index nor lists work claimable now: a completion of a session whose
// claim's update still rides replaces it there, so a session claimed and
// completed between two calls to its shard costs the index one update.
// It reports whether it did.
func (s *Store) rideAlong(shard int, u readyUpdate) bool {
	if u.due || u.dead != "" {
		return false
	}
	if u.at != "" {
		if at, err := strconv.ParseInt(u.at, 10, 64); err != nil || at <= s.now() {
			return false
		}
	}
	l := &s.lines
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[shard]
	if line == nil {
		return false
	}
	if _, ok := line.riders[u.session]; !ok {
		if _, sending := line.sending[u.session]; !sending {
			return false
		}
	}
	if !line.keepLocked(u) {
		return false
	}
	l.armLocked(shard, line)
	return true
}

// armLocked starts the line's ride timer when it has riders and none runs
// (l.mu held).
func (l *readyLines) armLocked(shard int, line *readyLine) {
	if line.timer != nil || len(line.riders) == 0 || l.flush == nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(l.rideFor, func() {
		l.mu.Lock()
		if line.timer == t {
			line.timer = nil
		}
		l.mu.Unlock()
		l.flush(shard)
	})
	line.timer = t
}

// riding returns the time (epoch ms) a claim's update still riding for
// session lists it at, and whether there is one.
func (l *readyLines) riding(shard int, session string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[shard]
	if line == nil {
		return 0, false
	}
	u, ok := line.riders[session]
	if !ok {
		if u, ok = line.sending[session]; !ok {
			return 0, false
		}
	}
	if u.at == "" {
		// Settled: passed over until the update goes.
		return math.MaxInt64, true
	}
	at, err := strconv.ParseInt(u.at, 10, 64)
	return at, err == nil
}

// riderCount returns how many claim updates ride for shard.
func (l *readyLines) riderCount(shard int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if line := l.lines[shard]; line != nil {
		return len(line.riders)
	}
	return 0
}

// dueRiders returns the shards whose riding updates list a session at now
// or earlier (its claim lapsed with the update unsent).
func (l *readyLines) dueRiders(now int64) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var shards []int
	for shard, line := range l.lines {
		for _, u := range line.riders {
			if u.at == "" {
				continue
			}
			if at, err := strconv.ParseInt(u.at, 10, 64); err != nil || at <= now {
				shards = append(shards, shard)
				break
			}
		}
	}
	return shards
}

// withRiders merges the line's riders into updates (a session's newest
// update only) and empties them (l.mu held).
func (line *readyLine) withRidersLocked(updates []readyUpdate) []readyUpdate {
	if len(line.riders) == 0 {
		return updates
	}
	line.sending = line.riders
	merged := map[string]bool{}
	for i, u := range updates {
		if r, ok := line.riders[u.session]; ok {
			updates[i] = newestOf(r, u)
			merged[u.session] = true
		}
	}
	for _, r := range line.riders {
		if !merged[r.session] {
			updates = append(updates, r)
		}
	}
	line.riders = nil
	if line.timer != nil {
		line.timer.Stop()
		line.timer = nil
	}
	return updates
}

// giveBackLocked keeps the riders of a call that failed for the next one
// (l.mu held): the store's next write of the shard, its next ClaimNext
// past ridersRead, or the timer the next rider starts (none is started
// here, so a store whose client closed stops trying).
func (line *readyLine) giveBackLocked(riders []readyUpdate) {
	for _, r := range riders {
		line.keepLocked(r)
	}
}

// readyGroup is the updates one call sends, and its outcome once done is
// closed.
type readyGroup struct {
	updates []readyUpdate
	led     bool
	done    chan struct{}
	err     error
}

// lineLocked returns shard's line, made on first use (l.mu held).
func (l *readyLines) lineLocked(shard int) *readyLine {
	if l.lines == nil {
		l.lines = map[int]*readyLine{}
	}
	line := l.lines[shard]
	if line == nil {
		line = &readyLine{sem: make(chan struct{}, 1)}
		l.lines[shard] = line
	}
	return line
}

// send applies own (one update, or none to send only the riders) to
// shard with apply, in a group with the updates that come while the
// shard's call under way ends and the claims' updates riding: the
// group's first writer sends it (on its context), the others wait for it
// (or their context).
func (l *readyLines) send(ctx context.Context, shard int, own []readyUpdate, apply func(context.Context, []readyUpdate) error) error {
	l.mu.Lock()
	line := l.lineLocked(shard)
	g := line.next
	if g == nil {
		g = &readyGroup{done: make(chan struct{})}
		line.next = g
	}
	g.updates = append(g.updates, own...)
	lead := !g.led
	g.led = true
	l.mu.Unlock()
	if !lead {
		select {
		case <-g.done:
			return g.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Close the group to newcomers once it is its turn (or its writer
	// gives up: the group fails, and each writer keeps its update for
	// later, as after any failed update), the riders taken along.
	var riders []readyUpdate
	closeGroup := func() []readyUpdate {
		l.mu.Lock()
		defer l.mu.Unlock()
		if line.next == g {
			line.next = nil
		}
		n := len(g.updates)
		g.updates = line.withRidersLocked(g.updates)
		riders = g.updates[n:]
		return g.updates
	}
	select {
	case line.sem <- struct{}{}:
	case <-ctx.Done():
		closeGroup()
		l.mu.Lock()
		line.sending = nil
		line.giveBackLocked(riders)
		l.mu.Unlock()
		g.err = ctx.Err()
		close(g.done)
		return g.err
	}
	g.err = apply(ctx, closeGroup())
	l.mu.Lock()
	line.sending = nil
	if g.err != nil {
		line.giveBackLocked(riders)
	}
	l.mu.Unlock()
	<-line.sem
	close(g.done)
	return g.err
}

// waitWithin returns limit, or what is left of ctx's deadline when that is
// less (zero or less when ctx has ended).
func waitWithin(ctx context.Context, limit time.Duration) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	if dl, ok := ctx.Deadline(); ok {
		return min(limit, time.Until(dl))
	}
	return limit
}

// CompactLogEntries is the most entries a settled session's log may hold
// for the store to rebuild it to its size (lua/compact_log.lua): a bound on
// that call's work.
const CompactLogEntries = 256

// CompactChunkFields is the most fields a head chunk of a settled session
// may hold for the store to rebuild it without its pin field
// (rows.ChunkPin): Redis's default hash-max-listpack-entries, beyond which
// the rebuilt hash would be a hashtable again.
const CompactChunkFields = 512

// CompactBytes is the most bytes (MEMORY USAGE) a settled session's log,
// or one of its head chunks, may take for the store to rebuild it: with
// CompactLogEntries and CompactChunkFields, a bound on the rebuild's work
// whatever the payloads' sizes (a rebuild of this much takes tens of
// microseconds).
const CompactBytes = 64 << 10

// compactLog rebuilds a session a write left without work to its size
// (lua/compact_log.lua), when it is small (CompactLogEntries,
// CompactChunkFields, CompactBytes) and Config.NoCompaction is not set:
// Redis keeps a 4 KB listpack for a stream's newest node until it fills,
// which would make every small session cost 5 KB whatever it holds, and a
// head chunk's pin keeps it a hashtable, ~165 B a completed row where a
// listpack takes ~30. A key-locking server refuses DUMP in a script:
// nothing is done there. Best effort: the write has committed, and a
// failure here only leaves the session as it was.
func (s *Store) compactLog(ctx context.Context, session string) {
	locking, err := s.keyLocking(ctx)
	if err != nil || locking {
		return
	}
	if s.bigLogs.has(session) {
		return
	}
	k := s.keys(session)
	script := scripts.All()["compact_log"]
	_ = s.retrying(ctx, true, func(ctx context.Context) error {
		reply, err := script.Lua(false).Exec(ctx, s.scripts, []string{k.Count(), k.Sentinel()},
			[]string{strconv.Itoa(CompactLogEntries), strconv.Itoa(CompactChunkFields), strconv.Itoa(CompactBytes)}).AsInt64()
		if err == nil && reply == 2 {
			s.bigLogs.add(session)
		}
		return err
	})
}

// bigLogsLimit bounds the sessions a store remembers as too big to
// rebuild; past it the store forgets them all and learns again.
const bigLogsLimit = 10000

// bigLogs holds the sessions whose log compact_log found past its bounds:
// a log only grows until a reclaim deletes its past, so the store sends
// no rebuild for them (a settle of a big, busy session would otherwise
// pay a script call that does nothing) until this store reclaims or drops
// the session. A clear and reclaim by another process leaves a
// session's new lifetime unrebuilt here until the limit clears the set:
// memory, never correctness.
type bigLogs struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (b *bigLogs) has(session string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[session]
	return ok
}

func (b *bigLogs) add(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= bigLogsLimit {
		b.m = map[string]struct{}{}
	}
	b.m[session] = struct{}{}
}

func (b *bigLogs) forget(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, session)
}

// lateReadyLimit bounds the updates a store keeps for shards it could not
// reach; beyond it the oldest are left to RepairReady.
const lateReadyLimit = 10000

// lateReady holds the newest update per session that could not be sent
// (its shard's slot migrating, a failover), to send again with the next
// update that gets through.
type lateReady struct {
	mu      sync.Mutex
	pending map[int]map[string]readyUpdate
	n       atomic.Int64
}

func (l *lateReady) keep(shard int, u readyUpdate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[int]map[string]readyUpdate{}
	}
	m := l.pending[shard]
	if m == nil {
		m = map[string]readyUpdate{}
		l.pending[shard] = m
	}
	if old, ok := m[u.session]; ok {
		if newerVersion(old.version, u.version) {
			return
		}
		if u.dead == "" && old.dead != "" {
			// The older update changed the dead index and the newer one
			// says nothing of it: the newer one carries the removal (a
			// session still holding dead letters sends its state with
			// every update, so "" here is none left).
			u.dead = "0"
		}
	} else if l.n.Load() >= lateReadyLimit {
		return
	} else {
		l.n.Add(1)
	}
	m[u.session] = u
}

// take removes and returns every kept update.
func (l *lateReady) take() map[int]map[string]readyUpdate {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending
	l.pending = nil
	l.n.Store(0)
	return p
}

// newerVersion reports whether version a is newer than b (decimal strings).
func newerVersion(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// flushLate sends the updates kept for shards that could not be reached;
// those that fail again are kept again.
func (s *Store) flushLate(ctx context.Context) {
	for shard, m := range s.late.take() {
		updates := make([]readyUpdate, 0, len(m))
		for _, u := range m {
			updates = append(updates, u)
		}
		if s.applyReady(ctx, shard, updates) != nil {
			for _, u := range updates {
				s.late.keep(shard, u)
			}
		}
	}
}

// readyBatch is how many session updates one ready_index call carries.
const readyBatch = 128

// applyReady sends updates of one shard's sessions, readyBatch per call.
func (s *Store) applyReady(ctx context.Context, shard int, updates []readyUpdate) error {
	r := keys.ReadyFor(s.cfg.Prefix, shard)
	channel, sharded := r.WorkChannel(), "0"
	if s.cfg.PublishWait < 0 {
		channel = ""
	}
	if s.cfg.ShardedPubSub {
		sharded = "1"
	}
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return err
	}
	for len(updates) > 0 {
		n := min(len(updates), readyBatch)
		args := make([]string, 0, 2+5*n)
		args = append(args, channel, sharded)
		for _, u := range updates[:n] {
			due := "0"
			if u.due {
				due = "1"
			}
			args = append(args, u.session, u.version, u.at, due, u.dead)
		}
		script := scripts.All()["ready_index"]
		if err := script.Lua(locking).Exec(ctx, s.scripts, []string{r.Index(), r.Sentinel()}, args).Error(); err != nil {
			return fmt.Errorf("a2redis: updating ready index shard %d: %w", shard, err)
		}
		s.view.noteUpdates(shard, s.cfg.ReadyShards, s.now(), updates[:n])
		updates = updates[n:]
	}
	return nil
}

// claimReadyShards records the prefix's shard count, or checks that it is the
// one recorded.
func (s *Store) claimReadyShards(ctx context.Context) error {
	c, key, want := s.client, keys.ReadyShards(s.cfg.Prefix), strconv.Itoa(s.cfg.ReadyShards)
	if err := s.do(ctx, c.B().Set().Key(key).Value(want).Nx().Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("a2redis: recording the ready shards of prefix %q: %w", s.cfg.Prefix, err)
	}
	found, err := s.do(ctx, c.B().Get().Key(key).Build()).ToString()
	if err != nil {
		return fmt.Errorf("a2redis: reading the ready shards of prefix %q: %w", s.cfg.Prefix, err)
	}
	if found != want {
		return check.Invalid("Config.ReadyShards", "is %d, but prefix %q was set up with %s shards: every store on a prefix must use the same number", s.cfg.ReadyShards, s.cfg.Prefix, found)
	}
	return nil
}

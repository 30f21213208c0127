package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
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
// reply; the mark alone means "nothing changed".
const readyMarkPrefix = "\x01R"

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

// readyUpdate is one session's update for its shard.
type readyUpdate struct {
	session, version, at string
	due                  bool
}

func parseReadyMark(session, mark string) (readyUpdate, bool) {
	parts := strings.SplitN(mark, ":", 3)
	if len(parts) != 3 {
		return readyUpdate{}, false
	}
	return readyUpdate{session: session, version: parts[0], at: parts[1], due: parts[2] == "1"}, true
}

// DefaultReadyWait bounds how long a write waits for its ready-index update
// after the script committed.
const DefaultReadyWait = time.Second

// noteReady sends a write's ready mark to the session's shard. The write has
// committed, so neither the caller's cancellation nor a failure here fails
// it: an update that never arrives is what RepairReady restores.
func (s *Store) noteReady(ctx context.Context, session, mark string) {
	u, ok := parseReadyMark(session, mark)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ReadyWait)
	defer cancel()
	shard := keys.ReadyShard(session, s.cfg.ReadyShards)
	// Refusals (the shard's slot migrating) are retried within ReadyWait;
	// ready_index applies only newer versions, so a repeat is harmless.
	err := s.retrying(ctx, true, func(ctx context.Context) error {
		return s.applyReady(ctx, shard, []readyUpdate{u})
	})
	if err != nil {
		s.late.keep(shard, u)
		return
	}
	s.flushLate(ctx)
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
		args := make([]string, 0, 2+4*n)
		args = append(args, channel, sharded)
		for _, u := range updates[:n] {
			due := "0"
			if u.due {
				due = "1"
			}
			args = append(args, u.session, u.version, u.at, due)
		}
		script := scripts.All()["ready_index"]
		if err := script.Lua(locking).Exec(ctx, s.client, []string{r.Index(), r.Sentinel()}, args).Error(); err != nil {
			return fmt.Errorf("a2redis: updating ready index shard %d: %w", shard, err)
		}
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

// ReadyShards returns how many shards the store's ready index has.
func (s *Store) ReadyShards() int { return s.cfg.ReadyShards }

// ReadySession is one session the ready index lists.
type ReadySession struct {
	// Session is the session id.
	Session string
	// Shard is the index shard that lists it.
	Shard int
	// At is the time it has work from: not after now when a head is
	// claimable now (the time it got work, or was last claimed from while
	// more was left), else when the earliest claim or retry hold ends.
	At time.Time
}

// ReadyPage lists up to limit sessions of one index shard with work from at
// or after `after` (zero: from the earliest), earliest first, and the
// continuation to pass as after for the next page (zero when the shard has
// no more). Sessions sharing one time are listed whole on one page, so a
// page may hold more than limit.
func (s *Store) ReadyPage(ctx context.Context, shard int, after time.Time, limit int) ([]ReadySession, time.Time, error) {
	if shard < 0 || shard >= s.cfg.ReadyShards {
		return nil, time.Time{}, check.Invalid("shard", "must be in [0, %d) (got %d)", s.cfg.ReadyShards, shard)
	}
	if limit <= 0 {
		return nil, time.Time{}, check.Invalid("limit", "must be positive (got %d)", limit)
	}
	min := "-inf"
	if !after.IsZero() {
		min = strconv.FormatInt(after.UnixMilli(), 10)
	}
	c, key := s.client, keys.ReadyFor(s.cfg.Prefix, shard).Index()
	entries, err := s.do(ctx, c.B().Zrange().Key(key).Min(min).Max("+inf").Byscore().Limit(0, int64(limit)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
	}
	out := make([]ReadySession, 0, len(entries))
	for _, e := range entries {
		out = append(out, ReadySession{Session: e.Member, Shard: shard, At: time.UnixMilli(int64(e.Score))})
	}
	if len(entries) < limit {
		return out, time.Time{}, nil
	}
	// The next page starts after the last time; finish that time here.
	last := int64(entries[len(entries)-1].Score)
	rest, err := s.do(ctx, c.B().Zrangebyscore().Key(key).Min(strconv.FormatInt(last, 10)).Max(strconv.FormatInt(last, 10)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
	}
	seen := make(map[string]bool, len(out))
	for _, r := range out {
		seen[r.Session] = true
	}
	for _, e := range rest {
		if !seen[e.Member] {
			out = append(out, ReadySession{Session: e.Member, Shard: shard, At: time.UnixMilli(last)})
		}
	}
	return out, time.UnixMilli(last + 1), nil
}

// ReadyShardStats is one index shard's summary.
type ReadyShardStats struct {
	// Shard is the shard number.
	Shard int
	// Due is how many of its sessions have work claimable now.
	Due int64
	// Held is how many have work only once a claim or retry hold ends.
	Held int64
	// Oldest is the earliest time among its due sessions (zero when none):
	// now − Oldest is how long the longest-waiting session has waited.
	Oldest time.Time
	// Next is the earliest time a held session's work frees (zero when none).
	Next time.Time
}

// ReadyStats summarizes every shard of the ready index: a few commands per
// shard, whatever the number of sessions.
func (s *Store) ReadyStats(ctx context.Context) ([]ReadyShardStats, error) {
	now := strconv.FormatInt(s.now(), 10)
	c := s.client
	cmds := make(rueidis.Commands, 0, 4*s.cfg.ReadyShards)
	for shard := 0; shard < s.cfg.ReadyShards; shard++ {
		key := keys.ReadyFor(s.cfg.Prefix, shard).Index()
		cmds = append(cmds,
			c.B().Zcount().Key(key).Min("-inf").Max(now).Build(),
			c.B().Zcount().Key(key).Min("("+now).Max("+inf").Build(),
			c.B().Zrange().Key(key).Min("0").Max("0").Withscores().Build(),
			c.B().Zrange().Key(key).Min("("+now).Max("+inf").Byscore().Limit(0, 1).Withscores().Build())
	}
	replies := s.doMulti(ctx, cmds...)
	out := make([]ReadyShardStats, s.cfg.ReadyShards)
	for shard := range out {
		st := ReadyShardStats{Shard: shard}
		var err error
		if st.Due, err = replies[4*shard].AsInt64(); err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		if st.Held, err = replies[4*shard+1].AsInt64(); err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		first, err := replies[4*shard+2].AsZScores()
		if err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		if st.Due > 0 && len(first) > 0 {
			st.Oldest = time.UnixMilli(int64(first[0].Score))
		}
		next, err := replies[4*shard+3].AsZScores()
		if err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		if len(next) > 0 {
			st.Next = time.UnixMilli(int64(next[0].Score))
		}
		out[shard] = st
	}
	return out, nil
}

// ClaimNextRequest asks for runnable heads of whichever sessions have work.
type ClaimNextRequest struct {
	// Holder names the claimant (a worker id). Required.
	Holder string
	// TTL is the lease: claims expire at now + TTL. Required.
	TTL time.Duration
	// Consumers restricts claims to these consumers; nil serves
	// Config.Consumers (or, with none declared, every consumer).
	Consumers []a2redis.Consumer
	// MaxFailures, when positive, dead-letters a head whose lapsed claim is
	// taken over once its failures reach it, without running it.
	MaxFailures int
	// Limit is the most heads the call claims (from one session). Default
	// Config.ClaimLimit.
	Limit int
	// Exclude names heads not to claim (e.g. ones this worker still runs).
	Exclude []a2redis.HeadRef
	// Sessions, when set, are tried first, in order, before the index is
	// read: the sessions a work wake-up just named.
	Sessions []string
}

// ClaimNextResult is what a ClaimNext claimed.
type ClaimNextResult struct {
	// Session is the session claimed from ("" when nothing was claimed).
	Session string
	// ClaimResult is the claim in that session; its Outcome is Claimed, or
	// Busy / Settled when no session gave work.
	ClaimResult
	// NextAt, when nothing was claimed, is the earliest time the index
	// lists work at (a claim or retry hold that ends): when to look again if
	// no work wake-up comes first. Zero when the index lists nothing.
	NextAt time.Time
}

// claimNextCandidates is how many due sessions per shard one ClaimNext
// reads, and claimNextTries how many of them it tries.
const (
	claimNextCandidates = 8
	claimNextTries      = 8
	skipFor             = time.Second
)

// skipCache remembers sessions that gave this store's ClaimNext nothing
// although the index listed them due, when the call served only some
// consumers (the work is another consumer's): skipped while the index shows
// them at the same time, for at most skipFor.
type skipCache struct {
	mu      sync.Mutex
	entries map[string]skipEntry
}

type skipEntry struct {
	at    int64
	until time.Time
}

func (c *skipCache) skip(session string, at int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[session]
	if !ok {
		return false
	}
	if e.at != at || time.Now().After(e.until) {
		delete(c.entries, session)
		return false
	}
	return true
}

func (c *skipCache) add(session string, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]skipEntry{}
	}
	if len(c.entries) > 4096 {
		now := time.Now()
		for k, e := range c.entries {
			if now.After(e.until) {
				delete(c.entries, k)
			}
		}
	}
	c.entries[session] = skipEntry{at: at, until: time.Now().Add(skipFor)}
}

// claimNext is ClaimNext without its observation.
func (s *Store) claimNext(ctx context.Context, req ClaimNextRequest) (ClaimNextResult, error) {
	if err := checkName("Holder", req.Holder); err != nil {
		return ClaimNextResult{}, err
	}
	if req.TTL <= 0 {
		return ClaimNextResult{}, check.Invalid("TTL", "must be positive (got %v)", req.TTL)
	}
	// Updates a shard refused earlier go before the index is read.
	s.flushLate(ctx)
	claim := func(session string) (ClaimResult, error) {
		return s.claimAvailable(refusalsOnce(ctx), ClaimRequest{
			Session: session, Holder: req.Holder, TTL: req.TTL, Exclude: req.Exclude,
			Consumers: req.Consumers, MaxFailures: req.MaxFailures, Limit: req.Limit,
		})
	}
	// A session the server refuses (its slot migrating) is passed over for
	// the next one; the refusal is reported only when no session gave work.
	var refused error
	passOver := func(err error) bool {
		if errors.Is(err, a2redis.ErrUnavailable) {
			refused = cmp.Or(refused, err)
			return true
		}
		return false
	}
	for _, session := range req.Sessions {
		r, err := claim(session)
		if passOver(err) {
			continue
		}
		if err != nil {
			return ClaimNextResult{}, err
		}
		if r.Outcome == Claimed {
			return ClaimNextResult{Session: session, ClaimResult: r}, nil
		}
	}
	now := s.now()
	c := s.client
	cmds := make(rueidis.Commands, 0, s.cfg.ReadyShards)
	for shard := 0; shard < s.cfg.ReadyShards; shard++ {
		key := keys.ReadyFor(s.cfg.Prefix, shard).Index()
		cmds = append(cmds, c.B().Zrange().Key(key).Min("-inf").Max("+inf").Byscore().Limit(0, claimNextCandidates).Withscores().Build())
	}
	type candidate struct {
		session string
		at      int64
	}
	var due []candidate
	var next int64
	// Only a call that serves some consumers skips sessions that just gave
	// it nothing (their work may be another consumer's); with every
	// consumer served, a miss is a race with another claim, whose own
	// index update already moved the session.
	skipping := req.Consumers != nil
	skipped := false
	for shard, reply := range s.doMulti(ctx, cmds...) {
		entries, err := reply.AsZScores()
		if err != nil {
			return ClaimNextResult{}, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		for _, e := range entries {
			at := int64(e.Score)
			if at > now {
				if next == 0 || at < next {
					next = at
				}
				break
			}
			if skipping && s.skips.skip(e.Member, at) {
				skipped = true
				continue
			}
			due = append(due, candidate{e.Member, at})
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].at < due[j].at })
	if len(due) > claimNextTries {
		due = due[:claimNextTries]
	}
	// Oldest first, but callers arriving together should not all pick the
	// same session: shuffle the front half.
	front := (len(due) + 1) / 2
	rand.Shuffle(front, func(i, j int) { due[i], due[j] = due[j], due[i] })
	outcome := Settled
	for _, cand := range due {
		r, err := claim(cand.session)
		if passOver(err) {
			continue
		}
		if err != nil {
			return ClaimNextResult{}, err
		}
		if r.Outcome == Claimed {
			return ClaimNextResult{Session: cand.session, ClaimResult: r}, nil
		}
		if r.Outcome == Busy {
			outcome = Busy
		}
		if skipping {
			s.skips.add(cand.session, cand.at)
			skipped = true
		}
		if err := s.resyncReady(refusalsOnce(ctx), cand.session); err != nil && !passOver(err) {
			return ClaimNextResult{}, err
		}
	}
	if refused != nil {
		return ClaimNextResult{}, refused
	}
	res := ClaimNextResult{ClaimResult: ClaimResult{Outcome: outcome}}
	if skipped {
		// Look again once the skips end.
		if again := now + skipFor.Milliseconds(); next == 0 || again < next {
			next = again
		}
	}
	if next > 0 {
		res.NextAt = time.UnixMilli(next)
		if outcome == Settled {
			res.Outcome = Busy
			res.RetryAt = res.NextAt
		}
	}
	return res, nil
}

// resyncReady lists a session again from its true state, under a new
// version (ready_sync).
func (s *Store) resyncReady(ctx context.Context, session string) error {
	_, err := s.run(ctx, "ready_sync", session, []string{itoa(s.now())})
	return err
}

// resyncLost lists a session again after a write whose reply was lost:
// within ReadyWait and the caller's own deadline (a caller that gave up is
// not kept waiting; RepairReady covers what this misses).
func (s *Store) resyncLost(ctx context.Context, session string) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyWait)
	defer cancel()
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return
	}
	// One try, outside the retry wrapper: the connection just failed.
	lua := scripts.All()["ready_sync"].Lua(locking)
	msg, err := lua.Exec(ctx, s.client, []string{s.keys(session).Count(), s.keys(session).Sentinel()}, []string{itoa(s.now())}).ToMessage()
	if err != nil {
		return
	}
	values, _ := msg.ToArray()
	if _, mark := popReadyMark(values); mark != "" {
		s.noteReady(ctx, session, mark)
	}
}

// RepairStats reports what a RepairReady pass did.
type RepairStats struct {
	// Sessions is how many sessions' records were read.
	Sessions int
	// Sent is how many of their states were sent to the index.
	Sent int
	// Unreachable is how many nodes the pass could not read (a master
	// that died, before the cluster has promoted its replica); their
	// sessions wait for the next pass, and the pass returns an error
	// wrapping a2redis.ErrUnavailable. A shard that cannot be updated fails
	// the pass the same way, after the other shards are.
	Unreachable int
}

// sendFailures collects a repair pass's failed shard updates.
type sendFailures struct {
	n   int
	err error
}

// repairPage is how many keys one repair SCAN step asks for.
const repairPage = 1000

// RepairReady makes the ready index list every session whose own record
// says it has work: it scans the prefix's sessions (SCAN on every master,
// never KEYS) and sends each such session's recorded state with its
// recorded version; a shard applies only what it lacks, so a pass costs a
// read per session and writes nothing where the index is right. (A lost
// removal only leaves a session listed early, which the claim that visits
// it mends.) A write
// whose index update was lost (the process died or its connection broke
// between the script and the update) is listed again by the next pass: run
// it periodically (the worker runtime does, one store at a time per prefix)
// and a session with work stays unlisted at most one interval plus one
// pass.
func (s *Store) RepairReady(ctx context.Context) (RepairStats, error) {
	var st RepairStats
	pending := map[int][]readyUpdate{}
	pattern := keys.EscapeGlob(s.cfg.Prefix) + ":{*}:listed"
	nodes, unreachable, nodeErr := s.masters(ctx)
	var failed sendFailures
	for _, node := range nodes {
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			// One node's call is bounded: rueidis retries a read on a
			// node that refuses connections for as long as it may.
			nctx, cancel := context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
			entry, err := node.Do(nctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(repairPage).Build().Pin()).AsScanEntry()
			cancel()
			if err != nil && ctx.Err() == nil {
				unreachable++
				nodeErr = cmp.Or(nodeErr, err)
				break
			}
			if err != nil {
				return st, fmt.Errorf("a2redis: repair scan: %w", err)
			}
			if err := s.repairKeys(ctx, entry.Elements, &st, pending, &failed); err != nil {
				return st, err
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	for shard, updates := range pending {
		s.repairSend(ctx, shard, updates, &st, &failed)
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	st.Unreachable = unreachable
	switch {
	case unreachable > 0:
		return st, fmt.Errorf("%w: a2redis: repair could not read %d node(s), their sessions wait for the next pass: %w", a2redis.ErrUnavailable, unreachable, nodeErr)
	case failed.err != nil:
		return st, fmt.Errorf("%w: a2redis: repair could not update %d shard call(s), their sessions wait for the next pass: %w", a2redis.ErrUnavailable, failed.n, failed.err)
	}
	return st, nil
}

// repairSend sends a repair pass's updates of one shard; a shard that
// fails is recorded in failed, and the pass goes on with the others.
func (s *Store) repairSend(ctx context.Context, shard int, updates []readyUpdate, st *RepairStats, failed *sendFailures) {
	if err := s.applyReady(ctx, shard, updates); err != nil {
		failed.n++
		failed.err = cmp.Or(failed.err, err)
		return
	}
	st.Sent += len(updates)
}

// repairKeys reads the listed records among names and queues their states
// per shard in pending, sending a shard's queue once it fills a call.
func (s *Store) repairKeys(ctx context.Context, names []string, st *RepairStats, pending map[int][]readyUpdate, failed *sendFailures) error {
	var sessions []string
	cmds := make(rueidis.Commands, 0, len(names))
	c := s.client
	for _, name := range names {
		session, ok := sessionOfListedKey(s.cfg.Prefix, name)
		if !ok {
			continue
		}
		sessions = append(sessions, session)
		cmds = append(cmds, c.B().Get().Key(name).Build())
	}
	if len(cmds) == 0 {
		return nil
	}
	now := s.now()
	for i, reply := range s.doMulti(ctx, cmds...) {
		text, err := reply.ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("a2redis: repair read: %w", err)
		}
		st.Sessions++
		parts := strings.Split(text, ":")
		if len(parts) < 2 {
			continue
		}
		version, at := parts[0], parts[1]
		if at == "" {
			// No work: a lost removal leaves an entry listed early, which
			// the claim that visits it mends (ready_sync); only work that
			// may be unlisted needs sending.
			continue
		}
		due := false
		if at != "" {
			ms, err := strconv.ParseInt(at, 10, 64)
			due = err == nil && ms <= now
		}
		shard := keys.ReadyShard(sessions[i], s.cfg.ReadyShards)
		pending[shard] = append(pending[shard], readyUpdate{session: sessions[i], version: version, at: at, due: due})
		if len(pending[shard]) >= readyBatch {
			s.repairSend(ctx, shard, pending[shard], st, failed)
			pending[shard] = nil
		}
	}
	return nil
}

func sessionOfListedKey(prefix, key string) (string, bool) {
	head := prefix + ":{"
	if !strings.HasPrefix(key, head) || !strings.HasSuffix(key, "}:listed") {
		return "", false
	}
	session, ok := keys.ParseTag(key[len(head) : len(key)-len("}:listed")])
	if !ok || keys.For(prefix, session).Listed() != key {
		return "", false
	}
	return session, true
}

// masters returns the clients whose keys together are every key once: the
// one server, or each master of a cluster; and how many nodes of a cluster
// did not say their role in time (Retries.Unavailable each).
func (s *Store) masters(ctx context.Context) ([]rueidis.Client, int, error) {
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	var out []rueidis.Client
	failed := 0
	var first error
	for _, addr := range addrs {
		node := nodes[addr]
		if s.client.Mode() == rueidis.ClientModeCluster {
			nctx, cancel := context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
			role, err := node.Do(nctx, node.B().Role().Build().Pin()).ToArray()
			cancel()
			if err != nil || len(role) == 0 {
				if ctx.Err() == nil {
					failed++
					first = cmp.Or(first, fmt.Errorf("ROLE on %s: %w", addr, cmp.Or(err, errors.New("empty reply"))))
				}
				continue
			}
			if r, _ := role[0].ToString(); r != "master" {
				continue
			}
		}
		out = append(out, node)
	}
	return out, failed, first
}

// TryRepairReady runs RepairReady unless another store on the prefix
// repaired within `every`: the stores of a deployment share one repair per
// interval (a lock key with that expiry). It reports whether this store ran
// the pass.
func (s *Store) TryRepairReady(ctx context.Context, every time.Duration) (bool, RepairStats, error) {
	if every <= 0 {
		return false, RepairStats{}, check.Invalid("every", "must be positive (got %v)", every)
	}
	c := s.client
	err := s.do(ctx, c.B().Set().Key(keys.RepairLock(s.cfg.Prefix)).Value(strconv.FormatInt(s.now(), 10)).Nx().Px(every).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, RepairStats{}, nil
	}
	if err != nil {
		return false, RepairStats{}, fmt.Errorf("a2redis: taking the repair lock: %w", err)
	}
	st, err := s.RepairReady(ctx)
	return true, st, err
}

// ReadyState is what the ready index lists for one session.
type ReadyState struct {
	// Listed reports that the index lists the session: it has work.
	Listed bool
	// Due reports that its work is claimable now (At is not after now).
	Due bool
	// At is the time it has work from (see ReadySession.At); zero when not
	// listed.
	At time.Time
}

// ReadyAt returns what the ready index lists for session: one command on
// the session's shard.
func (s *Store) ReadyAt(ctx context.Context, session string) (ReadyState, error) {
	if err := checkSession(session); err != nil {
		return ReadyState{}, err
	}
	c := s.client
	key := keys.ReadyFor(s.cfg.Prefix, keys.ReadyShard(session, s.cfg.ReadyShards)).Index()
	score, err := s.do(ctx, c.B().Zscore().Key(key).Member(session).Build()).AsFloat64()
	if rueidis.IsRedisNil(err) {
		return ReadyState{}, nil
	}
	if err != nil {
		return ReadyState{}, fmt.Errorf("a2redis: reading the ready index for session %q: %w", session, err)
	}
	at := int64(score)
	return ReadyState{Listed: true, Due: at <= s.now(), At: time.UnixMilli(at)}, nil
}

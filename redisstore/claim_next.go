package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
)

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
	// Limit is the most heads the call claims (from one session, or
	// shared among several with Spread). Default Config.ClaimLimit; at
	// most Config.MaxBatch.
	Limit int
	// Exclude names heads not to claim (e.g. ones this worker still runs):
	// at most Config.MaxBatch.
	Exclude []a2redis.HeadRef
	// Sessions, when set, are tried first, in order, before the index is
	// read: the sessions a work wake-up just named.
	Sessions []string
	// Shards names index shards that have work now as far as the caller
	// knows: the shards of wake-ups whose sessions are not in Sessions (a
	// notify.WorkNotice with Gap, or one the caller could not keep). The
	// store counts them among the shards it knows have work, which this
	// call or the next ones read first, earliest work first (a named shard
	// as of now). Each must be in [0, ReadyShards()).
	Shards []int
	// AllShards reads every shard of the index (64 shards per round
	// trip) instead of at most 8: for an occasional full pass
	// (the worker's MaxWait timer), which finds what nothing announced
	// (another process's lease that lapsed) however many shards there are.
	AllShards bool
	// Spread, above 1, lets the call claim from up to Spread sessions
	// (never more than Limit) in one round trip, the claims sent together:
	// the sessions named in Sessions, or the earliest due in the index.
	// Limit is shared among them as evenly as it goes (each result's
	// Share). The first session claimed from is the result's Session, the
	// others are in More. 0 or 1: one session per call.
	Spread int
}

// ClaimNextResult is what a ClaimNext claimed.
type ClaimNextResult struct {
	// Session is the session claimed from ("" when nothing was claimed).
	Session string
	// ClaimResult is the claim in that session; its Outcome is Claimed, or
	// Busy / Settled when no session gave work.
	ClaimResult
	// Share is the part of the request's Limit the claim in Session was
	// given (all of it without Spread): a claim that took as many heads,
	// claimed and dead-lettered, may have left more behind.
	Share int
	// More are the other sessions claimed from when Spread let the call
	// claim from several, each with its Session, ClaimResult and Share
	// (their OthersDue and NextAt are not set).
	More []ClaimNextResult
	// OthersDue, when the claim came from the index (not from Sessions),
	// reports that the index listed other sessions as due too, in the
	// shards this call read or, for the others, as far as the store knows
	// (a shard it never read may list work):
	// a caller that keeps a session's slots (claiming a lane's next head
	// with its predecessor's completion, CompleteAndClaim) should hand them
	// back while it is set, so that those sessions get their turn.
	OthersDue bool
	// NextAt, when nothing was claimed, is the earliest time the index
	// lists work at as far as this store knows (a claim or retry hold that
	// ends): when to look again if no work wake-up comes first. It is not
	// after now when shards this call did not read may have work (an
	// index of more than 8 shards, read a few per call): call again at
	// once. Zero when the index lists nothing.
	NextAt time.Time
}

// Claims returns the claim of every session r claimed from: r's own
// first (without More), then those of More; nil when nothing was claimed.
func (r ClaimNextResult) Claims() []ClaimNextResult {
	if r.Session == "" {
		return nil
	}
	first := r
	first.More = nil
	return append([]ClaimNextResult{first}, r.More...)
}

// ClaimNext claims runnable heads from a session the ready index lists as
// due, with ClaimAvailable's lease, fencing, MaxFailures and Limit rules.
// It reads the earliest due sessions of at most 8 shards in one round trip
// (every shard of an index of 8 or fewer): up to 4 that the shards named in
// req.Shards or the store's own knowledge say have work, earliest first, and
// the rest in turn from a rotating window, so that every shard is read
// within ReadyShards/4 calls of the store whatever else is known
// (req.AllShards reads them all). It tries them oldest first, shuffled
// among the first few so that workers calling at once spread over
// sessions; a claim that leaves work behind moves its session behind the
// others, so one busy session cannot starve the rest. A session that gives
// nothing is listed again from its true state. With nothing claimable it
// reports Busy or Settled and NextAt. With Config.Durability, a claim not
// acknowledged in time returns its result (the session and the heads,
// which are held) together with an a2redis.ErrNotReplicated error.
func (s *Store) ClaimNext(ctx context.Context, req ClaimNextRequest) (ClaimNextResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.claimNext(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpClaimNext})
	res, err := s.claimNext(ctx, req)
	count, dead := 0, 0
	for _, c := range res.Claims() {
		count, dead = count+len(c.Heads), dead+len(c.DeadLettered)
	}
	end(OperationEnd{Session: res.Session, Count: count, DeadLettered: dead, Err: err})
	return res, err
}

// claimNextCandidates is how many due sessions per shard one ClaimNext
// reads, and claimNextTries how many of them it tries (or its Spread, when
// more).
const (
	claimNextCandidates = 8
	claimNextTries      = 8
	skipFor             = time.Second
)

// skipCache remembers sessions that gave this store's ClaimNext nothing
// although the index listed them due, when the call served only some
// consumers (the work is another consumer's, or held back by a
// consumer's PerSession limit): skipped while the index shows them at the
// same time, for at most skipFor, per set of consumers served. A claim
// this store ends in such a session (a completion, failure, release or
// cancel) forgets its skips: the place it freed may be what the session
// was waiting for.
type skipCache struct {
	mu      sync.Mutex
	entries map[string]map[string]skipEntry // session → scope → entry
	n       int
}

type skipEntry struct {
	at    int64
	until time.Time
}

func (c *skipCache) skip(scope, session string, at int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[session][scope]
	if !ok {
		return false
	}
	if e.at != at || time.Now().After(e.until) {
		c.drop(scope, session)
		return false
	}
	return true
}

func (c *skipCache) drop(scope, session string) {
	delete(c.entries[session], scope)
	c.n--
	if len(c.entries[session]) == 0 {
		delete(c.entries, session)
	}
}

func (c *skipCache) add(scope, session string, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]map[string]skipEntry{}
	}
	if c.n > 4096 {
		now := time.Now()
		for session, scopes := range c.entries {
			for scope, e := range scopes {
				if now.After(e.until) {
					c.drop(scope, session)
				}
			}
		}
	}
	scopes := c.entries[session]
	if scopes == nil {
		scopes = map[string]skipEntry{}
		c.entries[session] = scopes
	}
	if _, ok := scopes[scope]; !ok {
		c.n++
	}
	scopes[scope] = skipEntry{at: at, until: time.Now().Add(skipFor)}
}

// forget drops the session's skips, and reports whether it had any.
func (c *skipCache) forget(session string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	scopes, ok := c.entries[session]
	if ok {
		c.n -= len(scopes)
		delete(c.entries, session)
	}
	return ok
}

// endedClaims is told of a committed write that ended claims in session (a
// completion, failure, release or cancel): when this store's ClaimNext was
// skipping the session, it no longer does, and the session's shard is
// read on the next call (its work may have waited for the freed place).
func (s *Store) endedClaims(session string) {
	if s.skips.forget(session) {
		s.view.init(s.cfg.ReadyShards)
		s.view.hint(keys.ReadyShard(session, s.cfg.ReadyShards), s.now())
	}
}

// claimNext is ClaimNext without its observation.
func (s *Store) claimNext(ctx context.Context, req ClaimNextRequest) (ClaimNextResult, error) {
	if err := checkName("Holder", req.Holder); err != nil {
		return ClaimNextResult{}, err
	}
	if req.TTL <= 0 {
		return ClaimNextResult{}, check.Invalid("TTL", "must be positive (got %v)", req.TTL)
	}
	for _, shard := range req.Shards {
		if shard < 0 || shard >= s.cfg.ReadyShards {
			return ClaimNextResult{}, check.Invalid("Shards", "must be in [0, %d) (got %d)", s.cfg.ReadyShards, shard)
		}
	}
	if req.Spread < 0 {
		return ClaimNextResult{}, check.Invalid("Spread", "is negative (%d)", req.Spread)
	}
	limit, err := s.claimLimit(req.Limit)
	if err != nil {
		return ClaimNextResult{}, err
	}
	spread := max(1, min(req.Spread, limit))
	view := &s.view
	view.init(s.cfg.ReadyShards)
	for _, shard := range req.Shards {
		view.hint(shard, s.now())
	}
	if _, open := s.claimable(ctx, s.served(ctx, req.Consumers)); !open {
		return ClaimNextResult{ClaimResult: ClaimResult{Outcome: Settled}}, nil // every consumer it serves is paused
	}
	// Updates a shard refused earlier go before the index is read, and so
	// do riding claim updates whose time has come.
	s.flushLate(ctx)
	s.sendDueRiders(ctx)
	claim := func(session string, limit int) (ClaimResult, error) {
		return s.claimAvailable(claimMarksRide(refusalsOnce(ctx)), ClaimRequest{
			Session: session, Holder: req.Holder, TTL: req.TTL, Exclude: req.Exclude,
			Consumers: req.Consumers, MaxFailures: req.MaxFailures, Limit: limit,
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
	// A batch's claims, what each session gave: claimed (with, when not
	// acknowledged in time, an a2redis.ErrNotReplicated error: its heads
	// are held all the same), nothing (outcome; batch returns these
	// sessions), refused (passed over), or failed (failure: returned when
	// no session of the batch gave work).
	var (
		claimed []ClaimNextResult
		unacked error
		failure error
		outcome = Settled
	)
	batch := func(sessions []string) (missed []string) {
		for _, t := range claimBatch(sessions, limit, claim) {
			if passOver(t.err) {
				continue
			}
			switch err := unreplicatedNothing(t.r, t.err); {
			case errors.Is(err, a2redis.ErrNotReplicated):
				unacked = cmp.Or(unacked, err)
				claimed = append(claimed, ClaimNextResult{Session: t.session, ClaimResult: t.r, Share: t.share})
			case err != nil:
				failure = cmp.Or(failure, err)
			case t.r.Outcome == Claimed:
				claimed = append(claimed, ClaimNextResult{Session: t.session, ClaimResult: t.r, Share: t.share})
			default:
				if t.r.Outcome == Busy {
					outcome = Busy
				}
				missed = append(missed, t.session)
			}
		}
		return missed
	}
	// done assembles what the batch claimed: the first session is the
	// result's, the others are in More.
	done := func() (ClaimNextResult, error) {
		res := claimed[0]
		res.More = claimed[1:]
		return res, unacked
	}
	for from := 0; from < len(req.Sessions); from += spread {
		batch(req.Sessions[from:min(from+spread, len(req.Sessions))])
		if len(claimed) > 0 {
			return done()
		}
		if failure != nil {
			return ClaimNextResult{}, failure
		}
	}
	outcome = Settled
	now := s.now()
	shards, seen := view.pick(s.cfg.ReadyShards, now, req.AllShards)
	read := make([][]rueidis.ZScore, len(shards))
	// A shard's read takes as many entries more as this store has claim
	// updates riding for it (those sessions are passed over: see ride),
	// so that riding sessions listed first never hide the due ones behind
	// them; past ridersRead a shard's riders are sent first instead.
	wanted := make([]int, len(shards))
	for i, shard := range shards {
		riders := s.lines.riderCount(shard)
		if riders > ridersRead {
			s.sendRiders(ctx, shard)
			riders = s.lines.riderCount(shard)
		}
		wanted[i] = claimNextCandidates + min(riders, ridersRead)
	}
	c := s.client
	for from := 0; from < len(shards); from += claimNextPage {
		page := shards[from:min(from+claimNextPage, len(shards))]
		cmds := make(rueidis.Commands, 0, len(page))
		for i, shard := range page {
			key := keys.ReadyFor(s.cfg.Prefix, shard).Index()
			cmds = append(cmds, c.B().Zrange().Key(key).Min("-inf").Max("+inf").Byscore().Limit(0, int64(wanted[from+i])).Withscores().Build())
		}
		for i, reply := range s.doMulti(ctx, cmds...) {
			entries, err := reply.AsZScores()
			if err != nil {
				return ClaimNextResult{}, fmt.Errorf("a2redis: reading ready index shard %d: %w", page[i], err)
			}
			read[from+i] = entries
		}
	}
	type candidate struct {
		session string
		at      int64
	}
	var due []candidate
	// What became of each due session this call saw: skipped, tried and
	// given nothing, or claimed from.
	const (
		skippedIt = iota + 1
		failedIt
		claimedIt
		ridingIt
	)
	fate := map[string]int{}
	// Only a call that serves some consumers skips sessions that just gave
	// it nothing (their work may be another consumer's); with every
	// consumer served, a miss is a race with another claim, whose own
	// index update already moved the session.
	skipping := req.Consumers != nil
	// The skips are per set of consumers served: a session that gave one
	// consumer nothing may hold another's work (a worker claims its
	// rate-limited consumers apart from the others).
	scope := ""
	if skipping {
		names := make([]string, len(req.Consumers))
		for i, c := range req.Consumers {
			names[i] = c.Name
		}
		sort.Strings(names)
		scope = strings.Join(names, "\x00")
	}
	// riding: the sessions passed over for this store's riding claim
	// updates, with the time those list them at.
	riding := map[string]int64{}
	for i, entries := range read {
		for _, e := range entries {
			at := int64(e.Score)
			if at > now {
				break
			}
			if until, ok := s.lines.riding(shards[i], e.Member); ok && until > now {
				// This store claimed it, and the update saying so rides.
				fate[e.Member] = ridingIt
				riding[e.Member] = until
				continue
			}
			if skipping && s.skips.skip(scope, e.Member, at) {
				fate[e.Member] = skippedIt
				continue
			}
			due = append(due, candidate{e.Member, at})
		}
	}
	// learn tells the view what the reads found, less what this call did
	// to the sessions it tried.
	learn := func() {
		for i, entries := range read {
			at := int64(viewNone)
			for _, e := range entries {
				t := int64(e.Score)
				if t > now {
					at = min(at, t)
					break
				}
				switch fate[e.Member] {
				case skippedIt:
					at = min(at, now+skipFor.Milliseconds())
				case ridingIt:
					at = min(at, riding[e.Member])
				case claimedIt:
					at = min(at, now)
				case failedIt:
					// Listed again from its true state (ready_sync).
				default:
					at = min(at, t)
				}
			}
			if len(entries) == wanted[i] {
				// Sessions past the read sort at or after its last: look
				// again from its time, or once the skips end when this
				// call passed over or tried every entry it read (so a
				// shard of sessions that keep giving this caller nothing
				// is not read again at once, call after call).
				last := entries[len(entries)-1]
				switch t := int64(last.Score); {
				case t > now || fate[last.Member] == 0 || fate[last.Member] == claimedIt:
					at = min(at, t)
				case fate[last.Member] == ridingIt:
					at = min(at, now)
				default:
					at = min(at, now+skipFor.Milliseconds())
				}
			}
			view.learn(shards[i], seen[i], at)
		}
	}
	// othersDue reports whether the index lists a session other than
	// claimed as due: among those read, or in a shard not read.
	othersDue := func(claimed []ClaimNextResult) bool {
		for _, c := range due {
			if !slices.ContainsFunc(claimed, func(r ClaimNextResult) bool { return r.Session == c.session }) {
				return true
			}
		}
		return view.dueElsewhere(shards, now)
	}
	sort.Slice(due, func(i, j int) bool { return due[i].at < due[j].at })
	if tries := max(claimNextTries, spread); len(due) > tries {
		due = due[:tries]
	}
	// Oldest first, but callers arriving together should not all pick the
	// same session: shuffle the front half.
	front := (len(due) + 1) / 2
	rand.Shuffle(front, func(i, j int) { due[i], due[j] = due[j], due[i] })
	at := make(map[string]int64, len(due))
	for _, cand := range due {
		at[cand.session] = cand.at
	}
	for from := 0; from < len(due); from += spread {
		names := make([]string, 0, spread)
		for _, cand := range due[from:min(from+spread, len(due))] {
			names = append(names, cand.session)
		}
		missed := batch(names)
		for _, c := range claimed {
			fate[c.Session] = claimedIt
		}
		for _, session := range missed {
			fate[session] = failedIt
			if skipping {
				s.skips.add(scope, session, at[session])
				fate[session] = skippedIt
			}
			if err := s.resyncReady(refusalsOnce(ctx), session); err != nil && !passOver(err) {
				failure = cmp.Or(failure, err)
			}
		}
		if len(claimed) > 0 {
			learn()
			res, err := done()
			res.OthersDue = othersDue(claimed)
			return res, err
		}
		if failure != nil {
			learn()
			return ClaimNextResult{}, failure
		}
	}
	learn()
	if refused != nil {
		return ClaimNextResult{}, refused
	}
	res := ClaimNextResult{ClaimResult: ClaimResult{Outcome: outcome}}
	next, unread := view.next()
	if unread || next <= now {
		// Shards this call did not read may have work now.
		next = now
	}
	if next != viewNone {
		res.NextAt = time.UnixMilli(next)
		if outcome == Settled {
			res.Outcome = Busy
			res.RetryAt = res.NextAt
		}
	}
	return res, nil
}

// claimTry is one session's claim in a batch: its share of the call's
// limit and what the claim gave.
type claimTry struct {
	session string
	share   int
	r       ClaimResult
	err     error
}

// claimBatch claims from sessions at once (their calls go out together,
// pipelined on the client's connections), limit shared among them as
// evenly as it goes, the first ones taking what does not divide; it
// reports what each gave, in order.
func claimBatch(sessions []string, limit int, claim func(session string, limit int) (ClaimResult, error)) []claimTry {
	n := len(sessions)
	tries := make([]claimTry, n)
	for i, session := range sessions {
		tries[i] = claimTry{session: session, share: limit / n}
		if i < limit%n {
			tries[i].share++
		}
	}
	if n == 1 {
		tries[0].r, tries[0].err = claim(sessions[0], tries[0].share)
		return tries
	}
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() { tries[i].r, tries[i].err = claim(tries[i].session, tries[i].share) })
	}
	wg.Wait()
	return tries
}

// unreplicatedNothing drops a replication shortfall from the error of a
// claim that claimed and dead-lettered nothing (ClaimNext goes on to the
// next session, as after any claim that gave nothing), and returns err
// otherwise.
func unreplicatedNothing(r ClaimResult, err error) error {
	if errors.Is(err, a2redis.ErrNotReplicated) && r.Outcome != Claimed && len(r.DeadLettered) == 0 {
		return nil
	}
	return err
}

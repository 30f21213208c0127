package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
)

// ClaimOutcome tells how a ClaimAvailable ended.
type ClaimOutcome string

// The claim outcomes.
const (
	// Claimed: heads were claimed (or dead-lettered by a lapsed takeover).
	Claimed ClaimOutcome = "claimed"
	// Busy: every eligible head is held; RetryAt says when one frees.
	Busy ClaimOutcome = "busy"
	// Settled: no served head is runnable.
	Settled ClaimOutcome = "settled"
)

// ClaimRequest asks for a session's runnable heads.
type ClaimRequest struct {
	// Session is the session id. Required.
	Session string
	// Holder names the claimant (a worker id). Required.
	Holder string
	// TTL is the lease: claims expire at now + TTL. Required unless
	// ExpiresAt is set. Recommended: 30s, or a few times a handler's usual
	// run, renewed (RenewClaims) every third of it while the handler still
	// runs. A lease too short lets a second worker take over a head that
	// is still running; one too long delays the takeover when a worker dies.
	TTL time.Duration
	// ExpiresAt, when set, is the absolute lease expiry instead of TTL.
	ExpiresAt time.Time
	// Exclude names heads not to claim (e.g. ones this worker still runs):
	// at most Config.MaxBatch.
	Exclude []a2redis.HeadRef
	// Consumers restricts claims to the consumers a deployment serves; nil
	// serves every consumer.
	Consumers []a2redis.Consumer
	// MaxFailures, when positive, dead-letters a head whose lapsed claim is
	// taken over once its failures reach it, without running it, for the
	// consumers whose registry entry sets no a2redis.Consumer.MaxFailures
	// (the entry's wins). Recommended: the value FailRequest.MaxFailures
	// uses (5), so that an event that crashes every worker that runs it
	// (its claims lapse with no failure reported) is dead-lettered too
	// instead of looping.
	MaxFailures int
	// Through, when positive, claims only heads at or below that index.
	Through int64
	// Limit is the most heads one call claims, lowest indexes first; the
	// rest wait for the next call, so one script never holds Redis long.
	// Default Config.ClaimLimit (256); at most Config.MaxBatch. Lapsed claims count among them as
	// long as at most max(1024, 4×Limit) have lapsed at once; a larger pile
	// is taken over earliest lease first, over several calls.
	Limit int
}

// ClaimResult is what a ClaimAvailable claimed.
type ClaimResult struct {
	// Outcome is claimed, busy or settled.
	Outcome ClaimOutcome
	// Heads are the claimed heads to run, sorted by index then consumer.
	// Each carries its event and its new attempt (HeadState.Attempts).
	Heads []a2redis.HeadEvent
	// DeadLettered are lapsed heads this call dead-lettered instead of
	// claiming (MaxFailures reached); they are not to be run.
	DeadLettered []a2redis.HeadEvent
	// RetryAt is, when busy, the earliest time a held head frees.
	RetryAt time.Time
	// ClearIndex is the session's latest clear marker (when claimed).
	ClearIndex int64
	// SessionHead is the session's head index (when claimed).
	SessionHead int64
}

// Attempt names one claimed attempt: its head and the attempt number its
// claim returned (HeadEvent.Attempts). RenewClaims, CompleteAttempts,
// CompleteAndClaim and Release name the attempts they act on with it.
type Attempt struct {
	// Head names the head: consumer, lane and index.
	Head a2redis.HeadRef
	// Attempt is the attempt the claim returned. Required.
	Attempt int64
}

// AttemptOf is the attempt a claim returned for the head h.
func AttemptOf(h a2redis.HeadEvent) Attempt { return Attempt{Head: h.Ref(), Attempt: h.Attempts} }

// ClaimAvailable claims every eligible head of a session for a holder, up to
// the limit: live, served, not excluded, at or below Through, and not held
// by an unexpired claim or retry hold. Each claim bumps the head's attempt;
// a lapsed claim taken over counts a failure. A claim whose outcome is
// unknown (its connection failed) is not retried, since a second one would
// bump the attempts again: the error reaches the caller, and heads it may
// have claimed are taken over once the lease lapses. With
// Config.Durability, a claim not acknowledged in time returns its result
// together with an a2redis.ErrNotReplicated error: the heads are held.
func (s *Store) ClaimAvailable(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.claimAvailable(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpClaim, Session: req.Session})
	res, err := s.claimAvailable(ctx, req)
	end(OperationEnd{Session: req.Session, Count: len(res.Heads), DeadLettered: len(res.DeadLettered), Err: err})
	return res, err
}

// claimAvailable is ClaimAvailable without its observation.
func (s *Store) claimAvailable(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if err := checkSession(req.Session); err != nil {
		return ClaimResult{}, err
	}
	if err := checkName("Holder", req.Holder); err != nil {
		return ClaimResult{}, err
	}
	now := s.now()
	expires, err := check.Expiry(now, req.TTL, req.ExpiresAt)
	if err != nil {
		return ClaimResult{}, err
	}
	if req.MaxFailures < 0 {
		return ClaimResult{}, check.Invalid("MaxFailures", "must be at least 1 (got %d)", req.MaxFailures)
	}
	if req.Through < 0 {
		return ClaimResult{}, check.Invalid("Through", "is negative (%d)", req.Through)
	}
	limit, err := s.claimLimit(req.Limit)
	if err != nil {
		return ClaimResult{}, err
	}
	if err := check.Count("Exclude", "heads", len(req.Exclude), s.cfg.MaxBatch, "Config.MaxBatch"); err != nil {
		return ClaimResult{}, err
	}
	consumers := s.served(ctx, req.Consumers)
	if err := s.checkDeclaredConsumers(ctx, "Consumers", req.Consumers); err != nil {
		return ClaimResult{}, err
	}
	consumers, open := s.claimable(ctx, consumers)
	if !open {
		return ClaimResult{Outcome: Settled}, nil // every consumer it serves is paused
	}
	served, err := servedArg(consumers)
	if err != nil {
		return ClaimResult{}, err
	}
	maxFailures, through := "", ""
	if req.MaxFailures > 0 {
		maxFailures = itoa(int64(req.MaxFailures))
	}
	if req.Through > 0 {
		through = itoa(req.Through)
	}
	args := []string{req.Holder, itoa(now), itoa(expires), maxFailures, served, through, itoa(int64(limit)), itoa(int64(len(req.Exclude)))}
	for i, ref := range req.Exclude {
		if err := checkName(fmt.Sprintf("Exclude[%d].Consumer", i), ref.Consumer); err != nil {
			return ClaimResult{}, err
		}
		tag := tagOf(ref.Lane)
		if ref.Lane == "" {
			tag = "#" + itoa(ref.Index)
		}
		args = append(args, ref.Consumer, tag)
	}
	// The flat claim first when the call serves every consumer or the
	// declared ones (the heads are then, almost always, all served); a call
	// naming a subset goes to the general claim at once.
	reply, err := s.claimRun(ctx, req.Session, args, len(req.Exclude) == 0 && req.Consumers == nil)
	// An unreplicated claim holds its heads all the same: report them.
	notReplicated := notReplicatedOnly(reply, &err)
	if err != nil {
		return ClaimResult{}, err
	}
	fresh := a2redis.HeadState{
		Attempts: 1, FirstClaimedAt: time.UnixMilli(now), LastClaimedAt: time.UnixMilli(now),
		Holder: req.Holder, ClaimExpiresAt: time.UnixMilli(expires),
	}
	r, err := claimResult(req.Session, reply, fresh)
	if err == nil && r.Outcome == Claimed {
		err = s.claimedEvents(ctx, req.Session, &r)
	}
	if err == nil {
		err = notReplicated
	}
	return r, err
}

// claimLimit returns a claim's limit: limit, or Config.ClaimLimit for 0;
// ErrInvalidArgument outside [1, Config.MaxBatch].
func (s *Store) claimLimit(limit int) (int, error) {
	limit = cmp.Or(limit, s.cfg.ClaimLimit)
	if limit < 0 || limit > s.cfg.MaxBatch {
		return 0, check.Invalid("Limit", "must be in [1, Config.MaxBatch (%d)] (got %d)", s.cfg.MaxBatch, limit)
	}
	return limit, nil
}

// claimRun runs a claim: with `open` (nothing excluded, every or every
// declared consumer served), first the flat claim_fast, which handles the
// common case and hands the rest to claim with nothing written.
func (s *Store) claimRun(ctx context.Context, session string, args []string, open bool) ([]rueidis.RedisMessage, error) {
	if open && !scripts.GeneralOnly() {
		reply, err := s.run(ctx, "claim_fast", session, args)
		if (err != nil && !handedOn(reply, err)) || word(reply, 0) != "general" {
			return reply, err
		}
	}
	call := args
	for {
		reply, err := s.run(ctx, "claim", session, call)
		if err != nil || word(reply, 0) != "scan" {
			return reply, err
		}
		// The scan for free heads was cut short with nothing found (heads
		// of consumers this call does not serve): go on from there.
		call = append(args[:len(args):len(args)], word(reply, 1))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// claimResult decodes a claim's reply; a head claimed for the first time
// has its claim state fresh. The heads' events are left for
// claimedEvents.
func claimResult(session string, reply []rueidis.RedisMessage, fresh a2redis.HeadState) (ClaimResult, error) {
	switch word(reply, 0) {
	case "settled":
		return ClaimResult{Outcome: Settled}, nil
	case "busy":
		at, err := number(reply, 1)
		if err != nil {
			return ClaimResult{}, err
		}
		return ClaimResult{Outcome: Busy, RetryAt: time.UnixMilli(at)}, nil
	case "missing":
		return ClaimResult{}, errorf(a2redis.ErrRangeGap, session, "a head names index %s, past the session head", word(reply, 1))
	case "claimed":
		count, err := number(reply, 1)
		if err != nil || len(reply) != int(count)+4 {
			return ClaimResult{}, fmt.Errorf("%w: claim replied %d items for %d heads", a2redis.ErrUnexpectedReply, len(reply), count)
		}
		r := ClaimResult{Outcome: Claimed}
		for _, m := range reply[2 : 2+count] {
			head, parts, err := claimedHead(session, m, fresh, "claimed head")
			if err != nil {
				return ClaimResult{}, err
			}
			if len(parts) == 4 {
				head.HeadState = headState(parts[3])
			}
			if head.DeadLettered() {
				r.DeadLettered = append(r.DeadLettered, head)
			} else {
				r.Heads = append(r.Heads, head)
			}
		}
		sortHeads(r.Heads)
		sortHeads(r.DeadLettered)
		if r.ClearIndex, err = number(reply, int(2+count)); err != nil {
			return ClaimResult{}, err
		}
		if r.SessionHead, err = number(reply, int(3+count)); err != nil {
			return ClaimResult{}, err
		}
		return r, nil
	}
	return ClaimResult{}, fmt.Errorf("%w: claim replied %v", a2redis.ErrUnexpectedReply, reply)
}

// claimedEvents fills in the events of a claim's heads with one XRANGE per
// run of consecutive indexes, sent together. Stored events never change,
// so reading them after the claim reads what the claim saw, unless a clear
// and a reclaim deleted them in between: such heads belong to a past
// lifetime (their attempts are superseded) and are left out. A missing
// event above the clear marker is a gap in the log (ErrRangeGap).
func (s *Store) claimedEvents(ctx context.Context, session string, r *ClaimResult) error {
	indexes := make([]int64, 0, len(r.Heads)+len(r.DeadLettered))
	for _, list := range [][]a2redis.HeadEvent{r.Heads, r.DeadLettered} {
		for _, h := range list {
			indexes = append(indexes, h.Index)
		}
	}
	events, err := s.events(ctx, session, indexes)
	if err != nil {
		return err
	}
	fill := func(list []a2redis.HeadEvent) ([]a2redis.HeadEvent, bool) {
		out, gone := list[:0], false
		for _, h := range list {
			ev, ok := events[h.Index]
			if !ok {
				gone = true
				continue
			}
			h.StoredEvent = ev
			out = append(out, h)
		}
		return out, gone
	}
	var goneHeads, goneDead bool
	r.Heads, goneHeads = fill(r.Heads)
	r.DeadLettered, goneDead = fill(r.DeadLettered)
	if !goneHeads && !goneDead {
		return nil
	}
	// Events are missing: only a clear since the claim explains that.
	b, err := s.Bounds(ctx, session)
	if err != nil {
		return err
	}
	for _, idx := range indexes {
		if _, ok := events[idx]; !ok && idx > b.ClearIndex {
			return errorf(a2redis.ErrRangeGap, session, "claimed index %d, which the log lacks", idx)
		}
	}
	r.ClearIndex = max(r.ClearIndex, b.ClearIndex)
	return nil
}

// events reads the events at indexes (in any order, repeats allowed) with
// one XRANGE per run of consecutive indexes, sent together. An index with
// no event is left out.
func (s *Store) events(ctx context.Context, session string, indexes []int64) (map[int64]a2redis.StoredEvent, error) {
	indexes = slices.Clone(indexes)
	slices.Sort(indexes)
	indexes = slices.Compact(indexes)
	log := s.keys(session).Log()
	var cmds rueidis.Commands
	for first := 0; first < len(indexes); {
		last := first
		for last+1 < len(indexes) && indexes[last+1] == indexes[last]+1 {
			last++
		}
		cmds = append(cmds, s.client.B().Xrange().Key(log).Start(itoa(indexes[first])+"-0").End(itoa(indexes[last])+"-0").Build())
		first = last + 1
	}
	events := make(map[int64]a2redis.StoredEvent, len(indexes))
	for _, res := range s.doMulti(ctx, cmds...) {
		entries, err := res.ToArray()
		if err != nil {
			return nil, err
		}
		for _, m := range entries {
			ev, err := entry(session, m)
			if err != nil {
				return nil, err
			}
			events[ev.Index] = ev
		}
	}
	return events, nil
}

func sortHeads(heads []a2redis.HeadEvent) {
	sort.SliceStable(heads, func(i, j int) bool {
		if heads[i].Index != heads[j].Index {
			return heads[i].Index < heads[j].Index
		}
		return heads[i].Consumer < heads[j].Consumer
	})
}

// claimedHead decodes a claimed head as the claim scripts send it,
// { consumer, kind, index } and an optional fourth element (the caller's
// to read), as a fresh head of session; what names it in errors.
func claimedHead(session string, m rueidis.RedisMessage, fresh a2redis.HeadState, what string) (a2redis.HeadEvent, []rueidis.RedisMessage, error) {
	parts := array(m)
	if len(parts) != 3 && len(parts) != 4 {
		return a2redis.HeadEvent{}, nil, fmt.Errorf("%w: %s %v", a2redis.ErrUnexpectedReply, what, m)
	}
	index, err := strconv.ParseInt(text(parts[2]), 10, 64)
	if err != nil {
		return a2redis.HeadEvent{}, nil, fmt.Errorf("%w: %s %v", a2redis.ErrUnexpectedReply, what, m)
	}
	kind, lane := cursorOf(text(parts[1]))
	return a2redis.HeadEvent{
		StoredEvent: a2redis.StoredEvent{Session: session, Index: index},
		Consumer:    text(parts[0]), Lane: lane, Kind: kind, HeadState: fresh,
	}, parts, nil
}

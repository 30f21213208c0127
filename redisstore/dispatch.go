package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/notify"
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
	// Exclude names heads not to claim (e.g. ones this worker still runs).
	Exclude []a2redis.HeadRef
	// Consumers restricts claims to the consumers a deployment serves; nil
	// serves every consumer.
	Consumers []a2redis.Consumer
	// MaxFailures, when positive, dead-letters a head whose lapsed claim is
	// taken over once its failures reach it, without running it.
	// Recommended: the value FailRequest.MaxFailures uses (5), so that an
	// event that crashes every worker that runs it (its claims lapse with
	// no failure reported) is dead-lettered too instead of looping.
	MaxFailures int
	// Through, when positive, claims only heads at or below that index.
	Through int64
	// Limit is the most heads one call claims, lowest indexes first; the
	// rest wait for the next call, so one script never holds Redis long.
	// Default Config.ClaimLimit (256). Lapsed claims count among them as
	// long as at most max(1024, 4×Limit) have lapsed at once; a larger pile
	// is taken over earliest lease first, over several calls.
	Limit int
}

// ClaimResult is what a ClaimAvailable claimed.
type ClaimResult struct {
	// Outcome is claimed, busy or settled.
	Outcome ClaimOutcome
	// Heads are the claimed heads to run, sorted by index then consumer.
	// Each carries its event and its new attempt (Dispatch.Attempts).
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
	limit := req.Limit
	if limit == 0 {
		limit = s.cfg.ClaimLimit
	}
	if limit < 0 {
		return ClaimResult{}, check.Invalid("Limit", "is negative (%d)", limit)
	}
	consumers := s.served(req.Consumers)
	if err := s.checkDeclaredConsumers("Consumers", req.Consumers); err != nil {
		return ClaimResult{}, err
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
	fresh := a2redis.Dispatch{
		Attempts: 1, FirstClaimedAt: time.UnixMilli(now), LastClaimedAt: time.UnixMilli(now),
		Holder: req.Holder, ClaimExpiresAt: time.UnixMilli(expires),
	}
	r, err := claimResult(req.Session, reply, fresh)
	if err == nil && r.Outcome == Claimed {
		s.noteLogCursors(r.Heads)
		s.noteLogCursors(r.DeadLettered)
		err = s.claimedEvents(ctx, req.Session, &r)
	}
	if err == nil {
		err = notReplicated
	}
	return r, err
}

// claimRun runs a claim: with `open` (nothing excluded, every or every
// declared consumer served), first the flat claim_fast, which handles the
// common case and hands the rest to claim with nothing written.
func (s *Store) claimRun(ctx context.Context, session string, args []string, open bool) ([]rueidis.RedisMessage, error) {
	if open {
		reply, err := s.run(ctx, "claim_fast", session, args)
		if err != nil || word(reply, 0) != "general" {
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

// completeRun runs complete_many's arguments: first, when fast, the flat
// complete_fast, which handles event and lane heads claimed and never
// failed or pinned and hands the rest to complete_many with nothing
// written.
func (s *Store) completeRun(ctx context.Context, session string, args []string, fast bool) ([]rueidis.RedisMessage, error) {
	if fast {
		reply, err := s.run(ctx, "complete_fast", session, args)
		if err != nil || word(reply, 0) != "general" {
			return reply, err
		}
	}
	return s.runIndexed(ctx, "complete_many", session, args)
}

// completesFast reports whether complete_fast may complete these heads:
// not when one of them is a log cursor's head (complete_fast would only
// hand it on, a script call spent for nothing). A consumer never uses one
// lane both as a target lane and as its log (LogSpec.Lane), so a served
// log spec, or a log head an earlier claim returned, tells.
func (s *Store) completesFast(consumers []a2redis.Consumer, refs []a2redis.HeadRef) bool {
	for _, r := range refs {
		if r.Lane == "" {
			continue
		}
		if _, ok := s.logCursors.Load(logCursorKey(r.Consumer, r.Lane)); ok {
			return false
		}
		for _, c := range consumers {
			if c.Log != nil && c.Name == r.Consumer && c.Log.Lane == r.Lane {
				return false
			}
		}
	}
	return true
}

func logCursorKey(consumer, lane string) string { return consumer + "\x00" + lane }

// noteLogCursors remembers the log cursors among claimed heads (see
// completesFast).
func (s *Store) noteLogCursors(heads []a2redis.HeadEvent) {
	for _, h := range heads {
		if h.Kind == a2redis.LogCursor {
			s.logCursors.LoadOrStore(logCursorKey(h.Consumer, h.Lane), struct{}{})
		}
	}
}

// claimResult decodes a claim's reply; a head claimed for the first time
// has the dispatch columns fresh. The heads' events are left for
// claimedEvents.
func claimResult(session string, reply []rueidis.RedisMessage, fresh a2redis.Dispatch) (ClaimResult, error) {
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
			parts := array(m)
			if len(parts) != 3 && len(parts) != 4 {
				return ClaimResult{}, fmt.Errorf("%w: claimed head %v", a2redis.ErrUnexpectedReply, m)
			}
			index, err := strconv.ParseInt(text(parts[2]), 10, 64)
			if err != nil {
				return ClaimResult{}, fmt.Errorf("%w: claimed head %v", a2redis.ErrUnexpectedReply, m)
			}
			kind, lane := cursorOf(text(parts[1]))
			head := a2redis.HeadEvent{
				StoredEvent: a2redis.StoredEvent{Session: session, Index: index},
				Consumer:    text(parts[0]), Lane: lane, Kind: kind, Dispatch: fresh,
			}
			if len(parts) == 4 {
				head.Dispatch = dispatch(parts[3])
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

func sortRefs(refs []a2redis.HeadRef) {
	sort.SliceStable(refs, func(i, j int) bool {
		if refs[i].Index != refs[j].Index {
			return refs[i].Index < refs[j].Index
		}
		return refs[i].Consumer < refs[j].Consumer
	})
}

// Claim is one held claim: a head and the attempt its claim returned.
type Claim struct {
	a2redis.HeadRef
	// Attempt is the attempt number of the claim.
	Attempt int64
}

// RenewRequest asks to extend a holder's claims.
type RenewRequest struct {
	// Session is the session id. Required.
	Session string
	// Holder is the claimant. Required.
	Holder string
	// Claims are the claims to renew.
	Claims []Claim
	// TTL is the new lease from now, unless ExpiresAt is set; usually the
	// claim's own TTL (see ClaimRequest.TTL).
	TTL time.Duration
	// ExpiresAt, when set, is the absolute new expiry.
	ExpiresAt time.Time
}

// RenewResult says which claims were renewed and which were lost.
type RenewResult struct {
	// Renewed are the claims extended, sorted by index then consumer.
	Renewed []a2redis.HeadRef
	// Superseded are claims a newer attempt took, or whose head the
	// cursor moved past: stop working on them.
	Superseded []a2redis.HeadRef
	// Lapsed are the other claims: not held by this holder any more
	// though no newer attempt took them (the lease ran out, or the claim
	// was failed or released), or naming a head its cursor has not
	// reached. Stop working on them too: any claim may take them over.
	Lapsed []a2redis.HeadRef
}

// RenewClaims extends the holder's live claims. Every requested claim is
// reported in exactly one of Renewed, Superseded and Lapsed.
func (s *Store) RenewClaims(ctx context.Context, req RenewRequest) (RenewResult, error) {
	if err := checkSession(req.Session); err != nil {
		return RenewResult{}, err
	}
	if err := checkName("Holder", req.Holder); err != nil {
		return RenewResult{}, err
	}
	now := s.now()
	expires, err := check.Expiry(now, req.TTL, req.ExpiresAt)
	if err != nil {
		return RenewResult{}, err
	}
	if len(req.Claims) == 0 {
		return RenewResult{Renewed: []a2redis.HeadRef{}, Superseded: []a2redis.HeadRef{}, Lapsed: []a2redis.HeadRef{}}, nil
	}
	args := []string{req.Holder, itoa(now), itoa(expires), itoa(int64(len(req.Claims)))}
	for i, c := range req.Claims {
		if err := checkCause(fmt.Sprintf("Claims[%d]", i), a2redis.Cause{Consumer: c.Consumer, Lane: c.Lane, Index: c.Index, Attempt: c.Attempt}); err != nil {
			return RenewResult{}, err
		}
		if err := s.checkDeclared(fmt.Sprintf("Claims[%d].Consumer", i), c.Consumer); err != nil {
			return RenewResult{}, err
		}
		args = append(args, c.Consumer, tagOf(c.Lane), itoa(c.Index), itoa(c.Attempt))
	}
	reply, err := s.run(ctx, "renew", req.Session, args)
	if err != nil {
		return RenewResult{}, err
	}
	renewed, err := number(reply, 0)
	if err != nil || int(renewed)+1 > len(reply) {
		return RenewResult{}, fmt.Errorf("%w: renew replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	r := RenewResult{Renewed: []a2redis.HeadRef{}, Superseded: []a2redis.HeadRef{}, Lapsed: []a2redis.HeadRef{}}
	reported := make([]bool, len(req.Claims))
	for i, m := range reply[1:] {
		pos, err := asInt(m)
		if err != nil || pos < 1 || int(pos) > len(req.Claims) {
			return RenewResult{}, fmt.Errorf("%w: renew replied position %v", a2redis.ErrUnexpectedReply, m)
		}
		ref := req.Claims[pos-1].HeadRef
		reported[pos-1] = true
		if int64(i) < renewed {
			r.Renewed = append(r.Renewed, ref)
		} else {
			r.Superseded = append(r.Superseded, ref)
		}
	}
	for i, c := range req.Claims {
		if !reported[i] {
			r.Lapsed = append(r.Lapsed, c.HeadRef)
		}
	}
	sortRefs(r.Renewed)
	sortRefs(r.Superseded)
	sortRefs(r.Lapsed)
	return r, nil
}

// CompleteRequest finishes an attempt.
type CompleteRequest struct {
	// Session is the session id. Required.
	Session string
	// Head names the head: consumer, lane and index.
	Head a2redis.HeadRef
	// Attempt is the attempt the claim returned. Required.
	Attempt int64
	// Events are the events the handler returned; they are appended with
	// Cause = this attempt, atomically with the completion.
	Events []a2redis.Event
	// Consumers are the served consumers (see AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// CompleteOutcome tells how a CompleteAttempt ended.
type CompleteOutcome string

// The completion outcomes.
const (
	// Completed: the cursor moved past the head (now or by an earlier try
	// whose acknowledgement was lost).
	Completed CompleteOutcome = "completed"
	// CompleteSuperseded: the attempt no longer owns the head; nothing was
	// written.
	CompleteSuperseded CompleteOutcome = "superseded"
)

// CompleteResult is what a CompleteAttempt did.
type CompleteResult struct {
	// Outcome is completed or superseded.
	Outcome CompleteOutcome
	// Events are the returned events as stored (the committed ones on a
	// replay).
	Events []a2redis.StoredEvent
	// Replayed reports a retry of an already committed completion.
	Replayed bool
}

// completeAttempt is CompleteAttempt without its observation.
func (s *Store) completeAttempt(ctx context.Context, req CompleteRequest) (CompleteResult, error) {
	if err := checkSession(req.Session); err != nil {
		return CompleteResult{}, err
	}
	cause := a2redis.Cause{Consumer: req.Head.Consumer, Lane: req.Head.Lane, Index: req.Head.Index, Attempt: req.Attempt}
	if err := checkCause("Head", cause); err != nil {
		return CompleteResult{}, err
	}
	consumers := s.served(req.Consumers)
	served, err := servedArg(consumers)
	if err != nil {
		return CompleteResult{}, err
	}
	batch, _, err := s.prepare(req.Events, "Events")
	if err != nil {
		return CompleteResult{}, err
	}
	for i, e := range req.Events {
		if e.Cause != nil {
			return CompleteResult{}, check.Invalid(fmt.Sprintf("Events[%d].Cause", i), "is set: returned events take the completed attempt as their cause")
		}
	}
	now := s.now()
	var reply []rueidis.RedisMessage
	switch {
	case len(batch) > 0:
		reply, err = s.runIndexed(ctx, "complete", req.Session, completeArgs(now, cause, served, batch))
	default:
		// Nothing to append: complete_fast, else complete_event for an
		// event head and complete_many (a fraction of complete's cost) for
		// a lane or log head. { 'ok', outcome } becomes { outcome }.
		args := []string{itoa(now), served, "1", cause.Consumer, tagOf(cause.Lane), itoa(cause.Index), itoa(cause.Attempt)}
		if req.Head.Lane != "" {
			reply, err = s.completeRun(ctx, req.Session, args, s.completesFast(consumers, []a2redis.HeadRef{req.Head}))
		} else if reply, err = s.run(ctx, "complete_fast", req.Session, args); err == nil && word(reply, 0) == "general" {
			// complete_event replies { outcome, ... } itself.
			reply, err = s.run(ctx, "complete_event", req.Session, []string{itoa(now), cause.Consumer, itoa(cause.Index), itoa(cause.Attempt)})
			break
		}
		if err == nil && word(reply, 0) == "ok" {
			reply = reply[1:]
		}
	}
	if err != nil {
		return CompleteResult{}, writeError(req.Session, batch, err)
	}
	switch word(reply, 0) {
	case "ok":
		if len(batch) == 0 {
			return CompleteResult{Outcome: Completed, Events: []a2redis.StoredEvent{}}, nil
		}
		first, err := number(reply, 1)
		if err != nil {
			return CompleteResult{}, err
		}
		stored := appendedEvents(req.Session, batch, first, now, func(int) *a2redis.Cause { return &cause })
		s.publish(ctx, req.Session, notify.Encode(lastIndex(stored), now, wakeEntries(stored)))
		return CompleteResult{Outcome: Completed, Events: stored}, nil
	case "duplicate":
		stored, err := replayedEvents(req.Session, batch, reply[1:])
		if err != nil {
			return CompleteResult{}, err
		}
		for _, ev := range stored {
			if ev.Cause == nil || *ev.Cause != cause {
				return CompleteResult{}, errorf(a2redis.ErrPartialDuplicateBatch, req.Session, "returned event %q was stored by another attempt", ev.ID)
			}
		}
		if last := lastIndex(stored); last > 0 {
			s.publish(ctx, req.Session, notify.EncodeBare(last))
		}
		return CompleteResult{Outcome: Completed, Events: stored, Replayed: true}, nil
	case "superseded":
		return CompleteResult{Outcome: CompleteSuperseded, Events: []a2redis.StoredEvent{}}, nil
	case "missing":
		return CompleteResult{}, errorf(a2redis.ErrNoEvent, req.Session, "no event at index %d", req.Head.Index)
	case "partial":
		return CompleteResult{}, errorf(a2redis.ErrPartialDuplicateBatch, req.Session, "returned event ids clash with stored events or with the committed completion of index %d", req.Head.Index)
	}
	return CompleteResult{}, fmt.Errorf("%w: complete replied %v", a2redis.ErrUnexpectedReply, reply)
}

// completeArgs are the complete script's arguments for a completion that
// returns batch.
func completeArgs(now int64, cause a2redis.Cause, served string, batch []prepared) []string {
	causeJSON, _ := json.Marshal(cause)
	// The returned ids as the script records them: byte-exact, so a retry
	// of a completion whose ids are not UTF-8 still replays.
	var ids strings.Builder
	for _, e := range batch {
		ids.WriteString(itoa(int64(len(e.id))))
		ids.WriteByte(':')
		ids.WriteString(e.id)
	}
	args := make([]string, 0, 9+len(batch)*4)
	args = append(args, itoa(now), cause.Consumer, tagOf(cause.Lane), itoa(cause.Index), itoa(cause.Attempt),
		string(causeJSON), served, ids.String(), itoa(int64(len(batch))))
	for _, e := range batch {
		args = append(args, e.id, e.typ, string(e.payload), e.targets)
	}
	return args
}

// Completion names one claimed attempt to complete without returned
// events: the head and the attempt its claim returned.
type Completion struct {
	// Head names the head: consumer, lane and index.
	Head a2redis.HeadRef
	// Attempt is the attempt the claim returned. Required.
	Attempt int64
}

// CompleteAttemptsRequest completes several claimed attempts of one
// session, none of which returns events.
type CompleteAttemptsRequest struct {
	// Session is the session id. Required.
	Session string
	// Attempts are the attempts to complete: at most Config.MaxBatch, no
	// head named twice.
	Attempts []Completion
	// Consumers are the served consumers (see AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// causes are the attempts as the causes their completions would be.
func (r CompleteAttemptsRequest) causes() []a2redis.Cause {
	out := make([]a2redis.Cause, len(r.Attempts))
	for i, a := range r.Attempts {
		out[i] = a2redis.Cause{Consumer: a.Head.Consumer, Lane: a.Head.Lane, Index: a.Head.Index, Attempt: a.Attempt}
	}
	return out
}

// completeMany is CompleteAttempts without its observation.
func (s *Store) completeMany(ctx context.Context, req CompleteAttemptsRequest) ([]CompleteResult, error) {
	results, _, err := s.completeAttempts(ctx, req, nil)
	return results, err
}

// NextClaim asks a completion to claim, in the same script call, the next
// head of every lane it moves on, for Holder until now + TTL.
type NextClaim struct {
	// Holder names the claimant. Required.
	Holder string
	// TTL is the lease of the claimed heads. Required.
	TTL time.Duration
}

// CompleteAndClaimResult is what a CompleteAndClaim did.
type CompleteAndClaimResult struct {
	// Results are the completions, one per attempt (as CompleteAttempts).
	Results []CompleteResult
	// Next are the lanes' next heads it claimed for the holder (Outcome
	// Claimed), each with its event; Settled when it claimed none.
	Next ClaimResult
}

// completeAndClaim is CompleteAndClaim without its observation.
func (s *Store) completeAndClaim(ctx context.Context, req CompleteAttemptsRequest, next NextClaim) (CompleteAndClaimResult, error) {
	if err := checkName("Holder", next.Holder); err != nil {
		return CompleteAndClaimResult{}, err
	}
	if next.TTL <= 0 {
		return CompleteAndClaimResult{}, check.Invalid("TTL", "must be positive (got %v)", next.TTL)
	}
	results, claimed, err := s.completeAttempts(ctx, req, &next)
	return CompleteAndClaimResult{Results: results, Next: claimed}, err
}

// completeAttempts is CompleteAttempts, and CompleteAndClaim with next.
func (s *Store) completeAttempts(ctx context.Context, req CompleteAttemptsRequest, next *NextClaim) ([]CompleteResult, ClaimResult, error) {
	results, claimed, err := s.completeAttemptsRun(ctx, req, next)
	if err != nil || next == nil {
		return results, claimed, err
	}
	if claimed.Outcome == Claimed {
		s.noteLogCursors(claimed.Heads)
		for _, h := range claimed.Heads {
			if h.ID == "" {
				// Not sent along (several lanes moved on): read them.
				return results, claimed, s.claimedEvents(ctx, req.Session, &claimed)
			}
		}
		return results, claimed, nil
	}
	if claimed.Outcome == "" {
		// The general path completed: claim what the lanes freed.
		lanes := 0
		for i, r := range results {
			if r.Outcome == Completed && !r.Replayed && req.Attempts[i].Head.Lane != "" {
				lanes++
			}
		}
		if lanes == 0 {
			return results, ClaimResult{Outcome: Settled}, nil
		}
		claimed, err = s.claimAvailable(ctx, ClaimRequest{Session: req.Session, Holder: next.Holder, TTL: next.TTL, Consumers: req.Consumers, Limit: lanes})
		return results, claimed, err
	}
	return results, claimed, nil
}

func (s *Store) completeAttemptsRun(ctx context.Context, req CompleteAttemptsRequest, next *NextClaim) ([]CompleteResult, ClaimResult, error) {
	var none ClaimResult
	if err := checkSession(req.Session); err != nil {
		return nil, none, err
	}
	if err := check.Completions("Attempts", req.causes(), s.cfg.MaxBatch); err != nil {
		return nil, none, err
	}
	consumers := s.served(req.Consumers)
	served, err := servedArg(consumers)
	if err != nil {
		return nil, none, err
	}
	now := s.now()
	args := make([]string, 0, 5+4*len(req.Attempts))
	args = append(args, itoa(now), served, itoa(int64(len(req.Attempts))))
	for _, a := range req.Attempts {
		args = append(args, a.Head.Consumer, tagOf(a.Head.Lane), itoa(a.Head.Index), itoa(a.Attempt))
	}
	if len(req.Attempts) == 0 {
		return []CompleteResult{}, ClaimResult{Outcome: Settled}, nil
	}
	var fresh a2redis.Dispatch
	if next != nil {
		expires := now + max(next.TTL.Milliseconds(), 1)
		args = append(args, next.Holder, itoa(expires))
		fresh = a2redis.Dispatch{
			Attempts: 1, FirstClaimedAt: time.UnixMilli(now), LastClaimedAt: time.UnixMilli(now),
			Holder: next.Holder, ClaimExpiresAt: time.UnixMilli(expires),
		}
	}
	refs := make([]a2redis.HeadRef, len(req.Attempts))
	for i, a := range req.Attempts {
		refs[i] = a.Head
	}
	reply, err := s.completeRun(ctx, req.Session, args, s.completesFast(consumers, refs))
	if err != nil {
		return nil, none, err
	}
	claimed := none
	if next != nil && word(reply, 0) == "ok" && len(reply) == len(req.Attempts)+2 {
		// complete_fast took it: the next heads it claimed follow the
		// outcomes. (Without them the general path ran, or nothing
		// completed.)
		r, err := nextHeads(req.Session, reply[len(reply)-1], fresh)
		if err != nil {
			return nil, none, err
		}
		claimed, reply = r, reply[:len(reply)-1]
	}
	switch word(reply, 0) {
	case "ok":
		if len(reply) != len(req.Attempts)+1 {
			break
		}
		results := make([]CompleteResult, len(req.Attempts))
		for i := range results {
			switch word(reply, i+1) {
			case "ok":
				results[i] = CompleteResult{Outcome: Completed, Events: []a2redis.StoredEvent{}}
			case "duplicate":
				results[i] = CompleteResult{Outcome: Completed, Events: []a2redis.StoredEvent{}, Replayed: true}
			case "superseded":
				results[i] = CompleteResult{Outcome: CompleteSuperseded, Events: []a2redis.StoredEvent{}}
			default:
				return nil, none, fmt.Errorf("%w: complete_many replied %v", a2redis.ErrUnexpectedReply, reply)
			}
		}
		return results, claimed, nil
	case "missing", "partial":
		j, err := number(reply, 1)
		if err != nil || j < 1 || int(j) > len(req.Attempts) {
			break
		}
		head := req.Attempts[j-1].Head
		if word(reply, 0) == "missing" {
			return nil, none, errorf(a2redis.ErrNoEvent, req.Session, "Attempts[%d]: no event at index %d", j-1, head.Index)
		}
		return nil, none, errorf(a2redis.ErrPartialDuplicateBatch, req.Session, "Attempts[%d]: the committed completion of index %d returned events; replay it with CompleteAttempt", j-1, head.Index)
	}
	return nil, none, fmt.Errorf("%w: complete_many replied %v", a2redis.ErrUnexpectedReply, reply)
}

// FailRequest reports a failed attempt.
type FailRequest struct {
	// Session is the session id. Required.
	Session string
	// Head names the head.
	Head a2redis.HeadRef
	// Attempt is the attempt the claim returned. Required.
	Attempt int64
	// Error is the failure's text, recorded on the head.
	Error string
	// MaxFailures dead-letters the head once its failures reach it.
	// Required (at least 1). Recommended: 5, with a RetryAfter that grows
	// with the failures, so a passing outage is ridden out and a poison
	// event stops within minutes; use the same value in
	// ClaimRequest.MaxFailures.
	MaxFailures int
	// RetryAfter, when positive, holds the head back from claims until
	// now + RetryAfter. Recommended: a backoff by failure count, e.g. 1s,
	// 10s, 1m, 5m.
	RetryAfter time.Duration
}

// FailOutcome tells how a FailAttempt ended.
type FailOutcome string

// The failure outcomes.
const (
	// Failed: the failure was counted; the head runs again.
	Failed FailOutcome = "failed"
	// DeadLettered: the failure reached MaxFailures; the cursor stops at
	// the head until a redrive.
	DeadLettered FailOutcome = "dead_lettered"
	// FailSuperseded: the attempt no longer owns the head; nothing written.
	FailSuperseded FailOutcome = "superseded"
)

// FailResult is what a FailAttempt did.
type FailResult struct {
	// Outcome is failed, dead_lettered or superseded.
	Outcome FailOutcome
	// Failures is the head's failure count.
	Failures int64
}

// failAttempt is FailAttempt without its observation.
func (s *Store) failAttempt(ctx context.Context, req FailRequest) (FailResult, error) {
	if err := checkSession(req.Session); err != nil {
		return FailResult{}, err
	}
	if err := checkCause("Head", a2redis.Cause{Consumer: req.Head.Consumer, Lane: req.Head.Lane, Index: req.Head.Index, Attempt: req.Attempt}); err != nil {
		return FailResult{}, err
	}
	if req.MaxFailures < 1 {
		return FailResult{}, check.Invalid("MaxFailures", "must be at least 1 (got %d)", req.MaxFailures)
	}
	if req.RetryAfter < 0 {
		return FailResult{}, check.Invalid("RetryAfter", "is negative (%v)", req.RetryAfter)
	}
	now := s.now()
	hold := ""
	if req.RetryAfter > 0 {
		hold = itoa(now + max(req.RetryAfter.Milliseconds(), 1))
	}
	reply, err := s.run(ctx, "fail", req.Session, []string{req.Head.Consumer, tagOf(req.Head.Lane), itoa(req.Head.Index),
		itoa(req.Attempt), req.Error, itoa(int64(req.MaxFailures)), itoa(now), hold})
	if err != nil {
		return FailResult{}, err
	}
	failures, err := number(reply, 1)
	if err != nil {
		return FailResult{}, err
	}
	switch outcome := word(reply, 0); outcome {
	case "failed", "dead_lettered", "superseded":
		return FailResult{Outcome: FailOutcome(outcome), Failures: failures}, nil
	case "missing":
		return FailResult{}, errorf(a2redis.ErrNoEvent, req.Session, "no event at index %d", req.Head.Index)
	}
	return FailResult{}, fmt.Errorf("%w: fail replied %v", a2redis.ErrUnexpectedReply, reply)
}

// RedriveAction is what a redrive does with a dead-lettered head.
type RedriveAction string

// The redrive actions.
const (
	// Retry clears the head's failures and makes it runnable again.
	Retry RedriveAction = "retry"
	// Skip moves the cursor past the head.
	Skip RedriveAction = "skip"
)

// RedriveRequest acts on a consumer's dead-lettered head.
type RedriveRequest struct {
	// Session is the session id. Required.
	Session string
	// Consumer is the consumer whose head it is. Required.
	Consumer string
	// Lane is the lane of the head's cursor (a lane or log cursor, as
	// HeadEvent.Lane reports it); empty for the consumer's event cursor.
	Lane string
	// Index is the dead-lettered head's index. Required.
	Index int64
	// Action is Retry or Skip.
	Action RedriveAction
	// Consumers are the served consumers (for HasPending; see
	// AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// RedriveResult is what a Redrive did.
type RedriveResult struct {
	// Redriven reports that a dead-lettered head was found and acted on.
	Redriven bool
	// HasPending reports whether a served consumer has a live head.
	HasPending bool
}

// Redrive retries or skips a consumer's dead-lettered head: the head of the
// cursor Lane names (the event cursor when empty) at Index.
func (s *Store) Redrive(ctx context.Context, req RedriveRequest) (RedriveResult, error) {
	if err := checkSession(req.Session); err != nil {
		return RedriveResult{}, err
	}
	if err := checkName("Consumer", req.Consumer); err != nil {
		return RedriveResult{}, err
	}
	if err := checkLane("Lane", req.Lane); err != nil {
		return RedriveResult{}, err
	}
	if req.Index < 1 {
		return RedriveResult{}, check.Invalid("Index", "must be at least 1 (got %d)", req.Index)
	}
	if req.Action != Retry && req.Action != Skip {
		return RedriveResult{}, check.Invalid("Action", "must be %q or %q (got %q)", Retry, Skip, req.Action)
	}
	if err := s.checkDeclared("Consumer", req.Consumer); err != nil {
		return RedriveResult{}, err
	}
	served, err := servedArg(s.served(req.Consumers))
	if err != nil {
		return RedriveResult{}, err
	}
	reply, err := s.runIndexed(ctx, "redrive", req.Session, []string{req.Consumer, itoa(req.Index), string(req.Action), itoa(s.now()), served, tagOf(req.Lane)})
	if err != nil {
		return RedriveResult{}, err
	}
	return RedriveResult{Redriven: word(reply, 0) == "1", HasPending: word(reply, 1) == "1"}, nil
}

// WakeLogResult is a log cursor after a WakeLog.
type WakeLogResult struct {
	// Cursor is the log cursor (Head 0: nothing to run).
	Cursor a2redis.Cursor
	// SessionHead is the session's head index.
	SessionHead int64
}

// WakeLog brings one log cursor up to date without an append: a missing
// cursor starts at the clear marker with Backfill (else at the session head
// with nothing to run); an idle one takes the next stored event of its
// types; one with a head keeps it.
func (s *Store) WakeLog(ctx context.Context, session string, consumer a2redis.Consumer) (WakeLogResult, error) {
	if err := checkSession(session); err != nil {
		return WakeLogResult{}, err
	}
	if consumer.Log == nil {
		return WakeLogResult{}, check.Invalid("consumer.Log", "is nil: WakeLog needs a log consumer")
	}
	if _, err := servedArg([]a2redis.Consumer{consumer}); err != nil {
		return WakeLogResult{}, err
	}
	types := "*"
	if consumer.Log.Types != nil {
		raw, _ := json.Marshal(consumer.Log.Types)
		types = string(raw)
	}
	backfill := "0"
	if consumer.Log.Backfill {
		backfill = "1"
	}
	reply, err := s.runIndexed(ctx, "wake_log", session, []string{consumer.Name, consumer.Log.Lane, types, backfill, itoa(s.now())})
	if err != nil {
		return WakeLogResult{}, err
	}
	if word(reply, 0) != "ok" || len(reply) != 5 {
		return WakeLogResult{}, fmt.Errorf("%w: wake_log replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	position, err := number(reply, 1)
	if err != nil {
		return WakeLogResult{}, err
	}
	var head int64
	if !reply[2].IsNil() {
		if head, err = number(reply, 2); err != nil {
			return WakeLogResult{}, err
		}
	}
	sessionHead, err := number(reply, 4)
	if err != nil {
		return WakeLogResult{}, err
	}
	return WakeLogResult{
		Cursor: a2redis.Cursor{
			Consumer: consumer.Name, Lane: consumer.Log.Lane, Kind: a2redis.LogCursor,
			Position: position, Head: head, Dispatch: dispatch(reply[3]),
		},
		SessionHead: sessionHead,
	}, nil
}

// nextHeads decodes the next heads complete_fast claimed: { consumer,
// kind, index } each, all fresh.
func nextHeads(session string, m rueidis.RedisMessage, fresh a2redis.Dispatch) (ClaimResult, error) {
	r := ClaimResult{Outcome: Settled}
	for _, part := range array(m) {
		parts := array(part)
		if len(parts) != 3 && len(parts) != 4 {
			return ClaimResult{}, fmt.Errorf("%w: claimed next head %v", a2redis.ErrUnexpectedReply, part)
		}
		index, err := strconv.ParseInt(text(parts[2]), 10, 64)
		if err != nil {
			return ClaimResult{}, fmt.Errorf("%w: claimed next head %v", a2redis.ErrUnexpectedReply, part)
		}
		kind, lane := cursorOf(text(parts[1]))
		head := a2redis.HeadEvent{
			StoredEvent: a2redis.StoredEvent{Session: session, Index: index},
			Consumer:    text(parts[0]), Lane: lane, Kind: kind, Dispatch: fresh,
		}
		if len(parts) == 4 {
			// The script sent the lone next head's event along.
			ev, err := entry(session, parts[3])
			if err != nil || ev.Index != index {
				return ClaimResult{}, fmt.Errorf("%w: claimed next head's entry %v", a2redis.ErrUnexpectedReply, parts[3])
			}
			head.StoredEvent = ev
		}
		r.Heads = append(r.Heads, head)
	}
	if len(r.Heads) > 0 {
		r.Outcome = Claimed
		sortHeads(r.Heads)
	}
	return r, nil
}

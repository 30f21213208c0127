package model

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

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

func (s *session) headEvent(c *cursor) a2redis.HeadEvent {
	ev, _ := s.entry(c.head)
	return a2redis.HeadEvent{StoredEvent: ev, Consumer: c.consumer, Lane: c.lane, Kind: c.kind, HeadState: c.d.public()}
}

// heads returns the session's cursors with a head above the clear marker,
// in (index, cursor id) order: the order the store considers them in.
func (s *session) heads() []*cursor {
	var out []*cursor
	for _, c := range s.sortedCursors() {
		if c.head > s.clear {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].head < out[j].head })
	return out
}

// ClaimAvailable claims a session's eligible heads for a holder (see
// redisstore.Store.ClaimAvailable).
func (m *Store) ClaimAvailable(ctx context.Context, req redisstore.ClaimRequest) (redisstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.ClaimResult{}, err
	}
	if err := checkSession(req.Session); err != nil {
		return redisstore.ClaimResult{}, err
	}
	if err := checkName("Holder", req.Holder); err != nil {
		return redisstore.ClaimResult{}, err
	}
	now := m.now()
	expires, err := check.Expiry(now, req.TTL, req.ExpiresAt)
	if err != nil {
		return redisstore.ClaimResult{}, err
	}
	if req.MaxFailures < 0 {
		return redisstore.ClaimResult{}, check.Invalid("MaxFailures", "must be at least 1 (got %d)", req.MaxFailures)
	}
	if req.Through < 0 {
		return redisstore.ClaimResult{}, check.Invalid("Through", "is negative (%d)", req.Through)
	}
	limit := req.Limit
	if limit == 0 {
		limit = m.cfg.ClaimLimit
	}
	if limit < 0 {
		return redisstore.ClaimResult{}, check.Invalid("Limit", "is negative (%d)", limit)
	}
	consumers := m.served(req.Consumers)
	for i, c := range req.Consumers {
		if err := m.checkDeclared(fmt.Sprintf("Consumers[%d].Name", i), c.Name); err != nil {
			return redisstore.ClaimResult{}, err
		}
	}
	consumers, open := m.claimable(consumers)
	if !open {
		return redisstore.ClaimResult{Outcome: redisstore.Settled}, nil // every consumer it serves is paused
	}
	srv, err := parseServed(consumers)
	if err != nil {
		return redisstore.ClaimResult{}, err
	}
	excluded := map[[2]string]bool{}
	for i, ref := range req.Exclude {
		if err := checkName(fmt.Sprintf("Exclude[%d].Consumer", i), ref.Consumer); err != nil {
			return redisstore.ClaimResult{}, err
		}
		tag := "L" + ref.Lane
		if ref.Lane == "" {
			tag = fmt.Sprintf("#%d", ref.Index)
		}
		excluded[[2]string{ref.Consumer, tag}] = true
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	taken, retryAt := s.eligible(now, req.Through, limit, srv, excluded)
	if len(taken) == 0 {
		if retryAt != 0 {
			return redisstore.ClaimResult{Outcome: redisstore.Busy, RetryAt: time.UnixMilli(retryAt)}, nil
		}
		return redisstore.ClaimResult{Outcome: redisstore.Settled}, nil
	}
	// A takeover runs alone: a claim that takes over a lapsed head takes
	// only it (the lowest); the lapse counts a failure only when it was the
	// only head of the session its holder lost, and otherwise the others
	// its holder lost are released.
	var lostWith []*cursor
	for _, c := range taken {
		if c.d.holder == "" {
			continue
		}
		taken = []*cursor{c}
		for _, o := range s.heads() {
			if o != c && o.d.holder == c.d.holder && o.d.expires <= now {
				lostWith = append(lostWith, o)
			}
		}
		break
	}
	// One takeover releases at most scripts.TakeoverRelease of them, in
	// the runnable set's order (by the lapsed lease's end, then cursor id),
	// and leaves at least two when it cuts the pile.
	lostOthers := len(lostWith)
	if lostOthers > scripts.TakeoverRelease {
		sort.Slice(lostWith, func(i, j int) bool {
			a, b := lostWith[i], lostWith[j]
			if a.d.expires != b.d.expires {
				return a.d.expires < b.d.expires
			}
			return a.cid < b.cid
		})
		lostWith = lostWith[:min(scripts.TakeoverRelease, lostOthers-2)]
	}
	r := redisstore.ClaimResult{Outcome: redisstore.Claimed, ClearIndex: s.clear, SessionHead: s.head}
	for _, c := range taken {
		d := &c.d
		// A claim still held here lapsed: its attempt never finished.
		lapsed := d.holder != ""
		counted := false
		if lapsed {
			counted = lostOthers == 0
			d.lastError = fmt.Sprintf("lease expired: held by %s until %s, taken over by %s at %s",
				d.holder, utcText(d.expires), req.Holder, utcText(now))
			if counted {
				d.failures++
				d.lastFailed, d.lastFailedAtt = now, d.attempts
			} else {
				why := fmt.Sprintf(" (no failure counted: it lapsed with %d other heads of the session, so the crash may have been another's)", lostOthers)
				d.lastError += why
				for _, o := range lostWith {
					o.d.lastError = fmt.Sprintf("lease expired: held by %s until %s, released by %s at %s%s",
						d.holder, utcText(o.d.expires), req.Holder, utcText(now), why)
					o.d.holder, o.d.expires = "", 0
				}
			}
		}
		d.attempts++
		mf := srv.maxFailures[c.consumer]
		if mf == 0 {
			mf = req.MaxFailures
		}
		if counted && mf > 0 && d.failures >= int64(mf) {
			// The takeover spent the last attempt: dead-letter it unrun.
			d.deadAt, d.holder, d.expires = now, "", 0
			s.releasePins(c)
			s.noteDead(now)
			r.DeadLettered = append(r.DeadLettered, s.headEvent(c))
			continue
		}
		if d.firstClaimed == 0 {
			d.firstClaimed = now
		}
		d.lastClaimed, d.holder, d.expires = now, req.Holder, expires
		r.Heads = append(r.Heads, s.headEvent(c))
	}
	sortHeads(r.Heads)
	sortHeads(r.DeadLettered)
	return r, nil
}

// utcText is an instant as a takeover's last error spells it.
func utcText(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// eligible returns the heads a claim takes, in order, up to limit, and the
// earliest time a held eligible head frees.
func (s *session) eligible(now, through int64, limit int, srv served, excluded map[[2]string]bool) (taken []*cursor, retryAt int64) {
	// room: how many more heads of the session a consumer with a
	// per-session limit may have in flight (a head with a holder is in
	// flight, a lapsed claim too).
	var room map[string]int
	if len(srv.limits) > 0 {
		room = map[string]int{}
		for name, k := range srv.limits {
			room[name] = k
		}
		for _, c := range s.heads() {
			if _, ok := room[c.consumer]; ok && c.d.holder != "" {
				room[c.consumer]--
			}
		}
	}
	for _, c := range s.heads() {
		tag := "L" + c.lane
		if c.kind == a2redis.EventCursor {
			tag = fmt.Sprintf("#%d", c.head)
		}
		if c.dead() || (through > 0 && c.head > through) || !srv.has(c.consumer) || excluded[[2]string{c.consumer, tag}] {
			continue
		}
		if until := s.heldUntil(c); until > now {
			if retryAt == 0 || until < retryAt {
				retryAt = until
			}
			continue
		}
		if len(taken) < limit {
			// A head of a limited consumer that holds no claim (a lapsed
			// claim is taken over without room) waits while it has none.
			if left, ok := room[c.consumer]; ok && c.d.holder == "" {
				if left <= 0 {
					continue
				}
				room[c.consumer] = left - 1
			}
			taken = append(taken, c)
		}
	}
	return taken, retryAt
}

// ClaimOrder returns, without claiming, the heads a ClaimAvailable with req
// would consider, in the order it takes them (lowest index first; ties in
// cursor-id order, which the contract leaves unspecified). A testing aid:
// it lets a test choose limits that do not split heads tied on index and
// consumer. req.Limit is ignored; invalid requests return nil.
func (m *Store) ClaimOrder(req redisstore.ClaimRequest) []a2redis.HeadRef {
	srv, err := parseServed(req.Consumers)
	if err != nil {
		return nil
	}
	excluded := map[[2]string]bool{}
	for _, ref := range req.Exclude {
		tag := "L" + ref.Lane
		if ref.Lane == "" {
			tag = fmt.Sprintf("#%d", ref.Index)
		}
		excluded[[2]string{ref.Consumer, tag}] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[req.Session]
	if s == nil {
		return nil
	}
	taken, _ := s.eligible(m.now(), req.Through, 1<<30, srv, excluded)
	out := make([]a2redis.HeadRef, len(taken))
	for i, c := range taken {
		out[i] = c.ref()
	}
	return out
}

// RenewClaims extends the holder's live claims (see
// redisstore.Store.RenewClaims).
func (m *Store) RenewClaims(ctx context.Context, req redisstore.RenewRequest) (redisstore.RenewResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.RenewResult{}, err
	}
	if err := checkSession(req.Session); err != nil {
		return redisstore.RenewResult{}, err
	}
	if err := checkName("Holder", req.Holder); err != nil {
		return redisstore.RenewResult{}, err
	}
	now := m.now()
	expires, err := check.Expiry(now, req.TTL, req.ExpiresAt)
	if err != nil {
		return redisstore.RenewResult{}, err
	}
	r := redisstore.RenewResult{Renewed: []a2redis.HeadRef{}, Superseded: []a2redis.HeadRef{}, Lapsed: []a2redis.HeadRef{}}
	if len(req.Claims) == 0 {
		return r, nil
	}
	for i, c := range req.Claims {
		if err := checkCause(fmt.Sprintf("Claims[%d]", i), a2redis.Cause{Consumer: c.Head.Consumer, Lane: c.Head.Lane, Index: c.Head.Index, Attempt: c.Attempt}); err != nil {
			return redisstore.RenewResult{}, err
		}
		if err := m.checkDeclared(fmt.Sprintf("Claims[%d].Consumer", i), c.Head.Consumer); err != nil {
			return redisstore.RenewResult{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	var early []a2redis.HeadRef
	for _, claim := range req.Claims {
		if claim.Head.Index <= s.clear {
			early = append(early, claim.Head)
			continue
		}
		c := s.rowCursor(claim.Head.Consumer, claim.Head.Lane, claim.Head.Index)
		if c == nil {
			r.Lapsed = append(r.Lapsed, claim.Head) // nothing there to renew
			continue
		}
		if _, moved := c.passed[claim.Head.Index]; moved {
			r.Superseded = append(r.Superseded, claim.Head)
			continue
		}
		if c.head != claim.Head.Index {
			r.Lapsed = append(r.Lapsed, claim.Head) // not reached yet: holds no claim
			continue
		}
		switch {
		case c.d.attempts > claim.Attempt:
			r.Superseded = append(r.Superseded, claim.Head)
		case c.d.attempts == claim.Attempt && expires > now && c.d.deadAt == 0 &&
			c.d.holder == req.Holder && c.d.expires > now:
			c.d.expires = expires
			r.Renewed = append(r.Renewed, claim.Head)
		default:
			r.Lapsed = append(r.Lapsed, claim.Head)
		}
	}
	r.Superseded = append(early, r.Superseded...)
	sortRefs(r.Renewed)
	sortRefs(r.Superseded)
	sortRefs(r.Lapsed)
	return r, nil
}

// CompleteAttempt finishes a claimed attempt and appends its returned
// events atomically (see redisstore.Store.CompleteAttempt).
func (m *Store) CompleteAttempt(ctx context.Context, req redisstore.CompleteRequest) (redisstore.CompleteResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.CompleteResult{}, err
	}
	if err := checkSession(req.Session); err != nil {
		return redisstore.CompleteResult{}, err
	}
	cause := a2redis.Cause{Consumer: req.Head.Consumer, Lane: req.Head.Lane, Index: req.Head.Index, Attempt: req.Attempt}
	if err := checkCause("Head", cause); err != nil {
		return redisstore.CompleteResult{}, err
	}
	srv, err := parseServed(m.served(req.Consumers))
	if err != nil {
		return redisstore.CompleteResult{}, err
	}
	batch, err := m.prepare(req.Events, "Events")
	if err != nil {
		return redisstore.CompleteResult{}, err
	}
	for i, e := range req.Events {
		if e.Cause != nil {
			return redisstore.CompleteResult{}, check.Invalid(fmt.Sprintf("Events[%d].Cause", i), "is set: returned events take the completed attempt as their cause")
		}
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.complete(m.session(req.Session), req, cause, batch, srv, now)
}

// complete is CompleteAttempt's decision, with the lock held.
func (m *Store) complete(s *session, req redisstore.CompleteRequest, cause a2redis.Cause, batch []prepared, srv served, now int64) (redisstore.CompleteResult, error) {
	superseded := redisstore.CompleteResult{Outcome: redisstore.CompleteSuperseded, Events: []a2redis.StoredEvent{}}
	idx := cause.Index
	if idx <= s.clear {
		return superseded, nil
	}
	if idx > s.head {
		return redisstore.CompleteResult{}, fmt.Errorf("%w: no event at index %d (session %q)", a2redis.ErrNoEvent, idx, req.Session)
	}
	c := s.rowCursor(cause.Consumer, cause.Lane, idx)
	if c == nil {
		return superseded, nil
	}
	if done, moved := c.passed[idx]; moved {
		// A retry of a committed completion replays its events; the same
		// attempt with other ids is a partial duplicate.
		if done.attempt == 0 || done.attempt != req.Attempt {
			return superseded, nil
		}
		if len(done.ids) != len(batch) {
			return redisstore.CompleteResult{}, partial(req.Session, "returned event ids differ from the committed completion of index %d", idx)
		}
		events := make([]a2redis.StoredEvent, 0, len(batch))
		for i, e := range batch {
			owner, ok := s.owner(e.id)
			if e.id != done.ids[i] || !ok {
				return redisstore.CompleteResult{}, partial(req.Session, "returned event ids differ from the committed completion of index %d", idx)
			}
			ev, _ := s.entry(owner)
			events = append(events, ev)
		}
		return redisstore.CompleteResult{Outcome: redisstore.Completed, Events: events, Replayed: true}, nil
	}
	if c.head != idx || c.d.attempts != req.Attempt || c.d.holder == "" || c.d.deadAt != 0 {
		return superseded, nil
	}
	for _, e := range batch {
		if _, ok := s.owner(e.id); ok {
			return redisstore.CompleteResult{}, partial(req.Session, "returned event ids clash with stored events")
		}
	}
	if c.kind == a2redis.LogCursor {
		if spec, ok := srv.spec(c.consumer, c.lane); ok {
			c.setTypes(spec.types)
		}
	}
	base := s.head
	stored := make([]a2redis.StoredEvent, 0, len(batch))
	targets := make([][]a2redis.Target, len(batch))
	ids := make([]string, len(batch))
	for i, e := range batch {
		stored = append(stored, s.push(e.id, e.typ, e.payload, now, &cause, e.notBefore))
		targets[i] = e.targets
		ids[i] = e.id
	}
	s.enqueue(stored, targets, srv, base)
	s.advance(c, completion{attempt: req.Attempt, ids: ids})
	return redisstore.CompleteResult{Outcome: redisstore.Completed, Events: stored}, nil
}

// CompleteAttempts completes several attempts without returned events, all
// or nothing (see redisstore.Store.CompleteAttempts).
func (m *Store) CompleteAttempts(ctx context.Context, req redisstore.CompleteAttemptsRequest) ([]redisstore.CompleteResult, error) {
	results, _, err := m.completeAttempts(ctx, req, nil)
	return results, err
}

// CompleteAndClaim completes attempts as CompleteAttempts does and claims
// for next.Holder the new head of every lane or log cursor it moved on,
// when that head may be claimed now (see redisstore.Store.CompleteAndClaim).
func (m *Store) CompleteAndClaim(ctx context.Context, req redisstore.CompleteAttemptsRequest, next redisstore.NextClaim) (redisstore.CompleteAndClaimResult, error) {
	if err := checkName("Holder", next.Holder); err != nil {
		return redisstore.CompleteAndClaimResult{}, err
	}
	if next.TTL <= 0 {
		return redisstore.CompleteAndClaimResult{}, check.Invalid("TTL", "must be positive (got %v)", next.TTL)
	}
	paused := m.Paused()
	for _, a := range req.Attempts {
		if slices.Contains(paused, a.Head.Consumer) {
			// A paused consumer's cursors take no next head.
			results, _, err := m.completeAttempts(ctx, req, nil)
			return redisstore.CompleteAndClaimResult{Results: results, Next: redisstore.ClaimResult{Outcome: redisstore.Settled}}, err
		}
	}
	results, claimed, err := m.completeAttempts(ctx, req, &next)
	return redisstore.CompleteAndClaimResult{Results: results, Next: claimed}, err
}

// completeAttempts is CompleteAttempts and, with next, CompleteAndClaim.
func (m *Store) completeAttempts(ctx context.Context, req redisstore.CompleteAttemptsRequest, next *redisstore.NextClaim) ([]redisstore.CompleteResult, redisstore.ClaimResult, error) {
	settled := redisstore.ClaimResult{Outcome: redisstore.Settled}
	if err := m.checkAttempts(ctx, req.Session, req.Attempts); err != nil {
		return nil, settled, err
	}
	srv, err := parseServed(m.served(req.Consumers))
	if err != nil {
		return nil, settled, err
	}
	if len(req.Attempts) == 0 {
		return []redisstore.CompleteResult{}, settled, nil
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	// What fails the whole call is found before anything changes.
	for i, a := range req.Attempts {
		idx := a.Head.Index
		if idx <= s.clear {
			continue
		}
		if idx > s.head {
			return nil, settled, fmt.Errorf("%w: Attempts[%d]: no event at index %d (session %q)", a2redis.ErrNoEvent, i, idx, req.Session)
		}
		c := s.rowCursor(a.Head.Consumer, a.Head.Lane, idx)
		if c == nil {
			continue
		}
		if done, moved := c.passed[idx]; moved && done.attempt != 0 && done.attempt == a.Attempt && len(done.ids) > 0 {
			return nil, settled, partial(req.Session, "Attempts[%d]: the committed completion of index %d returned events", i, idx)
		}
	}
	results := make([]redisstore.CompleteResult, len(req.Attempts))
	var moved []*cursor
	for i, a := range req.Attempts {
		one := redisstore.CompleteRequest{Session: req.Session, Head: a.Head, Attempt: a.Attempt}
		cause := a2redis.Cause{Consumer: a.Head.Consumer, Lane: a.Head.Lane, Index: a.Head.Index, Attempt: a.Attempt}
		if results[i], err = m.complete(s, one, cause, nil, srv, now); err != nil {
			return nil, settled, err
		}
		if r := results[i]; r.Outcome == redisstore.Completed && !r.Replayed && a.Head.Lane != "" {
			moved = append(moved, s.rowCursor(a.Head.Consumer, a.Head.Lane, a.Head.Index))
		}
	}
	if next == nil {
		return results, settled, nil
	}
	// Complete and claim next, once every attempt is done (each was fenced
	// by the state the call found): a moved cursor's new head that may be
	// claimed now is claimed for the first time (it has just become the
	// head).
	expires := now + max(next.TTL.Milliseconds(), 1)
	claimed := settled
	for _, c := range moved {
		if c.head == 0 || s.heldUntil(c) > now {
			continue
		}
		c.d = headState{attempts: 1, firstClaimed: now, lastClaimed: now, holder: next.Holder, expires: expires}
		claimed.Outcome = redisstore.Claimed
		claimed.Heads = append(claimed.Heads, s.headEvent(c))
	}
	// By index, consumer and lane (two lanes of a consumer may move on to
	// the same event).
	sort.SliceStable(claimed.Heads, func(i, j int) bool {
		a, b := claimed.Heads[i], claimed.Heads[j]
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		return a.Lane < b.Lane
	})
	return results, claimed, nil
}

// FailAttempt records a failed attempt (see redisstore.Store.FailAttempt).
func (m *Store) FailAttempt(ctx context.Context, req redisstore.FailRequest) (redisstore.FailResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.FailResult{}, err
	}
	if err := checkSession(req.Session); err != nil {
		return redisstore.FailResult{}, err
	}
	if err := checkCause("Head", a2redis.Cause{Consumer: req.Head.Consumer, Lane: req.Head.Lane, Index: req.Head.Index, Attempt: req.Attempt}); err != nil {
		return redisstore.FailResult{}, err
	}
	if req.MaxFailures < 0 {
		return redisstore.FailResult{}, check.Invalid("MaxFailures", "is negative (%d)", req.MaxFailures)
	}
	if req.RetryAfter < 0 {
		return redisstore.FailResult{}, check.Invalid("RetryAfter", "is negative (%v)", req.RetryAfter)
	}
	// The registry's MaxFailures, else the request's, else the default.
	maxFailures := m.declaredMaxFailures(req.Head.Consumer)
	if maxFailures == 0 {
		maxFailures = req.MaxFailures
	}
	if maxFailures == 0 {
		maxFailures = redisstore.DefaultMaxFailures
	}
	if req.Permanent {
		maxFailures = 1
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	idx := req.Head.Index
	superseded := func(failures int64) (redisstore.FailResult, error) {
		return redisstore.FailResult{Outcome: redisstore.FailSuperseded, Failures: failures}, nil
	}
	if idx <= s.clear {
		return superseded(0)
	}
	if idx > s.head {
		return redisstore.FailResult{}, fmt.Errorf("%w: no event at index %d (session %q)", a2redis.ErrNoEvent, idx, req.Session)
	}
	c := s.rowCursor(req.Head.Consumer, req.Head.Lane, idx)
	if c == nil || c.head != idx {
		return superseded(0) // moved past, or never reached
	}
	d := &c.d
	if d.attempts != req.Attempt {
		return superseded(d.failures)
	}
	if d.holder == "" && d.lastFailedAtt == req.Attempt {
		// This attempt's failure is already recorded: report it again.
		if d.deadAt != 0 {
			return redisstore.FailResult{Outcome: redisstore.DeadLettered, Failures: d.failures}, nil
		}
		return redisstore.FailResult{Outcome: redisstore.Failed, Failures: d.failures}, nil
	}
	if d.deadAt != 0 {
		return redisstore.FailResult{Outcome: redisstore.DeadLettered, Failures: d.failures}, nil
	}
	if d.holder == "" {
		return superseded(d.failures)
	}
	d.failures++
	d.lastError, d.lastFailed, d.lastFailedAtt, d.holder = req.Error, now, req.Attempt, ""
	if d.failures >= int64(maxFailures) {
		d.deadAt, d.expires = now, 0
		s.releasePins(c)
		s.noteDead(now)
		return redisstore.FailResult{Outcome: redisstore.DeadLettered, Failures: d.failures}, nil
	}
	d.expires = 0
	if req.RetryAfter > 0 {
		d.expires = now + max(req.RetryAfter.Milliseconds(), 1)
	}
	return redisstore.FailResult{Outcome: redisstore.Failed, Failures: d.failures}, nil
}

// DeadLetters returns the session's dead-lettered heads, sorted by index
// then consumer.
func (m *Store) DeadLetters(ctx context.Context, session string) ([]a2redis.HeadEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSession(session); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []a2redis.HeadEvent{}
	if s := m.sessions[session]; s != nil {
		for _, c := range s.heads() {
			if c.dead() {
				out = append(out, s.headEvent(c))
			}
		}
	}
	sortHeads(out)
	return out, nil
}

// Redrive retries or skips a consumer's dead-lettered head (see
// redisstore.Store.Redrive).
func (m *Store) Redrive(ctx context.Context, req redisstore.RedriveRequest) (redisstore.RedriveResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.RedriveResult{}, err
	}
	if err := checkSession(req.Session); err != nil {
		return redisstore.RedriveResult{}, err
	}
	if err := checkName("Consumer", req.Consumer); err != nil {
		return redisstore.RedriveResult{}, err
	}
	if err := checkLane("Lane", req.Lane); err != nil {
		return redisstore.RedriveResult{}, err
	}
	if req.Index < 1 {
		return redisstore.RedriveResult{}, check.Invalid("Index", "must be at least 1 (got %d)", req.Index)
	}
	if req.Action != redisstore.Retry && req.Action != redisstore.Skip {
		return redisstore.RedriveResult{}, check.Invalid("Action", "must be %q or %q (got %q)", redisstore.Retry, redisstore.Skip, req.Action)
	}
	if err := m.checkDeclared("Consumer", req.Consumer); err != nil {
		return redisstore.RedriveResult{}, err
	}
	srv, err := parseServed(m.served(req.Consumers))
	if err != nil {
		return redisstore.RedriveResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	var found *cursor
	if req.Index > s.clear && req.Index <= s.head {
		// The cursor Lane names: the event cursor when empty, else the lane
		// or log cursor of that lane.
		if c := s.rowCursor(req.Consumer, req.Lane, req.Index); c != nil && c.head == req.Index && c.dead() {
			found = c
		}
	}
	if found == nil {
		return redisstore.RedriveResult{HasPending: s.hasPending(srv)}, nil
	}
	if req.Action == redisstore.Skip {
		if found.kind == a2redis.LogCursor {
			if spec, ok := srv.spec(found.consumer, found.lane); ok {
				found.setTypes(spec.types)
			}
		}
		s.advance(found, completion{})
	} else {
		found.d.deadAt, found.d.failures = 0, 0
	}
	s.noteDead(0)
	return redisstore.RedriveResult{Redriven: true, HasPending: s.hasPending(srv)}, nil
}

// Cancel skips a live head without running it (see
// redisstore.Store.Cancel).
func (m *Store) Cancel(ctx context.Context, req redisstore.CancelRequest) (redisstore.CancelResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.CancelResult{}, err
	}
	if err := checkSession(req.Session); err != nil {
		return redisstore.CancelResult{}, err
	}
	if err := checkName("Consumer", req.Consumer); err != nil {
		return redisstore.CancelResult{}, err
	}
	if err := checkLane("Lane", req.Lane); err != nil {
		return redisstore.CancelResult{}, err
	}
	if req.Index < 1 {
		return redisstore.CancelResult{}, check.Invalid("Index", "must be at least 1 (got %d)", req.Index)
	}
	if err := m.checkDeclared("Consumer", req.Consumer); err != nil {
		return redisstore.CancelResult{}, err
	}
	srv, err := parseServed(m.served(req.Consumers))
	if err != nil {
		return redisstore.CancelResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	var found *cursor
	if req.Index > s.clear && req.Index <= s.head {
		if c := s.rowCursor(req.Consumer, req.Lane, req.Index); c != nil && c.head == req.Index {
			found = c
		}
	}
	switch {
	case found == nil:
		return redisstore.CancelResult{Outcome: redisstore.CancelNotFound, HasPending: s.hasPending(srv)}, nil
	case found.dead():
		return redisstore.CancelResult{Outcome: redisstore.CancelDeadLettered, HasPending: s.hasPending(srv)}, nil
	}
	attempts := found.d.attempts
	if found.kind == a2redis.LogCursor {
		if spec, ok := srv.spec(found.consumer, found.lane); ok {
			found.setTypes(spec.types)
		}
	}
	// Processed by attempt 0: every later call of a running attempt is
	// superseded.
	s.advance(found, completion{})
	return redisstore.CancelResult{Outcome: redisstore.Cancelled, Attempts: attempts, HasPending: s.hasPending(srv)}, nil
}

// WakeLog brings one log cursor up to date without an append (see
// redisstore.Store.WakeLog).
func (m *Store) WakeLog(ctx context.Context, session string, consumer a2redis.Consumer) (redisstore.WakeLogResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.WakeLogResult{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.WakeLogResult{}, err
	}
	if consumer.Log == nil {
		return redisstore.WakeLogResult{}, check.Invalid("consumer.Log", "is nil: WakeLog needs a log consumer")
	}
	srv, err := parseServed([]a2redis.Consumer{consumer})
	if err != nil {
		return redisstore.WakeLogResult{}, err
	}
	spec := srv.logs[0]
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(session)
	cid := cidOf(spec.name, a2redis.LogCursor, spec.lane, 0)
	c := s.cursors[cid]
	if c == nil && s.head == s.clear {
		return redisstore.WakeLogResult{
			Cursor:      a2redis.Cursor{Consumer: spec.name, Lane: spec.lane, Kind: a2redis.LogCursor, Position: s.clear},
			SessionHead: s.head,
		}, nil
	}
	if c == nil {
		c = newCursor(spec.name, spec.lane, a2redis.LogCursor, 0)
		c.setTypes(spec.types)
		c.position = s.head
		if spec.backfill {
			c.position = s.clear
			c.head = s.nextLog(c, s.clear)
		}
		s.cursors[cid] = c
	} else {
		c.setTypes(spec.types)
		if c.head == 0 {
			c.head = s.nextLog(c, c.position)
		}
	}
	return redisstore.WakeLogResult{Cursor: s.public(c), SessionHead: s.head}, nil
}

func (s *session) public(c *cursor) a2redis.Cursor {
	out := a2redis.Cursor{Consumer: c.consumer, Lane: c.lane, Kind: c.kind, Position: c.position, Head: c.head}
	if c.head > 0 {
		out.HeadState = c.d.public()
	}
	return out
}

// Cursors returns every lane and log cursor of a session and every event
// cursor with a head, sorted by consumer, then lane (event cursors last),
// then head.
func (m *Store) Cursors(ctx context.Context, session string) ([]a2redis.Cursor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSession(session); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []a2redis.Cursor{}
	s := m.sessions[session]
	if s == nil {
		return out, nil
	}
	for _, c := range s.sortedCursors() {
		switch {
		case c.kind == a2redis.EventCursor && c.head == 0:
			continue
		case c.kind == a2redis.LaneCursor && c.head == 0 && c.position <= s.clear:
			continue
		}
		out = append(out, s.public(c))
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		if (a.Kind == a2redis.EventCursor) != (b.Kind == a2redis.EventCursor) {
			return b.Kind == a2redis.EventCursor
		}
		if a.Lane != b.Lane {
			return a.Lane < b.Lane
		}
		return a.Head < b.Head
	})
	return out, nil
}

// InFlight returns how many heads of the session each consumer has in
// flight (see redisstore.Store.InFlight): heads whose claim names a holder.
func (m *Store) InFlight(ctx context.Context, session string) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSession(session); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	if s := m.sessions[session]; s != nil {
		for _, c := range s.heads() {
			if c.d.holder != "" {
				out[c.consumer]++
			}
		}
	}
	return out, nil
}

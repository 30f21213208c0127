package model

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
)

// Clear ends the session's current lifetime with a clear marker (see
// redisstore.Store.Clear).
func (m *Store) Clear(ctx context.Context, session string, opts redisstore.ClearOptions) (redisstore.ClearResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.ClearResult{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.ClearResult{}, err
	}
	if opts.IfLastIndex != nil && *opts.IfLastIndex < 0 {
		return redisstore.ClearResult{}, check.Invalid("IfLastIndex", "is negative (%d)", *opts.IfLastIndex)
	}
	if opts.Cause != nil {
		if err := checkCause("Cause", *opts.Cause); err != nil {
			return redisstore.ClearResult{}, err
		}
	}
	marker := m.cfg.IDs()
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(session)
	if c := opts.Cause; c != nil {
		if c.Index <= s.clear || !s.rowCursor(c.Consumer, c.Lane, c.Index).current(c.Index, c.Attempt) {
			return redisstore.ClearResult{}, &a2redis.SupersededError{Session: session, Cause: *c}
		}
	}
	if opts.IfLastIndex != nil {
		want := *opts.IfLastIndex
		// A retry of this very clear: its marker sits right after the
		// expected head.
		if s.clear > 0 && s.clear == want+1 {
			return redisstore.ClearResult{Cleared: true, Index: s.head, ClearIndex: s.clear}, nil
		}
		if s.head != want {
			return redisstore.ClearResult{Cleared: false, Index: s.head, ClearIndex: s.clear}, nil
		}
	}
	if s.head == 0 || s.clear == s.head {
		return redisstore.ClearResult{Cleared: true, Index: s.head, ClearIndex: s.clear}, nil
	}
	if _, taken := s.owner(marker); taken {
		return redisstore.ClearResult{}, partial(session, "the clear marker id %q is already stored", marker)
	}
	ev := s.push(marker, a2redis.ClearEventType, []byte("null"), now, nil, 0)
	s.clear = ev.Index
	defer s.noteDead(0)
	// No head survives; log cursors count from the marker.
	for cid, c := range s.cursors {
		s.releasePins(c)
		if c.kind != a2redis.LogCursor {
			delete(s.cursors, cid)
			continue
		}
		c.position, c.head, c.d, c.queue = ev.Index, 0, headState{}, nil
		c.passed = map[int64]completion{}
	}
	return redisstore.ClearResult{Cleared: true, Index: ev.Index, ClearIndex: ev.Index}, nil
}

// ReclaimPage deletes one page of the session's past lifetimes and, once
// none is left, sweeps them (see redisstore.Store.ReclaimPage).
func (m *Store) ReclaimPage(ctx context.Context, session string) (redisstore.ReclaimResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.ReclaimResult{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.ReclaimResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil || s.clear == 0 {
		return redisstore.ReclaimResult{Done: true}, nil
	}
	// A marker a collapse moved out of the log (into the clear key) is
	// below the newer marker like the rest, but no page deletes it.
	n, deleted := 0, 0
	for n < len(s.log) && deleted < m.cfg.ReclaimPageSize && s.log[n].Index < s.clear {
		ev := s.log[n]
		if s.ids[ev.ID] == ev.Index {
			delete(s.ids, ev.ID)
		}
		n++
		if ev.Index != s.collapsedMarker {
			deleted++
		}
	}
	s.log = s.log[n:]
	if deleted == m.cfg.ReclaimPageSize {
		return redisstore.ReclaimResult{Deleted: int64(deleted)}, nil
	}
	s.sweepReducers()
	if s.head == s.clear {
		s.collapse()
	}
	return redisstore.ReclaimResult{Deleted: int64(deleted), Done: true}, nil
}

// sweepReducers drops what a reclaim's sweep drops of the reducers: the
// snapshots of past lifetimes (below the marker), and a reducer left with
// none. Reads never see them; a trim no longer waits for them.
func (s *session) sweepReducers() {
	for name, r := range s.reducers {
		if r.head != nil && r.head.index < s.clear {
			r.head = nil
		}
		for idx := range r.history {
			if idx < s.clear {
				delete(r.history, idx)
			}
		}
		if r.head == nil && len(r.history) == 0 {
			delete(s.reducers, name)
		}
	}
}

// collapse shrinks a lifetime that ended empty to its marker: the marker's
// id record goes (the id is free again), and the marker leaves the log for
// the clear key (reads still find it). Snapshots taken at the marker
// belong to the new lifetime and stay.
func (s *session) collapse() {
	if ev, ok := s.entry(s.clear); ok && s.ids[ev.ID] == ev.Index {
		delete(s.ids, ev.ID)
	}
	s.collapsedMarker = s.clear
	s.floor = 0 // the floor key goes with the rest
}

// Reclaim runs ReclaimPage until the session is done and returns the total
// deleted.
func (m *Store) Reclaim(ctx context.Context, session string) (redisstore.ReclaimResult, error) {
	var total redisstore.ReclaimResult
	for {
		r, err := m.ReclaimPage(ctx, session)
		total.Deleted += r.Deleted
		if err != nil {
			return total, err
		}
		if r.Done {
			total.Done = true
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("reclaim: %w", err)
		}
	}
}

// Drop deletes the session (see redisstore.Store.Drop): a clear, a reclaim,
// then nothing of it is left. The model runs one operation at a time, so no
// append races it and the drop always completes.
func (m *Store) Drop(ctx context.Context, session string) (redisstore.DropResult, error) {
	c, err := m.Clear(ctx, session, redisstore.ClearOptions{})
	if err != nil {
		return redisstore.DropResult{}, err
	}
	r, err := m.Reclaim(ctx, session)
	if err != nil {
		return redisstore.DropResult{ClearIndex: c.ClearIndex, Deleted: r.Deleted}, err
	}
	m.mu.Lock()
	delete(m.sessions, session)
	m.mu.Unlock()
	return redisstore.DropResult{Dropped: true, ClearIndex: c.ClearIndex, Deleted: r.Deleted}, nil
}

// Retention ends or drops the idle sessions (see redisstore.Store.Retention):
// a whole pass over every session (the model has no scan), the idle ones
// in session order, at most policy.MaxSessions. Scanned counts the
// sessions with a log; Cursor is always "" (the pass saw everything).
func (m *Store) Retention(ctx context.Context, policy redisstore.RetentionPolicy, cursor string) (redisstore.RetentionResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.RetentionResult{}, err
	}
	policy, err := policy.Check()
	if err != nil {
		return redisstore.RetentionResult{}, err
	}
	if cursor != "" {
		if a, b, ok := strings.Cut(cursor, ":"); !ok || !digits(a) || !digits(b) {
			return redisstore.RetentionResult{}, check.Invalid("cursor", "is not a retention cursor (%q)", cursor)
		}
	}
	now := m.now()
	cutoff := now - policy.IdleFor.Milliseconds()
	if policy.IdleFor == 0 {
		cutoff = math.MinInt64 // nothing is idle: the pass only trims
	}
	type idle struct {
		session     string
		head, clear int64
	}
	var found []idle
	var trims []string
	res := redisstore.RetentionResult{}
	m.mu.Lock()
	for _, name := range m.sortedSessionsLocked() {
		s := m.sessions[name]
		if len(s.log) == 0 {
			continue
		}
		res.Scanned++
		// A head left, live or dead-lettered: not idle.
		busy := len(s.heads()) > 0
		newest := s.log[len(s.log)-1].CreatedAt.UnixMilli()
		if busy || newest > cutoff || (!policy.Drop && s.head == s.clear) {
			if policy.Trim != nil && s.trimDue(*policy.Trim, now) {
				trims = append(trims, name)
			}
			continue
		}
		found = append(found, idle{name, s.head, s.clear})
	}
	m.mu.Unlock()
	for _, st := range found {
		if len(res.Idle) == policy.MaxSessions {
			break
		}
		res.Idle = append(res.Idle, st.session)
		if policy.DryRun {
			continue
		}
		if st.head > st.clear {
			head := st.head
			c, err := m.Clear(ctx, st.session, redisstore.ClearOptions{IfLastIndex: &head})
			if err != nil {
				return res, err
			}
			if !c.Cleared {
				res.Changed++
				continue
			}
		}
		if policy.Drop {
			if _, err := m.Drop(ctx, st.session); err != nil {
				return res, err
			}
			res.Dropped++
			continue
		}
		if _, err := m.Reclaim(ctx, st.session); err != nil {
			return res, err
		}
		res.Ended++
	}
	for _, name := range trims {
		if len(res.Idle)+len(res.Trimmed) == policy.MaxSessions {
			break
		}
		req := *policy.Trim
		req.DryRun = policy.DryRun
		t, err := m.Trim(ctx, name, req)
		if err != nil {
			return res, err
		}
		if t.Removed > 0 {
			res.Trimmed = append(res.Trimmed, redisstore.SessionTrim{Session: name, Floor: t.Floor, Removed: t.Removed})
		}
	}
	if policy.DryRun {
		res.Cursor = cursor
	}
	return res, nil
}

// trimDue is redisstore's filter of a retention pass's trims: the
// session's oldest log entry lies past the request's bounds.
func (s *session) trimDue(req redisstore.TrimRequest, now int64) bool {
	var oldest *a2redis.StoredEvent
	for i := range s.log {
		if s.log[i].Index != s.collapsedMarker {
			oldest = &s.log[i]
			break
		}
	}
	switch {
	case oldest == nil:
		return false
	case req.Through > 0 && oldest.Index > req.Through:
		return false
	case req.KeepLast > 0 && s.head-oldest.Index+1 <= int64(req.KeepLast):
		return false
	case req.OlderThan > 0 && oldest.CreatedAt.UnixMilli() > now-req.OlderThan.Milliseconds():
		return false
	}
	return true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (m *Store) sortedSessionsLocked() []string {
	out := make([]string, 0, len(m.sessions))
	for name := range m.sessions {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

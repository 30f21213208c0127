package model

import (
	"context"
	"fmt"

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
	ev := s.push(marker, a2redis.ClearEventType, []byte("null"), now, nil)
	s.clear = ev.Index
	// No head survives; log cursors count from the marker.
	for cid, c := range s.cursors {
		s.releasePins(c)
		if c.kind != a2redis.LogCursor {
			delete(s.cursors, cid)
			continue
		}
		c.position, c.head, c.d, c.queue = ev.Index, 0, dispatch{}, nil
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
	n := 0
	for n < len(s.log) && n < m.cfg.ReclaimPageSize && s.log[n].Index < s.clear {
		ev := s.log[n]
		if s.ids[ev.ID] == ev.Index {
			delete(s.ids, ev.ID)
		}
		n++
	}
	s.log = s.log[n:]
	if n == m.cfg.ReclaimPageSize {
		return redisstore.ReclaimResult{Deleted: int64(n)}, nil
	}
	if s.head == s.clear {
		s.collapse()
	}
	return redisstore.ReclaimResult{Deleted: int64(n), Done: true}, nil
}

// collapse shrinks a lifetime that ended empty to its marker: the marker's
// id record goes (the id is free again). Snapshots taken at the marker
// belong to the new lifetime and stay.
func (s *session) collapse() {
	if ev, ok := s.entry(s.clear); ok && s.ids[ev.ID] == ev.Index {
		delete(s.ids, ev.ID)
	}
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

package model

import (
	"context"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/redisstore"
)

// trimChunk is how many indexes share one head chunk (rows.HeadChunkSize):
// a trim removes the rows of the chunks wholly at or below its floor.
const trimChunk = rows.HeadChunkSize

// Trim removes the oldest events of the session's current lifetime that
// every consumer is done with (see redisstore.Store.Trim): below every
// head, through every registered log consumer's position (a backfilling
// one without a cursor has passed nothing), through every reducer's
// newest snapshot of the lifetime; within the request's bounds.
func (m *Store) Trim(ctx context.Context, session string, req redisstore.TrimRequest) (redisstore.TrimResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.TrimResult{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.TrimResult{}, err
	}
	switch {
	case req.Through < 0:
		return redisstore.TrimResult{}, check.Invalid("Through", "is negative (%d)", req.Through)
	case req.KeepLast < 0:
		return redisstore.TrimResult{}, check.Invalid("KeepLast", "is negative (%d)", req.KeepLast)
	case req.OlderThan < 0:
		return redisstore.TrimResult{}, check.Invalid("OlderThan", "is negative (%v)", req.OlderThan)
	}
	m.regMu.Lock()
	registered := cloneConsumers(m.reg.consumers)
	m.regMu.Unlock()
	cutoff := int64(-1)
	if req.OlderThan > 0 {
		cutoff = m.now() - req.OlderThan.Milliseconds()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return redisstore.TrimResult{}, nil
	}
	through := s.head
	if req.Through > 0 {
		through = min(through, req.Through)
	}
	if req.KeepLast > 0 {
		through = min(through, s.head-int64(req.KeepLast))
	}
	bound := s.head
	below := func(idx int64) { bound = min(bound, idx-1) }
	for _, c := range s.heads() {
		below(c.head)
	}
	for _, c := range registered {
		if c.Log == nil {
			continue
		}
		if cur := s.cursors[rows.LogCursorID(c.Name, c.Log.Lane)]; cur != nil {
			below(cur.position + 1)
		} else if c.Log.Backfill {
			below(s.clear)
		}
	}
	for _, r := range s.reducers {
		switch {
		case r.head != nil && r.head.index >= s.clear:
			below(r.head.index + 1)
		case r.head == nil && len(r.history) == 0:
			// not in the reducer registry
		default:
			below(s.clear) // a state read from the marker
		}
	}
	bound = max(bound, s.floor)
	target := min(through, bound)
	start := max(s.floor+1, s.clear, 1)
	out := redisstore.TrimResult{Floor: s.floor, Bound: bound}
	if target < start {
		return out, nil
	}
	floor, kept := target, s.log[:0:0]
	young := false
	for _, ev := range s.log {
		switch {
		case ev.Index < start || ev.Index > target || young || ev.Index == s.collapsedMarker:
			// (A marker a collapse moved into the clear key is no log
			// entry: no trim removes it.)
			kept = append(kept, ev)
			continue
		case cutoff >= 0 && ev.CreatedAt.UnixMilli() >= cutoff:
			young, floor = true, ev.Index-1
			kept = append(kept, ev)
			continue
		}
		if s.ids[ev.ID] == ev.Index && !req.DryRun {
			delete(s.ids, ev.ID)
		}
		out.Removed++
	}
	if out.Removed == 0 {
		return out, nil
	}
	if req.DryRun {
		out.Floor = floor
		return out, nil
	}
	s.log = kept
	// The rows of the chunks wholly at or below the new floor go: a
	// completion sent again for one of their heads is superseded.
	for _, c := range s.cursors {
		for idx := range c.passed {
			if chunk := (idx - 1) / trimChunk; chunk >= (start-1)/trimChunk && chunk < floor/trimChunk {
				delete(c.passed, idx)
			}
		}
	}
	s.floor = floor
	out.Floor = floor
	return out, nil
}

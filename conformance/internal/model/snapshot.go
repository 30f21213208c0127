package model

import (
	"context"
	"encoding/json"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
)

// pinRef names one checkpoint: a reducer's snapshot at an index.
type pinRef struct {
	reducer string
	index   int64
}

// reducer is one reducer's snapshots: the head snapshot (it only moves
// forward) and the pinned history below it.
type reducer struct {
	head    *snapshot
	history map[int64]json.RawMessage
}

type snapshot struct {
	index int64
	state json.RawMessage
}

// releasePins gives back the checkpoints a cursor's head pins: a checkpoint
// no head pins any more leaves its history.
func (s *session) releasePins(c *cursor) {
	for ref := range c.pins {
		s.pins[ref]--
		if s.pins[ref] <= 0 {
			delete(s.pins, ref)
			if r := s.reducers[ref.reducer]; r != nil {
				delete(r.history, ref.index)
			}
		}
	}
	c.pins = nil
}

// PutSnapshots stores snapshots of a reducer's state (see
// redisstore.Store.PutSnapshots).
func (m *Store) PutSnapshots(ctx context.Context, session, reducerName string, writes []redisstore.SnapshotWrite) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSession(session); err != nil {
		return err
	}
	if err := checkName("reducer", reducerName); err != nil {
		return err
	}
	type merged struct {
		index int64
		state json.RawMessage
		pins  []a2redis.HeadRef
	}
	valid, err := check.Snapshots(len(writes), m.cfg.MaxBatch, func(i int) (int64, json.RawMessage, []a2redis.HeadRef) {
		return writes[i].Index, writes[i].State, writes[i].Pins
	})
	if err != nil {
		return err
	}
	if len(valid) == 0 {
		return nil
	}
	sorted := make([]*merged, len(valid))
	for i, v := range valid {
		sorted[i] = &merged{index: v.Index, state: v.State, pins: v.Pins}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(session)
	r := s.reducers[reducerName]
	if r == nil {
		r = &reducer{history: map[int64]json.RawMessage{}}
		s.reducers[reducerName] = r
	}
	head := r.head
	if head != nil && head.index < s.clear {
		head = nil // a snapshot of a past lifetime counts as absent
	}
	// Writes below the clear marker are dropped; a pin holds only on a live
	// head of the current lifetime.
	var kept []*merged
	for _, mg := range sorted {
		if mg.index < s.clear {
			continue
		}
		kept = append(kept, mg)
		ref := pinRef{reducer: reducerName, index: mg.index}
		for _, pin := range mg.pins {
			if pin.Index <= s.clear || pin.Index > s.head {
				continue
			}
			c := s.rowCursor(pin.Consumer, pin.Lane, pin.Index)
			if c == nil || c.head != pin.Index || c.dead() || c.pins[ref] {
				continue
			}
			if c.pins == nil {
				c.pins = map[pinRef]bool{}
			}
			c.pins[ref] = true
			s.pins[ref]++
		}
	}
	if len(kept) == 0 {
		return nil
	}
	for idx := range r.history {
		if idx < s.clear {
			delete(r.history, idx)
		}
	}
	pinned := func(index int64) bool { return s.pins[pinRef{reducer: reducerName, index: index}] > 0 }
	latest := kept[len(kept)-1]
	top := int64(-1)
	if head != nil {
		top = head.index
	}
	if head == nil || latest.index > head.index {
		// The head moves forward: the one it replaces stays while pinned.
		if head != nil && pinned(head.index) {
			r.history[head.index] = head.state
		}
		top = latest.index
	}
	for _, mg := range kept {
		if mg.index < top {
			if pinned(mg.index) {
				r.history[mg.index] = mg.state
			} else {
				delete(r.history, mg.index)
			}
		}
	}
	if latest.index >= top {
		r.head = &snapshot{index: latest.index, state: latest.state}
		delete(r.history, latest.index)
	}
	return nil
}

// ReadState reads a reducer's newest snapshot at or below opts.Through of
// the current lifetime, with the log frontier and clear marker (see
// redisstore.Store.ReadState).
func (m *Store) ReadState(ctx context.Context, session, reducerName string, opts redisstore.ReadStateOptions) (redisstore.State, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.State{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.State{}, err
	}
	if err := checkName("reducer", reducerName); err != nil {
		return redisstore.State{}, err
	}
	if opts.Through < 0 {
		return redisstore.State{}, check.Invalid("Through", "is negative (%d)", opts.Through)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return redisstore.State{}, nil
	}
	st := redisstore.State{Head: s.head, ClearIndex: s.clear}
	r := s.reducers[reducerName]
	if r == nil {
		return st, nil
	}
	within := func(idx int64) bool { return idx >= s.clear && (opts.Through == 0 || idx <= opts.Through) }
	if r.head != nil && within(r.head.index) {
		st.Snapshot, st.SnapshotIndex = append(json.RawMessage(nil), r.head.state...), r.head.index
		return st, nil
	}
	best := int64(-1)
	for idx := range r.history {
		if within(idx) && idx > best {
			best = idx
		}
	}
	if best >= 0 {
		st.Snapshot, st.SnapshotIndex = append(json.RawMessage(nil), r.history[best]...), best
	}
	return st, nil
}

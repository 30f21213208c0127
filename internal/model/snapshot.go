package model

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/a2redis/a2redis"
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
	if len(writes) > m.cfg.MaxBatch {
		return a2redis.Invalid("writes", "holds %d writes, more than the maximum batch of %d", len(writes), m.cfg.MaxBatch)
	}
	type merged struct {
		index int64
		state json.RawMessage
		pins  []a2redis.HeadRef
		seen  map[a2redis.HeadRef]bool
	}
	byIndex := map[int64]*merged{}
	for i, w := range writes {
		at := fmt.Sprintf("writes[%d]", i)
		if w.Index < 0 {
			return a2redis.Invalid(at+".Index", "is negative (%d)", w.Index)
		}
		if len(w.State) == 0 {
			return a2redis.Invalid(at+".State", "is empty (store JSON null explicitly)")
		}
		if !json.Valid(w.State) {
			return a2redis.Invalid(at+".State", "is not valid JSON")
		}
		mg := byIndex[w.Index]
		if mg == nil {
			mg = &merged{index: w.Index, seen: map[a2redis.HeadRef]bool{}}
			byIndex[w.Index] = mg
		}
		mg.state = append(json.RawMessage(nil), w.State...)
		for j, pin := range w.Pins {
			pinAt := fmt.Sprintf("%s.Pins[%d]", at, j)
			if err := checkName(pinAt+".Consumer", pin.Consumer); err != nil {
				return err
			}
			if err := checkLane(pinAt+".Lane", pin.Lane); err != nil {
				return err
			}
			if pin.Index < 1 {
				return a2redis.Invalid(pinAt+".Index", "must be at least 1 (got %d)", pin.Index)
			}
			if !mg.seen[pin] {
				mg.seen[pin] = true
				mg.pins = append(mg.pins, pin)
			}
		}
	}
	if len(byIndex) == 0 {
		return nil
	}
	sorted := make([]*merged, 0, len(byIndex))
	for _, mg := range byIndex {
		sorted = append(sorted, mg)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].index < sorted[j].index })

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
		return redisstore.State{}, a2redis.Invalid("Through", "is negative (%d)", opts.Through)
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

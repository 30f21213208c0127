package model

import (
	"slices"
	"time"

	"github.com/a2redis/a2redis"
)

// cursor is one consumer cursor: an event cursor (one event), a lane cursor
// (a FIFO of its lane's events) or a log cursor (the whole log, by type).
type cursor struct {
	consumer, lane string
	kind           a2redis.CursorKind
	cid            string
	position       int64 // the last index moved past
	head           int64 // the index to handle next; 0: none
	d              headState
	queue          []int64 // lane cursors: targeted indexes after the head
	types          []string
	allTypes       bool                 // log cursors: nil types, every type
	passed         map[int64]completion // heads moved past, this lifetime
	pins           map[pinRef]bool      // checkpoints the current head pins
}

// completion records how a cursor moved past a head.
type completion struct {
	attempt int64 // the completing attempt; 0 when skipped
	ids     []string
}

// headState is a head's claim and failure bookkeeping in epoch milliseconds
// (0: never / none).
type headState struct {
	attempts, firstClaimed, lastClaimed int64
	holder                              string
	expires                             int64 // claim expiry or retry hold
	failures, lastFailed, lastFailedAtt int64
	lastError                           string
	deadAt                              int64
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func (d headState) public() a2redis.HeadState {
	return a2redis.HeadState{
		Attempts:          d.attempts,
		FirstClaimedAt:    msTime(d.firstClaimed),
		LastClaimedAt:     msTime(d.lastClaimed),
		Holder:            d.holder,
		ClaimExpiresAt:    msTime(d.expires),
		Failures:          d.failures,
		LastFailedAt:      msTime(d.lastFailed),
		LastFailedAttempt: d.lastFailedAtt,
		LastError:         d.lastError,
		DeadLetteredAt:    msTime(d.deadAt),
	}
}

func (c *cursor) dead() bool { return c.head > 0 && c.d.deadAt != 0 }

// live reports a head a claim may take (not dead-lettered).
func (c *cursor) live() bool { return c.head > 0 && c.d.deadAt == 0 }

func (c *cursor) takes(typ string) bool {
	if typ == a2redis.ClearEventType {
		return false
	}
	return c.allTypes || slices.Contains(c.types, typ)
}

func (c *cursor) setTypes(types []string) {
	c.allTypes = types == nil
	c.types = append([]string(nil), types...)
}

func (c *cursor) ref() a2redis.HeadRef {
	return a2redis.HeadRef{Consumer: c.consumer, Lane: c.lane, Index: c.head}
}

func newCursor(consumer, lane string, kind a2redis.CursorKind, idx int64) *cursor {
	return &cursor{
		consumer: consumer, lane: lane, kind: kind, cid: cidOf(consumer, kind, lane, idx),
		passed: map[int64]completion{},
	}
}

// rowCursor is the cursor a request naming (consumer, lane, idx) means: the
// event cursor of that event, or the lane or log cursor of that lane.
func (s *session) rowCursor(consumer, lane string, idx int64) *cursor {
	if lane == "" {
		return s.cursors[cidOf(consumer, a2redis.EventCursor, "", idx)]
	}
	if c := s.cursors[cidOf(consumer, a2redis.LaneCursor, lane, 0)]; c != nil {
		return c
	}
	return s.cursors[cidOf(consumer, a2redis.LogCursor, lane, 0)]
}

// current reports whether attempt still owns the cursor's head at idx: the
// fence of caused appends and clears.
func (c *cursor) current(idx, attempt int64) bool {
	return c != nil && c.head == idx && c.d.attempts == attempt && c.d.deadAt == 0
}

// heldUntil is when the cursor's head may next be claimed (epoch ms; at
// or before now: it may be claimed now): the end of its claim or retry
// hold, or, for an event or lane cursor, its event's scheduled time
// (Event.NotBefore), whichever is later. Log cursors are never scheduled.
func (s *session) heldUntil(c *cursor) int64 {
	until := c.d.expires
	if c.kind != a2redis.LogCursor {
		if ev, ok := s.entry(c.head); ok && !ev.NotBefore.IsZero() {
			until = max(until, ev.NotBefore.UnixMilli())
		}
	}
	return until
}

// nextLog is the first event after `after` a log cursor takes, or 0.
func (s *session) nextLog(c *cursor, after int64) int64 {
	for idx := max(after, s.clear) + 1; idx <= s.head; idx++ {
		ev, ok := s.entry(idx)
		if ok && c.takes(ev.Type) {
			return idx
		}
	}
	return 0
}

// advance moves a cursor past its head: an event cursor is done, a lane
// cursor takes its lane's next event, a log cursor the next event it takes.
func (s *session) advance(c *cursor, done completion) {
	idx := c.head
	s.releasePins(c)
	c.passed[idx] = done
	c.position = idx
	c.d = headState{}
	switch c.kind {
	case a2redis.EventCursor:
		c.head = 0
	case a2redis.LaneCursor:
		c.head = 0
		if len(c.queue) > 0 {
			c.head, c.queue = c.queue[0], c.queue[1:]
		}
	case a2redis.LogCursor:
		c.head = s.nextLog(c, idx)
	}
}

// enqueue starts the cursor work of events just pushed: each event's
// targets, then each served log consumer whose types the batch carries.
func (s *session) enqueue(batch []a2redis.StoredEvent, targets [][]a2redis.Target, srv served, base int64) {
	for i, ev := range batch {
		for _, t := range targets[i] {
			if t.Lane == "" {
				c := newCursor(t.Consumer, "", a2redis.EventCursor, ev.Index)
				c.kind, c.position, c.head = a2redis.EventCursor, ev.Index-1, ev.Index
				s.cursors[c.cid] = c
				continue
			}
			cid := cidOf(t.Consumer, a2redis.LaneCursor, t.Lane, 0)
			c := s.cursors[cid]
			if c == nil {
				c = newCursor(t.Consumer, t.Lane, a2redis.LaneCursor, 0)
				c.position = s.clear
				s.cursors[cid] = c
			}
			if c.head == 0 {
				c.head = ev.Index
			} else {
				c.queue = append(c.queue, ev.Index)
			}
		}
	}
	for _, spec := range srv.logs {
		probe := &cursor{}
		probe.setTypes(spec.types)
		first := int64(0)
		for _, ev := range batch {
			if probe.takes(ev.Type) {
				first = ev.Index
				break
			}
		}
		if first == 0 {
			continue
		}
		cid := cidOf(spec.name, a2redis.LogCursor, spec.lane, 0)
		c := s.cursors[cid]
		if c == nil {
			c = newCursor(spec.name, spec.lane, a2redis.LogCursor, 0)
			c.setTypes(spec.types)
			if spec.backfill {
				c.position = s.clear
				c.head = s.nextLog(c, s.clear)
			} else {
				c.position, c.head = base, first
			}
			s.cursors[cid] = c
			continue
		}
		c.setTypes(spec.types)
		if c.head == 0 {
			c.head = s.nextLog(c, c.position)
		}
	}
}

// hasPending reports whether a served consumer has a live head.
func (s *session) hasPending(srv served) bool {
	for _, c := range s.cursors {
		if c.live() && srv.has(c.consumer) {
			return true
		}
	}
	return false
}

// sortedCursors returns the cursors in cursor-id order.
func (s *session) sortedCursors() []*cursor {
	out := make([]*cursor, 0, len(s.cursors))
	for _, c := range s.cursors {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *cursor) int {
		switch {
		case a.cid < b.cid:
			return -1
		case a.cid > b.cid:
			return 1
		}
		return 0
	})
	return out
}

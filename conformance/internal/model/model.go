// Package model is the a2redis contract as plain in-memory Go: a store with
// the method shapes of redisstore.Store (the same request and result types)
// whose state is ordinary maps and slices, written from the contract
// (design.md §1 and the in-memory reference store) rather than from the Lua
// scripts. The conformance suite's differential test drives a Redis store
// and a model with the same operations and compares every result and the
// final state.
//
// The model keeps no Redis layout: it has no type indexes, no head chunks,
// no runnable set. What it must agree on is only what a caller can observe:
// results, errors (by errors.Is class) and reads.
//
// Where the contract leaves a choice open the model takes the one the
// reference store takes and says so: heads tied on index and consumer are
// taken in cursor-id order (see ClaimOrder), completions of every head a
// cursor moved past stay replayable until the lifetime ends.
package model

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/redisstore"
)

// Config configures a model Store. The zero value is ready to use.
type Config struct {
	// Clock is the store's clock. Default time.Now.
	Clock func() time.Time
	// IDs generates event ids for events without one and for clear
	// markers. Default redisstore.RandomID.
	IDs func() string
	// MaxBatch is the most events one Append or CompleteAttempt may carry.
	// Default redisstore.DefaultMaxBatch.
	MaxBatch int
	// ClaimLimit is the default ClaimRequest.Limit. Default
	// redisstore.DefaultClaimLimit.
	ClaimLimit int
	// ReclaimPageSize is how many old entries one ReclaimPage deletes.
	// Default redisstore.ReclaimPageSize.
	ReclaimPageSize int
	// Trace, when set, gives the trace context an append stores with its
	// events (as redisstore.Config.Observer's TraceContext does).
	Trace func(ctx context.Context) string
}

// Store is the in-memory contract. It is safe for concurrent use.
type Store struct {
	cfg      Config
	mu       sync.Mutex
	sessions map[string]*session
	regMu    sync.Mutex // guards reg: taken alone or inside mu, never around it
	reg      registry
}

// New returns an empty model store.
func New(cfg Config) *Store {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.IDs == nil {
		cfg.IDs = redisstore.RandomID
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = redisstore.DefaultMaxBatch
	}
	if cfg.ClaimLimit == 0 {
		cfg.ClaimLimit = redisstore.DefaultClaimLimit
	}
	if cfg.ReclaimPageSize == 0 {
		cfg.ReclaimPageSize = redisstore.ReclaimPageSize
	}
	return &Store{cfg: cfg, sessions: map[string]*session{}}
}

func (m *Store) now() int64 { return m.cfg.Clock().UnixMilli() }

// session is one session's state.
type session struct {
	name  string
	log   []a2redis.StoredEvent // entries still stored, ascending (contiguous but for a trim's gap)
	head  int64                 // the newest index
	clear int64                 // the latest clear marker, or 0
	// floor is the highest index a trim removed (Store.Trim), or 0; the
	// log may then skip from below the marker to after the floor.
	floor int64
	// collapsedMarker is the index of a marker a collapse moved from the
	// log to the clear key (readable still; no reclaim counts it), or 0.
	collapsedMarker int64
	ids             map[string]int64 // event id → the index it names (entries still stored)

	cursors  map[string]*cursor // by cursor id (rows.EventCursorID, …)
	reducers map[string]*reducer
	pins     map[pinRef]int // pin counts per checkpoint
	presence map[[2]string]presenceEntry
	// deadSince is the time since which the session has held dead
	// letters without a break (0: it holds none); see noteDead.
	deadSince int64
}

func (m *Store) session(name string) *session {
	s := m.sessions[name]
	if s == nil {
		s = &session{
			name: name, ids: map[string]int64{}, cursors: map[string]*cursor{},
			reducers: map[string]*reducer{}, pins: map[pinRef]int{},
			presence: map[[2]string]presenceEntry{},
		}
		m.sessions[name] = s
	}
	return s
}

// entry returns the stored event at idx.
func (s *session) entry(idx int64) (a2redis.StoredEvent, bool) {
	if len(s.log) == 0 {
		return a2redis.StoredEvent{}, false
	}
	i := sort.Search(len(s.log), func(i int) bool { return s.log[i].Index >= idx })
	if i == len(s.log) || s.log[i].Index != idx {
		return a2redis.StoredEvent{}, false
	}
	return copyEvent(s.log[i]), true
}

func copyEvent(e a2redis.StoredEvent) a2redis.StoredEvent {
	e.Payload = append(json.RawMessage(nil), e.Payload...)
	if e.Cause != nil {
		c := *e.Cause
		e.Cause = &c
	}
	return e
}

// owner is the index an id names in the current lifetime (ids below the
// clear marker are free again).
func (s *session) owner(id string) (int64, bool) {
	idx, ok := s.ids[id]
	if !ok || idx < s.clear {
		return 0, false
	}
	return idx, true
}

// push appends one event at the next index.
func (s *session) push(id, typ string, payload json.RawMessage, now int64, cause *a2redis.Cause, notBefore int64) a2redis.StoredEvent {
	s.head++
	ev := a2redis.StoredEvent{
		Session: s.name, Index: s.head, ID: id, Type: typ,
		Payload: append(json.RawMessage(nil), payload...), CreatedAt: time.UnixMilli(now),
	}
	if cause != nil {
		c := *cause
		ev.Cause = &c
	}
	if notBefore > 0 {
		ev.NotBefore = time.UnixMilli(notBefore)
	}
	s.log = append(s.log, ev)
	s.ids[id] = s.head
	return copyEvent(ev)
}

// Bounds returns a session's head and latest clear marker.
func (m *Store) Bounds(ctx context.Context, session string) (redisstore.Bounds, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.Bounds{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.Bounds{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return redisstore.Bounds{}, nil
	}
	return redisstore.Bounds{Head: s.head, ClearIndex: s.clear, Floor: s.floor}, nil
}

// ClearIndex returns the session's latest clear marker index, or 0.
func (m *Store) ClearIndex(ctx context.Context, session string) (int64, error) {
	b, err := m.Bounds(ctx, session)
	return b.ClearIndex, err
}

// Read returns the session's events with after < index <= through (0: up
// to the head), starting no lower than the latest clear marker.
func (m *Store) Read(ctx context.Context, session string, after, through int64) ([]a2redis.StoredEvent, error) {
	out := []a2redis.StoredEvent{}
	err := m.ReadPages(ctx, session, after, through, func(page []a2redis.StoredEvent) error {
		out = append(out, page...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadPages is Read delivering the events in pages of
// redisstore.ReadPageSize.
func (m *Store) ReadPages(ctx context.Context, session string, after, through int64, fn func([]a2redis.StoredEvent) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSession(session); err != nil {
		return err
	}
	if after < 0 || through < 0 {
		return check.Invalid("after/through", "negative index (%d, %d)", after, through)
	}
	m.mu.Lock()
	var events []a2redis.StoredEvent
	if s := m.sessions[session]; s != nil {
		last := s.head
		if through > 0 && through < last {
			last = through
		}
		if after > 0 && after < s.floor && s.floor >= s.clear {
			m.mu.Unlock()
			return fmt.Errorf("%w: events %d to %d were trimmed: the retained log starts at %d (session %q)", a2redis.ErrTrimmed, after+1, s.floor, s.floor+1, session)
		}
		for idx := max(after, s.clear-1, s.floor) + 1; idx <= last; idx++ {
			ev, ok := s.entry(idx)
			if !ok {
				m.mu.Unlock()
				return fmt.Errorf("%w: model lost index %d of session %q", a2redis.ErrRangeGap, idx, session)
			}
			events = append(events, ev)
		}
	}
	m.mu.Unlock()
	for len(events) > 0 {
		n := min(len(events), redisstore.ReadPageSize)
		if err := fn(events[:n:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

// ReadTail returns the newest limit (at most 1000) events of the current
// lifetime, the clear marker included, in index order.
func (m *Store) ReadTail(ctx context.Context, session string, limit int) ([]a2redis.StoredEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSession(session); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, check.Invalid("limit", "must be at least 1 (got %d)", limit)
	}
	limit = min(limit, 1000)
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []a2redis.StoredEvent{}
	s := m.sessions[session]
	if s == nil {
		return out, nil
	}
	from := max(s.clear, s.floor+1, 1, s.head-int64(limit)+1)
	for idx := from; idx <= s.head; idx++ {
		if ev, ok := s.entry(idx); ok {
			out = append(out, ev)
		}
	}
	return out, nil
}

// Sessions lists the sessions the model holds, sorted.
func (m *Store) Sessions() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.sessions))
	for name := range m.sessions {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// EventIDs returns the ids of the session's current lifetime (the clear
// marker's included), by index: what the layout keeps id records for.
func (m *Store) EventIDs(session string) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	if s := m.sessions[session]; s != nil {
		for id, idx := range s.ids {
			if idx >= s.clear {
				out[id] = idx
			}
		}
	}
	return out
}

// cid returns a cursor id as the layout spells it; ordering by it breaks
// ties between heads at the same index the way the store does.
func cidOf(consumer string, kind a2redis.CursorKind, lane string, idx int64) string {
	switch kind {
	case a2redis.LaneCursor:
		return rows.LaneCursorID(consumer, lane)
	case a2redis.LogCursor:
		return rows.LogCursorID(consumer, lane)
	}
	return rows.EventCursorID(consumer, idx)
}

package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
)

// Bounds are a session's head, latest clear marker and trim floor.
type Bounds struct {
	// Head is the index of the newest event (0 for an empty session).
	Head int64 `json:"head"`
	// ClearIndex is the latest clear marker's index, or 0.
	ClearIndex int64 `json:"clear_index"`
	// Floor is the highest index trimmed from the log (Store.Trim): the
	// retained log starts right after it. 0 when nothing was trimmed.
	Floor int64 `json:"floor,omitempty"`
}

// Bounds reads a session's head, clear marker and trim floor in one MGET.
func (s *Store) Bounds(ctx context.Context, session string) (Bounds, error) {
	if err := checkSession(session); err != nil {
		return Bounds{}, err
	}
	k := s.keys(session)
	values, err := s.do(ctx, s.client.B().Mget().Key(k.Count(), k.Clear(), k.Floor()).Build()).ToArray()
	if err != nil {
		return Bounds{}, fmt.Errorf("a2redis: reading bounds of session %q: %w", session, err)
	}
	if len(values) != 3 {
		return Bounds{}, fmt.Errorf("%w: MGET returned %d values", a2redis.ErrUnexpectedReply, len(values))
	}
	var b Bounds
	if b.ClearIndex, err = clearIndex(values[1]); err != nil {
		return Bounds{}, err
	}
	if values[0].IsNil() {
		// A collapsed session keeps only its clear marker.
		b.Head = b.ClearIndex
	} else if b.Head, err = optionalInt(values[0]); err != nil {
		return Bounds{}, err
	}
	if b.Floor, err = optionalInt(values[2]); err != nil {
		return Bounds{}, err
	}
	return b, nil
}

// clearIndex reads a clear key's value (keys.ParseClear): the marker's
// index, 0 for none.
func clearIndex(m rueidis.RedisMessage) (int64, error) {
	if m.IsNil() {
		return 0, nil
	}
	s, err := m.ToString()
	if err != nil {
		return 0, err
	}
	c, ok := keys.ParseClear(s)
	if !ok {
		return 0, fmt.Errorf("%w: %q is not a clear marker", a2redis.ErrUnexpectedReply, s)
	}
	return c.Index, nil
}

// collapsedMarker returns the clear marker at idx of a session that
// collapsed to it (an ended lifetime: the marker's entry is no longer in
// the log, its clear key says it), as a read of its entry would; false
// when the session did not collapse to a marker at idx.
func (s *Store) collapsedMarker(ctx context.Context, session string, idx int64) (a2redis.StoredEvent, bool, error) {
	v, err := s.do(ctx, s.client.B().Get().Key(s.keys(session).Clear()).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return a2redis.StoredEvent{}, false, nil
	}
	if err != nil {
		return a2redis.StoredEvent{}, false, fmt.Errorf("a2redis: reading the clear marker of session %q: %w", session, err)
	}
	c, ok := keys.ParseClear(v)
	if !ok {
		return a2redis.StoredEvent{}, false, fmt.Errorf("%w: %q is not a clear marker", a2redis.ErrUnexpectedReply, v)
	}
	if !c.Collapsed || c.Index != idx {
		return a2redis.StoredEvent{}, false, nil
	}
	return a2redis.StoredEvent{
		Session: session, Index: idx, ID: c.ID, Type: a2redis.ClearEventType,
		Payload: json.RawMessage("null"), CreatedAt: time.UnixMilli(c.CreatedAt),
	}, true, nil
}

func optionalInt(m rueidis.RedisMessage) (int64, error) {
	if m.IsNil() {
		return 0, nil
	}
	s, err := m.ToString()
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an index", a2redis.ErrUnexpectedReply, s)
	}
	return n, nil
}

// ClearIndex returns the session's latest clear marker index, or 0.
func (s *Store) ClearIndex(ctx context.Context, session string) (int64, error) {
	b, err := s.Bounds(ctx, session)
	return b.ClearIndex, err
}

// Read returns the session's events with after < index <= through (through
// 0: up to the head), in index order. Reads start no lower than the latest
// clear marker, and after the trim floor (Bounds.Floor): a read from the
// start (after 0) starts at the retained log, and one from inside the
// trimmed past (0 < after < Floor) fails with ErrTrimmed, since the events
// it asks for are gone. A gap in the log fails with ErrRangeGap, except one
// a concurrent clear and reclaim explain: then the read goes on from the
// new marker, and what it had read of the past lifetime is dropped.
func (s *Store) Read(ctx context.Context, session string, after, through int64) ([]a2redis.StoredEvent, error) {
	out := []a2redis.StoredEvent{}
	err := s.ReadPages(ctx, session, after, through, func(page []a2redis.StoredEvent) error {
		if n := len(out); n > 0 && page[0].Index != out[n-1].Index+1 {
			out = out[:0] // jumped to a new clear marker
		}
		out = append(out, page...)
		return nil
	})
	return out, err
}

// ReadPages is Read delivering the events page by page (ReadPageSize at a
// time) to fn, so a long log is never held in memory. An error from fn
// stops the read and is returned. When a concurrent clear and reclaim remove
// entries the read has not reached yet, it goes on from the new clear
// marker: the next page starts at the marker (a jump forward, never a
// duplicate).
func (s *Store) ReadPages(ctx context.Context, session string, after, through int64, fn func([]a2redis.StoredEvent) error) error {
	if err := checkSession(session); err != nil {
		return err
	}
	if after < 0 || through < 0 {
		return check.Invalid("after/through", "negative index (%d, %d)", after, through)
	}
	b, err := s.Bounds(ctx, session)
	if err != nil {
		return err
	}
	if err := trimmedPast(session, after, b); err != nil {
		return err
	}
	last := after
	for {
		err = s.readRange(ctx, session, last, through, b, func(page []a2redis.StoredEvent) error {
			last = page[len(page)-1].Index
			return fn(page)
		})
		if !errors.Is(err, a2redis.ErrRangeGap) {
			return err
		}
		again, berr := s.Bounds(ctx, session)
		if berr != nil {
			return err
		}
		if again.Floor > b.Floor && again.Floor > last {
			// A concurrent trim removed what the read had not reached.
			if terr := trimmedPast(session, last, again); terr != nil {
				return terr
			}
			b = again
			continue
		}
		if again.ClearIndex <= b.ClearIndex || again.ClearIndex <= last {
			return err // not a gap a newer clear or trim explains
		}
		b = again
	}
}

func (s *Store) readRange(ctx context.Context, session string, after, through int64, b Bounds, fn func([]a2redis.StoredEvent) error) error {
	last := b.Head
	if through > 0 && through < last {
		last = through
	}
	next := max(after, b.ClearIndex-1, b.Floor) + 1
	log := s.keys(session).Log()
	for next <= last {
		cmd := s.client.B().Xrange().Key(log).Start(itoa(next) + "-0").End(itoa(last) + "-0").Count(ReadPageSize).Build()
		entries, err := s.do(ctx, cmd).AsXRange()
		if err != nil {
			return fmt.Errorf("a2redis: reading session %q: %w", session, err)
		}
		if next == b.ClearIndex && (len(entries) == 0 || entries[0].ID != itoa(next)+"-0") {
			// The marker's entry is not in the log: the session collapsed
			// to it (its clear key says it), or a gap.
			marker, ok, err := s.collapsedMarker(ctx, session, next)
			if err != nil {
				return err
			}
			if ok {
				next++
				if err := fn([]a2redis.StoredEvent{marker}); err != nil {
					return err
				}
				if len(entries) == 0 {
					continue // the marker was the last event, or a gap follows
				}
				// The entries read start right after the marker.
			}
		}
		if len(entries) == 0 {
			return errorf(a2redis.ErrRangeGap, session, "the log ends before index %d", last)
		}
		page := make([]a2redis.StoredEvent, len(entries))
		for i, e := range entries {
			ev, err := toEvent(session, e.ID, e.FieldValues)
			if err != nil {
				return err
			}
			if ev.Index != next+int64(i) {
				return errorf(a2redis.ErrRangeGap, session, "index %d follows %d", ev.Index, next+int64(i)-1)
			}
			page[i] = ev
		}
		next += int64(len(entries))
		if err := fn(page); err != nil {
			return err
		}
	}
	return nil
}

// ReadTail returns the newest limit events of the session's current
// lifetime (the clear marker included), in index order. limit is capped at
// 1000.
func (s *Store) ReadTail(ctx context.Context, session string, limit int) ([]a2redis.StoredEvent, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, check.Invalid("limit", "must be at least 1 (got %d)", limit)
	}
	limit = min(limit, 1000)
	b, err := s.Bounds(ctx, session)
	if err != nil {
		return nil, err
	}
	from := max(b.ClearIndex, b.Floor+1, 1)
	if b.Head < from {
		return []a2redis.StoredEvent{}, nil
	}
	cmd := s.client.B().Xrevrange().Key(s.keys(session).Log()).End(itoa(b.Head) + "-0").Start(itoa(from) + "-0").Count(int64(limit)).Build()
	entries, err := s.do(ctx, cmd).AsXRange()
	if err != nil {
		return nil, fmt.Errorf("a2redis: reading the tail of session %q: %w", session, err)
	}
	out := make([]a2redis.StoredEvent, len(entries))
	for i, e := range entries {
		ev, err := toEvent(session, e.ID, e.FieldValues)
		if err != nil {
			return nil, err
		}
		out[len(entries)-1-i] = ev
	}
	if from == b.ClearIndex && len(out) < limit && (len(out) == 0 || out[0].Index != from) {
		// Down to the marker, and its entry is not in the log: a session
		// collapsed to it says it in its clear key.
		marker, ok, err := s.collapsedMarker(ctx, session, from)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append([]a2redis.StoredEvent{marker}, out...)
		}
	}
	for i := 1; i < len(out); i++ {
		if out[i].Index != out[i-1].Index+1 {
			return nil, errorf(a2redis.ErrRangeGap, session, "index %d follows %d", out[i].Index, out[i-1].Index)
		}
	}
	return out, nil
}

// trimmedPast is ErrTrimmed for a read positioned after `after` when the
// current lifetime's events from there were trimmed (after 0, from the
// start, reads the retained log).
func trimmedPast(session string, after int64, b Bounds) error {
	if after > 0 && after < b.Floor && b.Floor >= b.ClearIndex {
		return errorf(a2redis.ErrTrimmed, session, "events %d to %d were trimmed: the retained log starts at %d", after+1, b.Floor, b.Floor+1)
	}
	return nil
}

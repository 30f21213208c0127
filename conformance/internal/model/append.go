package model

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
)

func partial(session, format string, a ...any) error {
	return fmt.Errorf("%w: %s (session %q)", a2redis.ErrPartialDuplicateBatch, fmt.Sprintf(format, a...), session)
}

// Append appends a batch atomically and idempotently by event id (see
// redisstore.Store.Append).
func (m *Store) Append(ctx context.Context, session string, events []a2redis.Event, opts redisstore.AppendOptions) (redisstore.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.AppendResult{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.AppendResult{}, err
	}
	if opts.OriginIndex < 0 {
		return redisstore.AppendResult{}, check.Invalid("OriginIndex", "is negative (%d)", opts.OriginIndex)
	}
	srv, err := parseServed(m.served(opts.Consumers))
	if err != nil {
		return redisstore.AppendResult{}, err
	}
	batch, err := m.prepare(events, "events")
	if err != nil {
		return redisstore.AppendResult{}, err
	}
	for i, e := range events {
		if e.Cause != nil {
			if err := checkCause(fmt.Sprintf("events[%d].Cause", i), *e.Cause); err != nil {
				return redisstore.AppendResult{}, err
			}
			c := *e.Cause
			batch[i].cause = &c
		}
	}
	trace := m.trace(ctx)
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(session)
	if len(batch) == 0 {
		return redisstore.AppendResult{Events: []a2redis.StoredEvent{}, HasPending: s.hasPending(srv)}, nil
	}
	stored := make([]a2redis.StoredEvent, 0, len(batch))
	for _, e := range batch {
		if idx, ok := s.owner(e.id); ok {
			ev, _ := s.entry(idx)
			stored = append(stored, ev)
		}
	}
	if len(stored) == len(batch) {
		return redisstore.AppendResult{Events: stored, Replayed: true, HasPending: s.hasPending(srv)}, nil
	}
	if len(stored) > 0 {
		return redisstore.AppendResult{}, partial(session, "%d of %d event ids are already stored", len(stored), len(batch))
	}
	if opts.OriginIndex > 0 && opts.OriginIndex <= s.clear {
		return redisstore.AppendResult{}, fmt.Errorf("%w: scheduled work from event %d was cleared (session %q)", a2redis.ErrSessionCleared, opts.OriginIndex, session)
	}
	// The attempt fence: a caused event commits only while its attempt
	// still owns the cursor's head. Causes below the clear marker are
	// reported first, then the others in batch order.
	for _, e := range batch {
		if e.cause != nil && e.cause.Index <= s.clear {
			return redisstore.AppendResult{}, &a2redis.SupersededError{Session: session, Cause: *e.cause}
		}
	}
	for _, e := range batch {
		if c := e.cause; c != nil && !s.rowCursor(c.Consumer, c.Lane, c.Index).current(c.Index, c.Attempt) {
			return redisstore.AppendResult{}, &a2redis.SupersededError{Session: session, Cause: *c}
		}
	}
	base := s.head
	targets := make([][]a2redis.Target, len(batch))
	for i, e := range batch {
		ev := s.push(e.id, e.typ, e.payload, now, e.cause, e.notBefore)
		if trace != "" {
			s.log[len(s.log)-1].Trace = trace
			ev.Trace = trace
		}
		stored = append(stored, ev)
		targets[i] = e.targets
	}
	s.enqueue(stored, targets, srv, base)
	return redisstore.AppendResult{Events: stored, HasPending: s.hasPending(srv)}, nil
}

// trace is the trace context an append stores (Config.Trace), dropped when
// it is too long or not valid UTF-8, as the store drops it.
func (m *Store) trace(ctx context.Context) string {
	if m.cfg.Trace == nil {
		return ""
	}
	tc := m.cfg.Trace(ctx)
	if len(tc) > redisstore.MaxTraceContext || !utf8.ValidString(tc) {
		return ""
	}
	return tc
}

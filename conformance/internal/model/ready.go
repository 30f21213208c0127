package model

import (
	"context"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
)

// ReadyAt reports what the ready index must list for session (see
// redisstore.Store.ReadyAt): listed when any consumer's live head is
// claimable now (Due; At is then a time not after now that the model does
// not pin down: the store keeps when the session got work) or once the
// earliest claim or retry hold ends (At).
func (m *Store) ReadyAt(ctx context.Context, session string) (redisstore.ReadyState, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.ReadyState{}, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.ReadyState{}, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return redisstore.ReadyState{}, nil
	}
	var next int64
	for _, c := range s.heads() {
		if c.dead() {
			continue
		}
		until := s.heldUntil(c)
		if until <= now {
			return redisstore.ReadyState{Listed: true, Due: true, At: time.UnixMilli(now)}, nil
		}
		if next == 0 || until < next {
			next = until
		}
	}
	if next == 0 {
		return redisstore.ReadyState{}, nil
	}
	return redisstore.ReadyState{Listed: true, At: time.UnixMilli(next)}, nil
}

// Release gives claimed attempts back without counting a failure (see
// redisstore.Store.Release).
func (m *Store) Release(ctx context.Context, req redisstore.ReleaseRequest) ([]redisstore.ReleaseOutcome, error) {
	if err := m.checkAttempts(ctx, req.Session, req.Attempts); err != nil {
		return nil, err
	}
	for i, a := range req.Attempts {
		if err := m.checkDeclared(fmt.Sprintf("Attempts[%d].Consumer", i), a.Head.Consumer); err != nil {
			return nil, err
		}
	}
	if req.Delay < 0 {
		return nil, check.Invalid("Delay", "is negative (%v)", req.Delay)
	}
	out := make([]redisstore.ReleaseOutcome, len(req.Attempts))
	if len(req.Attempts) == 0 {
		return out, nil
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(req.Session)
	for i, a := range req.Attempts {
		out[i] = redisstore.ReleaseSuperseded
		if a.Head.Index <= s.clear || a.Head.Index > s.head {
			continue
		}
		c := s.rowCursor(a.Head.Consumer, a.Head.Lane, a.Head.Index)
		if c == nil || c.head != a.Head.Index || c.dead() || c.d.holder == "" || c.d.attempts != a.Attempt {
			continue
		}
		if _, moved := c.passed[a.Head.Index]; moved {
			continue
		}
		c.d.holder = ""
		c.d.expires = 0
		if req.Delay > 0 {
			c.d.expires = now + max(req.Delay.Milliseconds(), 1)
		}
		out[i] = redisstore.Released
	}
	return out, nil
}

// checkAttempts is what CompleteAttempts and Release check first: the
// context, the session and the attempts (as completions).
func (m *Store) checkAttempts(ctx context.Context, session string, attempts []redisstore.Attempt) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSession(session); err != nil {
		return err
	}
	causes := make([]a2redis.Cause, len(attempts))
	for i, a := range attempts {
		causes[i] = a2redis.Cause{Consumer: a.Head.Consumer, Lane: a.Head.Lane, Index: a.Head.Index, Attempt: a.Attempt}
	}
	return check.Completions("Attempts", causes, m.cfg.MaxBatch)
}

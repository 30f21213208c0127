package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/wire"
	"github.com/a2redis/a2redis/redisstore"
)

// Source is what a feed reads from: the store, unless FeedOptions.Source
// names another (*redisstore.Store satisfies it).
type Source interface {
	// ReadPages delivers the session's events with after < index <=
	// through (0: up to the head), in index order, page by page; reads
	// start no lower than the latest clear marker.
	ReadPages(ctx context.Context, session string, after, through int64, fn func([]a2redis.StoredEvent) error) error
	// ClearIndex returns the session's latest clear marker, or 0.
	ClearIndex(ctx context.Context, session string) (int64, error)
}

// Update is one delivery of a feed.
type Update struct {
	// Events are the next events, contiguous, in index order (never a
	// duplicate, never a gap). Events carried by a wake-up have a nil
	// Cause: wake-ups do not carry causes (read the log for them).
	Events []a2redis.StoredEvent
	// Cleared, when positive, reports that the session was cleared: it is
	// the clear marker's index, and the marker is Events[0]. The events of
	// the ended lifetime that the feed had not delivered yet are skipped
	// (reads start at the marker).
	Cleared int64
	// CaughtUp is true when this update came from an XRANGE catch-up
	// rather than a carried wake-up.
	CaughtUp bool
}

// FeedOptions configure a Feed. The zero value is ready to use.
type FeedOptions struct {
	// Source, when set, is what the feed reads from instead of the store
	// (a source that bounds each read, say). Default: the store.
	Source Source
	// FollowTTL is how long a followed session's mark outlives its last
	// refresh (see WatchOptions.FollowTTL). Default DefaultFollowTTL.
	FollowTTL time.Duration
}

// Feed follows sessions: every event, once, in order, with wake-ups applied
// when they carry the events and XRANGE catch-ups otherwise. It is safe for
// concurrent use.
type Feed struct {
	src   Source
	watch *SessionWatcher
}

// NewFeed returns a feed of the store's sessions: it subscribes through
// the store's client in its publish mode (Config.ShardedPubSub) and reads
// from the store (or opts.Source).
func NewFeed(store *redisstore.Store, opts FeedOptions) *Feed {
	var src Source = store
	if opts.Source != nil {
		src = opts.Source
	}
	return &Feed{
		src:   src,
		watch: NewSessionWatcher(store, WatchOptions{FollowTTL: opts.FollowTTL}),
	}
}

// Follow delivers every event after `after` (raised to the clear marker - 1
// when lower) in index order until ctx ends (returns ctx.Err()) or fn
// returns an error (returned). It marks the session followed and
// subscribes first (SessionWatcher.Watch), then catches up with
// ReadPages, then applies carried wake-ups that continue exactly where it
// is, and catches up by reading whenever a wake-up is bare, skips ahead, a
// reconnect happened, or the followed mark may have lapsed. A read error that is not a transport error (for
// example ErrRangeGap) ends Follow; transport errors are retried with
// backoff. fn runs on the calling goroutine, one update at a time.
func (f *Feed) Follow(ctx context.Context, session string, after int64, fn func(Update) error) error {
	if session == "" {
		return check.Invalid("session", "is empty")
	}
	if after < 0 {
		return check.Invalid("after", "is negative (%d)", after)
	}
	if fn == nil {
		return check.Invalid("fn", "is nil")
	}
	fw := &follower{ctx: ctx, src: f.src, session: session, pos: after, fn: fn}
	err := f.watch.Watch(ctx, session, fw.handle)
	var ue userError
	if errors.As(err, &ue) {
		return ue.err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// userError carries an error fn returned, so it is never retried.
type userError struct{ err error }

func (e userError) Error() string { return e.err.Error() }
func (e userError) Unwrap() error { return e.err }

// follower is one Follow's position and logic.
type follower struct {
	ctx     context.Context
	src     Source
	session string
	pos     int64 // the last index delivered (or skipped as the past)
	raised  bool  // pos was raised to the clear marker - 1 once
	fn      func(Update) error
}

func (fw *follower) handle(n Notice) error {
	switch n.Kind {
	case NoticeSubscribed, NoticeOverflow:
		return fw.catchUp()
	case NoticeMessage:
		msg, err := wire.Decode(n.Payload)
		if err != nil {
			return fw.catchUp()
		}
		return fw.apply(msg)
	}
	return nil
}

// apply applies a wake-up: carried events that continue where the feed is,
// or a catch-up when it is bare, skips ahead or announces more than it
// carries.
func (fw *follower) apply(msg wire.Message) error {
	if msg.Frontier <= fw.pos {
		return nil
	}
	if msg.Bare || len(msg.Entries) == 0 {
		return fw.catchUp()
	}
	events := make([]a2redis.StoredEvent, 0, len(msg.Entries))
	next := fw.pos + 1
	for _, e := range msg.Entries {
		if e.Index < next {
			continue // already delivered
		}
		if e.Index != next {
			return fw.catchUp()
		}
		events = append(events, a2redis.StoredEvent{
			Session:   fw.session,
			Index:     e.Index,
			ID:        e.ID,
			Type:      e.Type,
			Payload:   e.Payload,
			CreatedAt: time.UnixMilli(msg.CreatedAt),
		})
		next++
	}
	if err := fw.deliver(events, false); err != nil {
		return err
	}
	if msg.Frontier > fw.pos {
		return fw.catchUp()
	}
	return nil
}

// catchUp reads everything after the position, retrying transport errors
// with backoff while ctx lasts.
func (fw *follower) catchUp() error {
	backoff := DefaultMinBackoff
	for {
		err := fw.read()
		if err == nil {
			return nil
		}
		var ue userError
		if errors.As(err, &ue) || fw.ctx.Err() != nil || !transient(err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-fw.ctx.Done():
			t.Stop()
			return fw.ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, DefaultMaxBackoff)
	}
}

func (fw *follower) read() error {
	if !fw.raised {
		clear, err := fw.src.ClearIndex(fw.ctx, fw.session)
		if err != nil {
			return err
		}
		fw.raised = true
		if fw.pos < clear-1 {
			fw.pos = clear - 1
		}
	}
	return fw.src.ReadPages(fw.ctx, fw.session, fw.pos, 0, func(page []a2redis.StoredEvent) error {
		return fw.deliver(page, true)
	})
}

// deliver hands events on, split so that a clear marker opens an update of
// its own. The first event must follow the position, or be a clear marker
// (a read that starts at the marker).
func (fw *follower) deliver(events []a2redis.StoredEvent, caughtUp bool) error {
	for len(events) > 0 && events[0].Index <= fw.pos {
		events = events[1:]
	}
	if len(events) == 0 {
		return nil
	}
	if first := events[0]; first.Index != fw.pos+1 && first.Type != a2redis.ClearEventType {
		return fmt.Errorf("%w: session %q: the feed is at %d, the next event read is %d", a2redis.ErrRangeGap, fw.session, fw.pos, first.Index)
	}
	for len(events) > 0 {
		end := 1
		for end < len(events) && events[end].Type != a2redis.ClearEventType {
			end++
		}
		u := Update{Events: events[:end:end], CaughtUp: caughtUp}
		if events[0].Type == a2redis.ClearEventType {
			u.Cleared = events[0].Index
		}
		if err := fw.fn(u); err != nil {
			return userError{err}
		}
		fw.pos = events[end-1].Index
		events = events[end:]
	}
	return nil
}

// transient reports an error a retry may fix: not a Redis error reply, not
// an a2redis error, not the end of ctx.
func transient(err error) bool {
	if asRedisErr(err) != nil {
		return false
	}
	for _, permanent := range []error{
		context.Canceled, context.DeadlineExceeded,
		a2redis.ErrRangeGap, a2redis.ErrInvalidArgument, a2redis.ErrUnexpectedReply,
		a2redis.ErrLayoutMismatch, a2redis.ErrNoEvent,
	} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}

package notify

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// DefaultFollowTTL is how long a session stays marked followed after a
// watch last refreshed its mark; a watch refreshes it every quarter of that.
const DefaultFollowTTL = time.Minute

// WatchOptions configure a SessionWatcher. The zero value is ready to use.
type WatchOptions struct {
	// SubscriberOptions configure the subscriptions; their Sharded is
	// set from the store's Config.ShardedPubSub.
	SubscriberOptions
	// FollowTTL is how long a watched session's followed mark
	// (keys.Session.Followed) outlives its last refresh; a watch refreshes
	// it every FollowTTL/4. Default DefaultFollowTTL.
	FollowTTL time.Duration
}

// SessionWatcher follows sessions' notify channels (keys.Session.
// NotifyChannel). A store publishes a plain append's wake-up only while
// the session is marked followed (keys.Session.Followed), so that appends
// to sessions nobody follows cost no PUBLISH; a watch keeps the mark set.
// Feed uses it; use it directly to be woken without reading events (a
// claim loop woken by new work). A plain Subscriber on a notify channel
// gets only the wake-ups that someone else's watch or feed caused. It is
// safe for concurrent use.
type SessionWatcher struct {
	client rueidis.Client
	sub    *Subscriber
	prefix string
	ttl    time.Duration
}

// NewSessionWatcher returns a watcher of the notify channels of the
// store's sessions, subscribing through the store's client in its publish
// mode: opts.Sharded is the store's Config.ShardedPubSub.
func NewSessionWatcher(store *redisstore.Store, opts WatchOptions) *SessionWatcher {
	if opts.FollowTTL <= 0 {
		opts.FollowTTL = DefaultFollowTTL
	}
	opts.Sharded = store.ShardedPubSub()
	client := store.Client()
	return &SessionWatcher{client: client, sub: NewSubscriber(client, opts.SubscriberOptions), prefix: store.Prefix(), ttl: opts.FollowTTL}
}

// Watch marks the session followed, subscribes to its notify channel and
// calls fn with every notice, one at a time, on the calling goroutine, as
// Subscriber.Subscribe does, until ctx ends (it returns ctx.Err()), fn
// returns an error (returned), or the server refuses the subscription or
// the mark (returned). The mark is set before the subscription, and
// refreshed every FollowTTL/4 while Watch runs: a write that commits
// before the mark does not publish, but the read you make after
// NoticeSubscribed sees it; one that commits after it publishes. When a
// refresh finds that the mark may have lapsed (it was gone, or the last
// refresh is more than FollowTTL old: the process stalled or Redis was out
// of reach), wake-ups may have been skipped meanwhile, and fn gets a
// NoticeOverflow: read what you missed, as after an overflow. A
// resubscription (NoticeSubscribed with Resubscribed) sets the mark again
// before fn sees it.
func (w *SessionWatcher) Watch(ctx context.Context, session string, fn func(Notice) error) error {
	if w.client == nil {
		return check.Invalid("client", "is nil")
	}
	if session == "" {
		return check.Invalid("session", "is empty")
	}
	if fn == nil {
		return check.Invalid("fn", "is nil")
	}
	if err := keys.ValidatePrefix(w.prefix); err != nil {
		return check.Invalid("prefix", "%v", err)
	}
	k := keys.For(w.prefix, session)
	channel := k.NotifyChannel()
	m := &mark{client: w.client, key: k.Followed(), ttl: w.ttl, opts: w.sub.opts}
	if err := m.first(ctx); err != nil {
		return err
	}
	handle := func(n Notice) error {
		if n.Kind == NoticeSubscribed && n.Resubscribed {
			// The server may have restarted or failed over and lost the
			// mark: set it again before the read this notice calls for.
			// (If that fails, the next refresh finds the mark lapsed.)
			_, _ = m.refresh(ctx)
		}
		return fn(n)
	}
	return w.sub.subscribe(ctx, channel, handle, func(ctx context.Context, q *queue) {
		m.keep(ctx, func() { q.push(Notice{Kind: NoticeOverflow, Channel: channel}) })
	})
}

// mark is one watch's followed mark.
type mark struct {
	client rueidis.Client
	key    string
	ttl    time.Duration
	opts   SubscriberOptions

	mu sync.Mutex // serializes refreshes
	// sent is when the last successful refresh was sent: the mark lasts
	// at least until sent + ttl.
	sent time.Time
	// now is the refreshes' clock: time.Now when nil (a test sets its own).
	now func() time.Time
}

// refresh sets the mark and reports whether it may have lapsed since the
// last refresh: it was gone, or this refresh completed more than ttl after
// the last one was sent (a request sent at time t that succeeds sets the
// mark until at least t + ttl).
func (m *mark) refresh(ctx context.Context) (lapsed bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, now := m.client, m.now
	if now == nil {
		now = time.Now
	}
	sent := now()
	err = c.Do(ctx, c.B().Set().Key(m.key).Value("1").Get().Px(m.ttl).Build()).Error()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false, err
	}
	lapsed = err != nil || now().Sub(m.sent) >= m.ttl
	m.sent = sent
	return lapsed, nil
}

// first sets the mark before the subscription, retrying transport errors
// with backoff while ctx lasts; a Redis error reply is returned.
func (m *mark) first(ctx context.Context) error {
	backoff := m.opts.MinBackoff
	for {
		_, err := m.refresh(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if asRedisErr(err) != nil {
			return fmt.Errorf("notify: marking session followed: %w", err)
		}
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, m.opts.MaxBackoff)
	}
}

// keep refreshes the mark every ttl/4 until ctx ends, and calls lapsed
// after a refresh that finds it may have lapsed. Failed refreshes are
// retried with backoff.
func (m *mark) keep(ctx context.Context, lapsed func()) {
	wait, backoff := m.ttl/4, m.opts.MinBackoff
	for sleep(ctx, wait) {
		gone, err := m.refresh(ctx)
		if err != nil {
			wait, backoff = min(backoff, m.ttl/4), min(2*backoff, m.opts.MaxBackoff)
			continue
		}
		wait, backoff = m.ttl/4, m.opts.MinBackoff
		if gone {
			lapsed()
		}
	}
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

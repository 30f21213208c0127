package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/check"
)

// Defaults of SubscriberOptions.
const (
	DefaultQueueLimit = 1024
	DefaultMinBackoff = 20 * time.Millisecond
	DefaultMaxBackoff = time.Second
)

// NoticeKind tells the notices of a subscription apart.
type NoticeKind int

// The notice kinds.
const (
	// NoticeSubscribed: the server confirmed the subscription on a new
	// connection. Messages published before it were not received; after a
	// reconnect (Resubscribed) that is a gap to fill by reading.
	NoticeSubscribed NoticeKind = iota + 1
	// NoticeMessage: a message published on the channel.
	NoticeMessage
	// NoticeOverflow: the handler fell behind, and messages received while
	// QueueLimit notices were waiting were dropped. Fill the gap by
	// reading; the subscription goes on.
	NoticeOverflow
	// NoticeDisconnected: the subscription's connection dropped (Err says why,
	// nil when the server ended the subscription, e.g. a sharded channel's
	// slot moved). The subscriber reconnects with backoff; a NoticeSubscribed
	// notice with Resubscribed follows once it is back.
	NoticeDisconnected
)

// String returns the kind's name.
func (k NoticeKind) String() string {
	switch k {
	case NoticeSubscribed:
		return "subscribed"
	case NoticeMessage:
		return "message"
	case NoticeOverflow:
		return "overflow"
	case NoticeDisconnected:
		return "disconnected"
	}
	return fmt.Sprintf("NoticeKind(%d)", int(k))
}

// Notice is one thing a subscription reports, in the order it happened.
type Notice struct {
	// Kind is what happened.
	Kind NoticeKind
	// Channel is the subscribed channel.
	Channel string
	// Payload is the message (NoticeMessage only).
	Payload []byte
	// Resubscribed reports a NoticeSubscribed notice after the first: messages
	// published while the subscriber was away were lost.
	Resubscribed bool
	// Err is why the connection dropped (NoticeDisconnected only; may be nil).
	Err error
}

// SubscriberOptions configure a Subscriber. The zero value is ready to use.
type SubscriberOptions struct {
	// Sharded subscribes with SSUBSCRIBE (Redis 7 sharded pub/sub), for
	// messages sent with SPUBLISH (redisstore.Config.ShardedPubSub). On a
	// cluster a sharded message travels only within the shard that owns
	// the channel's slot, instead of being broadcast over the cluster bus
	// to every node, so pub/sub scales with the shards; the price is that
	// publisher and subscriber must agree on the mode, the connection is
	// tied to the slot's node (a slot migration or failover ends the
	// subscription, and the subscriber reconnects and reports the gap),
	// and servers without sharded pub/sub (miniredis, Redis < 7) refuse
	// it. Default false: SUBSCRIBE, which works everywhere.
	Sharded bool
	// QueueLimit is how many notices may wait for a slow handler before
	// further messages are dropped and reported as one NoticeOverflow notice.
	// Default 1024.
	QueueLimit int
	// MinBackoff is the first wait before reconnecting after a dropped
	// connection or a failed attempt. Default 20ms.
	MinBackoff time.Duration
	// MaxBackoff caps the wait between reconnect attempts, which doubles
	// after each failed attempt. Default 1s.
	MaxBackoff time.Duration
}

// Subscriber receives the messages of a channel on a dedicated connection
// and survives reconnects: after a dropped connection it subscribes again on
// a new one and reports the gap, so a reader knows to catch up. Messages
// published while it was away are lost (pub/sub keeps nothing). It is safe
// for concurrent use; each Subscribe has a connection of its own.
//
// The connection is dedicated (rueidis Client.Dedicate) rather than the
// client's shared pipeline: a RESP3 subscription on the shared connection
// breaks every other command on miniredis, and a dedicated one can be
// closed when the subscription ends, so no subscribed connection ever goes
// back to the pool.
type Subscriber struct {
	client rueidis.Client
	opts   SubscriberOptions
	// received, when set (tests only), is called with each message read
	// from the connection, before it is queued or dropped.
	received func(Notice)
}

// NewSubscriber returns a subscriber on client.
func NewSubscriber(client rueidis.Client, opts SubscriberOptions) *Subscriber {
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = DefaultQueueLimit
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	return &Subscriber{client: client, opts: opts}
}

// Subscribe subscribes to channel and calls fn with every notice, one at a
// time, in order, on the calling goroutine, until ctx ends (it returns
// ctx.Err()), fn returns an error (returned), or the server refuses the
// subscription (a Redis error reply other than a transient one such as
// LOADING, returned). Transport errors are retried with backoff forever:
// bound ctx to give up. fn may block; notices wait for it (see QueueLimit).
// The first notice is NoticeSubscribed: read what you missed after it, not
// before, so nothing published in between is lost.
func (s *Subscriber) Subscribe(ctx context.Context, channel string, fn func(Notice) error) error {
	return s.subscribe(ctx, channel, fn, nil)
}

// subscribe is Subscribe, with beside, when not nil, running in a
// goroutine of its own for as long as the subscription lasts; it may push
// notices of its own onto the subscription's queue.
func (s *Subscriber) subscribe(ctx context.Context, channel string, fn func(Notice) error, beside func(context.Context, *queue)) error {
	if s.client == nil {
		return check.Invalid("client", "is nil")
	}
	if channel == "" {
		return check.Invalid("channel", "is empty")
	}
	if fn == nil {
		return check.Invalid("fn", "is nil")
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := newQueue(s.opts.QueueLimit)
	pumped := make(chan error, 1)
	go func() { pumped <- s.pumpRecovered(ctx, channel, q) }()
	if beside != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			beside(ctx, q)
		}()
		defer func() {
			cancel()
			<-done
		}()
	}
	stop := func(err error) error {
		cancel()
		<-pumped
		return err
	}
	for {
		select {
		case <-parent.Done():
			return stop(parent.Err())
		case err := <-pumped:
			return err
		case <-q.wake:
			for _, n := range q.take() {
				if err := parent.Err(); err != nil {
					return stop(err)
				}
				if err := fn(n); err != nil {
					return stop(err)
				}
			}
		}
	}
}

// pumpRecovered is pump on its own goroutine: a panic under it (in the
// client) ends the subscription with an error instead of the process.
func (s *Subscriber) pumpRecovered(ctx context.Context, channel string, q *queue) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("notify: reading channel %q panicked: %v", channel, p)
		}
	}()
	return s.pump(ctx, channel, q)
}

// pump keeps one subscription alive, connection after connection, and
// queues what it receives. It returns when ctx ends or the server refuses
// the subscription.
func (s *Subscriber) pump(ctx context.Context, channel string, q *queue) error {
	backoff := s.opts.MinBackoff
	var confirmed atomic.Int64 // subscriptions confirmed so far
	for {
		var live atomic.Bool
		// The hook runs on the connection's reader goroutine, before any
		// message that follows the confirmation: it must not block.
		hooked := rueidis.WithOnSubscriptionHook(ctx, func(sub rueidis.PubSubSubscription) {
			if (sub.Kind != "subscribe" && sub.Kind != "ssubscribe") || sub.Channel != channel || live.Load() {
				return
			}
			live.Store(true)
			n := confirmed.Add(1)
			q.push(Notice{Kind: NoticeSubscribed, Channel: channel, Resubscribed: n > 1})
		})
		conn, release := s.client.Dedicate()
		cmd := conn.B().Subscribe().Channel(channel).Build()
		if s.opts.Sharded {
			cmd = conn.B().Ssubscribe().Channel(channel).Build()
		}
		err := conn.Receive(hooked, cmd, func(m rueidis.PubSubMessage) {
			n := Notice{Kind: NoticeMessage, Channel: channel, Payload: []byte(m.Message)}
			if s.received != nil {
				s.received(n)
			}
			q.push(n)
		})
		// Close the connection rather than hand a subscribed one back to
		// the pool; a new subscription gets a new connection.
		conn.Close()
		release()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if refused(err) {
			return fmt.Errorf("notify: subscribing to %q: %w", channel, err)
		}
		if live.Load() {
			q.push(Notice{Kind: NoticeDisconnected, Channel: channel, Err: err})
			backoff = s.opts.MinBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
}

// refused reports a Redis error reply that retrying will not fix.
func refused(err error) bool {
	rerr := asRedisErr(err)
	if rerr == nil {
		return false
	}
	if _, moved := rerr.IsMoved(); moved {
		return false
	}
	if _, ask := rerr.IsAsk(); ask {
		return false
	}
	return !rerr.IsLoading() && !rerr.IsClusterDown() && !rerr.IsTryAgain()
}

// asRedisErr returns the Redis error reply err wraps, or nil
// (rueidis.IsRedisErr does not look through wrapping).
func asRedisErr(err error) *rueidis.RedisError {
	var rerr *rueidis.RedisError
	if errors.As(err, &rerr) && rerr != rueidis.Nil {
		return rerr
	}
	return nil
}

// queue holds notices between the connection and the handler. Subscription
// notices always fit; messages beyond the limit are dropped and reported by
// one NoticeOverflow notice until the handler takes the queue.
type queue struct {
	mu       sync.Mutex
	items    []Notice
	limit    int
	overflow bool
	wake     chan struct{}
}

func newQueue(limit int) *queue {
	return &queue{limit: limit, wake: make(chan struct{}, 1)}
}

func (q *queue) push(n Notice) {
	q.mu.Lock()
	switch {
	case n.Kind == NoticeMessage && q.overflow:
		q.mu.Unlock()
		return
	case n.Kind == NoticeMessage && len(q.items) >= q.limit:
		q.overflow = true
		n = Notice{Kind: NoticeOverflow, Channel: n.Channel}
	}
	q.items = append(q.items, n)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) take() []Notice {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items, q.overflow = nil, false
	return items
}

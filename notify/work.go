package notify

import (
	"context"
	"errors"
	"sync"

	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// WorkNotice is one thing a work watch reports.
type WorkNotice struct {
	// Shard is the ready-index shard the notice concerns.
	Shard int
	// Session, when set, is a session that got work claimable now (a new
	// head, a lane's next head freed by a completion, a redrive, a
	// release, a retry hold or a lease that was given back).
	Session string
	// Gap reports that announcements of the shard may have been missed
	// (the subscription (re)started, or the handler fell behind), or that
	// work became claimable that no session announcement names (a paused
	// consumer resumed). Read the shard's index instead of waiting (name
	// the shard in redisstore.ClaimNextRequest.Shards).
	Gap bool
}

// WorkWatcher follows the work channels of every shard of a prefix's
// ready index (keys.Ready.WorkChannel), each on a subscription that
// survives reconnects. Holds and lease expiries are not announced: they
// come from the index itself, whose earliest time is the next timer
// (redisstore.ClaimNextResult.NextAt).
type WorkWatcher struct {
	sub    *Subscriber
	prefix string
	shards int
}

// NewWorkWatcher returns a watcher of the work channels of the store's
// ready index (its prefix and redisstore.Store.ReadyShards), subscribing
// through the store's client in its publish mode: opts.Sharded is the
// store's Config.ShardedPubSub.
func NewWorkWatcher(store *redisstore.Store, opts SubscriberOptions) *WorkWatcher {
	opts.Sharded = store.ShardedPubSub()
	return &WorkWatcher{sub: NewSubscriber(store.Client(), opts), prefix: store.Prefix(), shards: store.ReadyShards()}
}

// Watch subscribes to every shard's work channel and calls fn with each
// notice, one at a time, until ctx ends (it returns ctx.Err()), fn returns
// an error (returned), or the server refuses a subscription (returned).
// Every shard first reports a Gap once subscribed: read the index then,
// not before, so that no announcement between the read and the
// subscription is lost.
func (w *WorkWatcher) Watch(ctx context.Context, fn func(WorkNotice) error) error {
	if w.shards < 1 {
		return errors.New("notify: a work watch needs at least one shard")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		first   error
		wg      sync.WaitGroup
		deliver sync.Mutex // fn runs one notice at a time
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for shard := 0; shard < w.shards; shard++ {
		channel := keys.ReadyFor(w.prefix, shard).WorkChannel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.sub.Subscribe(ctx, channel, func(n Notice) error {
				var wn WorkNotice
				switch n.Kind {
				case NoticeSubscribed, NoticeOverflow:
					wn = WorkNotice{Shard: shard, Gap: true}
				case NoticeMessage:
					// An empty announcement (a consumer resumed: no session
					// names its work) asks for a read of the index.
					wn = WorkNotice{Shard: shard, Session: string(n.Payload), Gap: len(n.Payload) == 0}
				default:
					return nil
				}
				deliver.Lock()
				defer deliver.Unlock()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fn(wn)
			})
			if err != nil && ctx.Err() == nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		return first
	}
	return ctx.Err()
}

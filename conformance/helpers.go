package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// ---------------------------------------------------------------------------
// Failing with context.

func (e *env) fatalf(format string, a ...any) {
	e.t.Helper()
	e.t.Fatalf(format, a...)
}

func (e *env) no(err error, what string, a ...any) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", fmt.Sprintf(what, a...), err)
	}
}

func (e *env) is(err, target error, what string, a ...any) {
	e.t.Helper()
	if !errors.Is(err, target) {
		e.t.Fatalf("%s: got error %v, want one matching %v", fmt.Sprintf(what, a...), err, target)
	}
}

func (e *env) eq(got, want any, what string, a ...any) {
	e.t.Helper()
	g, w := render(got), render(want)
	if g != w {
		e.t.Fatalf("%s:\n got: %s\nwant: %s", fmt.Sprintf(what, a...), g, w)
	}
}

func (e *env) check(ok bool, what string, a ...any) {
	e.t.Helper()
	if !ok {
		e.t.Fatalf(what, a...)
	}
}

// render prints a value for comparison: JSON with times as epoch
// milliseconds, so equal instants compare equal whatever their location.
func render(v any) string {
	b, err := json.Marshal(normalize(v))
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Building requests.

func ev(typ string, targets ...a2redis.Target) a2redis.Event {
	return a2redis.Event{Type: typ, Targets: targets}
}

func evID(id, typ string, targets ...a2redis.Target) a2redis.Event {
	return a2redis.Event{ID: id, Type: typ, Targets: targets}
}

func to(consumer string) a2redis.Target { return a2redis.Target{Consumer: consumer} }

func lane(consumer, lane string) a2redis.Target {
	return a2redis.Target{Consumer: consumer, Lane: lane}
}

func logc(name, lane string, backfill bool, types ...string) a2redis.Consumer {
	return a2redis.Consumer{Name: name, Log: &a2redis.LogSpec{Lane: lane, Types: types, Backfill: backfill}}
}

func (e *env) append(session string, events ...a2redis.Event) redisstore.AppendResult {
	e.t.Helper()
	r, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
	e.no(err, "append to %q", session)
	return r
}

func (e *env) appendServed(session string, consumers []a2redis.Consumer, events ...a2redis.Event) redisstore.AppendResult {
	e.t.Helper()
	r, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{Consumers: consumers})
	e.no(err, "append to %q", session)
	return r
}

func (e *env) appendN(session string, n int, mk func(i int) a2redis.Event) []a2redis.StoredEvent {
	e.t.Helper()
	var stored []a2redis.StoredEvent
	for first := 0; first < n; first += redisstore.DefaultMaxBatch {
		batch := make([]a2redis.Event, min(redisstore.DefaultMaxBatch, n-first))
		for i := range batch {
			batch[i] = mk(first + i)
		}
		stored = append(stored, e.append(session, batch...).Events...)
	}
	return stored
}

func (e *env) claim(req redisstore.ClaimRequest) redisstore.ClaimResult {
	e.t.Helper()
	if req.Session == "" {
		req.Session = "s"
	}
	if req.Holder == "" {
		req.Holder = "w1"
	}
	if req.TTL == 0 && req.ExpiresAt.IsZero() {
		req.TTL = time.Minute
	}
	r, err := e.store.ClaimAvailable(e.ctx, req)
	e.no(err, "claim %+v", req)
	return r
}

func (e *env) complete(h a2redis.HeadEvent, events ...a2redis.Event) redisstore.CompleteResult {
	e.t.Helper()
	r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: h.Session, Head: h.Ref(), Attempt: h.Attempts, Events: events})
	e.no(err, "complete %s", refOf(h.Ref()))
	return r
}

func (e *env) fail(h a2redis.HeadEvent, maxFailures int, retryAfter time.Duration) redisstore.FailResult {
	e.t.Helper()
	r, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: h.Session, Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: maxFailures, RetryAfter: retryAfter})
	e.no(err, "fail %s", refOf(h.Ref()))
	return r
}

func (e *env) read(session string) []a2redis.StoredEvent {
	e.t.Helper()
	got, err := e.store.Read(e.ctx, session, 0, 0)
	e.no(err, "read %q", session)
	return got
}

func (e *env) bounds(session string) redisstore.Bounds {
	e.t.Helper()
	b, err := e.store.Bounds(e.ctx, session)
	e.no(err, "bounds of %q", session)
	return b
}

func (e *env) cursors(session string) []a2redis.Cursor {
	e.t.Helper()
	c, err := e.store.Cursors(e.ctx, session)
	e.no(err, "cursors of %q", session)
	return c
}

func (e *env) clearSession(session string) redisstore.ClearResult {
	e.t.Helper()
	r, err := e.store.Clear(e.ctx, session, redisstore.ClearOptions{})
	e.no(err, "clear %q", session)
	return r
}

// ---------------------------------------------------------------------------
// Rendering heads and indexes compactly.

func refOf(r a2redis.HeadRef) string {
	if r.Lane == "" {
		return fmt.Sprintf("%s@%d", r.Consumer, r.Index)
	}
	return fmt.Sprintf("%s/%s@%d", r.Consumer, r.Lane, r.Index)
}

func headRefs(heads []a2redis.HeadEvent) []string {
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = refOf(h.Ref())
	}
	return out
}

func indexes(events []a2redis.StoredEvent) []int64 {
	out := make([]int64, len(events))
	for i, ev := range events {
		out[i] = ev.Index
	}
	return out
}

func cursorLines(cs []a2redis.Cursor) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("%s %s/%s pos=%d head=%d att=%d fail=%d dead=%v", c.Kind, c.Consumer, c.Lane, c.Position, c.Head, c.Attempts, c.Failures, c.DeadLettered())
	}
	return out
}

// ---------------------------------------------------------------------------
// Looking at the keys.

// nodes returns a client per node of the target (one for a single server),
// sorted by address.
func nodes(c rueidis.Client) []rueidis.Client {
	byAddr := c.Nodes()
	addrs := make([]string, 0, len(byAddr))
	for a := range byAddr {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	out := make([]rueidis.Client, len(addrs))
	for i, a := range addrs {
		out[i] = byAddr[a]
	}
	return out
}

// sessionKeys returns every key of a session on every node, by node index,
// found by SCAN MATCH on the session's base with the glob characters
// escaped.
func (e *env) sessionKeys(session string) map[int][]string {
	e.t.Helper()
	pattern := keys.EscapeGlob(keys.For(e.prefix, session).Base()) + "*"
	out := map[int][]string{}
	for i, c := range nodes(e.client) {
		var cursor uint64
		for {
			entry, err := c.Do(e.ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			e.no(err, "SCAN %s", pattern)
			out[i] = append(out[i], entry.Elements...)
			if entry.Cursor == 0 {
				break
			}
			cursor = entry.Cursor
		}
		sort.Strings(out[i])
	}
	return out
}

// allSessionKeys flattens sessionKeys, sorted.
func (e *env) allSessionKeys(session string) []string {
	e.t.Helper()
	var out []string
	for _, ks := range e.sessionKeys(session) {
		out = append(out, ks...)
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------------
// Subscriptions.

// subscription receives the messages of one channel on a dedicated
// connection.
type subscription struct {
	mu   sync.Mutex
	msgs [][]byte
	cond chan struct{}
}

// subscribe subscribes to channel (SSUBSCRIBE when sharded) on a dedicated
// connection and returns once the server confirmed the subscription.
func (e *env) subscribe(channel string, sharded bool) *subscription {
	e.t.Helper()
	sub := &subscription{cond: make(chan struct{}, 1)}
	ready := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(e.ctx)
	ctx = rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "subscribe" || s.Kind == "ssubscribe" {
			once.Do(func() { close(ready) })
		}
	})
	dc, release := e.client.Dedicate()
	cmd := dc.B().Subscribe().Channel(channel).Build()
	if sharded {
		cmd = dc.B().Ssubscribe().Channel(channel).Build()
	}
	done := make(chan error, 1)
	go func() {
		done <- dc.Receive(ctx, cmd, func(m rueidis.PubSubMessage) {
			sub.mu.Lock()
			sub.msgs = append(sub.msgs, []byte(m.Message))
			sub.mu.Unlock()
			select {
			case sub.cond <- struct{}{}:
			default:
			}
		})
	}()
	e.t.Cleanup(func() {
		cancel()
		release()
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		e.fatalf("subscribe %q: %v", channel, err)
	case <-time.After(10 * time.Second):
		e.fatalf("subscribe %q: no confirmation within 10s", channel)
	}
	return sub
}

// watch follows session's notify channel through a notify.SessionWatcher
// (which marks the session followed, so that writes publish their
// wake-ups) and returns once the server confirmed the subscription.
func (e *env) watch(session string) *subscription {
	e.t.Helper()
	sub := &subscription{cond: make(chan struct{}, 1)}
	ready := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(e.ctx)
	w := notify.NewSessionWatcher(e.store, notify.WatchOptions{})
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(ctx, session, func(n notify.Notice) error {
			switch n.Kind {
			case notify.NoticeSubscribed:
				once.Do(func() { close(ready) })
			case notify.NoticeMessage:
				sub.mu.Lock()
				sub.msgs = append(sub.msgs, n.Payload)
				sub.mu.Unlock()
				select {
				case sub.cond <- struct{}{}:
				default:
				}
			}
			return nil
		})
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		e.fatalf("watch %q: %v", session, err)
	case <-time.After(10 * time.Second):
		e.fatalf("watch %q: no confirmation within 10s", session)
	}
	return sub
}

// next waits for the n-th message (0-based).
func (s *subscription) next(t *testing.T, n int) []byte {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		s.mu.Lock()
		if len(s.msgs) > n {
			m := s.msgs[n]
			s.mu.Unlock()
			return m
		}
		s.mu.Unlock()
		select {
		case <-s.cond:
		case <-deadline:
			t.Fatalf("no message #%d within 5s", n+1)
		}
	}
}

// count returns how many messages arrived so far.
func (s *subscription) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

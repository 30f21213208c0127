package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/notify"
)

// Plain appends (no causes, no lane targets, no served log consumer) to one
// session coalesce: while a session's line has its rounds in flight, the
// appends that arrive for the same session and served set queue up, and the
// next round — one script call — carries all of them, each batch screened
// and written on its own. An uncontended append is sent at once; a busy
// session pays one script call and one wake-up per round instead of one per
// append.

// Most batches and events one round carries; the largest batch that
// coalesces at all (a larger one already spreads its call's cost over its
// events, and is sent at once); and how many rounds of one line may be in
// flight together (two keep the server busy while a round's reply is being
// handed out).
const (
	coalesceMaxBatches = 256
	coalesceMaxEvents  = 4096
	coalesceBatchLimit = 16
	coalesceInFlight   = 2
)

// plainCall is one plain Append waiting for, or riding in, a round.
type plainCall struct {
	ctx    context.Context
	batch  []prepared
	heads  [][]string // per event, its event-cursor targets' row names
	origin string
	done   chan struct{}
	res    AppendResult
	err    error
}

// plainLine is the queue of one session and served set, and its rounds in
// flight.
type plainLine struct {
	inFlight int
	queue    []*plainCall
}

type coalescer struct {
	mu    sync.Mutex
	lines map[string]*plainLine
}

// appendPlain runs a plain append through its session's line.
func (s *Store) appendPlain(ctx context.Context, session, served string, call *plainCall) (AppendResult, error) {
	if s.cfg.NoCoalescing || len(call.batch) > coalesceBatchLimit {
		s.runPlain(session, served, []*plainCall{call}).send(s)
		return call.res, call.err
	}
	key := session + "\x00" + served
	c := &s.coalesce
	c.mu.Lock()
	if c.lines == nil {
		c.lines = map[string]*plainLine{}
	}
	line := c.lines[key]
	if line == nil {
		line = &plainLine{}
		c.lines[key] = line
	}
	if line.inFlight < coalesceInFlight && len(line.queue) == 0 {
		// Room on the line: this call is a round of its own, sent at once.
		line.inFlight++
		c.mu.Unlock()
		wake := s.runPlain(session, served, []*plainCall{call})
		s.roundDone(session, served, key, line)
		wake.send(s)
		return call.res, call.err
	}
	call.done = make(chan struct{})
	line.queue = append(line.queue, call)
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
		// Still queued: it is dropped and nothing is written. Already
		// taken: its outcome is unknown, as for any call cut short; a
		// retry with the same ids replays or writes it.
		return AppendResult{}, ctx.Err()
	}
}

// roundDone ends a round of the line and starts the rounds its queue now
// has room for, each in a goroutine of its own; an idle line is dropped.
func (s *Store) roundDone(session, served, key string, line *plainLine) {
	c := &s.coalesce
	c.mu.Lock()
	line.inFlight--
	var rounds [][]*plainCall
	for line.inFlight < coalesceInFlight {
		group := takeRound(line)
		if group == nil {
			break
		}
		line.inFlight++
		rounds = append(rounds, group)
	}
	if line.inFlight == 0 && len(line.queue) == 0 && c.lines[key] == line {
		delete(c.lines, key)
	}
	c.mu.Unlock()
	for _, group := range rounds {
		go func() {
			wake := s.runPlain(session, served, group)
			s.roundDone(session, served, key, line)
			// The callers return once their wake-up is out, as an
			// uncoalesced append does; the next round need not wait.
			wake.send(s)
			for _, call := range group {
				close(call.done)
			}
		}()
	}
}

// takeRound takes the next round's calls off the line's queue, dropping
// unsent the ones whose context already ended; nil when none is left. The
// coalescer's lock is held.
func takeRound(line *plainLine) []*plainCall {
	var group []*plainCall
	events := 0
	rest := line.queue[:0]
	for _, call := range line.queue {
		switch {
		case call.ctx.Err() != nil:
			call.err = call.ctx.Err()
			close(call.done)
		case len(group) < coalesceMaxBatches && (len(group) == 0 || events+len(call.batch) <= coalesceMaxEvents):
			group = append(group, call)
			events += len(call.batch)
		default:
			rest = append(rest, call)
		}
	}
	clear(line.queue[len(rest):])
	line.queue = rest
	return group
}

// wakeUp is the wake-up a committed round owes its session: a message, or
// none.
type wakeUp struct {
	ctx     context.Context
	session string
	message []byte
}

func (w wakeUp) send(s *Store) {
	if w.message != nil {
		s.publish(w.ctx, w.session, w.message)
	}
}

// runPlain sends one append_plain call for the group's batches, hands each
// call its result and returns the wake-up to publish. The call runs under a
// context that outlives any one caller: it ends at the latest deadline
// among them, or never.
func (s *Store) runPlain(session, served string, group []*plainCall) wakeUp {
	ctx := group[0].ctx
	if len(group) > 1 {
		var cancel context.CancelFunc
		ctx, cancel = groupContext(group)
		defer cancel()
	}
	now := s.now()
	size := 3
	for _, call := range group {
		size += 2 + 4*len(call.batch)
		for _, h := range call.heads {
			size += len(h)
		}
	}
	args := make([]string, 0, size)
	args = append(args, itoa(now), served, itoa(int64(len(group))))
	for _, call := range group {
		args = append(args, itoa(int64(len(call.batch))), call.origin)
		for i, e := range call.batch {
			args = append(args, e.id, e.typ, string(e.payload), itoa(int64(len(call.heads[i]))))
			args = append(args, call.heads[i]...)
		}
	}
	reply, err := s.run(ctx, "append_plain", session, args)
	if err == nil && len(reply) != len(group)+1 {
		err = fmt.Errorf("%w: append_plain replied %d outcomes for %d batches", a2redis.ErrUnexpectedReply, len(reply)-1, len(group))
	}
	if err != nil {
		for _, call := range group {
			call.err = err
		}
		return wakeUp{}
	}
	pending := word(reply, 0) == "1"
	var entries []notify.Entry
	var head, replayed int64
	for i, call := range group {
		if first, err := reply[i+1].AsInt64(); err == nil && reply[i+1].IsInt64() {
			stored := make([]a2redis.StoredEvent, len(call.batch))
			for j, e := range call.batch {
				stored[j] = e.stored(session, first+int64(j), now, nil)
			}
			call.res, call.err = AppendResult{Events: stored, HasPending: pending}, nil
		} else if outcome, err := reply[i+1].ToArray(); err != nil {
			call.err = fmt.Errorf("%w: append_plain replied %v", a2redis.ErrUnexpectedReply, reply[i+1])
			continue
		} else {
			call.res, call.err = s.plainOutcome(session, call, now, pending, outcome)
		}
		if call.err != nil {
			continue
		}
		for _, ev := range call.res.Events {
			if call.res.Replayed {
				replayed = max(replayed, ev.Index)
				continue
			}
			entries = append(entries, notify.Entry{Index: ev.Index, ID: ev.ID, Type: ev.Type, Payload: ev.Payload})
			head = max(head, ev.Index)
		}
	}
	// The publish outlives the round's context (see publishOn).
	wake := wakeUp{ctx: context.WithoutCancel(ctx), session: session}
	switch {
	case len(entries) > 0:
		wake.message = notify.Encode(head, now, entries)
	case replayed > 0:
		// A replayed batch's first try may have committed without its
		// wake-up.
		wake.message = notify.EncodeBare(replayed)
	}
	return wake
}

// plainOutcome decodes one batch's outcome of append_plain other than an
// append (which is just the batch's first index).
func (s *Store) plainOutcome(session string, call *plainCall, now int64, pending bool, outcome []rueidis.RedisMessage) (AppendResult, error) {
	switch word(outcome, 0) {
	case "empty":
		return AppendResult{Events: []a2redis.StoredEvent{}, HasPending: pending}, nil
	case "dup":
		stored := make([]a2redis.StoredEvent, 0, len(call.batch))
		for _, m := range outcome[1:] {
			ev, err := entry(session, m)
			if err != nil {
				return AppendResult{}, err
			}
			stored = append(stored, ev)
		}
		if len(stored) != len(call.batch) {
			return AppendResult{}, fmt.Errorf("%w: append replayed %d of %d events", a2redis.ErrUnexpectedReply, len(stored), len(call.batch))
		}
		return AppendResult{Events: stored, Replayed: true, HasPending: pending}, nil
	case "partial":
		return AppendResult{}, errorf(a2redis.ErrPartialDuplicateBatch, session, "%s of %d event ids are already stored", word(outcome, 1), len(call.batch))
	case "cleared":
		return AppendResult{}, errorf(a2redis.ErrSessionCleared, session, "scheduled work from event %s was cleared", word(outcome, 1))
	}
	return AppendResult{}, fmt.Errorf("%w: append_plain replied %v", a2redis.ErrUnexpectedReply, outcome)
}

// groupContext is the context of a coalesced call: no caller's cancellation
// ends it, and it lasts until the latest deadline among the callers (none
// when one has none).
func groupContext(group []*plainCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, call := range group {
		deadline, ok := call.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(call.ctx))
		}
		if deadline.After(latest) {
			latest = deadline
		}
	}
	return context.WithDeadline(context.WithoutCancel(group[0].ctx), latest)
}

package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/wire"
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
	coalesceMaxEvents  = a2redis.MaxBatch
	// coalesceMaxTargets bounds a round's heads as one batch's are (a round
	// is one script call, held to what one accepted batch may cost).
	coalesceMaxTargets = a2redis.MaxBatchTargets
	coalesceBatchLimit = 16
	coalesceInFlight   = 2
)

// plainCall is one plain Append waiting for, or riding in, a round.
type plainCall struct {
	ctx    context.Context
	batch  []prepared
	heads  [][]string // per event, its event-cursor targets' row names
	origin string
	nonce  string // the batch's id nonce when every id is generated
	done   chan struct{}
	res    AppendResult
	err    error
}

// targets is how many heads the call's events write.
func (c *plainCall) targets() int {
	n := 0
	for _, h := range c.heads {
		n += len(h)
	}
	return n
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
		s.runRound(session, served, []*plainCall{call}).send(s)
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
		wake := s.runRound(session, served, []*plainCall{call})
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
		return AppendResult{}, writeError(session, call.batch, ctx.Err())
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
			wake := s.runRound(session, served, group)
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
	events, targets := 0, 0
	rest := line.queue[:0]
	for _, call := range line.queue {
		n := call.targets()
		switch {
		case call.ctx.Err() != nil:
			call.err = call.ctx.Err()
			close(call.done)
		case len(group) < coalesceMaxBatches && (len(group) == 0 ||
			events+len(call.batch) <= coalesceMaxEvents && targets+n <= coalesceMaxTargets):
			group = append(group, call)
			events += len(call.batch)
			targets += n
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
	ctx context.Context
	// deadline is the round's deadline (zero for none), which ctx no
	// longer carries: the publish does not hold a caller past it.
	deadline time.Time
	session  string
	message  []byte
}

// send publishes the wake-up. It runs on the coalescer's goroutines too,
// so a panic is recovered: the appends are committed, and a lost wake-up
// only delays a reader until its next read.
func (w wakeUp) send(s *Store) {
	if w.message == nil {
		return
	}
	defer func() { _ = recover() }()
	s.publishFor(w.ctx, w.deadline, w.session, w.message)
}

// runRound is runPlain that never lets a panic escape (it would end the
// process from a coalescer goroutine, or leave the line's round counted in
// flight for ever): every call of the group gets an error instead, a
// *a2redis.BatchError with its ids, since the round may have committed.
func (s *Store) runRound(session, served string, group []*plainCall) (wake wakeUp) {
	defer func() {
		if p := recover(); p != nil {
			err := panicError("append round", p)
			for _, call := range group {
				call.res, call.err = AppendResult{}, writeError(session, call.batch, err)
			}
			wake = wakeUp{}
		}
	}()
	return s.runPlain(session, served, group)
}

// panicError is the error a recovered panic in what becomes: its outcome
// is unknown, like a lost reply's.
func panicError(what string, p any) error {
	if err, ok := p.(error); ok {
		return fmt.Errorf("a2redis: the store's %s panicked, its outcome is unknown: %w", what, err)
	}
	return fmt.Errorf("a2redis: the store's %s panicked, its outcome is unknown: %v", what, p)
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
	if len(group) == 1 && len(group[0].batch) == 1 {
		return s.runOne(ctx, session, served, group[0])
	}
	now := s.now()
	size := 3
	for _, call := range group {
		size += 4 + 4*len(call.batch)
		for _, h := range call.heads {
			size += len(h)
		}
	}
	args := make([]string, 0, size)
	args = append(args, itoa(now), served, itoa(int64(len(group))))
	for _, call := range group {
		targeted := "0"
		for _, h := range call.heads {
			if len(h) > 0 {
				targeted = "1"
				break
			}
		}
		args = append(args, itoa(int64(len(call.batch))), call.origin, call.nonce, targeted)
		for i, e := range call.batch {
			if call.nonce == "" {
				args = append(args, e.id)
			}
			args = append(args, e.typ, string(e.payload))
			if targeted == "1" {
				args = append(args, itoa(int64(len(call.heads[i]))))
				args = append(args, call.heads[i]...)
			}
		}
	}
	reply, err := s.run(ctx, "append_plain", session, args)
	if err == nil && len(reply) != len(group)+1 {
		err = fmt.Errorf("%w: append_plain replied %d outcomes for %d batches", a2redis.ErrUnexpectedReply, len(reply)-1, len(group))
	}
	if err != nil {
		for _, call := range group {
			call.err = writeError(session, call.batch, err)
		}
		return wakeUp{}
	}
	bits, err := number(reply, 0)
	if err != nil {
		for _, call := range group {
			call.err = err
		}
		return wakeUp{}
	}
	pending := bits&1 == 1
	var written []a2redis.StoredEvent
	var replayed int64
	for i, call := range group {
		call.res, call.err = plainOutcome(session, call, now, pending, reply[i+1])
		switch {
		case call.err != nil:
		case call.res.Replayed:
			replayed = max(replayed, lastIndex(call.res.Events))
		default:
			written = append(written, call.res.Events...)
		}
	}
	if bits&2 == 0 {
		// No reader follows the session: nobody to wake (one that starts
		// following later reads what it missed after subscribing).
		return wakeUp{}
	}
	// The publish outlives the round's context (see publishOn).
	deadline, _ := ctx.Deadline()
	wake := wakeUp{ctx: context.WithoutCancel(ctx), deadline: deadline, session: session}
	switch {
	case len(written) > 0:
		wake.message = wire.Encode(lastIndex(written), now, wakeEntries(written))
	case replayed > 0:
		// A replayed batch's first try may have committed without its
		// wake-up.
		wake.message = wire.EncodeBare(replayed)
	}
	return wake
}

// plainOutcome decodes one batch's outcome of append_plain: its first
// index when it was appended, else a list ("empty", "dup" with the stored
// entries, "partial" or "cleared").
func plainOutcome(session string, call *plainCall, now int64, pending bool, m rueidis.RedisMessage) (AppendResult, error) {
	if first, err := m.AsInt64(); err == nil && m.IsInt64() {
		return AppendResult{Events: appendedEvents(session, call.batch, first, now, nil), HasPending: pending}, nil
	}
	outcome, err := m.ToArray()
	if err != nil {
		return AppendResult{}, fmt.Errorf("%w: append_plain replied %v", a2redis.ErrUnexpectedReply, m)
	}
	switch w := word(outcome, 0); w {
	case "empty":
		return AppendResult{Events: []a2redis.StoredEvent{}, HasPending: pending}, nil
	case "dup":
		stored, err := replayedEvents(session, call.batch, outcome[1:])
		if err != nil {
			return AppendResult{}, err
		}
		return AppendResult{Events: stored, Replayed: true, HasPending: pending}, nil
	case "partial", "cleared":
		return AppendResult{}, refusedBatch(session, w, word(outcome, 1), len(call.batch))
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

// runOne sends a lone batch of one event through append_one, or
// append_targeted when it targets event cursors (scripts for just those
// cases, replying a single integer when they append), hands the call its
// result and returns the wake-up to publish.
func (s *Store) runOne(ctx context.Context, session, served string, call *plainCall) wakeUp {
	now := s.now()
	e := call.batch[0]
	block := ""
	if call.nonce == "" && generatedShape(e.id) {
		block = e.id[:24]
	}
	script := "append_one"
	args := append(make([]string, 0, 7+len(call.heads[0])), itoa(now), e.id, e.typ, string(e.payload), call.origin, served, block)
	if len(call.heads[0]) > 0 {
		script = "append_targeted"
		args = append(args, call.heads[0]...)
	} else {
		for len(args) > 4 && args[len(args)-1] == "" {
			args = args[:len(args)-1]
		}
	}
	reply, err := s.run(ctx, script, session, args)
	if err != nil {
		call.err = writeError(session, call.batch, err)
		return wakeUp{}
	}
	deadline, _ := ctx.Deadline()
	wake := wakeUp{ctx: context.WithoutCancel(ctx), deadline: deadline, session: session}
	if len(reply) == 1 && reply[0].IsInt64() {
		v, _ := reply[0].AsInt64()
		index := v >> 2
		call.res = AppendResult{Events: appendedEvents(session, call.batch, index, now, nil), HasPending: v&1 == 1}
		if v&2 != 0 {
			wake.message = wire.Encode(index, now, wakeEntries(call.res.Events))
		}
		return wake
	}
	bits, err := number(reply, 1)
	switch w := word(reply, 0); {
	case err != nil:
	case w == "dup":
		var stored []a2redis.StoredEvent
		stored, err = replayedEvents(session, call.batch, reply[2:])
		if err == nil {
			call.res = AppendResult{Events: stored, Replayed: true, HasPending: bits&1 == 1}
			if bits&2 != 0 {
				// The first try may have committed without its wake-up.
				wake.message = wire.EncodeBare(lastIndex(stored))
			}
			return wake
		}
	case w == "cleared":
		call.err = refusedBatch(session, w, call.origin, 1)
		return wakeUp{}
	default:
		err = fmt.Errorf("%w: %s replied %v", a2redis.ErrUnexpectedReply, script, reply)
	}
	call.err = err
	return wakeUp{}
}

// generatedShape reports an id of the shape the default generator gives
// (32 lower-case hex digits), which may be recorded in an id block.
func generatedShape(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/internal/wire"
)

// AppendOptions tune an Append.
type AppendOptions struct {
	// OriginIndex, when positive, marks scheduled work that came from the
	// event at that index: the append is refused with ErrSessionCleared
	// once a clear passed it.
	OriginIndex int64
	// Consumers are the consumers this deployment serves: log consumers
	// among them start or advance their cursors on this append, and
	// HasPending counts only their heads. Nil serves every consumer (and
	// starts no log cursor); an empty, non-nil slice serves none.
	Consumers []a2redis.Consumer
}

// AppendResult is what an Append stored.
type AppendResult struct {
	// Events are the stored events, in request order. On a lost-ack replay
	// they are the originally stored rows.
	Events []a2redis.StoredEvent
	// Replayed reports that every id was already stored: nothing was
	// written.
	Replayed bool
	// HasPending reports whether a served consumer has a live head in the
	// session.
	HasPending bool
}

// Append appends a batch of events to a session, atomically: every event
// gets the next dense index, or none does. It is idempotent by event id: a
// batch whose ids are all stored replays the stored rows (Replayed), one
// with only some stored fails with ErrPartialDuplicateBatch. Events with a
// Cause commit only while that attempt owns its head (ErrSupersededAttempt).
// After the write it publishes a wake-up on the session's notify channel;
// a plain append (see below) only while a reader follows the session
// (notify.Feed, notify.SessionWatcher: keys.Session.Followed).
// Plain appends (no causes, no lane targets, no served log consumer) to a session
// that arrive while another is in flight go together in the next script
// call, each with its own result (see Config.NoCoalescing). An append the
// store gave up on (see Config.Retries) fails with an *a2redis.BatchError
// carrying the batch's ids, generated ones included: sending it again with
// them never duplicates it.
func (s *Store) Append(ctx context.Context, session string, events []a2redis.Event, opts AppendOptions) (AppendResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.appendEvents(ctx, session, events, opts, "")
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpAppend, Session: session, Events: len(events)})
	res, err := s.appendEvents(ctx, session, events, opts, traceArg(o.TraceContext(ctx)))
	end(OperationEnd{Session: session, Count: len(res.Events), Err: err})
	return res, err
}

// appendEvents is Append; trace, when not empty, is stored with every
// event of the batch (which then takes the general script).
func (s *Store) appendEvents(ctx context.Context, session string, events []a2redis.Event, opts AppendOptions, trace string) (AppendResult, error) {
	if err := checkSession(session); err != nil {
		return AppendResult{}, err
	}
	if opts.OriginIndex < 0 {
		return AppendResult{}, check.Invalid("OriginIndex", "is negative (%d)", opts.OriginIndex)
	}
	consumers, served, err := s.servedFor(ctx, opts.Consumers)
	if err != nil {
		return AppendResult{}, err
	}
	batch, nonce, err := s.prepare(events, "events")
	if err != nil {
		return AppendResult{}, err
	}
	for i, e := range events {
		if e.Cause != nil {
			if err := checkCause(fmt.Sprintf("events[%d].Cause", i), *e.Cause); err != nil {
				return AppendResult{}, err
			}
		}
	}
	origin := ""
	if opts.OriginIndex > 0 {
		origin = itoa(opts.OriginIndex)
	}
	if trace == "" && plainBatch(events, consumers) && !scripts.GeneralOnly() {
		call := &plainCall{ctx: ctx, batch: batch, origin: origin, nonce: nonce, heads: make([][]string, len(events))}
		for i, e := range events {
			for _, t := range e.Targets {
				call.heads[i] = append(call.heads[i], rows.EventRow(t.Consumer))
			}
		}
		return s.appendPlain(ctx, session, served, call)
	}
	now := s.now()
	args := make([]string, 0, 4+len(batch)*5)
	args = append(args, itoa(now), itoa(int64(len(batch))), served, origin)
	for i, e := range batch {
		cause := ""
		if c := events[i].Cause; c != nil {
			raw, _ := json.Marshal(c)
			cause = string(raw)
		}
		args = append(args, e.id, e.typ, string(e.payload), cause, e.targets)
		batch[i].trace = trace
	}
	if trace != "" {
		args = append(args, trace)
	}
	reply, err := s.runIndexed(ctx, "append", session, args)
	if err != nil {
		return AppendResult{}, writeError(session, batch, err)
	}
	return s.appendResult(ctx, session, events, batch, now, reply)
}

func (s *Store) appendResult(ctx context.Context, session string, events []a2redis.Event, batch []prepared, now int64, reply []rueidis.RedisMessage) (AppendResult, error) {
	switch outcome := word(reply, 0); outcome {
	case "ok":
		first, err := number(reply, 1)
		if err != nil {
			return AppendResult{}, err
		}
		stored := appendedEvents(session, batch, first, now, func(i int) *a2redis.Cause { return events[i].Cause })
		if batch[0].trace != "" || scheduledBatch(batch) {
			// Wake-ups carry no trace context and no schedule: followers
			// read the events with them from the log.
			s.publish(ctx, session, wire.EncodeBare(first+int64(len(batch))-1))
		} else {
			s.publish(ctx, session, wire.Encode(first+int64(len(batch))-1, now, wakeEntries(stored)))
		}
		return AppendResult{Events: stored, HasPending: word(reply, 2) == "1"}, nil
	case "empty":
		return AppendResult{Events: []a2redis.StoredEvent{}, HasPending: word(reply, 1) == "1"}, nil
	case "dup":
		stored, err := replayedEvents(session, batch, reply[2:])
		if err != nil {
			return AppendResult{}, err
		}
		// The first try may have committed without publishing its wake-up.
		s.publish(ctx, session, wire.EncodeBare(lastIndex(stored)))
		return AppendResult{Events: stored, Replayed: true, HasPending: word(reply, 1) == "1"}, nil
	case "partial", "cleared":
		return AppendResult{}, refusedBatch(session, outcome, word(reply, 1), len(batch))
	case "superseded":
		pos, err := number(reply, 1)
		if err != nil || pos < 1 || int(pos) > len(events) || events[pos-1].Cause == nil {
			return AppendResult{}, fmt.Errorf("%w: append replied %v", a2redis.ErrUnexpectedReply, reply)
		}
		return AppendResult{}, &a2redis.SupersededError{Session: session, Cause: *events[pos-1].Cause}
	}
	return AppendResult{}, fmt.Errorf("%w: append replied %v", a2redis.ErrUnexpectedReply, reply)
}

// appendedEvents is a batch as stored from index first on; causeOf, when
// not nil, gives the i-th event's cause.
func appendedEvents(session string, batch []prepared, first, now int64, causeOf func(i int) *a2redis.Cause) []a2redis.StoredEvent {
	stored := make([]a2redis.StoredEvent, len(batch))
	for i, e := range batch {
		var cause *a2redis.Cause
		if causeOf != nil {
			cause = causeOf(i)
		}
		stored[i] = e.stored(session, first+int64(i), now, cause)
	}
	return stored
}

// replayedEvents decodes the stored entries a replayed batch came back
// with: one per event of the batch.
func replayedEvents(session string, batch []prepared, entries []rueidis.RedisMessage) ([]a2redis.StoredEvent, error) {
	stored := make([]a2redis.StoredEvent, 0, len(batch))
	for _, m := range entries {
		ev, err := entry(session, m)
		if err != nil {
			return nil, err
		}
		stored = append(stored, ev)
	}
	if len(stored) != len(batch) {
		return nil, fmt.Errorf("%w: the script replayed %d of %d events", a2redis.ErrUnexpectedReply, len(stored), len(batch))
	}
	return stored, nil
}

// refusedBatch is the error of a batch an append refused whole: "partial"
// (arg: how many ids are stored) or "cleared" (arg: the origin index).
func refusedBatch(session, outcome, arg string, n int) error {
	if outcome == "partial" {
		return errorf(a2redis.ErrPartialDuplicateBatch, session, "%s of %d event ids are already stored", arg, n)
	}
	return errorf(a2redis.ErrSessionCleared, session, "scheduled work from event %s was cleared", arg)
}

// scheduledBatch reports whether an event of batch is scheduled
// (Event.NotBefore): its wake-up is bare, since wake-up entries do not carry
// the time.
func scheduledBatch(batch []prepared) bool {
	for _, e := range batch {
		if e.notBefore > 0 {
			return true
		}
	}
	return false
}

// wakeEntries are stored events as a wake-up carries them.
func wakeEntries(stored []a2redis.StoredEvent) []wire.Entry {
	entries := make([]wire.Entry, len(stored))
	for i, ev := range stored {
		entries[i] = wire.Entry{Index: ev.Index, ID: ev.ID, Type: ev.Type, Payload: ev.Payload}
	}
	return entries
}

// lastIndex is the highest index among stored events.
func lastIndex(stored []a2redis.StoredEvent) int64 {
	var last int64
	for _, ev := range stored {
		last = max(last, ev.Index)
	}
	return last
}

// plainBatch reports a batch without cursor state to move: no causes, no
// scheduled events, no lane targets, no served log consumer (event-cursor
// targets are fine: each is a new head). The flat append_plain script
// serves it.
func plainBatch(events []a2redis.Event, consumers []a2redis.Consumer) bool {
	for _, e := range events {
		if e.Cause != nil || !e.NotBefore.IsZero() {
			return false
		}
		for _, t := range e.Targets {
			if t.Lane != "" {
				return false
			}
		}
	}
	for _, c := range consumers {
		if c.Log != nil {
			return false
		}
	}
	return true
}

// prepared is one validated event, as scripts take it.
type prepared struct {
	id, typ   string
	payload   json.RawMessage
	targets   string
	trace     string
	notBefore int64 // epoch ms; 0: not scheduled
}

func (p prepared) stored(session string, index, now int64, cause *a2redis.Cause) a2redis.StoredEvent {
	ev := a2redis.StoredEvent{
		Session: session, Index: index, ID: p.id, Type: p.typ,
		Payload: p.payload, CreatedAt: time.UnixMilli(now), Trace: p.trace,
	}
	if p.notBefore > 0 {
		ev.NotBefore = time.UnixMilli(p.notBefore)
	}
	if cause != nil {
		c := *cause
		ev.Cause = &c
	}
	return ev
}

// prepare validates a batch and fills in generated ids and null payloads.
// With the default id generator, the ids it fills in are one random nonce
// (24 hex digits) followed by a count (8 hex digits); it returns the nonce
// when every id of a non-empty batch is generated, so the batch can be
// recorded as one id block instead of an id key per event.
func (s *Store) prepare(events []a2redis.Event, arg string) ([]prepared, string, error) {
	ids, nonce, generated := s.cfg.IDs, "", 0
	if s.blockIDs {
		ids = func() string {
			if nonce == "" {
				nonce = randomNonce()
			}
			generated++
			return blockID(nonce, generated-1)
		}
	}
	valid, err := check.Batch(events, arg, s.cfg.MaxBatch, ids)
	if err != nil {
		return nil, "", err
	}
	out := make([]prepared, len(valid))
	for i, e := range valid {
		if err := s.checkServerBulk(fmt.Sprintf("%s[%d].Payload", arg, i), e.Payload); err != nil {
			return nil, "", err
		}
		out[i] = prepared{id: e.ID, typ: e.Type, payload: e.Payload, targets: targetsArg(events[i].Targets, e.NotBefore), notBefore: e.NotBefore}
	}
	if generated != len(events) {
		nonce = ""
	}
	return out, nonce, nil
}

// randomNonce returns 96 random bits as 24 lower-case hex digits.
func randomNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// blockID is the generated id of the event at position i of a batch with
// nonce: the nonce and i as 8 lower-case hex digits, as append_plain builds
// it.
func blockID(nonce string, i int) string {
	const digits = "0123456789abcdef"
	var b [32]byte
	copy(b[:], nonce)
	for j := 31; j >= 24; j-- {
		b[j] = digits[i&0xf]
		i >>= 4
	}
	return string(b[:])
}

// targetsArg encodes validated targets as [[consumer, tag], ...], or ” for
// none; a scheduled event's (notBefore, epoch ms, above 0) as [[consumer,
// tag, notBefore], ...] (include/cursor's targets_of).
func targetsArg(targets []a2redis.Target, notBefore int64) string {
	if len(targets) == 0 {
		return ""
	}
	if notBefore > 0 {
		triples := make([][3]any, len(targets))
		for i, t := range targets {
			triples[i] = [3]any{t.Consumer, tagOf(t.Lane), notBefore}
		}
		raw, _ := json.Marshal(triples)
		return string(raw)
	}
	pairs := make([][2]string, len(targets))
	for i, t := range targets {
		pairs[i] = [2]string{t.Consumer, tagOf(t.Lane)}
	}
	raw, _ := json.Marshal(pairs)
	return string(raw)
}

var (
	checkType  = check.Type
	checkName  = check.Name
	checkLane  = check.Lane
	checkCause = check.Cause
)

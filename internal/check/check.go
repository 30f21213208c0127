// Package check holds the argument rules the store and the reference model
// share: a request that breaks one is refused with a2redis.ErrInvalidArgument
// before anything is written.
package check

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
)

// Invalid returns an *a2redis.ArgumentError for arg: the error every
// refused argument gets.
func Invalid(arg, format string, a ...any) error {
	return &a2redis.ArgumentError{Arg: arg, Problem: fmt.Sprintf(format, a...)}
}

// Session refuses an empty session id or one longer than
// a2redis.MaxNameBytes (any other string is fine).
func Session(session string) error {
	if session == "" {
		return Invalid("session", "is empty")
	}
	return length("session", session)
}

// length refuses a name longer than a2redis.MaxNameBytes.
func length(arg, name string) error {
	if len(name) > a2redis.MaxNameBytes {
		return Invalid(arg, "is %d bytes, more than a2redis.MaxNameBytes (%d)", len(name), a2redis.MaxNameBytes)
	}
	return nil
}

// Type refuses an empty, non-UTF-8 or reserved event type.
func Type(arg, t string) error {
	switch {
	case t == "":
		return Invalid(arg, "is empty")
	case !utf8.ValidString(t):
		return Invalid(arg, "is not valid UTF-8")
	case t == a2redis.ClearEventType:
		return Invalid(arg, "%q is reserved for clear markers", t)
	}
	return length(arg, t)
}

// Name refuses an empty, non-UTF-8 or too long name (consumers, holders,
// reducers).
func Name(arg, name string) error {
	switch {
	case name == "":
		return Invalid(arg, "is empty")
	case !utf8.ValidString(name):
		return Invalid(arg, "is not valid UTF-8")
	}
	return length(arg, name)
}

// Lane refuses a non-UTF-8 or too long lane (empty means no lane).
func Lane(arg, lane string) error {
	if !utf8.ValidString(lane) {
		return Invalid(arg, "is not valid UTF-8")
	}
	return length(arg, lane)
}

// Payload refuses a value larger than a2redis.MaxPayloadBytes.
func Payload(arg string, payload []byte) error {
	if len(payload) > a2redis.MaxPayloadBytes {
		return Invalid(arg, "is %d bytes, more than a2redis.MaxPayloadBytes (%d)", len(payload), a2redis.MaxPayloadBytes)
	}
	return nil
}

// Count refuses a list of n items (what names them) longer than max (a
// limit the caller names in limit, e.g. "Config.MaxBatch").
func Count(arg, what string, n, max int, limit string) error {
	if n > max {
		return Invalid(arg, "holds %d %s, more than %s (%d)", n, what, limit, max)
	}
	return nil
}

// Cause refuses a cause without a consumer, or with an index or attempt
// below 1.
func Cause(arg string, c a2redis.Cause) error {
	if err := Name(arg+".Consumer", c.Consumer); err != nil {
		return err
	}
	if err := Lane(arg+".Lane", c.Lane); err != nil {
		return err
	}
	if c.Index < 1 {
		return Invalid(arg+".Index", "must be at least 1 (got %d)", c.Index)
	}
	if c.Attempt < 1 {
		return Invalid(arg+".Attempt", "must be at least 1 (got %d)", c.Attempt)
	}
	return nil
}

// Completions refuses a list of attempts to complete at once (arg names
// it, e.g. "Attempts"): more than maxBatch of them, an invalid one (see
// Cause), or one head named twice.
func Completions(arg string, attempts []a2redis.Cause, maxBatch int) error {
	if len(attempts) > maxBatch {
		return Invalid(arg, "holds %d attempts, more than Config.MaxBatch (%d)", len(attempts), maxBatch)
	}
	seen := make(map[a2redis.HeadRef]int, len(attempts))
	for i, c := range attempts {
		at := fmt.Sprintf("%s[%d]", arg, i)
		if err := Cause(at, c); err != nil {
			return err
		}
		if first, ok := seen[c.Ref()]; ok {
			return Invalid(at, "names the head of %s[%d] again", arg, first)
		}
		seen[c.Ref()] = i
	}
	return nil
}

// Event is one validated event of a batch: its id (generated when the
// caller gave none) and its payload (JSON null when the caller gave none).
type Event struct {
	ID      string
	Type    string
	Payload json.RawMessage
	// NotBefore is the event's scheduled time in epoch milliseconds; 0 when
	// it is not scheduled.
	NotBefore int64
}

// Batch validates a batch of events — at most maxBatch, each with a valid
// type, a JSON payload of at most a2redis.MaxPayloadBytes, an id unique in
// the batch, and valid, non-repeated targets (at most
// a2redis.MaxTargetsPerEvent, a2redis.MaxBatchTargets over the batch), at
// most a2redis.MaxBatchBytes in all — and fills in ids from ids() in order
// and null payloads. arg names the batch in errors.
func Batch(events []a2redis.Event, arg string, maxBatch int, ids func() string) ([]Event, error) {
	if len(events) > maxBatch {
		return nil, Invalid(arg, "holds %d events, more than the maximum batch of %d", len(events), maxBatch)
	}
	out := make([]Event, len(events))
	seen := make(map[string]int, len(events))
	targets, size := 0, 0
	for i, e := range events {
		// Argument names are formatted only for an error: this is the hot path.
		at := func(field string) string { return fmt.Sprintf("%s[%d].%s", arg, i, field) }
		if err := Type("", e.Type); err != nil {
			return nil, Type(at("Type"), e.Type)
		}
		payload := e.Payload
		if err := Payload("", payload); err != nil {
			return nil, Payload(at("Payload"), payload)
		}
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		} else if !json.Valid(payload) {
			return nil, Invalid(at("Payload"), "is not valid JSON")
		}
		id := e.ID
		if id == "" {
			id = ids()
		} else if err := length("", id); err != nil {
			return nil, length(at("ID"), id)
		}
		if j, dup := seen[id]; dup {
			return nil, Invalid(at("ID"), "repeats the id of %s[%d] (%q)", arg, j, id)
		}
		seen[id] = i
		size += len(id) + len(e.Type) + len(payload)
		if len(e.Targets) > 0 {
			if err := Targets(at("Targets"), e.Targets); err != nil {
				return nil, err
			}
			if targets += len(e.Targets); targets > a2redis.MaxBatchTargets {
				return nil, Invalid(at("Targets"), "brings the batch's targets to %d, more than a2redis.MaxBatchTargets (%d)", targets, a2redis.MaxBatchTargets)
			}
			for _, t := range e.Targets {
				size += len(t.Consumer) + len(t.Lane)
			}
		}
		if size > a2redis.MaxBatchBytes {
			return nil, Invalid(at("Payload"), "brings the batch to %d bytes, more than a2redis.MaxBatchBytes (%d)", size, a2redis.MaxBatchBytes)
		}
		nb, err := NotBefore(at("NotBefore"), e.NotBefore, len(e.Targets))
		if err != nil {
			return nil, err
		}
		out[i] = Event{ID: id, Type: e.Type, Payload: payload, NotBefore: nb}
	}
	return out, nil
}

// NotBefore validates an event's scheduled time: zero (not scheduled), or
// a time after 1970 and before keys.HeldOffset milliseconds (a held head
// scores keys.HeldOffset + its time in the runnable set, which must stay an
// exact float) on an event with targets (a schedule holds its targets'
// heads; without any it would hold nothing). It returns the time in epoch
// milliseconds, 0 for none.
func NotBefore(arg string, t time.Time, targets int) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	ms := t.UnixMilli()
	switch {
	case ms < 1 || ms >= keys.HeldOffset:
		return 0, Invalid(arg, "is %v, outside 1970 … %v", t, time.UnixMilli(keys.HeldOffset-1).UTC())
	case targets == 0:
		return 0, Invalid(arg, "is set on an event without targets (it holds only targets' heads)")
	}
	return ms, nil
}

// Targets refuses more than a2redis.MaxTargetsPerEvent targets, or a
// target without a consumer, with a non-UTF-8 lane, or named twice.
func Targets(arg string, targets []a2redis.Target) error {
	if err := Count(arg, "targets", len(targets), a2redis.MaxTargetsPerEvent, "a2redis.MaxTargetsPerEvent"); err != nil {
		return err
	}
	seen := make(map[a2redis.Target]bool, len(targets))
	for i, t := range targets {
		at := fmt.Sprintf("%s[%d]", arg, i)
		if err := Name(at+".Consumer", t.Consumer); err != nil {
			return err
		}
		if err := Lane(at+".Lane", t.Lane); err != nil {
			return err
		}
		if seen[t] {
			return Invalid(at, "repeats target %q lane %q", t.Consumer, t.Lane)
		}
		seen[t] = true
	}
	return nil
}

// Presence validates a presence write — a participant, the sender's at, a
// positive TTL, at most maxBatch fields, each named (valid UTF-8) with a
// JSON value or none (a tombstone) — and returns the field names.
func Presence(participant string, at time.Time, ttl time.Duration, values map[string]json.RawMessage, maxBatch int) ([]string, error) {
	if err := Name("Participant", participant); err != nil {
		return nil, err
	}
	if at.IsZero() {
		return nil, Invalid("At", "is zero: the sender's clock orders presence writes")
	}
	if ttl <= 0 {
		return nil, Invalid("TTL", "must be positive (got %v)", ttl)
	}
	if len(values) > maxBatch {
		return nil, Invalid("Values", "holds %d fields, more than the maximum batch of %d", len(values), maxBatch)
	}
	names := make([]string, 0, len(values))
	for name, value := range values {
		if name == "" {
			return nil, Invalid("Values", "has an empty field name")
		}
		if !utf8.ValidString(name) {
			return nil, Invalid(fmt.Sprintf("Values[%q]", name), "field name is not valid UTF-8")
		}
		if err := length(fmt.Sprintf("Values[%q]", name), name); err != nil {
			return nil, err
		}
		if err := Payload(fmt.Sprintf("Values[%q]", name), value); err != nil {
			return nil, err
		}
		if len(value) > 0 && !json.Valid(value) {
			return nil, Invalid(fmt.Sprintf("Values[%q]", name), "is not valid JSON")
		}
		names = append(names, name)
	}
	return names, nil
}

// Snapshot is one merged snapshot write: the last state written at its
// index, with every pin any write at that index named, once.
type Snapshot struct {
	Index int64
	State json.RawMessage
	Pins  []a2redis.HeadRef
}

// Snapshots validates n snapshot writes (write(i) gives the i-th) — at most
// maxBatch, each at an index ≥ 0 with a JSON state and pins naming real
// heads — and merges them per index, sorted by index.
func Snapshots(n, maxBatch int, write func(i int) (index int64, state json.RawMessage, pins []a2redis.HeadRef)) ([]Snapshot, error) {
	if n > maxBatch {
		return nil, Invalid("writes", "holds %d writes, more than the maximum batch of %d", n, maxBatch)
	}
	byIndex := make(map[int64]*Snapshot, n)
	pinned := 0
	seen := make(map[int64]map[a2redis.HeadRef]bool, n)
	for i := range n {
		index, state, pins := write(i)
		at := fmt.Sprintf("writes[%d]", i)
		if index < 0 {
			return nil, Invalid(at+".Index", "is negative (%d)", index)
		}
		if len(state) == 0 {
			return nil, Invalid(at+".State", "is empty (store JSON null explicitly)")
		}
		if err := Payload(at+".State", state); err != nil {
			return nil, err
		}
		if pinned += len(pins); pinned > maxBatch {
			return nil, Invalid(at+".Pins", "brings the pins to %d, more than the maximum batch of %d", pinned, maxBatch)
		}
		if !json.Valid(state) {
			return nil, Invalid(at+".State", "is not valid JSON")
		}
		s := byIndex[index]
		if s == nil {
			s = &Snapshot{Index: index}
			byIndex[index] = s
			seen[index] = map[a2redis.HeadRef]bool{}
		}
		s.State = append(json.RawMessage(nil), state...)
		for j, pin := range pins {
			pinAt := fmt.Sprintf("%s.Pins[%d]", at, j)
			if err := Name(pinAt+".Consumer", pin.Consumer); err != nil {
				return nil, err
			}
			if err := Lane(pinAt+".Lane", pin.Lane); err != nil {
				return nil, err
			}
			if pin.Index < 1 {
				return nil, Invalid(pinAt+".Index", "must be at least 1 (got %d)", pin.Index)
			}
			if !seen[index][pin] {
				seen[index][pin] = true
				s.Pins = append(s.Pins, pin)
			}
		}
	}
	out := make([]Snapshot, 0, len(byIndex))
	for _, s := range byIndex {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// Expiry is a lease's end in epoch milliseconds: at when set, else now + a
// positive ttl (at least 1 ms).
func Expiry(now int64, ttl time.Duration, at time.Time) (int64, error) {
	if !at.IsZero() {
		return at.UnixMilli(), nil
	}
	if ttl <= 0 {
		return 0, Invalid("TTL", "must be positive (got %v)", ttl)
	}
	return now + max(ttl.Milliseconds(), 1), nil
}

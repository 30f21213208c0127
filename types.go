package a2redis

import (
	"encoding/json"
	"fmt"
	"time"
)

// ClearEventType is the reserved type of the marker event a clear appends.
// Appends of this type are refused; log cursors never take it.
const ClearEventType = "a2.clear"

// Event is an event to append.
type Event struct {
	// ID identifies the event within its session; appending an id that is
	// already stored replays the stored event instead of writing (lost-ack
	// retries). Empty: the store generates one.
	ID string
	// Type names the kind of event. Required, valid UTF-8, not ClearEventType.
	Type string
	// Payload is the event body as JSON. Nil stores JSON null.
	Payload json.RawMessage
	// Cause names the consumer attempt that produced this event. When set,
	// the append commits only while that attempt still owns its head
	// (ErrSupersededAttempt otherwise).
	Cause *Cause
	// Targets are the consumers that must handle this event: a target with
	// a Lane joins that lane's FIFO, one without gets an event cursor of its
	// own (concurrent handling).
	Targets []Target
	// NotBefore, when set, schedules the event: its targets' heads are not
	// claimable before this time (by the store's clock, to the
	// millisecond). The event still takes its index at append time; an
	// event-cursor head waits alone, while a lane waits behind its
	// scheduled head (strict order: its later events wait too; give work
	// that must not wait a lane of its own). A scheduled head is held, not
	// failed: it counts no failure and the ready index lists the session at
	// NotBefore. Log cursors, which read the whole log, are not held. It
	// needs Targets, and must lie after 1970 and before keys.HeldOffset
	// milliseconds (about the year 37600); a time already passed is no
	// delay.
	NotBefore time.Time
}

// Target names a consumer that must handle an event.
type Target struct {
	// Consumer is the consumer's name. Required.
	Consumer string
	// Lane, when set, queues the event on the consumer's lane: only the
	// lane's head runs, in append order. Empty: an event cursor.
	Lane string
}

// Cause is the consumer attempt an event came from.
type Cause struct {
	// Consumer is the consumer's name.
	Consumer string `json:"consumer"`
	// Lane is the cursor's lane; empty for an event cursor.
	Lane string `json:"-"`
	// Index is the head's index.
	Index int64 `json:"index"`
	// Attempt is the attempt number the claim returned.
	Attempt int64 `json:"attempt"`
}

type causeJSON struct {
	Consumer string  `json:"consumer"`
	Lane     *string `json:"lane"`
	Index    int64   `json:"index"`
	Attempt  int64   `json:"attempt"`
}

// MarshalJSON encodes the cause as stored: an event cursor's lane is null.
func (c Cause) MarshalJSON() ([]byte, error) {
	v := causeJSON{Consumer: c.Consumer, Index: c.Index, Attempt: c.Attempt}
	if c.Lane != "" {
		lane := c.Lane
		v.Lane = &lane
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes a stored cause.
func (c *Cause) UnmarshalJSON(data []byte) error {
	var v causeJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*c = Cause{Consumer: v.Consumer, Index: v.Index, Attempt: v.Attempt}
	if v.Lane != nil {
		c.Lane = *v.Lane
	}
	return nil
}

// Ref is the head the cause names.
func (c Cause) Ref() HeadRef { return HeadRef{Consumer: c.Consumer, Lane: c.Lane, Index: c.Index} }

func (c Cause) cursorName() string {
	if c.Lane == "" {
		return fmt.Sprintf("consumer %q", c.Consumer)
	}
	return fmt.Sprintf("consumer %q lane %q", c.Consumer, c.Lane)
}

// StoredEvent is an event as the log holds it.
type StoredEvent struct {
	// Session is the session id.
	Session string `json:"session"`
	// Index is the event's dense position in its session, from 1.
	Index int64 `json:"index"`
	// ID is the event id, unique within the session's lifetime.
	ID string `json:"id"`
	// Type is the event type.
	Type string `json:"type"`
	// Payload is the stored JSON, verbatim.
	Payload json.RawMessage `json:"payload"`
	// CreatedAt is when it was appended, by the store's clock.
	CreatedAt time.Time `json:"created_at"`
	// Cause is the consumer attempt that produced it, if any.
	Cause *Cause `json:"cause,omitempty"`
	// NotBefore is the event's scheduled time (Event.NotBefore); zero when
	// it was not scheduled.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Trace is the trace context the append that wrote it carried (a W3C
	// traceparent), stored only when the store's Observer supplied one
	// (tracing on); empty otherwise.
	Trace string `json:"trace,omitempty"`
}

// Consumer declares a consumer a deployment serves.
type Consumer struct {
	// Name is the consumer's name. Required.
	Name string
	// Log, when set, makes the consumer read the whole log filtered by
	// event type through a log cursor.
	Log *LogSpec
	// PerSession, when positive, is the most heads of one session this
	// consumer has in flight at once across every claimer of the prefix
	// (claimed and not yet completed, failed, released or cancelled; a
	// lapsed claim counts until it is taken over): 1 runs a session's
	// heads one at a time without lanes. Heads over it wait, free, with no
	// failure counted; a retry hold is not in flight. The claim script
	// enforces it from the session's count of heads in flight. It is a
	// setting, not part of the consumer's identity: the registry's value
	// is the one claims use, and AddConsumers with another value changes
	// it. Zero for no limit; not for a Log consumer (its one cursor has
	// one head in flight at most).
	PerSession int
	// MaxFailures, when positive, dead-letters a head of this consumer at
	// that many failures (a failed attempt's report, or the takeover of a
	// lapsed claim); it wins over the value a request gives
	// (FailRequest.MaxFailures, ClaimRequest.MaxFailures, the worker's
	// Config.MaxFailures), which apply to consumers that set none. A
	// setting, like PerSession: the registry's value is the one used.
	MaxFailures int
}

// LogSpec declares a log cursor: a consumer that reads every event of some
// types, in order, one at a time.
type LogSpec struct {
	// Lane names the log cursor; it is the Lane of its heads. Required, and
	// it must not also be used as a target lane of the same consumer.
	Lane string
	// Types are the event types it takes; nil takes every type (never the
	// clear marker).
	Types []string
	// Backfill starts a new cursor at the beginning of the session's
	// current lifetime instead of at the append that created it.
	Backfill bool
}

// HeadRef names one head: a consumer's cursor at an index.
type HeadRef struct {
	// Consumer is the consumer's name.
	Consumer string `json:"consumer"`
	// Lane is the cursor's lane; empty for an event cursor.
	Lane string `json:"lane,omitempty"`
	// Index is the head's index.
	Index int64 `json:"index"`
}

// CursorKind tells the three kinds of cursor apart.
type CursorKind string

// The cursor kinds.
const (
	// EventCursor covers one event for one consumer (concurrent handling).
	EventCursor CursorKind = "event"
	// LaneCursor is a FIFO of a lane's targeted events; only its head runs.
	LaneCursor CursorKind = "lane"
	// LogCursor reads the whole log filtered by type.
	LogCursor CursorKind = "log"
)

// HeadState is a head's claim and failure bookkeeping. Zero times mean
// "never".
type HeadState struct {
	// Attempts counts the claims of this head (the current attempt number).
	Attempts int64 `json:"attempts"`
	// FirstClaimedAt is when it was first claimed.
	FirstClaimedAt time.Time `json:"first_claimed_at"`
	// LastClaimedAt is when it was last claimed.
	LastClaimedAt time.Time `json:"last_claimed_at"`
	// Holder is the holder of the current claim; empty when unclaimed.
	Holder string `json:"holder,omitempty"`
	// ClaimExpiresAt is when the current claim lapses, or until when a
	// failed head is held back from retrying.
	ClaimExpiresAt time.Time `json:"claim_expires_at"`
	// Failures counts failed attempts, lapsed claims included.
	Failures int64 `json:"failures"`
	// LastFailedAt is when the last failure was reported.
	LastFailedAt time.Time `json:"last_failed_at"`
	// LastFailedAttempt is the attempt the last failure was reported for.
	LastFailedAttempt int64 `json:"last_failed_attempt,omitempty"`
	// LastError is the last failure's error text.
	LastError string `json:"last_error,omitempty"`
	// DeadLetteredAt is when the head was dead-lettered; zero while live.
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
}

// DeadLettered reports whether the head is dead-lettered.
func (d HeadState) DeadLettered() bool { return !d.DeadLetteredAt.IsZero() }

// HeadEvent is a head with its event and its claim and failure state.
type HeadEvent struct {
	StoredEvent
	// Consumer is the consumer whose head this is.
	Consumer string `json:"consumer"`
	// Lane is the cursor's lane; empty for an event cursor.
	Lane string `json:"lane,omitempty"`
	// Kind is the cursor's kind.
	Kind CursorKind `json:"kind"`
	HeadState
}

// Ref names this head.
func (h HeadEvent) Ref() HeadRef { return HeadRef{Consumer: h.Consumer, Lane: h.Lane, Index: h.Index} }

// Cause is the cause events returned by this head's current attempt carry.
func (h HeadEvent) Cause() Cause {
	return Cause{Consumer: h.Consumer, Lane: h.Lane, Index: h.Index, Attempt: h.Attempts}
}

// Cursor is a consumer's position in a session.
type Cursor struct {
	// Consumer is the consumer's name.
	Consumer string `json:"consumer"`
	// Lane is the cursor's lane; empty for an event cursor.
	Lane string `json:"lane,omitempty"`
	// Kind is the cursor's kind.
	Kind CursorKind `json:"kind"`
	// Position is the last index the cursor moved past.
	Position int64 `json:"position"`
	// Head is the index it must handle next; 0 when it has none.
	Head int64 `json:"head"`
	HeadState
}

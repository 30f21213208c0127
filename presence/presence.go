// Package presence keeps who is present in a session: per participant, a
// set of fields with JSON values that expire unless refreshed.
//
// Writes are field-wise last-writer-wins by the sender's clock (Meta.At):
// a stored field survives an incoming one only while it is unexpired and
// strictly newer, so ties go to the incoming write. Deleting a field (a nil
// value) stores a tombstone that keeps the delete's stamp until it expires,
// so an older write that arrives after the delete still loses. Expiry is
// measured by the store's clock (redisstore.Config.Clock), never by the
// sender's, so the two clocks never mix.
//
// Every applied write is published, after it committed, on the session's
// presence channel; Subscribe streams those patches. Publishing is
// best-effort and pub/sub keeps nothing: a subscriber that needs the full
// picture reads it with Read and applies patches on top.
package presence

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// Meta describes one presence write.
type Meta struct {
	// Seen is the sender's sequence number, stored with each field.
	Seen int64
	// At is the sender's clock at the write; it orders writes field by
	// field. Required.
	At time.Time
	// TTL is how long the fields live, from the store's clock. Required
	// (positive).
	TTL time.Duration
}

// Patch is an applied presence write: the fields that won.
type Patch struct {
	// Participant is who wrote.
	Participant string `json:"participant"`
	// Values are the applied fields; a nil value is a delete.
	Values map[string]json.RawMessage `json:"values"`
	// Seen is the sender's sequence number.
	Seen int64 `json:"seen"`
	// At is the sender's clock at the write.
	At time.Time `json:"at"`
}

// Row is one live presence field.
type Row struct {
	// Participant is who is present.
	Participant string `json:"participant"`
	// Field is the field's name.
	Field string `json:"field"`
	// Value is the field's JSON value.
	Value json.RawMessage `json:"value"`
	// Seen is the sender's sequence number of the write.
	Seen int64 `json:"seen"`
	// At is the sender's clock at the write.
	At time.Time `json:"at"`
	// ExpiresAt is when the field expires, by the store's clock.
	ExpiresAt time.Time `json:"expires_at"`
}

// Presence is presence on one store. It is safe for concurrent use.
type Presence struct {
	store *redisstore.Store
}

// New returns presence on store (its prefix, clock, client and pub/sub
// mode).
func New(store *redisstore.Store) *Presence { return &Presence{store: store} }

// Set writes a participant's fields in one atomic step, field-wise
// last-writer-wins by meta.At; a nil value (or JSON null) deletes the
// field. It returns the applied patch, or nil when every field lost (or
// values is empty), and publishes the patch on the session's presence
// channel once the write committed (best-effort, waiting at most the
// store's PublishWait).
func (p *Presence) Set(ctx context.Context, session, participant string, values map[string]json.RawMessage, meta Meta) (*Patch, error) {
	if p.store == nil {
		return nil, check.Invalid("store", "is nil")
	}
	applied, err := p.store.PresenceSet(ctx, session, redisstore.PresenceWrite{
		Participant: participant,
		Values:      values,
		Seen:        meta.Seen,
		At:          meta.At,
		TTL:         meta.TTL,
	})
	if err != nil || len(applied) == 0 {
		return nil, err
	}
	patch := &Patch{
		Participant: participant,
		Values:      make(map[string]json.RawMessage, len(applied)),
		Seen:        meta.Seen,
		At:          time.UnixMilli(meta.At.UnixMilli()),
	}
	for _, field := range applied {
		patch.Values[field] = normalize(values[field])
	}
	if msg, err := encodePatch(patch); err == nil {
		p.store.PresencePublish(ctx, session, msg)
	}
	return patch, nil
}

// Read returns the session's live presence fields, sorted by participant
// then field. Fields the store's clock shows expired are left out and then
// pruned; the prune re-checks each expiry atomically, so it never deletes a
// field a concurrent write refreshed.
func (p *Presence) Read(ctx context.Context, session string) ([]Row, error) {
	if p.store == nil {
		return nil, check.Invalid("store", "is nil")
	}
	entries, err := p.store.PresenceRead(ctx, session)
	if err != nil {
		return nil, err
	}
	rows := make([]Row, len(entries))
	for i, e := range entries {
		rows[i] = Row{
			Participant: e.Participant, Field: e.Field, Value: e.Value,
			Seen: e.Seen, At: e.At, ExpiresAt: e.ExpiresAt,
		}
	}
	return rows, nil
}

// Subscribe calls fn with every patch published on the session's presence
// channel, in order, until ctx ends (it returns ctx.Err()) or the server
// refuses the subscription. It subscribes on a dedicated connection that
// survives reconnects, but patches published while it is away are lost:
// re-Read after a reconnect if the full picture matters. Values arrive as
// compact JSON (equal in meaning to what was set). Messages that are not
// patches are ignored.
func (p *Presence) Subscribe(ctx context.Context, session string, fn func(Patch)) error {
	if p.store == nil {
		return check.Invalid("store", "is nil")
	}
	if session == "" {
		return check.Invalid("session", "is empty")
	}
	if fn == nil {
		return check.Invalid("fn", "is nil")
	}
	sub := notify.NewSubscriber(p.store.Client(), notify.SubscriberOptions{Sharded: p.store.ShardedPubSub()})
	channel := keys.For(p.store.Prefix(), session).PresenceChannel()
	err := sub.Subscribe(ctx, channel, func(n notify.Notice) error {
		if n.Kind != notify.NoticeMessage {
			return nil
		}
		if patch, err := DecodePatch(n.Payload); err == nil {
			fn(patch)
		}
		return nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// wirePatch is a patch as published: at in epoch milliseconds.
type wirePatch struct {
	Participant string                     `json:"participant"`
	Seen        int64                      `json:"seen"`
	At          int64                      `json:"at"`
	Values      map[string]json.RawMessage `json:"values"`
}

func encodePatch(p *Patch) ([]byte, error) {
	values := make(map[string]json.RawMessage, len(p.Values))
	for field, v := range p.Values {
		if v == nil {
			v = json.RawMessage("null")
		}
		values[field] = v
	}
	return json.Marshal(wirePatch{Participant: p.Participant, Seen: p.Seen, At: p.At.UnixMilli(), Values: values})
}

// DecodePatch parses a patch as Set publishes it:
// {"participant":…,"seen":…,"at":<epoch ms>,"values":{field: value|null}}.
func DecodePatch(data []byte) (Patch, error) {
	var w wirePatch
	if err := json.Unmarshal(data, &w); err != nil {
		return Patch{}, err
	}
	if w.Participant == "" || w.Values == nil {
		return Patch{}, check.Invalid("patch", "has no participant or values")
	}
	p := Patch{Participant: w.Participant, Seen: w.Seen, At: time.UnixMilli(w.At), Values: make(map[string]json.RawMessage, len(w.Values))}
	for field, v := range w.Values {
		p.Values[field] = normalize(v)
	}
	return p, nil
}

// normalize makes a deleted field's value nil.
func normalize(v json.RawMessage) json.RawMessage {
	if len(v) == 0 || string(bytes.TrimSpace(v)) == "null" {
		return nil
	}
	return v
}

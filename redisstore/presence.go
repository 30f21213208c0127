package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// This file is the storage half of presence (package presence is the API):
// a per-session hash whose field is the JSON text [participant, field] and
// whose entry is {"a":at,"e":expiresAt,"s":seen,"v":value}, stamps first so
// scripts read them with a pattern. `a` is the sender's clock and orders
// writes (field-wise last-writer-wins, ties to the incoming write); `e` is
// the store's clock plus the TTL and bounds the entry's life. A null value
// is a tombstone: it keeps its stamp until it expires, so an older write
// arriving after a delete still loses.

// PresenceWrite is one participant's presence update.
type PresenceWrite struct {
	// Participant names who is present. Required, valid UTF-8.
	Participant string
	// Values are the fields to set, by name (non-empty, valid UTF-8). A
	// nil value or JSON null deletes the field (stored as a tombstone).
	Values map[string]json.RawMessage
	// Seen is the sender's sequence number, stored with each field.
	Seen int64
	// At is the sender's clock: it orders writes, field by field.
	// Required.
	At time.Time
	// TTL is how long the fields live, from the store's clock. Required
	// (positive).
	TTL time.Duration
}

// PresenceField names one presence field.
type PresenceField struct {
	// Participant names who is present.
	Participant string `json:"participant"`
	// Field is the field's name.
	Field string `json:"field"`
}

// PresenceEntry is one live presence field.
type PresenceEntry struct {
	PresenceField
	// Value is the field's JSON value.
	Value json.RawMessage `json:"value"`
	// Seen is the sender's sequence number of the write.
	Seen int64 `json:"seen"`
	// At is the sender's clock at the write.
	At time.Time `json:"at"`
	// ExpiresAt is when the field expires, by the store's clock.
	ExpiresAt time.Time `json:"expires_at"`
}

// presenceHashField encodes [participant, field] as JSON (no HTML escaping,
// so the stored text stays readable; the encoding is deterministic either
// way).
func presenceHashField(participant, field string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode([2]string{participant, field}) // strings always encode
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

func presenceEntryText(at, expires, seen int64, value json.RawMessage) string {
	var b bytes.Buffer
	b.Grow(len(value) + 64)
	b.WriteString(`{"a":`)
	b.WriteString(strconv.FormatInt(at, 10))
	b.WriteString(`,"e":`)
	b.WriteString(strconv.FormatInt(expires, 10))
	b.WriteString(`,"s":`)
	b.WriteString(strconv.FormatInt(seen, 10))
	b.WriteString(`,"v":`)
	b.Write(value)
	b.WriteByte('}')
	return b.String()
}

func isNullJSON(v json.RawMessage) bool {
	return len(v) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// PresenceSet applies a participant's presence update, field by field, in
// one atomic step: a field is written unless the stored one is unexpired and
// has a strictly newer At. It returns the names of the fields that were
// applied, sorted (empty when every field lost). It does not publish; see
// PresencePublish.
func (s *Store) PresenceSet(ctx context.Context, session string, w PresenceWrite) ([]string, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	names, err := check.Presence(w.Participant, w.At, w.TTL, w.Values, s.cfg.MaxBatch)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return []string{}, nil
	}
	sort.Strings(names)
	now := s.now()
	at := w.At.UnixMilli()
	ttl := max(w.TTL.Milliseconds(), 1)
	expires := now + ttl
	args := make([]string, 0, 4+2*len(names))
	args = append(args, itoa(at), itoa(now), itoa(ttl), itoa(int64(len(names))))
	for _, name := range names {
		value := w.Values[name]
		if isNullJSON(value) {
			value = json.RawMessage("null")
		}
		entry := presenceEntryText(at, expires, w.Seen, value)
		// The value goes with its times in one argument.
		if err := s.checkServerBulk(fmt.Sprintf("Values[%q]", name), []byte(entry)); err != nil {
			return nil, err
		}
		args = append(args, presenceHashField(w.Participant, name), entry)
	}
	reply, err := s.run(ctx, "presence_set", session, args)
	if err != nil {
		return nil, err
	}
	return presenceSetResult(names, reply)
}

func presenceSetResult(names []string, reply []rueidis.RedisMessage) ([]string, error) {
	if word(reply, 0) != "ok" {
		return nil, fmt.Errorf("%w: presence_set replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	applied := make([]string, 0, len(reply)-1)
	for _, m := range reply[1:] {
		pos, err := asInt(m)
		if err != nil || pos < 1 || int(pos) > len(names) {
			return nil, fmt.Errorf("%w: presence_set replied position %v", a2redis.ErrUnexpectedReply, m)
		}
		applied = append(applied, names[pos-1])
	}
	return applied, nil
}

type presenceStored struct {
	A *int64          `json:"a"`
	E *int64          `json:"e"`
	S int64           `json:"s"`
	V json.RawMessage `json:"v"`
}

// presencePage is how many fields one HSCAN step of PresenceRead asks
// for, and one presence_prune call of PresencePrune checks.
const presencePage = 500

// PresenceRead returns the session's live presence fields (tombstones
// left out), sorted by participant then field. Fields the store's clock
// shows expired are skipped and then pruned with PresencePrune; a failed
// prune only leaves the deletion to the next read. Entries this layout
// does not write are skipped. The hash is read in HSCAN steps, so a big
// presence never holds Redis long; a field written during the read may
// show its old or its new entry.
func (s *Store) PresenceRead(ctx context.Context, session string) ([]PresenceEntry, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	c := s.client
	key := s.keys(session).Presence()
	fields := map[string]string{}
	for cursor := uint64(0); ; {
		step, err := s.do(ctx, c.B().Hscan().Key(key).Cursor(cursor).Count(presencePage).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("a2redis: reading presence of session %q: %w", session, err)
		}
		for i := 0; i+1 < len(step.Elements); i += 2 {
			fields[step.Elements[i]] = step.Elements[i+1]
		}
		if cursor = step.Cursor; cursor == 0 {
			break
		}
	}
	now := s.now()
	out := make([]PresenceEntry, 0, len(fields))
	var expired []PresenceField
	for name, text := range fields {
		var key [2]string
		if err := json.Unmarshal([]byte(name), &key); err != nil {
			continue
		}
		var e presenceStored
		if err := json.Unmarshal([]byte(text), &e); err != nil || e.A == nil || e.E == nil {
			continue
		}
		field := PresenceField{Participant: key[0], Field: key[1]}
		if *e.E <= now {
			expired = append(expired, field)
			continue
		}
		if isNullJSON(e.V) {
			continue
		}
		out = append(out, PresenceEntry{
			PresenceField: field,
			Value:         e.V,
			Seen:          e.S,
			At:            time.UnixMilli(*e.A),
			ExpiresAt:     time.UnixMilli(*e.E),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Participant != out[j].Participant {
			return out[i].Participant < out[j].Participant
		}
		return out[i].Field < out[j].Field
	})
	if len(expired) > 0 {
		_, _ = s.PresencePrune(ctx, session, expired)
	}
	return out, nil
}

// PresencePrune deletes the named presence fields that are expired by the
// store's clock, re-checking each one's expiry atomically: a field a
// concurrent write refreshed is kept. It returns how many were deleted.
// Many fields are checked a few hundred per script call.
func (s *Store) PresencePrune(ctx context.Context, session string, fields []PresenceField) (int, error) {
	if err := checkSession(session); err != nil {
		return 0, err
	}
	deleted := 0
	for len(fields) > 0 {
		part := fields[:min(len(fields), presencePage)]
		fields = fields[len(part):]
		args := make([]string, 0, 1+len(part))
		args = append(args, itoa(s.now()))
		for _, f := range part {
			args = append(args, presenceHashField(f.Participant, f.Field))
		}
		reply, err := s.run(ctx, "presence_prune", session, args)
		if err != nil {
			return deleted, err
		}
		if word(reply, 0) != "ok" {
			return deleted, fmt.Errorf("%w: presence_prune replied %v", a2redis.ErrUnexpectedReply, reply)
		}
		n, err := number(reply, 1)
		if err != nil {
			return deleted, err
		}
		deleted += int(n)
	}
	return deleted, nil
}

// PresencePublish publishes a presence message on the session's presence
// channel (keys.Session.PresenceChannel), after the write it announces
// committed. Like wake-ups it is best-effort: it waits at most
// Config.PublishWait, and a failure is not reported (a negative
// PublishWait disables it). It uses SPUBLISH with Config.ShardedPubSub.
func (s *Store) PresencePublish(ctx context.Context, session string, message []byte) {
	s.publishOn(ctx, s.keys(session).PresenceChannel(), message)
}

// ShardedPubSub reports whether the store publishes with SPUBLISH
// (Config.ShardedPubSub): subscribers must then use SSUBSCRIBE.
func (s *Store) ShardedPubSub() bool { return s.cfg.ShardedPubSub }

package model

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
)

// presenceEntry is one [participant, field] entry; a null value is a
// tombstone that keeps its stamp until it expires.
type presenceEntry struct {
	at, expires, seen int64
	value             json.RawMessage
}

// PresenceSet applies a participant's presence update field by field,
// last-writer-wins by the sender's At, ties to the incoming write (see
// redisstore.Store.PresenceSet).
func (m *Store) PresenceSet(ctx context.Context, session string, w redisstore.PresenceWrite) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSession(session); err != nil {
		return nil, err
	}
	names, err := check.Presence(w.Participant, w.At, w.TTL, w.Values, m.cfg.MaxBatch)
	if err != nil {
		return nil, err
	}
	applied := []string{}
	if len(names) == 0 {
		return applied, nil
	}
	sort.Strings(names)
	now := m.now()
	at := w.At.UnixMilli()
	expires := now + max(w.TTL.Milliseconds(), 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(session)
	for _, name := range names {
		key := [2]string{w.Participant, name}
		if old, ok := s.presence[key]; ok && old.expires > now && old.at > at {
			continue
		}
		value := w.Values[name]
		if isNullJSON(value) {
			value = json.RawMessage("null")
		}
		s.presence[key] = presenceEntry{at: at, expires: expires, seen: w.Seen, value: append(json.RawMessage(nil), value...)}
		applied = append(applied, name)
	}
	return applied, nil
}

// PresenceRead returns the session's live presence fields, tombstones left
// out, sorted by participant then field; expired entries are pruned.
func (m *Store) PresenceRead(ctx context.Context, session string) ([]redisstore.PresenceEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSession(session); err != nil {
		return nil, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []redisstore.PresenceEntry{}
	s := m.sessions[session]
	if s == nil {
		return out, nil
	}
	for key, e := range s.presence {
		if e.expires <= now {
			delete(s.presence, key)
			continue
		}
		if isNullJSON(e.value) {
			continue
		}
		out = append(out, redisstore.PresenceEntry{
			PresenceField: redisstore.PresenceField{Participant: key[0], Field: key[1]},
			Value:         append(json.RawMessage(nil), e.value...),
			Seen:          e.seen,
			At:            time.UnixMilli(e.at),
			ExpiresAt:     time.UnixMilli(e.expires),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Participant != out[j].Participant {
			return out[i].Participant < out[j].Participant
		}
		return out[i].Field < out[j].Field
	})
	return out, nil
}

// PresencePrune deletes the named presence fields that the store's clock
// shows expired and returns how many it deleted (see
// redisstore.Store.PresencePrune).
func (m *Store) PresencePrune(ctx context.Context, session string, fields []redisstore.PresenceField) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkSession(session); err != nil {
		return 0, err
	}
	if len(fields) == 0 {
		return 0, nil
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return 0, nil
	}
	deleted := 0
	for _, f := range fields {
		key := [2]string{f.Participant, f.Field}
		if e, ok := s.presence[key]; ok && e.expires <= now {
			delete(s.presence, key)
			deleted++
		}
	}
	return deleted, nil
}

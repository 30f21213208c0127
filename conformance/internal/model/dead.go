package model

import (
	"context"
	"sort"
	"time"

	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// noteDead records a change of the session's dead letters: a session that
// holds none has no dead time; one that starts to hold some has held them
// since now (a write that can only remove dead letters passes 0). Every
// write that dead-letters a head or acts on a dead-lettered one calls it,
// as the store's scripts recount their session's dead letters then.
func (s *session) noteDead(now int64) {
	n := 0
	for _, c := range s.heads() {
		if c.dead() {
			n++
		}
	}
	switch {
	case n == 0:
		s.deadSince = 0
	case s.deadSince == 0:
		s.deadSince = now
	}
}

// DeadAt reports what the dead index must list for session (see
// redisstore.Store.DeadAt): its dead-lettered heads' count and consumers,
// and since when it has held dead letters; ok false when it holds none.
// The consumers are those of the first scripts.DeadScan dead letters by
// index, newest first, as the store reads them; Complete when those are
// all.
func (m *Store) DeadAt(ctx context.Context, session string) (redisstore.DeadSession, bool, error) {
	if err := ctx.Err(); err != nil {
		return redisstore.DeadSession{}, false, err
	}
	if err := checkSession(session); err != nil {
		return redisstore.DeadSession{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return redisstore.DeadSession{}, false, nil
	}
	var dead []*cursor
	for _, c := range s.heads() {
		if c.dead() {
			dead = append(dead, c)
		}
	}
	if len(dead) == 0 {
		return redisstore.DeadSession{}, false, nil
	}
	// The store reads the lowest scores first: minus the index, so the
	// highest indexes.
	sort.SliceStable(dead, func(i, j int) bool { return dead[i].head > dead[j].head })
	seen := map[string]bool{}
	consumers := []string{}
	for i, c := range dead {
		if i >= scripts.DeadScan {
			break
		}
		if !seen[c.consumer] {
			seen[c.consumer] = true
			consumers = append(consumers, c.consumer)
		}
	}
	sort.Strings(consumers)
	return redisstore.DeadSession{
		Session: session, Count: int64(len(dead)), Since: time.UnixMilli(s.deadSince),
		Consumers: consumers, Complete: len(dead) <= scripts.DeadScan,
	}, true, nil
}

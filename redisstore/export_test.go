package redisstore

import "time"

// LateReadyUpdates returns how many ready-index updates s keeps to send
// again (see noteReady).
func LateReadyUpdates(s *Store) int64 { return s.late.n.Load() }

// CoalesceLine returns, for session's line of plain appends with nothing
// served, its rounds in flight and its queued calls.
func CoalesceLine(s *Store, session string) (inFlight, queued int) {
	c := &s.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	line := c.lines[session+"\x00"]
	if line == nil {
		return 0, 0
	}
	return line.inFlight, len(line.queue)
}

// HoldReadyLine takes shard's ready-index line of s as a call under way
// would, until the returned func lets it go: the updates that come
// meanwhile wait in one group.
func HoldReadyLine(s *Store, shard int) (release func()) {
	s.lines.mu.Lock()
	line := s.lines.lineLocked(shard)
	s.lines.mu.Unlock()
	line.sem <- struct{}{}
	return func() { <-line.sem }
}

// ReadyLineWaiting returns how many updates wait in shard's forming group.
func ReadyLineWaiting(s *Store, shard int) int {
	s.lines.mu.Lock()
	defer s.lines.mu.Unlock()
	if line := s.lines.lines[shard]; line != nil && line.next != nil {
		return len(line.next.updates)
	}
	return 0
}

// RideFor sets how long s's claim updates ride before their shard's line
// sends them on its own (a test that looks at what rides sets an hour).
func RideFor(s *Store, d time.Duration) {
	s.lines.mu.Lock()
	defer s.lines.mu.Unlock()
	s.lines.rideFor = d
}

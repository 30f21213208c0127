package redisstore

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

package redisstore

// LateReadyUpdates returns how many ready-index updates s keeps to send
// again (see noteReady).
func LateReadyUpdates(s *Store) int64 { return s.late.n.Load() }

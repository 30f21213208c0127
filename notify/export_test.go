package notify

// SetReceived makes s call fn with each message it reads from a
// connection, before the message is queued or dropped (set it before
// Subscribe).
func SetReceived(s *Subscriber, fn func(Notice)) { s.received = fn }

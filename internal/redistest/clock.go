package redistest

import (
	"sync"
	"time"
)

// Clock is a settable clock for stores under test (Config.Clock): every
// stored time comes from it, so tests travel in time on real servers.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at the instant at.
func NewClock(at time.Time) *Clock { return &Clock{now: at} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

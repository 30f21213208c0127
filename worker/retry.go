package worker

import (
	"math"
	"math/rand/v2"
	"time"
)

// The default retry policy: exponential backoff with jitter.
const (
	// DefaultBackoffBase is the wait after a head's first failure.
	DefaultBackoffBase = time.Second
	// DefaultBackoffFactor multiplies the wait at each further failure:
	// with DefaultMaxFailures (5) a failing head runs again after about
	// 1 s, 4 s, 16 s and 64 s and is dead-lettered at its fifth failure,
	// some 1.5 minutes after the first: long enough to ride out a blip,
	// short enough that a poison event stops within minutes.
	DefaultBackoffFactor = 4.0
	// DefaultBackoffMax caps the wait (reached from the sixth failure on,
	// with a MaxFailures above 5).
	DefaultBackoffMax = 5 * time.Minute
	// DefaultBackoffJitter spreads each wait uniformly over ±20%, so heads
	// that failed together (an outage) do not all come back at once.
	DefaultBackoffJitter = 0.2
)

// Backoff is a retry policy: how long a head that failed waits before it
// runs again. failures counts the head's failures, this one included (1
// after the first); err is the handler's error. A result of zero or less
// makes it claimable again at once.
type Backoff func(failures int64, err error) time.Duration

// Exponential returns the backoff base × factor^(failures−1), capped at
// max, spread uniformly by ±jitter (a fraction: 0.2 is ±20%; 0 waits
// exactly).
func Exponential(base time.Duration, factor float64, max time.Duration, jitter float64) Backoff {
	return func(failures int64, _ error) time.Duration {
		if failures < 1 {
			failures = 1
		}
		d := float64(base) * math.Pow(factor, float64(failures-1))
		if d > float64(max) || math.IsInf(d, 0) || math.IsNaN(d) {
			d = float64(max)
		}
		if jitter > 0 {
			d *= 1 + jitter*(2*rand.Float64()-1)
		}
		return time.Duration(d)
	}
}

// DefaultBackoff is the retry policy a consumer gets unless Config.Backoff
// or WithBackoff sets another: Exponential(DefaultBackoffBase,
// DefaultBackoffFactor, DefaultBackoffMax, DefaultBackoffJitter).
var DefaultBackoff = Exponential(DefaultBackoffBase, DefaultBackoffFactor, DefaultBackoffMax, DefaultBackoffJitter)

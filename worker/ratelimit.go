package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// Rate-limited consumers (RateLimit) are claimed apart from the others: a
// claim serves one of them at a time, sized to the starts taken from its
// prefix-wide limit (redisstore.Store.TakeStarts, one script call on the
// limiters' slot), so no head is claimed before the limit allows it. The
// starts a process took but did not use stay its own until their window
// ends, and go back to the limit (GiveBackStarts) when the consumer has no
// more work, so a process with nothing to do never starves another.

// RateLimit bounds a consumer's handler starts across every worker of the
// prefix: at most starts per window of per (windows on the server's
// clock). Heads over the limit wait unclaimed, no failure counted, and are
// claimed when the next window opens (the worker waits for it; it does not
// poll). Every worker handling the consumer must set the same limit.
func RateLimit(starts int, per time.Duration) HandlerOption {
	return func(s *HandlerSpec) { s.rate = redisstore.RateLimit{Starts: starts, Per: per} }
}

// rateState is a rate-limited consumer's claiming state, owned by the
// dispatcher's goroutine.
type rateState struct {
	limit  redisstore.RateLimit
	tokens int                  // starts taken and not used yet
	grant  redisstore.RateGrant // the take they came from
	until  time.Time            // when they lapse (their window ends), system clock
	// blocked: the window is used up until `until`; idle: the last claim
	// found no work (until the next wake-up).
	blocked, idle bool
	// lag is how long a claim takes, a moving average of the last ones:
	// starts are used only while a claim can end in their window (a claim
	// ending after it would start its heads in the next window, whose
	// count does not hold them).
	lag time.Duration
}

// claimFits reports whether a claim started now ends before the starts
// lapse, counting twice a claim's usual duration — but never more than a
// quarter of the window, so a run of slow claims (a loaded server) cannot
// keep every claim out of every window.
func (rs *rateState) claimFits(now time.Time) bool {
	return now.Add(min(2*rs.lag, rs.limit.Per/4)).Before(rs.until)
}

// claimTook records a claim's duration in the moving average (a quarter
// of the way to each new one).
func (rs *rateState) claimTook(d time.Duration) {
	if rs.lag == 0 {
		rs.lag = d
		return
	}
	rs.lag += (d - rs.lag) / 4
}

// rateMargin is taken off a window's end: starts kept locally lapse that
// much early, so a process whose clock runs behind the server's does not
// use them in the next window.
const rateMargin = 5 * time.Millisecond

// claimRated claims for every rate-limited consumer that may claim now:
// woken says a wake-up or the index may have work for it. It returns
// whether it claimed anything and the earliest time a consumer held back by
// its limit may claim again (zero: none).
func (w *Worker) claimRated(ctx context.Context, woken bool) (claimed bool, retryAt time.Time) {
	for _, c := range w.rated {
		rs := c.rate
		now := time.Now()
		if !rs.until.IsZero() && !now.Before(rs.until) {
			rs.tokens, rs.blocked = 0, false // the window ended: its starts lapsed
		}
		if rs.tokens > 0 && !rs.claimFits(now) {
			// Too near the window's end for a claim: the starts go back
			// (for a process whose claim may still fit), and the next
			// window's are taken when it opens.
			w.giveBackStarts(ctx, c, rs)
			rs.blocked = true
			if retryAt.IsZero() || rs.until.Before(retryAt) {
				retryAt = rs.until
			}
			continue
		}
		if woken {
			rs.idle = false
		}
		if rs.idle || rs.blocked {
			if rs.blocked && (retryAt.IsZero() || rs.until.Before(retryAt)) {
				retryAt = rs.until
			}
			continue
		}
		w.mu.Lock()
		room := w.free
		if c.limit > 0 {
			room = min(room, c.limit-c.running-len(c.queue))
		}
		stopping := w.stopping
		w.mu.Unlock()
		if room <= 0 || stopping {
			continue
		}
		if rs.tokens == 0 {
			grant, err := w.store.TakeStarts(w.wctx, c.spec.Name, rs.limit, room)
			if err != nil {
				if ctx.Err() == nil {
					w.runtimeError(ctx, nil, fmt.Errorf("worker: rate limit of %q: %w", c.spec.Name, err))
				}
				continue
			}
			rs.tokens, rs.grant, rs.until = grant.Starts, grant, now.Add(grant.Wait-rateMargin)
			if grant.Starts == 0 || !rs.claimFits(time.Now()) {
				w.giveBackStarts(ctx, c, rs) // granted too near the window's end for a claim
				rs.blocked = true
				if retryAt.IsZero() || rs.until.Before(retryAt) {
					retryAt = rs.until
				}
				continue
			}
		}
		leaseFrom := time.Now()
		limit := min(room, rs.tokens)
		res, err := w.store.ClaimNext(w.wctx, redisstore.ClaimNextRequest{
			Holder: w.cfg.ID, TTL: w.cfg.TTL, Consumers: []a2redis.Consumer{c.spec}, MaxFailures: w.cfg.MaxFailures, Limit: limit,
		})
		rs.claimTook(time.Since(leaseFrom))
		if err != nil {
			if ctx.Err() == nil {
				w.runtimeError(ctx, nil, fmt.Errorf("worker: claiming for %q: %w", c.spec.Name, err))
			}
			continue
		}
		if res.Outcome != redisstore.Claimed || len(res.Heads) == 0 {
			if res.Outcome == redisstore.Claimed {
				w.admitClaim(ctx, res, leaseFrom, nil, 1) // dead letters only
			}
			// No work: the starts go back for other processes.
			w.giveBackStarts(ctx, c, rs)
			rs.idle = true
			// The index may hold its work where this call did not look, or
			// a hold may end: look again then, as the main claim does.
			if next := res.NextAt; !next.IsZero() {
				at := time.Now().Add(max(next.Sub(w.store.Now()), time.Millisecond))
				rs.idle, rs.blocked, rs.until = false, true, at
				if retryAt.IsZero() || at.Before(retryAt) {
					retryAt = at
				}
			}
			continue
		}
		rs.tokens -= len(res.Heads)
		w.admitClaim(ctx, res, leaseFrom, nil, 1)
		claimed = true
	}
	return claimed, retryAt
}

// giveBackStarts gives the consumer's unused starts back to its limit (the
// store gives back nothing once their window has ended).
func (w *Worker) giveBackStarts(ctx context.Context, c *consumer, rs *rateState) {
	if rs.tokens > 0 {
		if err := w.store.GiveBackStarts(w.wctx, c.spec.Name, rs.limit, rs.grant, rs.tokens); err != nil && ctx.Err() == nil {
			w.runtimeError(ctx, nil, fmt.Errorf("worker: rate limit of %q: %w", c.spec.Name, err))
		}
	}
	rs.tokens = 0
}

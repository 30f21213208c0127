package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// RateLimit bounds a consumer's handler starts across the whole prefix:
// at most Starts per window of Per, windows counted on the server's clock
// (so processes whose clocks disagree share one count).
type RateLimit struct {
	// Starts is the most starts per window. At least 1.
	Starts int
	// Per is the window's length. At least a millisecond.
	Per time.Duration
}

func (l RateLimit) check() error {
	if l.Starts < 1 {
		return check.Invalid("RateLimit.Starts", "must be at least 1 (got %d)", l.Starts)
	}
	if l.Per < time.Millisecond {
		return check.Invalid("RateLimit.Per", "must be at least 1ms (got %v)", l.Per)
	}
	return nil
}

// RateGrant is what TakeStarts granted.
type RateGrant struct {
	// Starts is how many starts were granted: fewer than asked, or none,
	// when the window is (nearly) used up.
	Starts int
	// Wait is how long until the window ends, when the next starts can be
	// granted.
	Wait time.Duration
	// Window numbers the window the starts were taken from (the server's
	// clock in ms divided by the window's length): GiveBackStarts gives
	// them back only while it lasts.
	Window int64
}

// TakeStarts takes up to n starts from consumer's rate limit (one script
// call on the limiters' slot), and says how many it granted, from which
// window, and when that window ends. Every process that limits the
// consumer must pass the same limit.
func (s *Store) TakeStarts(ctx context.Context, consumer string, limit RateLimit, n int) (RateGrant, error) {
	if err := check.Name("consumer", consumer); err != nil {
		return RateGrant{}, err
	}
	if err := limit.check(); err != nil {
		return RateGrant{}, err
	}
	if n < 1 {
		return RateGrant{}, check.Invalid("n", "must be at least 1 (got %d)", n)
	}
	return s.rate(ctx, consumer, limit, int64(n), "")
}

// GiveBackStarts returns n starts of a grant that were not used (a claim
// found fewer heads), so the window's count stays the starts that
// happened. Starts of a window that has ended are not given back: the
// window now running did not grant them, and giving them back to it would
// let it grant more than its limit. n is at most the grant's Starts.
func (s *Store) GiveBackStarts(ctx context.Context, consumer string, limit RateLimit, from RateGrant, n int) error {
	if err := check.Name("consumer", consumer); err != nil {
		return err
	}
	if err := limit.check(); err != nil {
		return err
	}
	if n > from.Starts {
		return check.Invalid("n", "gives back %d starts of a grant of %d", n, from.Starts)
	}
	if n < 1 {
		return nil
	}
	_, err := s.rate(ctx, consumer, limit, -int64(n), itoa(from.Window))
	return err
}

func (s *Store) rate(ctx context.Context, consumer string, limit RateLimit, n int64, window string) (RateGrant, error) {
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return RateGrant{}, err
	}
	lua := scripts.All()["rate_take"].Lua(locking)
	k := []string{keys.Rate(s.cfg.Prefix, consumer), keys.RateSentinel(s.cfg.Prefix)}
	args := []string{itoa(int64(limit.Starts)), itoa(limit.Per.Milliseconds()), itoa(n), window}
	var reply [3]int64
	// Not repeated on an unknown outcome: a second take would count twice.
	err = s.retrying(ctx, false, func(ctx context.Context) error {
		values, err := lua.Exec(ctx, s.client, k, args).ToArray()
		if err != nil {
			return err
		}
		if len(values) != len(reply) {
			return fmt.Errorf("%w: rate_take replied %d values", a2redis.ErrUnexpectedReply, len(values))
		}
		for i, v := range values {
			if reply[i], err = v.AsInt64(); err != nil {
				return fmt.Errorf("%w: rate_take: %v", a2redis.ErrUnexpectedReply, err)
			}
		}
		return nil
	})
	if err != nil {
		return RateGrant{}, fmt.Errorf("a2redis: rate limit of %q: %w", consumer, err)
	}
	return RateGrant{Starts: int(reply[0]), Wait: time.Duration(reply[1]) * time.Millisecond, Window: reply[2]}, nil
}

// RateUsage is a consumer's rate-limit window as its limiter holds it.
type RateUsage struct {
	// Consumer is the consumer's name.
	Consumer string
	// Starts is how many starts the running window has granted; 0 when
	// no window is running (no start was taken lately).
	Starts int
	// EndsIn is how long until that window ends; 0 when none runs.
	EndsIn time.Duration
}

// RateUsages reads the running rate-limit window of each consumer (a GET
// and a PTTL per consumer, sent together to the limiters' slot): what an
// operator checks to see a limit at work. A consumer without a rate limit,
// or whose window ended, reads as no window.
func (s *Store) RateUsages(ctx context.Context, consumers ...string) ([]RateUsage, error) {
	for _, c := range consumers {
		if err := check.Name("consumer", c); err != nil {
			return nil, err
		}
	}
	out := make([]RateUsage, len(consumers))
	for start := 0; start < len(consumers); start += rateReadPage {
		page := consumers[start:min(len(consumers), start+rateReadPage)]
		cmds := make([]rueidis.Completed, 0, 2*len(page))
		for _, c := range page {
			k := keys.Rate(s.cfg.Prefix, c)
			cmds = append(cmds, s.client.B().Get().Key(k).Build(), s.client.B().Pttl().Key(k).Build())
		}
		res := s.doMulti(ctx, cmds...)
		for i, c := range page {
			u := RateUsage{Consumer: c}
			stored, err := res[2*i].ToString()
			if err != nil && !rueidis.IsRedisNil(err) {
				return nil, err
			}
			ttl, err := res[2*i+1].AsInt64()
			if err != nil {
				return nil, err
			}
			// The limiter outlives its window by scripts.RateGrace.
			if _, n, ok := strings.Cut(stored, " "); ok && ttl > scripts.RateGrace {
				taken, _ := strconv.Atoi(n)
				u.Starts, u.EndsIn = taken, time.Duration(ttl-scripts.RateGrace)*time.Millisecond
			}
			out[start+i] = u
		}
	}
	return out, nil
}

// rateReadPage bounds the consumers one RateUsages round trip reads.
const rateReadPage = 256

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// payload is every event's body (the one redisstore's own benchmarks use).
var payload = []byte(`{"user":"u-1842","action":"checkout","items":[1,2,3],"total":129.5}`)

// parallel runs op(i) for every i in [0, n) from `workers` goroutines and
// returns how long that took. The first error cancels the rest and is
// returned. With rec set, every call's duration is recorded.
func parallel(ctx context.Context, workers, n int, rec *recorder, op func(ctx context.Context, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t := time.Now()
				if err := op(ctx, i); err != nil {
					cancel(err)
					return
				}
				if rec != nil {
					rec.add(time.Since(t))
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return elapsed, err
	}
	return elapsed, nil
}

// clock gives monotonic timestamps that goroutines can share through
// atomics: nanoseconds since the clock was made.
type clock struct{ base time.Time }

func newClock() clock { return clock{base: time.Now()} }

func (c clock) now() int64 { return int64(time.Since(c.base)) }

// stamps holds one send time per event, written by the sender and read by
// whoever receives the event.
type stamps []atomic.Int64

// since returns the delay from event i's send to now (a clock reading).
func (s stamps) since(i int, now int64) (time.Duration, bool) {
	if i < 0 || i >= len(s) {
		return 0, false
	}
	sent := s[i].Load()
	if sent == 0 {
		return 0, false
	}
	return time.Duration(now - sent), true
}

// atRate calls send(i) for i in [0, n) at `rate` calls per second, each in
// a goroutine of its own (an open loop: a slow call does not delay the
// next), and waits for every call. It returns the achieved rate (calls
// started per second) and the first error.
func atRate(ctx context.Context, rate, n int, send func(ctx context.Context, i int) error) (float64, error) {
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				wg.Wait()
				return 0, ctx.Err()
			case <-t.C:
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := send(ctx, i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	achieved := float64(n) / (time.Since(start) + interval).Seconds()
	wg.Wait()
	return achieved, first
}

// waitFor polls cond every millisecond until it holds, ctx ends or the
// timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a2bench: timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

var errShort = errors.New("a2bench: fewer events handled than appended")

package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
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

// finishRated ends a fixed-rate latency scenario: it waits (10 s at most)
// until every event was delivered, ends the measuring phase, then stops the
// receiving side (when stop is set) and reports how it ended (receiver names
// it in errors). It returns the time since start and the phase's cost.
func finishRated(ctx context.Context, ph *phase, start time.Time, n int, what string, delivered func() bool,
	stop func(), done <-chan error, receiver string) (time.Duration, Cost, error) {
	if err := waitFor(ctx, 10*time.Second, what, delivered); err != nil {
		return 0, Cost{}, err
	}
	elapsed := time.Since(start)
	cost, err := ph.end(ctx, n)
	if err != nil {
		return 0, Cost{}, err
	}
	if stop != nil {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return 0, Cost{}, fmt.Errorf("a2bench: %s: %w", receiver, err)
		}
	}
	return elapsed, cost, nil
}

// appended finishes an append/enqueue throughput measurement: the phase's
// cost, the memory the n events hold, and the per-call latency (label
// names it).
func (h *harness) appended(ctx context.Context, ph *phase, mem0 float64, n int, elapsed time.Duration, rec *recorder, label string) (Measurement, error) {
	cost, err := ph.end(ctx, n)
	if err != nil {
		return Measurement{}, err
	}
	mem1, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: float64(n) / elapsed.Seconds(),
		Latency: rec.latency(label),
		Cost:    cost, MemRetained: (mem1 - mem0) / float64(n),
	}, nil
}

// appendAtRate appends n one-event batches (ids e0, e1, …, each targeting
// the a2 consumer's event cursor) to session at the run's fixed rate,
// stamping each event's send time in sent: the latency scenarios' load.
func appendAtRate(ctx context.Context, h *harness, st *redisstore.Store, session string, n int, sent stamps, clk clock) (float64, error) {
	return atRate(ctx, h.opts.Rate, n, func(ctx context.Context, i int) error {
		sent[i].Store(max(clk.now(), 1))
		_, err := st.Append(ctx, session, []a2redis.Event{{ID: "e" + strconv.Itoa(i), Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: a2Consumer}}}}, redisstore.AppendOptions{})
		return err
	})
}

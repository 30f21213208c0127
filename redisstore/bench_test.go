package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// Benchmarks run against a redis-server of their own. Compare figures only
// with the baseline measured in the same run (this machine has 2 cores shared
// by client and server):
//
//	go test ./redisstore -run '^$' -bench . -benchtime 2s -count 3
//
// Baselines: an EVALSHA of a script doing one XADD (appends), and a Redis
// Streams consumer-group cycle, XREADGROUP COUNT 16 + XACK (processing).

var benchPayload = []byte(`{"user":"u-1842","action":"checkout","items":[1,2,3],"total":129.5}`)

type bench struct {
	ctx    context.Context
	client rueidis.Client
	store  *redisstore.Store
}

var benchSeq atomic.Int64

// newBench starts a server for one top-level benchmark (its statistics are
// then the benchmark's alone).
func newBench(b *testing.B) *bench {
	b.Helper()
	c := privateServer(b)
	ctx := context.Background()
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "bench"})
	require.NoError(b, err)
	return &bench{ctx: ctx, client: c, store: s}
}

func session(prefix string) string { return fmt.Sprintf("%s-%d", prefix, benchSeq.Add(1)) }

func (e *bench) fill(b *testing.B, session string, n int, mk func(i int) a2redis.Event) {
	b.Helper()
	for start := 0; start < n; start += 500 {
		batch := make([]a2redis.Event, min(500, n-start))
		for i := range batch {
			if mk == nil {
				batch[i] = a2redis.Event{Type: "t", Payload: benchPayload}
			} else {
				batch[i] = mk(start + i)
			}
		}
		_, err := e.store.Append(e.ctx, session, batch, redisstore.AppendOptions{})
		require.NoError(b, err)
	}
}

// serverCPU returns the server's used CPU (user + sys), in microseconds.
func (e *bench) serverCPU(b *testing.B) float64 {
	b.Helper()
	info, err := e.client.Do(e.ctx, e.client.B().Info().Section("cpu").Build()).ToString()
	require.NoError(b, err)
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			v, _ := strconv.ParseFloat(value, 64)
			total += v * 1e6
		}
	}
	return total
}

// measure reports the server's CPU per unit of work done between its call
// and the returned function's.
func (e *bench) measure(b *testing.B) func(units int, unit string) {
	b.Helper()
	before := e.serverCPU(b)
	scripts := e.scriptCalls(b)
	return func(units int, unit string) {
		b.ReportMetric((e.serverCPU(b)-before)/float64(units), "srv-µs/"+unit)
		b.ReportMetric(float64(units)/b.Elapsed().Seconds(), unit+"s/s")
		b.ReportMetric(float64(e.scriptCalls(b)-scripts)/float64(units), "scripts/"+unit)
	}
}

// scriptCalls returns how many EVALSHA and EVAL calls the server ran.
func (e *bench) scriptCalls(b *testing.B) int64 {
	b.Helper()
	var n int64
	for name, calls := range commandStatsAll(e.ctx, b, e.client) {
		if name == "evalsha" || name == "eval" {
			n += calls
		}
	}
	return n
}

// parallel runs op from workers goroutines until b.N calls are done.
func parallel(b *testing.B, workers int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := op(int(i)); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}

var xaddScript = rueidis.NewLuaScript(`return redis.call('XADD', KEYS[1], '*', 'payload', ARGV[1])`)

func BenchmarkAppend(b *testing.B) {
	e := newBench(b)
	// The baseline at both concurrencies the appends below use.
	for _, callers := range []int{64, 16} {
		b.Run(fmt.Sprintf("baseline=evalsha-xadd/callers=%d", callers), func(b *testing.B) {
			key := session("base")
			done := e.measure(b)
			parallel(b, callers, func(int) error {
				return xaddScript.Exec(e.ctx, e.client, []string{key}, []string{string(benchPayload)}).Error()
			})
			done(b.N, "op")
		})
	}
	b.Run("append-1/callers=64", func(b *testing.B) {
		s := session("a1")
		done := e.measure(b)
		parallel(b, 64, func(int) error {
			_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t", Payload: benchPayload}}, redisstore.AppendOptions{})
			return err
		})
		done(b.N, "op")
	})
	// The same with every append in a script call of its own.
	single, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: "bench", NoCoalescing: true})
	require.NoError(b, err)
	b.Run("append-1/callers=64/no-coalescing", func(b *testing.B) {
		s := session("a1n")
		done := e.measure(b)
		parallel(b, 64, func(int) error {
			_, err := single.Append(e.ctx, s, []a2redis.Event{{Type: "t", Payload: benchPayload}}, redisstore.AppendOptions{})
			return err
		})
		done(b.N, "op")
	})
	b.Run("append-1/callers=64/sessions=64", func(b *testing.B) {
		sessions := make([]string, 64)
		for i := range sessions {
			sessions[i] = session("a1s")
		}
		done := e.measure(b)
		parallel(b, 64, func(i int) error {
			_, err := e.store.Append(e.ctx, sessions[i%64], []a2redis.Event{{Type: "t", Payload: benchPayload}}, redisstore.AppendOptions{})
			return err
		})
		done(b.N, "op")
	})
	for _, st := range []struct {
		name  string
		store *redisstore.Store
	}{{"", e.store}, {"/no-coalescing", single}} {
		b.Run("append-100/callers=16"+st.name, func(b *testing.B) {
			s := session("a100")
			done := e.measure(b)
			parallel(b, 16, func(int) error {
				events := make([]a2redis.Event, 100)
				for i := range events {
					events[i] = a2redis.Event{Type: "t", Payload: benchPayload}
				}
				_, err := st.store.Append(e.ctx, s, events, redisstore.AppendOptions{})
				return err
			})
			done(b.N*100, "event")
		})
	}
	for _, history := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("append-1/history=%d", history), func(b *testing.B) {
			s := session("hist")
			e.fill(b, s, history, nil)
			b.ResetTimer()
			done := e.measure(b)
			parallel(b, 64, func(int) error {
				_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t", Payload: benchPayload}}, redisstore.AppendOptions{})
				return err
			})
			done(b.N, "op")
		})
	}
}

func BenchmarkProcess(b *testing.B) {
	e := newBench(b)
	for _, handlers := range []int{16, 64} {
		b.Run(fmt.Sprintf("baseline=xreadgroup-xack/handlers=%d", handlers), func(b *testing.B) {
			key := session("grp")
			c := e.client
			for start := 0; start < b.N; start += 1000 {
				cmds := make(rueidis.Commands, 0, 1000)
				for i := start; i < min(start+1000, b.N); i++ {
					cmds = append(cmds, c.B().Xadd().Key(key).Id("*").FieldValue().FieldValue("payload", string(benchPayload)).Build())
				}
				for _, r := range c.DoMulti(e.ctx, cmds...) {
					require.NoError(b, r.Error())
				}
			}
			require.NoError(b, c.Do(e.ctx, c.B().XgroupCreate().Key(key).Group("g").Id("0").Build()).Error())
			var handled atomic.Int64
			b.ResetTimer()
			done := e.measure(b)
			var wg sync.WaitGroup
			for w := range handlers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for handled.Load() < int64(b.N) {
						res, err := c.Do(e.ctx, c.B().Xreadgroup().Group("g", strconv.Itoa(w)).Count(16).Streams().Key(key).Id(">").Build()).AsXRead()
						if err != nil && !rueidis.IsRedisNil(err) {
							b.Error(err)
							return
						}
						entries := res[key]
						if len(entries) == 0 {
							return
						}
						ids := make([]string, len(entries))
						for i, en := range entries {
							ids[i] = en.ID
						}
						if err := c.Do(e.ctx, c.B().Xack().Key(key).Group("g").Id(ids...).Build()).Error(); err != nil {
							b.Error(err)
							return
						}
						handled.Add(int64(len(entries)))
					}
				}()
			}
			wg.Wait()
			done(b.N, "event")
		})
		for _, oneByOne := range []bool{false, true} {
			name := fmt.Sprintf("event-cursors/handlers=%d", handlers)
			if oneByOne {
				name += "/complete-one-by-one"
			}
			b.Run(name, func(b *testing.B) {
				s := session("ev")
				e.fill(b, s, b.N, func(int) a2redis.Event {
					return a2redis.Event{Type: "t", Payload: benchPayload, Targets: []a2redis.Target{{Consumer: "c"}}}
				})
				b.ResetTimer()
				done := e.measure(b)
				drainT(b, e, s, handlers, 16, oneByOne)
				done(b.N, "event")
			})
		}
	}
	// One handler claiming 16 heads at a time and completing them
	// together, without a limit and with the consumer limited to 16 heads
	// of a session in flight (a2redis.Consumer.PerSession), which each
	// claim then takes whole: the cost of the limit (the general claim
	// script, the read of the count) side by side.
	for _, perSession := range []int{0, 16} {
		b.Run(fmt.Sprintf("event-cursors/handlers=1/per-session=%d", perSession), func(b *testing.B) {
			ps, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: fmt.Sprintf("bench-ps%d", perSession),
				Consumers: []a2redis.Consumer{{Name: "c", PerSession: perSession}}})
			require.NoError(b, err)
			pe := &bench{ctx: e.ctx, client: e.client, store: ps}
			s := session("ps")
			pe.fill(b, s, b.N, func(int) a2redis.Event {
				return a2redis.Event{Type: "t", Payload: benchPayload, Targets: []a2redis.Target{{Consumer: "c"}}}
			})
			b.ResetTimer()
			done := pe.measure(b)
			drainT(b, pe, s, 1, 16, false)
			done(b.N, "event")
		})
	}
	for _, lanes := range []int{1, 16} {
		b.Run(fmt.Sprintf("ordered/lanes=%d", lanes), func(b *testing.B) {
			s := session("lane")
			e.fill(b, s, b.N, func(i int) a2redis.Event {
				return a2redis.Event{Type: "t", Payload: benchPayload, Targets: []a2redis.Target{{Consumer: "c", Lane: strconv.Itoa(i % lanes)}}}
			})
			b.ResetTimer()
			done := e.measure(b)
			// Only a lane's head is ever runnable, so one worker claims the
			// head of every lane (limit = lanes) and completes them together:
			// at most one event per lane is in hand at a time. (More workers
			// would only find every head held: busy claims.)
			e.drain(b, s, 1, lanes)
			done(b.N, "event")
		})
	}
}

// drain claims and completes a session's heads with `handlers` goroutines
// until it is settled.
func (e *bench) drain(b *testing.B, session string, handlers, limit int) {
	b.Helper()
	drainT(b, e, session, handlers, limit, false)
}

// drainT drains with CompleteAttempts per claim, or with oneByOne a
// CompleteAttempt per head.
func drainT(b testing.TB, e *bench, session string, handlers, limit int, oneByOne bool) {
	var wg sync.WaitGroup
	for w := range handlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := strconv.Itoa(w)
			for {
				c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: holder, TTL: time.Minute, Limit: limit})
				if err != nil {
					b.Error(err)
					return
				}
				switch c.Outcome {
				case redisstore.Settled:
					return
				case redisstore.Busy:
					time.Sleep(200 * time.Microsecond)
					continue
				}
				if oneByOne {
					for _, h := range c.Heads {
						if _, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts}); err != nil {
							b.Error(err)
							return
						}
					}
					continue
				}
				// The handlers return no events: the heads of one claim
				// complete together.
				done := make([]redisstore.Attempt, len(c.Heads))
				for i, h := range c.Heads {
					done[i] = redisstore.AttemptOf(h)
				}
				if _, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// One append + claim + complete, sequentially, as history and idle cursors
// grow: the cost must stay flat.
func BenchmarkCycle(b *testing.B) {
	e := newBench(b)
	cycle := func(b *testing.B, s string, target a2redis.Target) {
		b.Helper()
		for i := 0; i < b.N; i++ {
			_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t", Payload: benchPayload, Targets: []a2redis.Target{target}}}, redisstore.AppendOptions{})
			require.NoError(b, err)
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute})
			require.NoError(b, err)
			require.Len(b, c.Heads, 1)
			_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: s, Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts})
			require.NoError(b, err)
		}
	}
	for _, history := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			s := session("cyc")
			e.fill(b, s, history, nil)
			b.ResetTimer()
			cycle(b, s, a2redis.Target{Consumer: "c"})
		})
	}
	for _, idle := range []int{1, 1_000} {
		b.Run(fmt.Sprintf("idle-lanes=%d", idle), func(b *testing.B) {
			s := session("idle")
			e.fill(b, s, idle, func(i int) a2redis.Event {
				return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "idle-" + strconv.Itoa(i)}}}
			})
			e.drain(b, s, 4, 256)
			b.ResetTimer()
			cycle(b, s, a2redis.Target{Consumer: "c", Lane: "hot"})
		})
	}
	for _, gap := range []int{1, 1_000} {
		b.Run(fmt.Sprintf("typed-log/other-types-between=%d", gap), func(b *testing.B) {
			s := session("typed")
			served := []a2redis.Consumer{{Name: "audit", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"rare"}}}}
			_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "rare"}}, redisstore.AppendOptions{Consumers: served})
			require.NoError(b, err)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e.fill(b, s, gap, nil)
				b.StartTimer()
				c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute, Consumers: served})
				require.NoError(b, err)
				require.Len(b, c.Heads, 1)
				_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: s, Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, Consumers: served})
				require.NoError(b, err)
				_, err = e.store.Append(e.ctx, s, []a2redis.Event{{Type: "rare"}}, redisstore.AppendOptions{Consumers: served})
				require.NoError(b, err)
			}
		})
	}
}

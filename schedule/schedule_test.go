package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// testClock is a clock moved by hand: After's channels fire once Advance
// reaches their instant.
type testClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	// waiting counts the After calls not yet fired, for tests that wait
	// until every runner sleeps.
	changed chan struct{}
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newTestClock(at time.Time) *testClock {
	return &testClock{now: at, changed: make(chan struct{}, 1024)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	at := c.now.Add(d)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: at, ch: ch})
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return ch
}

// Advance moves the clock by d and fires the waiters it reached.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// pending is how many After channels wait.
func (c *testClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// settle waits until n runners sleep on the clock (each has one waiter).
func (c *testClock) settle(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("runners did not settle: %d of %d waiting", c.pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// process is one runner with its own client and store, as a process of its
// own would have.
type process struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startProcess(t *testing.T, client rueidis.Client, prefix string, clock *testClock, schedules ...schedule.Schedule) *process {
	t.Helper()
	store, err := redisstore.New(context.Background(), client, redisstore.Config{Prefix: prefix, Clock: clock.Now})
	require.NoError(t, err)
	r, err := schedule.NewRunner(store, schedule.Config{Clock: clock, ID: fmt.Sprintf("p%d", rand.IntN(1000))}, schedules...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- r.Run(ctx) }()
	t.Cleanup(p.stop)
	return p
}

func (p *process) stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}

// clients returns n clients of their own on one target server.
func clients(t *testing.T, target string, n int) []rueidis.Client {
	t.Helper()
	var out []rueidis.Client
	for i := 0; i < n; i++ {
		var url string
		switch target {
		case "redis":
			url = "redis://" + redistest.ServerAddr(t)
		case "cluster":
			url = "redis://" + redistest.ClusterAddrs(t)[0]
		default:
			mr, _ := redistest.Miniredis(t)
			if len(out) > 0 {
				t.Fatalf("miniredis: one client")
			}
			url = "redis://" + mr.Addr()
		}
		c, err := redisstore.Dial(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		out = append(out, c)
	}
	return out
}

// logOf reads the session's events, in log order.
func logOf(t *testing.T, client rueidis.Client, prefix, session string) []a2redis.StoredEvent {
	t.Helper()
	store, err := redisstore.New(context.Background(), client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	events, err := store.Read(context.Background(), session, 0, 1_000_000)
	require.NoError(t, err)
	return events
}

var start = time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)

// TestExactlyOncePerTickAcrossProcesses: three runners of one schedule,
// each with its own client and store, on a test clock moved in random steps
// (some shorter than a tick, some spanning several): every tick from the
// start on is stored exactly once, in order, and nothing else is.
func TestExactlyOncePerTickAcrossProcesses(t *testing.T) {
	for _, target := range []string{"redis", "cluster"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			cs := clients(t, target, 3)
			prefix := redistest.Prefix(t)
			clock := newTestClock(start.Add(17 * time.Second))
			sched := schedule.Schedule{Name: "beat", Every: time.Minute, Session: "s1",
				Event: a2redis.Event{Type: "beat.due", Targets: []a2redis.Target{{Consumer: "c"}}}}
			for _, c := range cs {
				startProcess(t, c, prefix, clock, sched)
			}
			clock.settle(t, 3)
			rng := rand.New(rand.NewPCG(1, 2))
			end := start.Add(17 * time.Second).Add(60 * time.Minute)
			for clock.Now().Before(end) {
				step := time.Duration(rng.Int64N(int64(150*time.Second))) + time.Second
				clock.Advance(step)
				clock.settle(t, 3)
			}
			events := logOf(t, cs[0], prefix, "s1")
			var want []string
			for tick := start.Add(time.Minute); !tick.After(clock.Now()); tick = tick.Add(time.Minute) {
				want = append(want, schedule.EventID("beat", tick))
			}
			var got []string
			for _, ev := range events {
				got = append(got, ev.ID)
			}
			require.Equal(t, want, got, "one event per tick, in order")
			require.GreaterOrEqual(t, len(got), 60)
			require.Equal(t, "beat.due", events[0].Type)
			require.JSONEq(t, fmt.Sprintf(`{"schedule":"beat","tick":%q}`, start.Add(time.Minute).Format(time.RFC3339Nano)), string(events[0].Payload))

			// The listing names the schedule and its newest tick.
			store, err := redisstore.New(context.Background(), cs[0], redisstore.Config{Prefix: prefix})
			require.NoError(t, err)
			listed, err := store.Schedules(context.Background())
			require.NoError(t, err)
			require.Len(t, listed, 1)
			require.Equal(t, "beat", listed[0].Name)
			require.Equal(t, "every 1m0s", listed[0].Spec)
			require.Equal(t, "s1", listed[0].Session)
			require.Equal(t, "beat.due", listed[0].Type)
			last := start.Add(time.Duration(len(want)) * time.Minute)
			require.True(t, listed[0].Last.Equal(last), "last %v, want %v", listed[0].Last, last)
			require.True(t, listed[0].Next.After(listed[0].Last))
			require.NoError(t, store.RemoveSchedule(context.Background(), "beat"))
			listed, err = store.Schedules(context.Background())
			require.NoError(t, err)
			require.Empty(t, listed)
		})
	}
}

// TestMissedTicks: ticks that fell due while no runner ran are skipped by
// default; CatchUp appends those of its window, and only those not stored.
func TestMissedTicks(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			client := tg.Client(t)
			prefix := redistest.Prefix(t)
			clock := newTestClock(start.Add(time.Second))
			sched := schedule.Schedule{Name: "m", Every: 10 * time.Minute, Session: "s",
				Event: a2redis.Event{Type: "m.due"}}
			p := startProcess(t, client, prefix, clock, sched)
			clock.settle(t, 1)
			clock.Advance(25 * time.Minute) // ticks 12:10, 12:20
			clock.settle(t, 1)
			p.stop()
			clock.Advance(60 * time.Minute) // 12:30 … 13:20 missed, now 13:25:01
			p2 := startProcess(t, client, prefix, clock, sched)
			clock.settle(t, 1)
			clock.Advance(10 * time.Minute) // tick 13:30
			clock.settle(t, 1)
			p2.stop()
			ids := func() []string {
				var out []string
				for _, ev := range logOf(t, client, prefix, "s") {
					out = append(out, strings.TrimPrefix(ev.ID, "a2s:m:"))
				}
				return out
			}
			ms := func(hm ...string) []string {
				var out []string
				for _, s := range hm {
					at, err := time.Parse("15:04", s)
					require.NoError(t, err)
					tick := time.Date(2031, 3, 1, at.Hour(), at.Minute(), 0, 0, time.UTC)
					out = append(out, fmt.Sprint(tick.UnixMilli()))
				}
				return out
			}
			require.Equal(t, ms("12:10", "12:20", "13:30"), ids(), "missed ticks skipped")

			// A runner with CatchUp 25m, started at 13:50:01 after a gap,
			// appends 13:40 and 13:50 (13:30 is stored and replays; 12:30 …
			// 13:20 are out of its window and stay skipped).
			clock.Advance(15 * time.Minute)
			catchUp := sched
			catchUp.CatchUp = 25 * time.Minute
			startProcess(t, client, prefix, clock, catchUp)
			clock.settle(t, 1)
			require.Equal(t, ms("12:10", "12:20", "13:30", "13:40", "13:50"), ids(), "the catch-up window's missed tick, once")
		})
	}
}

// TestCronSpec: a cron spec's ticks over a day, in its zone.
func TestCronSpec(t *testing.T) {
	_, client := redistest.Miniredis(t)
	prefix := redistest.Prefix(t)
	clock := newTestClock(start)
	startProcess(t, client, prefix, clock,
		schedule.Schedule{Name: "q", Cron: "*/15 9-10 * * *", Session: "s", Event: a2redis.Event{Type: "q"}},
		schedule.Schedule{Name: "berlin", Cron: "CRON_TZ=Europe/Berlin 0 14 * * *", Session: "s", Event: a2redis.Event{Type: "b"}},
	)
	clock.settle(t, 1)
	for i := 0; i < 24*4; i++ {
		clock.Advance(15 * time.Minute)
		clock.settle(t, 1)
	}
	var got []string
	for _, ev := range logOf(t, client, prefix, "s") {
		got = append(got, ev.ID)
	}
	var want []string
	for _, hm := range [][2]int{{9, 0}, {9, 15}, {9, 30}, {9, 45}, {10, 0}, {10, 15}, {10, 30}, {10, 45}} {
		want = append(want, schedule.EventID("q", time.Date(2031, 3, 2, hm[0], hm[1], 0, 0, time.UTC)))
	}
	want = append(want, schedule.EventID("berlin", time.Date(2031, 3, 1, 13, 0, 0, 0, time.UTC))) // 14:00 CET
	sort.Strings(want)
	sort.Strings(got)
	require.Equal(t, want, got)
}

// TestInvalidSchedules: bad schedules are ErrInvalidArgument before
// anything runs.
func TestInvalidSchedules(t *testing.T) {
	_, client := redistest.Miniredis(t)
	store, err := redisstore.New(context.Background(), client, redisstore.Config{Prefix: redistest.Prefix(t)})
	require.NoError(t, err)
	ev := a2redis.Event{Type: "x"}
	for name, s := range map[string]schedule.Schedule{
		"no name":    {Every: time.Minute, Session: "s", Event: ev},
		"colon":      {Name: "a:b", Every: time.Minute, Session: "s", Event: ev},
		"no session": {Name: "a", Every: time.Minute, Event: ev},
		"both":       {Name: "a", Every: time.Minute, Cron: "* * * * *", Session: "s", Event: ev},
		"neither":    {Name: "a", Session: "s", Event: ev},
		"@every":     {Name: "a", Cron: "@every 1m", Session: "s", Event: ev},
		"bad cron":   {Name: "a", Cron: "61 * * * *", Session: "s", Event: ev},
		"no type":    {Name: "a", Every: time.Minute, Session: "s"},
		"tiny":       {Name: "a", Every: time.Microsecond, Session: "s", Event: ev},
	} {
		_, err := schedule.NewRunner(store, schedule.Config{}, s)
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument, name)
	}
	ok := schedule.Schedule{Name: "a", Every: time.Minute, Session: "s", Event: ev}
	_, err = schedule.NewRunner(store, schedule.Config{}, ok, ok)
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "a name twice")
	require.True(t, errors.Is(err, a2redis.ErrInvalidArgument))
}

// TestBuild: Build makes each tick's event from the tick; its id is the
// runner's.
func TestBuild(t *testing.T) {
	_, client := redistest.Miniredis(t)
	prefix := redistest.Prefix(t)
	clock := newTestClock(start)
	startProcess(t, client, prefix, clock, schedule.Schedule{Name: "hourly", Cron: "@hourly", Session: "s",
		Build: func(tick time.Time) a2redis.Event {
			return a2redis.Event{ID: "ignored", Type: "report", Payload: []byte(fmt.Sprintf(`{"hour":%d}`, tick.Hour()))}
		}})
	clock.settle(t, 1)
	clock.Advance(2 * time.Hour)
	clock.settle(t, 1)
	events := logOf(t, client, prefix, "s")
	require.Len(t, events, 2)
	require.Equal(t, schedule.EventID("hourly", start.Add(time.Hour)), events[0].ID)
	require.JSONEq(t, `{"hour":13}`, string(events[0].Payload))
	require.JSONEq(t, `{"hour":14}`, string(events[1].Payload))
}

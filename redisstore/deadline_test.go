package redisstore_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// Deadlines kept: a call returns within its context's deadline plus
// redisstore.DeadlineSlack, whatever the server does — held by DEBUG SLEEP,
// writes paused by CLIENT PAUSE, or either starting just as the store sends
// the ready-index update of a write that committed (that update used to
// wait Config.ReadyWait, 1s, whatever the caller's deadline). The test
// allows deadlineAllowance over the deadline: DeadlineSlack plus room for
// a loaded machine; the longest overrun is logged. A call that waited for
// the stall would return a second after its deadline (the stall ends
// 1.5s after it began), twice the allowance.

const (
	callDeadline      = 500 * time.Millisecond
	stallFor          = 1500 * time.Millisecond
	deadlineAllowance = redisstore.DeadlineSlack + 450*time.Millisecond
)

// rawCommand sends one command on a connection of its own and returns the
// reply's first line.
func rawCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// serverHeld reports whether a PING (or, for writes, a SET) to addr goes
// unanswered for 50ms.
func serverHeld(addr string, write bool) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	cmd := "*1\r\n$4\r\nPING\r\n"
	if write {
		cmd = "*3\r\n$3\r\nSET\r\n$15\r\ndeadline-probe:\r\n$1\r\n1\r\n"
	}
	if _, err := c.Write([]byte(cmd)); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// stall is one way to hold a server: it starts and returns once the server
// is held, and the channel closes when the hold is over.
type stall struct {
	name  string
	start func(t *testing.T, addr string) <-chan struct{}
}

var stalls = []stall{
	{"debug-sleep", func(t *testing.T, addr string) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if reply, err := rawCommand(addr, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", stallFor.Seconds())); err != nil || !strings.HasPrefix(reply, "+OK") {
				t.Errorf("DEBUG SLEEP: %q %v", reply, err)
			}
		}()
		waitHeld(t, addr, false)
		return done
	}},
	{"client-pause-write", func(t *testing.T, addr string) <-chan struct{} {
		reply, err := rawCommand(addr, "CLIENT", "PAUSE", fmt.Sprint(stallFor.Milliseconds()), "WRITE")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(reply, "+OK"), "CLIENT PAUSE: %q", reply)
		done := make(chan struct{})
		time.AfterFunc(stallFor, func() { close(done) })
		waitHeld(t, addr, true)
		return done
	}},
}

func waitHeld(t *testing.T, addr string, write bool) {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if serverHeld(addr, write) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the stall never held the server")
}

// stallingClient starts a stall just before it sends the ready-index
// script, once armed.
type stallingClient struct {
	rueidis.Client
	sha   string
	armed atomic.Pointer[func()]
}

func (c *stallingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) > 1 && cs[0] == "EVALSHA" && cs[1] == c.sha {
		if fn := c.armed.Swap(nil); fn != nil {
			(*fn)()
		}
	}
	return c.Client.Do(ctx, cmd)
}

// deadlineEnv is a store on a private server, its sessions and a way to
// stall the server at the ready-index update.
type deadlineEnv struct {
	t      *testing.T
	addr   string
	store  *redisstore.Store
	client *stallingClient
	n      int
}

func newDeadlineEnv(t *testing.T) *deadlineEnv {
	in := redistest.SpawnServer(t, "--enable-debug-command", "yes")
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(raw.Close)
	sum := sha1.Sum([]byte(scripts.All()["ready_index"].Source))
	client := &stallingClient{Client: raw, sha: hex.EncodeToString(sum[:])}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One shard: every session's update goes to the same key.
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), ReadyShards: 1})
	require.NoError(t, err)
	return &deadlineEnv{t: t, addr: in.Addr(), store: s, client: client}
}

// session returns a new session with heads event heads of consumer c,
// and the first of them claimed when claimed is set.
func (e *deadlineEnv) session(heads int, claimed bool) (string, *a2redis.HeadEvent) {
	e.n++
	session := fmt.Sprintf("s%d", e.n)
	if heads == 0 {
		return session, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := make([]a2redis.Event, heads)
	for i := range events {
		events[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
	}
	_, err := e.store.Append(ctx, session, events, redisstore.AppendOptions{})
	require.NoError(e.t, err)
	if !claimed {
		return session, nil
	}
	r, err := e.store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: 1})
	require.NoError(e.t, err)
	require.Len(e.t, r.Heads, 1)
	return session, &r.Heads[0]
}

// op is one call under test, made with ctx on a session prepared for it
// (heads event heads, the first claimed when claimed is set); listed and
// due are what the ready index must list for the session afterwards.
type op struct {
	name          string
	heads         int
	claimed       bool
	listed, due   bool
	call          func(ctx context.Context, s *redisstore.Store, session string, head *a2redis.HeadEvent) error
	noIndexUpdate bool
	// readsAfter: the call reads after its write (a claim reads the
	// claimed events), which a server held from the index update on
	// leaves no time for.
	readsAfter bool
}

var deadlineOps = []op{
	{name: "append", listed: true, due: true, call: func(ctx context.Context, s *redisstore.Store, session string, _ *a2redis.HeadEvent) error {
		_, err := s.Append(ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "d"}}}}, redisstore.AppendOptions{})
		return err
	}},
	{name: "plain-append", noIndexUpdate: true, call: func(ctx context.Context, s *redisstore.Store, session string, _ *a2redis.HeadEvent) error {
		_, err := s.Append(ctx, session, []a2redis.Event{{Type: "t"}, {Type: "u"}}, redisstore.AppendOptions{})
		return err
	}},
	{name: "claim", heads: 2, listed: true, readsAfter: true, call: func(ctx context.Context, s *redisstore.Store, session string, _ *a2redis.HeadEvent) error {
		_, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
		return err
	}},
	{name: "complete", heads: 1, claimed: true, call: func(ctx context.Context, s *redisstore.Store, session string, h *a2redis.HeadEvent) error {
		_, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts})
		return err
	}},
	// A ClaimNext that takes a session's last free head sends no update:
	// it rides with the shard's next call (TestClaimUpdatesRide).
	{name: "claim-next", heads: 1, listed: true, readsAfter: true, noIndexUpdate: true, call: func(ctx context.Context, s *redisstore.Store, session string, _ *a2redis.HeadEvent) error {
		r, err := s.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Sessions: []string{session}})
		if err == nil && r.Session != session {
			err = fmt.Errorf("claimed from %q", r.Session)
		}
		return err
	}},
}

// timed runs fn under a callDeadline context and returns how long past the
// deadline it returned (negative when before).
func timed(fn func(ctx context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	return time.Since(start) - callDeadline, err
}

// With the server held before the call starts, every call gives up at its
// deadline: it returns the context's error (an append's wrapped in a
// BatchError), within the allowance.
func TestDeadlinesKeptWhileTheServerIsHeld(t *testing.T) {
	e := newDeadlineEnv(t)
	var worst time.Duration
	for _, st := range stalls {
		for _, o := range deadlineOps {
			session, head := e.session(o.heads, o.claimed)
			held := st.start(t, e.addr)
			over, err := timed(func(ctx context.Context) error { return o.call(ctx, e.store, session, head) })
			<-held
			worst = max(worst, over)
			t.Logf("%s %s: returned %v after the deadline: %v", st.name, o.name, over.Round(time.Millisecond), err)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "%s %s", st.name, o.name)
			assert.Less(t, over, deadlineAllowance, "%s %s returned %v after its deadline", st.name, o.name, over)
		}
	}
	t.Logf("longest overrun: %v", worst.Round(time.Millisecond))
}

// With the server held from the moment the store sends a committed write's
// ready-index update, the call returns by its deadline (successful, but
// for a claim's read of its events, which the held server leaves no time
// for: its deadline error); the update it
// could not send is kept (counted), and the store's next update that gets
// through takes it along: the index then lists the session as its state
// says (nothing lost).
func TestDeadlinesKeptAtTheReadyUpdate(t *testing.T) {
	e := newDeadlineEnv(t)
	var worst time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, st := range stalls {
		for _, o := range deadlineOps {
			if o.noIndexUpdate {
				continue
			}
			session, head := e.session(o.heads, o.claimed)
			var held <-chan struct{}
			var starting time.Duration // the test's own time to set the stall up, not the call's
			stallNow := func() {
				t0 := time.Now()
				held = st.start(t, e.addr)
				starting = time.Since(t0)
			}
			e.client.armed.Store(&stallNow)
			over, err := timed(func(ctx context.Context) error { return o.call(ctx, e.store, session, head) })
			over -= starting
			require.Nil(t, e.client.armed.Load(), "%s %s sent a ready-index update", st.name, o.name)
			kept := redisstore.LateReadyUpdates(e.store)
			<-held
			worst = max(worst, over)
			t.Logf("%s %s: returned %v after the deadline: %v", st.name, o.name, over.Round(time.Millisecond), err)
			if o.readsAfter && err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded, "%s %s", st.name, o.name)
			} else {
				require.NoError(t, err, "%s %s: the write committed", st.name, o.name)
			}
			assert.Less(t, over, deadlineAllowance, "%s %s returned %v after its deadline", st.name, o.name, over)
			assert.Equal(t, int64(1), kept, "%s %s: the missed update was kept", st.name, o.name)

			// The kept update goes with the next one: an append to another
			// session (to a consumer of its own: nothing to claim).
			_, err = e.store.Append(ctx, "other-"+session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "x"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			assert.Zero(t, redisstore.LateReadyUpdates(e.store), "%s %s: the kept update was sent", st.name, o.name)
			listed, err := e.store.ReadyAt(ctx, session)
			require.NoError(t, err)
			assert.Equal(t, o.listed, listed.Listed, "%s %s: listed %+v", st.name, o.name, listed)
			assert.Equal(t, o.due, listed.Due, "%s %s: due %+v", st.name, o.name, listed)
		}
	}
	t.Logf("longest overrun: %v", worst.Round(time.Millisecond))
}

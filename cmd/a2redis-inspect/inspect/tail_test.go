package inspect

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// follow starts `tail -f` in the background; stop interrupts it (Ctrl-C)
// and returns its exit code.
func follow(t *testing.T, e *env, args ...string) (out *syncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out = &syncBuffer{}
	var errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"--url", e.cli.url, "--prefix", e.cli.prefix, "tail", "-f"}, args...),
			Env{Stdout: out, Stderr: &errOut, Now: e.clock.Now})
	}()
	return out, func() int {
		cancel()
		select {
		case code := <-done:
			if code != ExitOK {
				t.Logf("stderr: %s", errOut.String())
			}
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("tail -f did not stop on Ctrl-C")
			return -1
		}
	}
}

func appendTypes(t *testing.T, e *env, session string, types ...string) {
	t.Helper()
	events := make([]a2redis.Event, len(types))
	for i, typ := range types {
		events[i] = a2redis.Event{Type: typ, Payload: json.RawMessage(`{"n":` + itoa(int64(i)) + `}`)}
	}
	_, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
	require.NoError(t, err)
}

func TestTailFollow(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	appendTypes(t, e, "s", "old.1", "old.2", "old.3")

	out, stop := follow(t, e, "-n", "2", "s")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "old.3") }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let the subscription settle; a missed wake-up is caught up anyway
	appendTypes(t, e, "s", "live.1", "live.2")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "live.2") }, 10*time.Second, 10*time.Millisecond)
	appendTypes(t, e, "s", "live.3")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "live.3") }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, ExitOK, stop(), "Ctrl-C ends a follow cleanly")

	text := out.String()
	checkAligned(t, text)
	var got []string
	for _, r := range parseTable(t, text) {
		got = append(got, r["INDEX"]+" "+r["TYPE"])
	}
	assert.Equal(t, []string{"2 old.2", "3 old.3", "4 live.1", "5 live.2", "6 live.3"}, got, "every event once, in order")
}

// TestTailFollowSharded follows, with --sharded, a session whose store
// publishes with SPUBLISH: the new events arrive by their wake-ups (a
// follow subscribed with SUBSCRIBE would get none, and would print them
// only at its next catch-up, long after the wait below).
func TestTailFollowSharded(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	sharded, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.cli.prefix, Clock: e.clock.Now, ShardedPubSub: true})
	require.NoError(t, err)
	e.store = sharded
	appendTypes(t, e, "s", "old")

	out, stop := follow(t, e, "--sharded", "s")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "old") }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let the subscription settle, as TestTailFollow does
	appendTypes(t, e, "s", "live.1")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "live.1") }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, ExitOK, stop())
}

func TestTailFollowJSONLines(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	appendTypes(t, e, "s", "old")

	out, stop := follow(t, e, "s", "--json")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"old"`) }, 10*time.Second, 10*time.Millisecond)
	appendTypes(t, e, "s", "live")
	// (A clear skips the past lifetime's undelivered events: wait first.)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"live"`) }, 10*time.Second, 10*time.Millisecond)
	_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), a2redis.ClearEventType) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, ExitOK, stop())

	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	require.Len(t, lines, 3)
	var types []string
	for i, line := range lines {
		var ev eventDoc
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "line %d: %s", i, line)
		assert.Equal(t, int64(i+1), ev.Index)
		types = append(types, ev.Type)
	}
	assert.Equal(t, []string{"old", "live", a2redis.ClearEventType}, types)
}

// tail -f shows the cause of an event appended live, as log does, in the
// table and in JSON Lines.
func TestTailFollowShowsCauses(t *testing.T) {
	t.Parallel()
	eachTarget(t, func(t *testing.T, e *env) {
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "order", Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "biller", Lane: "acct"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		table, stopTable := follow(t, e, "s")
		lines, stopLines := follow(t, e, "s", "--json")
		for _, out := range []*syncBuffer{table, lines} {
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "order") }, 10*time.Second, 10*time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // let the subscriptions settle
		claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 2)
		for _, h := range claim.Heads {
			_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts,
				Events: []a2redis.Event{{Type: h.Consumer + ".done"}}})
			require.NoError(t, err)
		}
		for _, out := range []*syncBuffer{table, lines} {
			require.Eventually(t, func() bool { return strings.Count(out.String(), ".done") == 2 }, 10*time.Second, 10*time.Millisecond)
		}
		require.Equal(t, ExitOK, stopTable())
		require.Equal(t, ExitOK, stopLines())

		causes := map[string]string{}
		// (Live rows wider than the first page's columns shift them: split
		// on blanks; no cell here holds one.)
		for _, line := range strings.Split(strings.TrimSpace(table.String()), "\n")[1:] {
			f := strings.Fields(line)
			require.Len(t, f, 6, line)
			causes[f[2]] = f[4]
		}
		assert.Equal(t, map[string]string{"order": "-", "mailer.done": "mailer@1#1", "biller.done": "biller/acct@1#1"}, causes)
		var docs []eventDoc
		parseLines(t, lines.String(), &docs)
		require.Len(t, docs, 3)
		for _, d := range docs[1:] {
			require.NotNil(t, d.Cause, d.Type)
			assert.Equal(t, strings.TrimSuffix(d.Type, ".done"), d.Cause.Consumer)
			assert.Equal(t, int64(1), d.Cause.Index)
		}
	})
}

// TestTailFollowWaitsForASession: tail -f on a session that does not exist
// yet waits for it and prints its events from the first; tail without -f
// still exits 1 with "no session".
func TestTailFollowWaitsForASession(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	appendTypes(t, e, "other", "x")
	e.cli.run(t, "", "tail", "later").failed(t, ExitError)
	out, stop := follow(t, e, "later")
	time.Sleep(200 * time.Millisecond) // the follow subscribes first
	appendTypes(t, e, "later", "first.1", "first.2")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "first.2") }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, ExitOK, stop())
	got := out.String()
	assert.Contains(t, got, "first.1")
	assert.Less(t, strings.Index(got, "first.1"), strings.Index(got, "first.2"))
}

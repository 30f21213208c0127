package inspect

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// deadHeads lists a session's dead letters as consumer@index.
func deadHeads(t *testing.T, e *env, session string) []string {
	t.Helper()
	heads, err := e.store.DeadLetters(e.ctx, session)
	require.NoError(t, err)
	var out []string
	for _, h := range heads {
		out = append(out, h.Consumer+"@"+itoa(h.Index))
	}
	return out
}

// killLane appends two lane events for consumer c and dead-letters the first.
func killLane(t *testing.T, e *env, session string) {
	t.Helper()
	_, err := e.store.Append(e.ctx, session, []a2redis.Event{
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
	}, redisstore.AppendOptions{})
	require.NoError(t, err)
	killHead(t, e, session, 1)
}

func killHead(t *testing.T, e *env, session string, index int64) {
	t.Helper()
	claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 1)
	h := claim.Heads[0]
	require.Equal(t, index, h.Index)
	_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 1})
	require.NoError(t, err)
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	killLane(t, e, "s")

	for _, answer := range []string{"", "n\n", "no\n", "maybe\n", "\n"} {
		r := c.run(t, answer, "redrive", "s", "c", "1", "--retry")
		line := r.failed(t, ExitError)
		assert.Contains(t, r.stderr, `Redrive (retry) the dead-lettered lane head of consumer "c" lane "x" at index 1 (type "job", 1 failure, last error "boom") in session "s"? [y/N]`)
		assert.Contains(t, line, "not redriven")
		assert.Equal(t, []string{"c@1"}, deadHeads(t, e, "s"), "declined (%q): nothing changed", answer)
	}

	// Not dead-lettered: refused before asking.
	r := c.run(t, "y\n", "redrive", "s", "c", "2", "--retry")
	line := r.failed(t, ExitError)
	assert.Contains(t, line, `consumer "c" has no dead-lettered head at index 2 in session "s"`)
	assert.NotContains(t, r.stderr, "[y/N]")

	// Confirmed on stdin: retried, runnable again.
	r = c.run(t, "y\n", "redrive", "s", "c", "1", "--retry")
	assert.Contains(t, r.ok(t), `redriven: the dead-lettered lane head of consumer "c" lane "x" at index 1`)
	assert.Contains(t, r.stdout, "made runnable again")
	assert.Empty(t, deadHeads(t, e, "s"))
	rows := byKey(parseTable(t, c.run(t, "", "cursors", "s").ok(t)), "CONSUMER")
	assert.Equal(t, stateReady, rows["c"]["STATE"])
	assert.Equal(t, "0", rows["c"]["FAILURES"])

	// --yes skips the question; --skip moves past the head.
	killHead(t, e, "s", 1)
	var doc redriveJSON
	r = c.run(t, "", "redrive", "--skip", "--yes", "--json", "s", "c", "1")
	parseJSON(t, r.ok(t), &doc)
	assert.NotContains(t, r.stderr, "[y/N]")
	assert.Equal(t, redriveJSON{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: "skip", Redriven: true, HasPending: true}, doc)
	rows = byKey(parseTable(t, c.run(t, "", "cursors", "s").ok(t)), "CONSUMER")
	assert.Equal(t, "1", rows["c"]["POSITION"])
	assert.Equal(t, "2", rows["c"]["HEAD"])

	// -y and "yes" in any case work too.
	killHead(t, e, "s", 2)
	c.run(t, "", "redrive", "-y", "s", "c", "2", "--retry").ok(t)
	killHead(t, e, "s", 2)
	c.run(t, "YES\n", "redrive", "s", "c", "2", "--retry").ok(t)
	assert.Empty(t, deadHeads(t, e, "s"))
}

func TestRedriveChoosesTheCursor(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	// Consumer c is dead at index 1 on its event cursor and on lane x.
	_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "job", Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "c", Lane: "x"}}}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 2)
	for _, h := range claim.Heads {
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 1})
		require.NoError(t, err)
	}
	require.Len(t, deadHeads(t, e, "s"), 2)

	line := c.run(t, "", "redrive", "s", "c", "1", "--retry", "--yes").failed(t, ExitUsage)
	assert.Contains(t, line, `pick one with --lane (one of "", "x"; "" is the event cursor)`)
	line = c.run(t, "", "redrive", "s", "c", "1", "--retry", "--yes", "--lane", "y").failed(t, ExitError)
	assert.Contains(t, line, `no dead-lettered head at index 1 on lane "y"`)

	var doc redriveJSON
	parseJSON(t, c.run(t, "", "redrive", "s", "c", "1", "--retry", "--yes", "--lane", "x", "--json").ok(t), &doc)
	assert.Equal(t, "x", doc.Lane)
	heads, err := e.store.DeadLetters(e.ctx, "s")
	require.NoError(t, err)
	require.Len(t, heads, 1)
	assert.Equal(t, a2redis.EventCursor, heads[0].Kind, "only the lane head was redriven")

	parseJSON(t, c.run(t, "", "redrive", "s", "c", "1", "--skip", "--yes", "--lane=", "--json").ok(t), &doc)
	assert.Equal(t, redriveJSON{Session: "s", Consumer: "c", Index: 1, Action: "skip", Redriven: true, HasPending: true}, doc)
	assert.Empty(t, deadHeads(t, e, "s"))
}

func TestRedriveInterruptedPrompt(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	killLane(t, e, "s")
	ctx, cancel := context.WithCancel(t.Context())
	stdin, _ := pipe(t)
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--url", e.cli.url, "--prefix", e.cli.prefix, "redrive", "s", "c", "1", "--retry"},
			Env{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	}()
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "[y/N]") }, 10*time.Second, 10*time.Millisecond)
	cancel() // Ctrl-C at the prompt
	select {
	case code := <-done:
		assert.Equal(t, ExitError, code)
		assert.Contains(t, errOut.String(), "interrupted")
	case <-time.After(10 * time.Second):
		t.Fatal("Ctrl-C did not end the prompt")
	}
	assert.Equal(t, []string{"c@1"}, deadHeads(t, e, "s"))
}

func TestRedriveUsage(t *testing.T) {
	t.Parallel()
	c := &cli{url: "redis://127.0.0.1:1"} // never reached: usage is checked first
	for _, args := range [][]string{
		{"redrive", "s", "c", "1"},
		{"redrive", "s", "c", "1", "--retry", "--skip"},
		{"redrive", "s", "c", "zero", "--retry"},
		{"redrive", "s", "c", "0", "--retry"},
		{"redrive", "s", "c", "--retry"},
	} {
		r := c.run(t, "y\n", args...)
		r.failed(t, ExitUsage)
		assert.Contains(t, r.stderr, "Usage: a2redis-inspect redrive [flags] SESSION CONSUMER INDEX", "%v", args)
	}
}

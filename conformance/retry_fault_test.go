package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/faultproxy"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// The store's own retries (Config.Retries): a try that times out or loses
// its connection is sent again with the same arguments and ids, so a try
// that committed without a reply becomes a replay, never a duplicate.

// auditLog reads a session's whole log (past lifetimes too) and counts, for
// the ids a caller was told are stored, how many are missing and how many
// entries repeat an id or were never reported.
func auditLog(ctx context.Context, t *testing.T, client rueidis.Client, prefix, session string, reported map[string]int64) (duplicates, lost, foreign int) {
	t.Helper()
	entries, err := client.Do(ctx, client.B().Xrange().Key(keys.For(prefix, session).Log()).Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	seen := map[string]int{}
	for _, e := range entries {
		id := e.FieldValues["id"]
		seen[id]++
		idx, ok := reported[id]
		switch {
		case !ok:
			foreign++
		case fmt.Sprintf("%d-0", idx) != e.ID:
			t.Errorf("session %s: event %s at %s, its append reported index %d", session, id, e.ID, idx)
		}
	}
	for id := range reported {
		switch n := seen[id]; {
		case n == 0:
			lost++
		case n > 1:
			duplicates += n - 1
		}
	}
	return duplicates, lost, foreign
}

// tryCounter wraps a client and counts the script calls sent through it.
type tryCounter struct {
	rueidis.Client
	tries atomic.Int64
}

func (c *tryCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) > 0 && (cs[0] == "EVALSHA" || cs[0] == "EVAL") {
		c.tries.Add(1)
	}
	return c.Client.Do(ctx, cmd)
}

// TestRetriesHeldServer: twelve appends with generated ids (two per
// session, so some coalesce) meet a server that answers nothing (stopped
// by SIGSTOP), with a 100ms limit per try. The server is let go once the
// store has sent twice as many tries as appends, so every append timed out
// at least once (counted, not hoped for). A try that timed out after it was
// written may commit when the server wakes (rueidis drops the connection
// of a try that timed out, but the server still reads what was sent), and
// a later try then replays it. Each append returns its events, each stored
// exactly once: no duplicate, nothing lost.
func TestRetriesHeldServer(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	raw := faultClient(t, srv.Addr())
	client := &tryCounter{Client: raw}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := Prefix(t)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1,
		Retries: redisstore.RetryPolicy{Attempts: 200, AttemptTimeout: 100 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
	require.NoError(t, err)
	// The script is loaded (a batch of the same shape: a lone event goes
	// through another script), so every try is one EVALSHA.
	_, err = store.Append(ctx, "warm", []a2redis.Event{{Type: "t"}, {Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	client.tries.Store(0)

	const appends, sessions = 12, 6
	srv.Freeze()
	results := make([]redisstore.AppendResult, appends)
	errs := make([]error, appends)
	var wg sync.WaitGroup
	for i := range appends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = store.Append(ctx, fmt.Sprint("s", i%sessions), []a2redis.Event{{Type: "a"}, {Type: "b"}}, redisstore.AppendOptions{})
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); client.tries.Load() < 2*appends; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the store sent %d tries to the held server", client.tries.Load())
	}
	held := client.tries.Load()
	srv.Thaw()
	wg.Wait()

	reported := make([]map[string]int64, sessions)
	for s := range reported {
		reported[s] = map[string]int64{}
	}
	replays := 0
	for i, res := range results {
		require.NoError(t, errs[i], "append %d", i)
		require.Len(t, res.Events, 2)
		if res.Replayed {
			replays++
		}
		for _, ev := range res.Events {
			reported[i%sessions][ev.ID] = ev.Index
		}
	}
	var duplicates, lost, foreign int
	for s := range sessions {
		d, l, f := auditLog(ctx, t, raw, prefix, fmt.Sprint("s", s), reported[s])
		duplicates, lost, foreign = duplicates+d, lost+l, foreign+f
	}
	// Whether a timed-out try commits before the try that succeeds depends
	// on the order in which the woken server reads its connections: the
	// replays are logged, not required (TestRetriesKilledConnections makes
	// committed-but-unanswered tries at chosen calls).
	t.Logf("%d appends, %d script tries while the server was held, %d in all, %d replayed a try that had committed; duplicates %d, lost %d, unreported %d",
		appends, held, client.tries.Load(), replays, duplicates, lost, foreign)
	assert.Zero(t, duplicates)
	assert.Zero(t, lost)
	assert.Zero(t, foreign)
}

// TestRetriesGiveUpCarriesIDs: when every try times out (the server is
// stopped by SIGSTOP until the append gave up, so no try can meet it
// answering), the error carries the batch's generated ids; once the server
// is back, the caller's retry with them replays the batch a try committed.
func TestRetriesGiveUpCarriesIDs(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t)
	client := faultClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := Prefix(t)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1,
		Retries: redisstore.RetryPolicy{Attempts: 3, AttemptTimeout: 100 * time.Millisecond}})
	require.NoError(t, err)
	// Loads the script a 3-event batch runs (a lone event runs another).
	_, err = store.Append(ctx, "warm", []a2redis.Event{{Type: "t"}, {Type: "t"}, {Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)

	events := []a2redis.Event{{Type: "a"}, {Type: "b"}, {Type: "c"}}
	srv.Freeze()
	_, err = store.Append(ctx, "s", events, redisstore.AppendOptions{})
	srv.Thaw()
	var batch *a2redis.BatchError
	require.ErrorAs(t, err, &batch, "every try timed out")
	t.Logf("gave up: %v", err)
	assert.Equal(t, "s", batch.Session)
	require.Len(t, batch.IDs, 3)
	for _, id := range batch.IDs {
		assert.Len(t, id, 32)
		assert.Equal(t, batch.IDs[0][:24], id[:24], "one nonce for the batch")
	}
	// Whether a try reached the server before its deadline depends on the
	// machine's load (a try the client had not written when its deadline
	// passed never runs); the log says which, read after them (the woken
	// server reads what the tries left in their connections before it
	// accepts and reads a new one). The caller's retry must agree with it.
	committed, err := client.Do(ctx, client.B().Xlen().Key(keys.For(prefix, "s").Log()).Build()).AsInt64()
	require.NoError(t, err)
	t.Logf("the log holds %d entries once the server was let go", committed)

	again := batch.WithIDs(events)
	res, err := store.Append(ctx, "s", again, redisstore.AppendOptions{})
	require.NoError(t, err)
	if committed > 0 {
		assert.True(t, res.Replayed, "a try committed once the server was let go: the retry replays it")
	} else {
		assert.False(t, res.Replayed, "no try reached the server: the retry stores the batch afresh")
	}
	reported := map[string]int64{}
	for i, ev := range res.Events {
		assert.Equal(t, batch.IDs[i], ev.ID)
		reported[ev.ID] = ev.Index
	}
	duplicates, lost, foreign := auditLog(ctx, t, client, prefix, "s", reported)
	assert.Zero(t, duplicates)
	assert.Zero(t, lost)
	assert.Zero(t, foreign)
}

// TestRetriesKilledConnections: sixteen producers append batches without
// ids to two sessions while a fault proxy cuts the store's connection at
// every 25th script call, after the server ran it and before its reply
// reaches the store (the write committed; the store never heard), with the
// store's default retries. A producer whose append the store gave up on
// sends it again with the ids its error carries. In the end every batch is
// stored exactly once, at the indexes reported. The faults happen at
// chosen calls, not when a timer fires: however the machine schedules the
// producers, the faults are made, and each costs an append its reply.
func TestRetriesKilledConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	srv := redistest.SpawnServer(t)
	const every = 25
	proxy, err := faultproxy.Start(srv.Addr(), faultproxy.Rule{Commands: []string{"EVALSHA", "EVAL"}, Every: every, Fault: faultproxy.DropReply})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	client := faultClient(t, proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := Prefix(t)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1})
	require.NoError(t, err)
	const producers, batches = 16, 150
	var replays, gaveUp atomic.Int64
	reported := make([]map[string]int64, producers)
	var wg sync.WaitGroup
	for p := range producers {
		reported[p] = map[string]int64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				batch := make([]a2redis.Event, 1+(p+b)%3)
				for i := range batch {
					batch[i] = a2redis.Event{Type: "t"}
				}
				for {
					if ctx.Err() != nil {
						t.Errorf("producer %d: %v", p, ctx.Err())
						return
					}
					res, err := store.Append(ctx, fmt.Sprint("s", p%2), batch, redisstore.AppendOptions{})
					var be *a2redis.BatchError
					if errors.As(err, &be) {
						gaveUp.Add(1)
						batch = be.WithIDs(batch)
						continue
					}
					if err != nil {
						t.Errorf("producer %d: %v", p, err)
						return
					}
					if res.Replayed {
						replays.Add(1)
					}
					for _, ev := range res.Events {
						reported[p][ev.ID] = ev.Index
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	faults := proxy.Stats().Faults
	var duplicates, lost, foreign int
	for s := range 2 {
		want := map[string]int64{}
		for p := s; p < producers; p += 2 {
			for id, idx := range reported[p] {
				want[id] = idx
			}
		}
		d, l, f := auditLog(ctx, t, client, prefix, fmt.Sprint("s", s), want)
		duplicates, lost, foreign = duplicates+d, lost+l, foreign+f
	}
	t.Logf("%d appends, %d replies dropped: %d replayed a try that had committed, %d given up by the store and sent again by the producer; duplicates %d, lost %d, unreported %d",
		producers*batches, faults, replays.Load(), gaveUp.Load(), duplicates, lost, foreign)
	assert.Zero(t, duplicates)
	assert.Zero(t, lost)
	assert.Zero(t, foreign)
	// A producer waits for each append before its next, so a coalesced
	// round carries at most one append per producer: at least
	// batches (150) script calls were made, and the proxy cut the reply of
	// every 25th. A cut reply's try had run, so its append was either
	// replayed by a retry or given up and sent again.
	assert.GreaterOrEqual(t, faults, int64(batches/every))
	assert.Positive(t, replays.Load()+gaveUp.Load(), "no append lost its reply")
}

// busyWatch wraps a client and records which scripts (by SHA1) were
// refused BUSY.
type busyWatch struct {
	rueidis.Client
	mu      sync.Mutex
	refused map[string]int
}

func (c *busyWatch) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	var sha string
	if cs := cmd.Commands(); len(cs) > 1 && (cs[0] == "EVALSHA" || cs[0] == "EVAL") {
		sha = cs[1]
	}
	res := c.Client.Do(ctx, cmd)
	if err := res.Error(); err != nil && sha != "" && strings.HasPrefix(err.Error(), "BUSY") {
		c.mu.Lock()
		c.refused[sha]++
		c.mu.Unlock()
	}
	return res
}

// scripts returns how many distinct scripts were refused.
func (c *busyWatch) scripts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.refused)
}

// TestRetriesBusyServer: while another client's script holds the server
// (BUSY replies), a store with retries off reports a2redis.ErrUnavailable
// wrapping the server's reply, nothing written; with retries, an append and
// a claim sent meanwhile go through once the script ends, each once. The
// busy script runs until the test kills it (SCRIPT KILL), once both the
// claim and the append were refused.
func TestRetriesBusyServer(t *testing.T) {
	t.Parallel()
	srv := redistest.SpawnServer(t, "--busy-reply-threshold", "20")
	client := faultClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := Prefix(t)
	once, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1, Retries: redisstore.RetryPolicy{Attempts: 1}})
	require.NoError(t, err)
	watch := &busyWatch{Client: client, refused: map[string]int{}}
	retrying, err := redisstore.New(ctx, watch, redisstore.Config{Prefix: prefix, PublishWait: -1,
		Retries: redisstore.RetryPolicy{Attempts: 1000, MaxBackoff: 20 * time.Millisecond}})
	require.NoError(t, err)
	_, err = retrying.Append(ctx, "s", []a2redis.Event{{ID: "e1", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	_, err = rawDo(srv.Addr(), "CONFIG", "RESETSTAT")
	require.NoError(t, err)

	// A script that spins until killed (it writes nothing, so SCRIPT KILL
	// ends it): past the threshold, others get BUSY.
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		_, _ = rawDo(srv.Addr(), "EVAL", "#!lua flags=no-writes\nwhile true do end", "0")
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if reply, _ := rawDo(srv.Addr(), "PING"); strings.HasPrefix(reply, "-BUSY") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the server never answered BUSY")
	}

	_, err = once.Append(ctx, "s", []a2redis.Event{{ID: "refused", Type: "t"}}, redisstore.AppendOptions{})
	require.ErrorIs(t, err, a2redis.ErrUnavailable)
	var reply *rueidis.RedisError
	require.ErrorAs(t, err, &reply)
	assert.True(t, strings.HasPrefix(reply.Error(), "BUSY"), "reply %q", reply.Error())
	var be *a2redis.BatchError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, []string{"refused"}, be.IDs)

	var wg sync.WaitGroup
	var claim redisstore.ClaimResult
	var claimErr, appendErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		claim, claimErr = retrying.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
	}()
	go func() {
		defer wg.Done()
		_, appendErr = retrying.Append(ctx, "s", []a2redis.Event{{ID: "e2", Type: "t"}}, redisstore.AppendOptions{})
	}()
	// Both were refused at least once: the script is killed.
	for deadline := time.Now().Add(30 * time.Second); watch.scripts() < 2; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the claim and the append were not both refused BUSY")
	}
	killed, err := rawDo(srv.Addr(), "SCRIPT", "KILL")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(killed, "+OK"), "SCRIPT KILL: %q", killed)
	<-busy
	wg.Wait()
	require.NoError(t, claimErr)
	require.NoError(t, appendErr)
	require.Len(t, claim.Heads, 1)
	assert.Equal(t, int64(1), claim.Heads[0].Attempts, "a refused claim is retried, and claims once")
	log, err := retrying.Read(ctx, "s", 0, 0)
	require.NoError(t, err)
	var ids []string
	for _, ev := range log {
		ids = append(ids, ev.ID)
	}
	assert.Equal(t, []string{"e1", "e2"}, ids, "the refused append wrote nothing, the retried one once")
	stats, err := client.Do(ctx, client.B().Info().Section("errorstats").Build()).ToString()
	require.NoError(t, err)
	t.Logf("server errors: %s", strings.Join(strings.Fields(stats), " "))
	assert.Contains(t, stats, "errorstat_BUSY:count=", "nothing was refused BUSY: the test proved nothing")
	var refused int
	for _, line := range strings.Fields(stats) {
		if n, ok := strings.CutPrefix(line, "errorstat_BUSY:count="); ok {
			_, _ = fmt.Sscan(n, &refused)
		}
	}
	assert.GreaterOrEqual(t, refused, 3, "the refused append, the claim's and the append's first tries")
}

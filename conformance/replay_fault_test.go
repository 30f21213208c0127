package conformance

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// cutProxy forwards TCP to a server; when armed, it drops the next reply the
// server sends and cuts the connection: the write committed, but the client
// never saw it.
type cutProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int64
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		var once sync.Once
		closeBoth := func() { once.Do(func() { _ = client.Close(); _ = server.Close() }) }
		go func() { _, _ = io.Copy(server, client); closeBoth() }()
		go func() {
			buf := make([]byte, 64*1024)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					if p.armed.CompareAndSwap(true, false) {
						p.cuts.Add(1)
						closeBoth()
						return
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						closeBoth()
						return
					}
				}
				if err != nil {
					closeBoth()
					return
				}
			}
		}()
	}
}

// Connections cut after the server committed a write but before its reply
// arrived: the client's retry replays, never duplicates, and no
// acknowledged write is lost. Append, complete, fail and clear.
func TestFaultsCutBeforeReply(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	srv := redistest.SpawnServer(t)
	proxy := newCutProxy(t, srv.Addr())
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{proxy.ln.Addr().String()}, ForceSingleClient: true, DisableCache: true,
		DisableRetry: true,
	})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The test retries, not the store: each cut must fail its call.
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "cut", Retries: redisstore.RetryPolicy{Attempts: 1}})
	require.NoError(t, err)

	// A cut reply is usually a committed script's, and the retry replays;
	// now and then it is another reply (a NOSCRIPT before the script ran,
	// a health-check PING), and the retry writes afresh. Either way nothing
	// is written twice and nothing acknowledged is lost.
	var attempted, faults, acked, replays int
	// cut runs op with the next reply dropped, then retries it once the
	// connection is back; it returns the retry's error.
	cut := func(op func() error) error {
		attempted++
		proxy.armed.Store(true)
		if err := op(); err != nil {
			faults++
		} else {
			proxy.armed.Store(false) // the reply was not a script's (e.g. a probe): no fault
		}
		var err error
		for i := 0; i < 100; i++ {
			attempted++
			if err = op(); err == nil {
				acked++
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return err
	}

	const rounds = 25
	ackedIDs := map[string]bool{}
	for r := range rounds {
		session := fmt.Sprint("s", r)
		// Append: the retry replays the stored rows.
		batch := []a2redis.Event{
			{ID: "a", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}},
			{ID: "b", Type: "t", Targets: []a2redis.Target{{Consumer: "l", Lane: "x"}}},
		}
		var res redisstore.AppendResult
		require.NoError(t, cut(func() (err error) {
			res, err = store.Append(ctx, session, batch, redisstore.AppendOptions{})
			return err
		}))
		if res.Replayed {
			replays++
		}
		ackedIDs[session+"/a"], ackedIDs[session+"/b"] = true, true

		claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 2)

		// Complete with returned events: the retry replays them.
		var done redisstore.CompleteResult
		h := claim.Heads[0]
		require.NoError(t, cut(func() (err error) {
			done, err = store.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts,
				Events: []a2redis.Event{{ID: "r", Type: "done"}}})
			return err
		}))
		assert.Equal(t, redisstore.Completed, done.Outcome)
		if done.Replayed {
			replays++
		}
		ackedIDs[session+"/r"] = true

		// Fail: the retry reports the same failure once.
		var failed redisstore.FailResult
		l := claim.Heads[1]
		require.NoError(t, cut(func() (err error) {
			failed, err = store.FailAttempt(ctx, redisstore.FailRequest{Session: session, Head: l.Ref(), Attempt: l.Attempts, Error: "x", MaxFailures: 5})
			return err
		}))
		assert.Equal(t, redisstore.FailResult{Outcome: redisstore.Failed, Failures: 1}, failed)

		// Clear, conditional on the head: the retry reports it cleared, once.
		head := int64(3)
		var cleared redisstore.ClearResult
		require.NoError(t, cut(func() (err error) {
			cleared, err = store.Clear(ctx, session, redisstore.ClearOptions{IfLastIndex: &head})
			return err
		}))
		assert.Equal(t, redisstore.ClearResult{Cleared: true, Index: 4, ClearIndex: 4}, cleared)
	}

	// Audit the logs: no id twice, one marker each, every acknowledged
	// event stored.
	duplicates, lost := 0, 0
	for r := range rounds {
		session := fmt.Sprint("s", r)
		seen := map[string]int{}
		var markers int
		// Read from the start of the past lifetime: the clear is not reclaimed.
		entries, err := client.Do(ctx, client.B().Xrange().Key(keys.For("cut", session).Log()).Start("-").End("+").Build()).AsXRange()
		require.NoError(t, err)
		for _, e := range entries {
			if e.FieldValues["type"] == a2redis.ClearEventType {
				markers++
				continue
			}
			seen[e.FieldValues["id"]]++
		}
		for id, n := range seen {
			if n > 1 {
				duplicates += n - 1
			}
			delete(ackedIDs, session+"/"+id)
		}
		if markers != 1 {
			duplicates += markers - 1
		}
		assert.Len(t, entries, 4, "session %s: a, b, r and one marker", session)
	}
	lost = len(ackedIDs)
	t.Logf("operations attempted %d, faults injected %d (connections cut %d), acknowledged %d, replayed appends/completions %d, duplicates %d, acknowledged writes lost %d",
		attempted, faults, proxy.cuts.Load(), acked, replays, duplicates, lost)
	assert.Greater(t, replays, rounds, "most cuts hit a committed script")
	assert.Zero(t, duplicates)
	assert.Zero(t, lost)
	// Now and then the armed cut takes a reply that was not the
	// operation's (a health-check PING on a slow run), and the operation
	// goes through: the proxy must still have failed nearly all of them.
	assert.GreaterOrEqual(t, faults, rounds*4*9/10, "nearly every armed operation lost its reply")
}

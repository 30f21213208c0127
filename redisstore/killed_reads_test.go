package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Reads while the store's connections are killed, on a client with
// rueidis's defaults (its own retries on). rueidis v1.0.79 retries a
// read-only command that a dying connection failed on a new connection and,
// once that succeeds, recycles the command into its pool while the dead
// connection's writer goroutine may still be reading it: `go test -race`
// reports it (client.go:67 PutCompleted against pipe.go:580 writeCmd). The
// store pins every command it sends outside a script (rueidis never
// recycles a pinned command), so under -race this test stays clean; with an
// unpinned GET in its place it fails within seconds. Without -race it
// checks that reads recover from killed connections.
func TestReadsWhileConnectionsDie(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	srv := redistest.SpawnServer(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), PublishWait: -1})
	require.NoError(t, err)
	for s := range 4 {
		_, err := store.Append(ctx, fmt.Sprint("s", s), []a2redis.Event{{Type: "t"}, {Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	killer, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(killer.Close)
	// A kill after every 25th successful read, not on a timer: the kills
	// land while other reads are in flight and the reads go on between
	// them, however the machine schedules the goroutines. The readers go on
	// past their 400 reads until a kill found a connection.
	kill := make(chan struct{}, 16*400)
	killed := make(chan struct{})
	var kills atomic.Int64
	go func() {
		defer close(killed)
		for range kill {
			n, _ := killer.Do(ctx, killer.B().ClientKill().TypeNormal().SkipmeYes().Build()).AsInt64()
			kills.Add(n)
		}
	}()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := fmt.Sprint("s", g%4)
			for i := 0; (i < 400 || kills.Load() == 0) && ctx.Err() == nil; i++ {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				events, err := store.Read(rctx, session, 0, 0)
				cancel()
				if err == nil && len(events) != 2 {
					t.Errorf("read %d events, want 2", len(events))
				}
				if err != nil {
					failed.Add(1)
				} else if ok.Add(1)%25 == 0 {
					select {
					case kill <- struct{}{}:
					default: // the killer is that far behind: one kill fewer
					}
				}
			}
		}()
	}
	wg.Wait()
	close(kill)
	<-killed
	t.Logf("%d reads succeeded, %d failed, %d connections killed", ok.Load(), failed.Load(), kills.Load())
	require.Positive(t, kills.Load(), "no connection was killed: the test proved nothing")
	require.Positive(t, ok.Load())
}

package redisstore_test

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

func (e *env) workers(limit int) []redisstore.WorkerInfo {
	e.t.Helper()
	var out []redisstore.WorkerInfo
	req := redisstore.PageRequest{Limit: limit}
	for {
		page, err := e.store.Workers(e.ctx, req)
		require.NoError(e.t, err)
		out = append(out, page.Workers...)
		if page.Next == "" {
			return out
		}
		req.After = page.Next
	}
}

func workerIDs(ws []redisstore.WorkerInfo) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.ID
	}
	sort.Strings(ids)
	return ids
}

// A worker's record is listed with what it registered, refreshed by each
// heartbeat, gone once its TTL passes without one, and gone at once when
// it deregisters; GoneWorkers reports an expired one for GoneWorkerKept,
// and the first registry write after that prunes it from the listing.
func TestWorkerRegistry(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.Empty(t, e.workers(0), "no worker registered")
		started := e.clock.Now().Add(-time.Minute)
		info := redisstore.WorkerInfo{
			ID: "w1", Host: "host-a", PID: 42, StartedAt: started, Consumers: []string{"mailer", "billing"},
			Concurrency: 8, InFlight: 2, HeadsTotal: 2,
			Heads: []redisstore.WorkerHead{{Session: "s", HeadRef: a2redis.HeadRef{Consumer: "billing", Lane: "x", Index: 3}},
				{Session: "t\n{}", HeadRef: a2redis.HeadRef{Consumer: "mailer", Index: 1}}},
		}
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, info, 10*time.Second))
		got := e.workers(0)
		require.Len(t, got, 1)
		want := info
		want.StartedAt = time.UnixMilli(started.UnixMilli())
		want.HeartbeatAt = time.UnixMilli(e.clock.Now().UnixMilli())
		want.ExpiresAt = want.HeartbeatAt.Add(10 * time.Second)
		require.Equal(t, want, got[0])

		// A heartbeat refreshes the record and its expiry.
		e.clock.Advance(6 * time.Second)
		info.InFlight, info.Heads, info.HeadsTotal = 0, nil, 0
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, info, 10*time.Second))
		got = e.workers(0)
		require.Len(t, got, 1)
		require.Equal(t, 0, got[0].InFlight)
		require.Empty(t, got[0].Heads)
		require.Equal(t, e.clock.Now().Add(10*time.Second).UnixMilli(), got[0].ExpiresAt.UnixMilli())

		// A second worker with a short TTL that stops heartbeating (killed).
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "w2", Host: "host-b"}, time.Second))
		require.Equal(t, []string{"w1", "w2"}, workerIDs(e.workers(0)))
		e.clock.Advance(2 * time.Second)
		require.Equal(t, []string{"w1"}, workerIDs(e.workers(0)), "w2's TTL passed without a heartbeat")
		// GoneWorkers tells it from a live worker, a deregistered one and a
		// holder that never registered, for GoneWorkerKept.
		w2Expired := time.UnixMilli(e.clock.Now().Add(-time.Second).UnixMilli())
		gone, err := e.store.GoneWorkers(e.ctx, []string{"w1", "w2", "never"})
		require.NoError(t, err)
		require.Equal(t, map[string]time.Time{"w2": w2Expired}, gone)
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, info, 10*time.Second))
		gone, err = e.store.GoneWorkers(e.ctx, []string{"w2"})
		require.NoError(t, err)
		require.Equal(t, map[string]time.Time{"w2": w2Expired}, gone, "a registry write within GoneWorkerKept keeps it")
		// Its listing member goes with the first registry write past it.
		e.clock.Advance(redisstore.GoneWorkerKept)
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, info, 10*time.Second))
		_, err = e.client.Do(e.ctx, e.client.B().Zscore().Key(keys.Workers(e.prefix)).Member("w2").Build()).AsFloat64()
		require.Error(t, err, "the heartbeat pruned the member expired GoneWorkerKept ago")
		gone, err = e.store.GoneWorkers(e.ctx, []string{"w2"})
		require.NoError(t, err)
		require.Empty(t, gone)

		// A clean stop deregisters at once.
		require.NoError(t, workerreg.Of(e.store).Deregister(e.ctx, "w1"))
		require.Empty(t, e.workers(0))
		n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(keys.Worker(e.prefix, "w1"), keys.Workers(e.prefix)).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "nothing of the registry is left")
	})
}

// Redis itself expires a dead worker's record after its TTL (real time;
// miniredis's time is moved by hand).
func TestWorkerRecordExpires(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			var mr *miniredis.Miniredis
			if tg.Name == "miniredis" {
				var c rueidis.Client
				mr, c = redistest.Miniredis(t)
				tg = redistest.Target{Name: tg.Name, Client: func(*testing.T) rueidis.Client { return c }}
			}
			e := newEnv(t, tg)
			require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "dead"}, 200*time.Millisecond))
			if mr != nil {
				mr.FastForward(time.Second)
			}
			require.Eventually(t, func() bool {
				n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(keys.Worker(e.prefix, "dead")).Build()).AsInt64()
				return err == nil && n == 0
			}, 10*time.Second, 20*time.Millisecond)
			require.Empty(t, e.workers(0), "a member whose record is gone is not listed")
		})
	}
}

// The listing pages, finishing each expiry time on its page, and lists
// every worker once when none heartbeats meanwhile.
func TestWorkersPaged(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		var want []string
		for i := range 23 {
			id := fmt.Sprintf("w%02d", i)
			want = append(want, id)
			if i%4 == 0 {
				e.clock.Advance(time.Millisecond) // some share an expiry time
			}
			require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: id}, time.Minute))
		}
		for _, limit := range []int{1, 2, 5, 100} {
			require.Equal(t, want, workerIDs(e.workers(limit)), "limit %d", limit)
		}
	})
}

func TestWorkerRegistryRefusesBadInput(t *testing.T) {
	e := newEnv(t, redistest.Targets[0])
	for _, err := range []error{
		workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{}, time.Second),
		workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "w"}, 0),
		workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "w", Heads: make([]redisstore.WorkerHead, redisstore.MaxWorkerHeads+1)}, time.Second),
		workerreg.Of(e.store).Deregister(e.ctx, ""),
		func() error { _, err := e.store.Workers(e.ctx, redisstore.PageRequest{After: "x1"}); return err }(),
	} {
		require.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%v", err)
	}
	require.Empty(t, e.workers(0), "nothing was written")
}

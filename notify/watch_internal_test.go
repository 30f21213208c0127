package notify

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
)

// A refresh reports a lapse exactly when the mark was gone or the last
// refresh is older than the TTL (miniredis's clock moves only when told).
func TestMarkRefreshReportsLapses(t *testing.T) {
	mr, client := redistest.Miniredis(t)
	ctx := context.Background()
	m := &mark{client: client, key: "p:{\"s\"}:followed", ttl: time.Minute, opts: NewSubscriber(client, SubscriberOptions{}).opts}
	require.NoError(t, m.first(ctx))
	assert.True(t, mr.Exists(m.key))
	ttl := mr.TTL(m.key)
	assert.Equal(t, time.Minute, ttl, "set with its expiry")

	lapsed, err := m.refresh(ctx)
	require.NoError(t, err)
	assert.False(t, lapsed, "refreshed in time")

	mr.FastForward(61 * time.Second)
	require.False(t, mr.Exists(m.key), "expired")
	lapsed, err = m.refresh(ctx)
	require.NoError(t, err)
	assert.True(t, lapsed, "found gone")
	assert.True(t, mr.Exists(m.key), "and set again")

	// Still there, but the last refresh was sent more than a TTL ago: the
	// mark may have lapsed in between (another reader set it again).
	m.sent = time.Now().Add(-2 * time.Minute)
	lapsed, err = m.refresh(ctx)
	require.NoError(t, err)
	assert.True(t, lapsed, "refreshed too late")
	lapsed, err = m.refresh(ctx)
	require.NoError(t, err)
	assert.False(t, lapsed)
}

// keep refreshes every TTL/4 and reports each lapse once. The refreshes'
// clock stands still (a refresh is never late, however the machine
// schedules them) and miniredis expires the mark only when told, so the
// only lapse is the deleted mark.
func TestMarkKeepReportsALapseOnce(t *testing.T) {
	mr, client := redistest.Miniredis(t)
	ctx, cancel := context.WithCancel(context.Background())
	var refreshes atomic.Int64
	at := time.Now()
	m := &mark{client: client, key: "p:{\"s\"}:followed", ttl: 400 * time.Millisecond, opts: NewSubscriber(client, SubscriberOptions{}).opts,
		now: func() time.Time { refreshes.Add(1); return at }}
	require.NoError(t, m.first(ctx))
	lapses := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.keep(ctx, func() { lapses <- struct{}{} })
	}()
	defer func() {
		cancel()
		<-done
	}()
	mr.Del(m.key)
	select {
	case <-lapses:
	case <-time.After(10 * time.Second):
		t.Fatal("no lapse reported")
	}
	assert.True(t, mr.Exists(m.key), "set again")
	// Three more refreshes report nothing: the clock is read twice in each,
	// and a fourth reads it once after the third called back (keep is
	// sequential).
	deadline := time.Now().Add(time.Minute)
	for n := refreshes.Load() + 2*3 + 1; refreshes.Load() < n; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "%d refreshes", refreshes.Load())
	}
	assert.Len(t, lapses, 0)
}

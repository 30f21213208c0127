package notify

import (
	"context"
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

// keep refreshes every TTL/4 and reports each lapse once.
func TestMarkKeepReportsALapseOnce(t *testing.T) {
	mr, client := redistest.Miniredis(t)
	ctx, cancel := context.WithCancel(context.Background())
	m := &mark{client: client, key: "p:{\"s\"}:followed", ttl: 2 * time.Second, opts: NewSubscriber(client, SubscriberOptions{}).opts}
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
	// Refreshed in time from then on: a few more refreshes report nothing
	// (unless this machine stalls for a whole TTL).
	time.Sleep(1100 * time.Millisecond)
	assert.Len(t, lapses, 0)
}

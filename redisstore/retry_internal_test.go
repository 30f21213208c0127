package redisstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
)

// The server replies the store types as a2redis.ErrUnavailable, and the
// ones it must not: real error replies from a real server (a script
// returning each text as its error), classified as the store classifies a
// failed try.
func TestClassifyReplies(t *testing.T) {
	t.Parallel()
	client := redistest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply := func(text string) error {
		return client.Do(ctx, client.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(text).Build()).Error()
	}
	for text, want := range map[string]failure{
		"LOADING Redis is loading the dataset in memory":                                refused,
		"CLUSTERDOWN The cluster is down":                                               refused,
		"TRYAGAIN Multiple keys request during rehashing of slot":                       refused,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data":              refused,
		"BUSY Redis is busy running a script.":                                          refused,
		"ASK 3999 127.0.0.1:6381":                                                       refused,
		"MOVED 3999 127.0.0.1:6381":                                                     refused,
		"READONLY You can't write against a read only replica.":                         refused,
		"NOREPLICAS Not enough good replicas to write.":                                 refused,
		"ERR Script attempted to access a non local key in a cluster node script: 1234": refused,
		"BUSYKEY Target key name already exists.":                                       final,
		"BUSYGROUP Consumer Group name already exists":                                  final,
		"ERR user_script:1: Script attempted to compare nil":                            final,
		"WRONGTYPE Operation against a key holding the wrong kind of value":             final,
		"NOSCRIPT No matching script.":                                                  final,
	} {
		err := reply(text)
		require.Error(t, err, text)
		got, typed := classify(ctx, ctx, err)
		assert.Equal(t, want, got, text)
		assert.Equal(t, want == refused, errors.Is(typed, a2redis.ErrUnavailable), text)
		var redisErr *rueidis.RedisError
		assert.True(t, errors.As(typed, &redisErr), "%s: the typed error still wraps the reply", text)
	}

	// Not sent: a connection that could not be opened.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, dialErr := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.Error(t, dialErr)
	got, typed := classify(ctx, ctx, dialErr)
	assert.Equal(t, refused, got, "%v", dialErr)
	assert.ErrorIs(t, typed, a2redis.ErrUnavailable)

	// The caller's context ends: final; a try's own timeout: unknown.
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	got, _ = classify(done, done, context.Canceled)
	assert.Equal(t, final, got)
	try, cancelTry := context.WithTimeout(ctx, time.Nanosecond)
	defer cancelTry()
	<-try.Done()
	got, typed = classify(ctx, try, context.DeadlineExceeded)
	assert.Equal(t, unknown, got)
	assert.ErrorIs(t, typed, context.DeadlineExceeded)
	got, _ = classify(ctx, ctx, rueidis.ErrClosing)
	assert.Equal(t, final, got)
}

// Backoff stays within its bounds and a caller deadline nearer than the
// next backoff ends the retries at once.
func TestRetryingHonoursDeadline(t *testing.T) {
	t.Parallel()
	s := &Store{cfg: Config{Retries: RetryPolicy{Attempts: 100, MinBackoff: 200 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	tries := 0
	start := time.Now()
	err := s.retrying(ctx, true, func(context.Context) error { tries++; return errors.New("connection reset") })
	require.Error(t, err)
	// The jittered wait may be shorter than the deadline once or twice; it
	// never runs past it.
	assert.Less(t, tries, 100)
	assert.LessOrEqual(t, time.Since(start), time.Second, "retrying outlived the caller's deadline")
	off := &Store{cfg: Config{Retries: RetryPolicy{Attempts: 1}}}
	tries = 0
	_ = off.retrying(context.Background(), true, func(context.Context) error { tries++; return errors.New("connection reset") })
	assert.Equal(t, 1, tries, "Attempts 1 tries once")
	tries = 0
	s.cfg.Retries = RetryPolicy{Attempts: 5, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	_ = s.retrying(context.Background(), false, func(context.Context) error { tries++; return errors.New("connection reset") })
	assert.Equal(t, 1, tries, "an unknown outcome is not retried for an operation that is not repeatable")
}

// Refusals (nothing ran) are retried past Attempts until Unavailable has
// passed; unknown outcomes stop at Attempts.
func TestRetryingRefusalsLastUnavailable(t *testing.T) {
	t.Parallel()
	client := redistest.Server(t)
	refusal := client.Do(context.Background(), client.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).
		Arg("TRYAGAIN Multiple keys request during rehashing of slot").Build()).Error()
	require.Error(t, refusal)
	s := &Store{cfg: Config{Retries: RetryPolicy{Attempts: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Unavailable: 100 * time.Millisecond}}}
	tries, start := 0, time.Now()
	err := s.retrying(context.Background(), true, func(context.Context) error { tries++; return refusal })
	require.ErrorIs(t, err, a2redis.ErrUnavailable)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "refusals stopped before Unavailable passed")
	assert.Greater(t, tries, 3, "refusals stopped at Attempts")
	// A refusal that clears in time is a success.
	tries = 0
	err = s.retrying(context.Background(), false, func(context.Context) error {
		if tries++; tries < 10 {
			return refusal
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 10, tries)
	tries = 0
	err = s.retrying(context.Background(), true, func(context.Context) error { tries++; return errors.New("connection reset") })
	require.Error(t, err)
	assert.Equal(t, 3, tries, "unknown outcomes stop at Attempts")
}

// Ready-index updates a shard could not take are kept, newest version per
// session, within a bound, and taken back in one piece.
func TestLateReadyKeepsTheNewest(t *testing.T) {
	t.Parallel()
	var l lateReady
	assert.Nil(t, l.take())
	l.keep(1, readyUpdate{session: "a", version: "3", at: "30"})
	l.keep(1, readyUpdate{session: "a", version: "2", at: "20"})
	l.keep(1, readyUpdate{session: "b", version: "1", at: ""})
	l.keep(2, readyUpdate{session: "a", version: "4", at: "40"})
	l.keep(1, readyUpdate{session: "b", version: "5", at: "50", due: true})
	got := l.take()
	assert.Equal(t, map[int]map[string]readyUpdate{
		1: {"a": {session: "a", version: "3", at: "30"}, "b": {session: "b", version: "5", at: "50", due: true}},
		2: {"a": {session: "a", version: "4", at: "40"}},
	}, got)
	assert.Nil(t, l.take(), "taken")
	for i := range lateReadyLimit + 10 {
		l.keep(0, readyUpdate{session: strconv.Itoa(i), version: "1"})
	}
	assert.Len(t, l.take()[0], lateReadyLimit)
}

// Durability's check of WAIT goes to a master: alone, WAIT has no key, and
// a cluster client sends a keyless command to any node, replicas included,
// which refuse it ("WAIT cannot be used with replica instances"), so New
// failed on a cluster with replicas about half the time.
func TestCheckDurabilityAsksAMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	// A small node timeout: the nodes learn the roles sooner.
	cl := redistest.SpawnClusterWith(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 3 * time.Second})
	client := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	failed := 0
	for i := range 16 {
		_, err := New(ctx, client, Config{Prefix: prefix + "-" + strconv.Itoa(i), Durability: Durability{Replicas: 1}})
		if err != nil {
			failed++
			t.Logf("New #%d: %v", i, err)
		}
	}
	assert.Zero(t, failed, "of 16 stores New refused")
}

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// deadLetterIn appends one event for consumer in session, claims it and
// fails it once with max failures 1: a dead letter with the error text.
func deadLetterIn(t *testing.T, e *env, session, consumer, text string) a2redis.HeadEvent {
	t.Helper()
	_, err := e.store.Append(e.ctx, session, []a2redis.Event{event(a2redis.Target{Consumer: consumer})}, redisstore.AppendOptions{})
	require.NoError(t, err)
	cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: consumer}}})
	require.NoError(t, err)
	require.NotEmpty(t, cl.Heads)
	h := cl.Heads[len(cl.Heads)-1]
	r, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: text, MaxFailures: 1})
	require.NoError(t, err)
	require.Equal(t, redisstore.DeadLettered, r.Outcome)
	return h
}

// listAll reads every page of a cross-session listing.
func listAll(t *testing.T, e *env, q redisstore.DeadLetterQuery) ([]a2redis.HeadEvent, int) {
	t.Helper()
	var out []a2redis.HeadEvent
	pages := 0
	for {
		page, err := e.store.DeadLettersAcross(e.ctx, q)
		require.NoError(t, err)
		pages++
		out = append(out, page.DeadLetters...)
		if page.Next == "" {
			return out, pages
		}
		require.Less(t, pages, 1000, "the listing does not end")
		q.After = page.Next
	}
}

func sessionsOf(heads []a2redis.HeadEvent) []string {
	var out []string
	for _, h := range heads {
		out = append(out, fmt.Sprintf("%s/%s@%d", h.Session, h.Consumer, h.Index))
	}
	return out
}

// TestDeadIndexListsSessionsWithDeadLetters: the dead index lists a
// session from its first dead letter (since then), counts them, names
// their consumers, keeps the time while some remain, and forgets the
// session when its last one is redriven; a clear and a drop forget it too.
func TestDeadIndexListsSessionsWithDeadLetters(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		_, listed, err := e.store.DeadAt(e.ctx, "a")
		require.NoError(t, err)
		assert.False(t, listed)
		first := deadLetterIn(t, e, "a", "c1", "boom")
		since := e.clock.Now()
		e.clock.Advance(time.Second)
		second := deadLetterIn(t, e, "a", "c2", "bang")
		d, listed, err := e.store.DeadAt(e.ctx, "a")
		require.NoError(t, err)
		require.True(t, listed)
		assert.Equal(t, int64(2), d.Count)
		assert.Equal(t, since.UnixMilli(), d.Since.UnixMilli(), "held since the first dead letter")
		assert.Equal(t, []string{"c1", "c2"}, d.Consumers)
		assert.True(t, d.Complete)

		// The first redriven: one left, still held since the first.
		e.clock.Advance(time.Second)
		r, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "a", Consumer: "c1", Index: first.Index, Action: redisstore.Retry})
		require.NoError(t, err)
		require.True(t, r.Redriven)
		d, listed, err = e.store.DeadAt(e.ctx, "a")
		require.NoError(t, err)
		require.True(t, listed)
		assert.Equal(t, int64(1), d.Count)
		assert.Equal(t, since.UnixMilli(), d.Since.UnixMilli())
		assert.Equal(t, []string{"c2"}, d.Consumers)
		// The last one skipped: the session leaves the index.
		r, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "a", Consumer: "c2", Index: second.Index, Action: redisstore.Skip})
		require.NoError(t, err)
		require.True(t, r.Redriven)
		_, listed, err = e.store.DeadAt(e.ctx, "a")
		require.NoError(t, err)
		assert.False(t, listed, "no dead letter left")

		// A clear forgets a session's dead letters; a drop forgets it.
		deadLetterIn(t, e, "b", "c1", "x")
		deadLetterIn(t, e, "c", "c1", "x")
		_, err = e.store.Clear(e.ctx, "b", redisstore.ClearOptions{})
		require.NoError(t, err)
		_, err = e.store.Drop(e.ctx, "c")
		require.NoError(t, err)
		for _, s := range []string{"b", "c"} {
			_, listed, err = e.store.DeadAt(e.ctx, s)
			require.NoError(t, err)
			assert.False(t, listed, "session %s", s)
		}
		sum, err := e.store.DeadSummaryOf(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, redisstore.DeadSummary{}, sum)
	})
}

// TestDeadLettersAcrossSessions: the listing across sessions gives every
// dead letter once, the longest-held session first, filtered by consumer
// and error text, whatever the page size; a filter that rules a session out
// by its listed consumers skips it unread.
func TestDeadLettersAcrossSessions(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		var want []string
		var wantC2, wantTimeout []string
		for i := range 12 {
			session := fmt.Sprintf("s%02d", (i*7)%12) // not in id order
			consumer := []string{"c1", "c2"}[i%2]
			text := []string{"timeout talking to the API", "bad request"}[i%3%2]
			h := deadLetterIn(t, e, session, consumer, text)
			if i%4 == 0 {
				// A second dead letter in the same session.
				h2 := deadLetterIn(t, e, session, consumer, text)
				want = append(want, fmt.Sprintf("%s/%s@%d", session, consumer, h.Index), fmt.Sprintf("%s/%s@%d", session, consumer, h2.Index))
				if consumer == "c2" {
					wantC2 = append(wantC2, want[len(want)-2:]...)
				}
				if strings.Contains(text, "timeout") {
					wantTimeout = append(wantTimeout, want[len(want)-2:]...)
				}
			} else {
				want = append(want, fmt.Sprintf("%s/%s@%d", session, consumer, h.Index))
				if consumer == "c2" {
					wantC2 = append(wantC2, want[len(want)-1])
				}
				if strings.Contains(text, "timeout") {
					wantTimeout = append(wantTimeout, want[len(want)-1])
				}
			}
			e.clock.Advance(time.Second)
		}
		// Sessions nobody dead-lettered in are never read.
		for i := range 20 {
			_, err := e.store.Append(e.ctx, fmt.Sprintf("quiet%d", i), []a2redis.Event{event(a2redis.Target{Consumer: "c1"})}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		for _, limit := range []int{1, 2, 5, 100} {
			got, _ := listAll(t, e, redisstore.DeadLetterQuery{Limit: limit})
			assert.Equal(t, want, sessionsOf(got), "limit %d", limit)
			got, _ = listAll(t, e, redisstore.DeadLetterQuery{Limit: limit, Consumer: "c2"})
			assert.Equal(t, wantC2, sessionsOf(got), "consumer c2, limit %d", limit)
			got, _ = listAll(t, e, redisstore.DeadLetterQuery{Limit: limit, Error: "timeout"})
			assert.Equal(t, wantTimeout, sessionsOf(got), "error timeout, limit %d", limit)
		}
		page, err := e.store.DeadLettersAcross(e.ctx, redisstore.DeadLetterQuery{Consumer: "c2"})
		require.NoError(t, err)
		assert.Equal(t, 6, page.Sessions, "only the sessions with c2's dead letters are read")
		for _, h := range page.DeadLetters {
			assert.NotEmpty(t, h.Type, "the event is read")
			assert.False(t, h.DeadLetteredAt.IsZero())
		}
		sum, err := e.store.DeadSummaryOf(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(12), sum.Sessions)
		assert.Equal(t, int64(len(want)), sum.DeadLetters)

		_, err = e.store.DeadLettersAcross(e.ctx, redisstore.DeadLetterQuery{After: "nonsense"})
		assert.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%v", err)
		_, err = e.store.DeadLettersAcross(e.ctx, redisstore.DeadLetterQuery{Limit: redisstore.MaxPageLimit + 1})
		assert.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%v", err)
	})
}

// TestRedriveAcrossSessions: a filter's dead letters across sessions are
// redriven in batches with progress, an interrupted run resumes from its
// last progress and does the rest, and what the filter leaves stays.
func TestRedriveAcrossSessions(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for i := range 9 {
			deadLetterIn(t, e, fmt.Sprintf("r%d", i), []string{"c1", "c2", "c1"}[i%3], "boom")
			e.clock.Advance(time.Second)
		}
		stop := errors.New("interrupted")
		var seen []redisstore.RedriveProgress
		p, err := e.store.RedriveAcross(e.ctx, redisstore.RedriveAcrossRequest{Consumer: "c1", Action: redisstore.Retry, Batch: 2, Progress: func(p redisstore.RedriveProgress) error {
			seen = append(seen, p)
			if len(seen) == 2 {
				return stop
			}
			return nil
		}})
		require.ErrorIs(t, err, stop)
		require.Len(t, seen, 2)
		assert.Equal(t, 2, seen[0].Redriven)
		assert.Equal(t, 4, p.Redriven)
		require.NotEmpty(t, p.Next)
		left, _ := listAll(t, e, redisstore.DeadLetterQuery{Consumer: "c1"})
		assert.Len(t, left, 2, "c1's dead letters left after the interruption")

		p, err = e.store.RedriveAcross(e.ctx, redisstore.RedriveAcrossRequest{Consumer: "c1", Action: redisstore.Retry, Batch: 2, After: p.Next})
		require.NoError(t, err)
		assert.Equal(t, 2, p.Redriven, "the resumed run does the rest")
		assert.True(t, p.Done)
		left, _ = listAll(t, e, redisstore.DeadLetterQuery{Consumer: "c1"})
		assert.Empty(t, left)
		others, _ := listAll(t, e, redisstore.DeadLetterQuery{})
		assert.Len(t, others, 3, "c2's dead letters stay")

		// Skip them all; the index is empty after.
		p, err = e.store.RedriveAcross(e.ctx, redisstore.RedriveAcrossRequest{Action: redisstore.Skip})
		require.NoError(t, err)
		assert.Equal(t, 3, p.Redriven)
		assert.Equal(t, 3, p.Sessions)
		sum, err := e.store.DeadSummaryOf(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(0), sum.DeadLetters)

		_, err = e.store.RedriveAcross(e.ctx, redisstore.RedriveAcrossRequest{Action: "nope"})
		assert.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%v", err)
	})
}

// TestRepairReadyMendsTheDeadIndex: a dead index that lost a session's
// update (its entry gone), or kept a stale entry (a removal lost), or
// lists a dropped session, is right again after RepairReady.
func TestRepairReadyMendsTheDeadIndex(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		deadLetterIn(t, e, "lost", "c1", "boom")
		_, err := e.store.Append(e.ctx, "stale", []a2redis.Event{event(a2redis.Target{Consumer: "c1"})}, redisstore.AppendOptions{})
		require.NoError(t, err)
		want, listed, err := e.store.DeadAt(e.ctx, "lost")
		require.NoError(t, err)
		require.True(t, listed)
		shardOf := func(s string) keys.Ready {
			return keys.ReadyFor(e.prefix, keys.ReadyShard(s, e.store.ReadyShards()))
		}
		// The update lost: the shard has neither the entry nor the version.
		r := shardOf("lost")
		c := e.client
		for _, cmd := range [][]string{
			{"ZREM", r.Dead(), "lost"}, {"HDEL", r.DeadCounts(), "lost"}, {"HDEL", r.Versions(), "lost"},
			{"ZADD", shardOf("stale").Dead(), "5", "stale"}, {"HSET", shardOf("stale").DeadCounts(), "stale", "1,1,2:c1"},
			{"ZADD", shardOf("gone").Dead(), "5", "gone"}, {"HSET", shardOf("gone").DeadCounts(), "gone", "1,1,2:c1"},
		} {
			require.NoError(t, c.Do(e.ctx, c.B().Arbitrary(cmd...).Build()).Error())
		}
		st, err := e.store.RepairReady(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, st.DeadMended, "the stale and the dropped session")
		got, listed, err := e.store.DeadAt(e.ctx, "lost")
		require.NoError(t, err)
		require.True(t, listed, "the lost update is sent again")
		assert.Equal(t, want, got)
		for _, s := range []string{"stale", "gone"} {
			_, listed, err := e.store.DeadAt(e.ctx, s)
			require.NoError(t, err)
			assert.False(t, listed, "session %s", s)
		}
		// A second pass finds nothing to mend.
		st, err = e.store.RepairReady(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, 0, st.DeadMended)
	})
}

// TestDeadListingCommands: listing dead letters across sessions costs
// commands by the sessions that hold dead letters, not by the prefix's
// sessions: the scenario of 28 dead letters over 26 sessions costs the same
// with 174 settled sessions beside them as with none (INFO commandstats).
func TestDeadListingCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	measure := func(prefix string, quiet int) (map[string]int64, int) {
		s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: prefix, ConsumerRefresh: -1})
		require.NoError(t, err)
		e := &env{t: t, ctx: ctx, store: s, client: c, prefix: prefix}
		for i := range 26 {
			consumer := []string{"billing", "notify", "search"}[i%3]
			deadLetterIn(t, e, fmt.Sprintf("conv-%03d", i), consumer, "boom")
			if i < 2 {
				deadLetterIn(t, e, fmt.Sprintf("conv-%03d", i), consumer, "boom")
			}
		}
		for i := range quiet {
			session := fmt.Sprintf("conv-%03d", 26+i)
			_, err := s.Append(ctx, session, []a2redis.Event{event(a2redis.Target{Consumer: "billing"})}, redisstore.AppendOptions{})
			require.NoError(t, err)
			cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			for _, h := range cl.Heads {
				_, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts})
				require.NoError(t, err)
			}
		}
		resetStats(ctx, t, c)
		got, _ := listAll(t, e, redisstore.DeadLetterQuery{})
		return commandStats(ctx, t, c), len(got)
	}
	alone, n := measure("deadcmds-a", 0)
	require.Equal(t, 28, n)
	beside, n := measure("deadcmds-b", 174)
	require.Equal(t, 28, n)
	total, list := perOp(alone, 1)
	t.Logf("listing 28 dead letters over 26 sessions (of 200): %.0f commands: %s", total, list)
	assert.Equal(t, alone, beside, "the settled sessions cost the listing nothing")
	assert.Zero(t, alone["scan"], "no keyspace scan")
}

// TestRecountDeadLettersListsAnOlderReleasesDeadLetters: a dead letter
// whose session's record does not carry it (made by a release without the
// dead index) is listed by RecountDeadLetters, not by RepairReady.
func TestRecountDeadLettersListsAnOlderReleasesDeadLetters(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		deadLetterIn(t, e, "old", "c1", "boom")
		want, listed, err := e.store.DeadAt(e.ctx, "old")
		require.NoError(t, err)
		require.True(t, listed)
		// What an older release leaves: the record without the dead state,
		// nothing in the dead index.
		k := keysFor(e, "old")
		c := e.client
		text, err := c.Do(e.ctx, c.B().Get().Key(k.Listed()).Build()).ToString()
		require.NoError(t, err)
		parts := strings.SplitN(text, ":", 4)
		require.Len(t, parts, 4, text)
		r := keys.ReadyFor(e.prefix, keys.ReadyShard("old", e.store.ReadyShards()))
		for _, cmd := range [][]string{
			{"SET", k.Listed(), strings.Join(parts[:3], ":")}, {"ZREM", r.Dead(), "old"}, {"HDEL", r.DeadCounts(), "old"},
		} {
			require.NoError(t, c.Do(e.ctx, c.B().Arbitrary(cmd...).Build()).Error())
		}
		_, err = e.store.RepairReady(e.ctx)
		require.NoError(t, err)
		_, listed, err = e.store.DeadAt(e.ctx, "old")
		require.NoError(t, err)
		require.False(t, listed, "RepairReady sends records as they are")

		e.clock.Advance(time.Second)
		st, err := e.store.RecountDeadLetters(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, st.DeadMended)
		got, listed, err := e.store.DeadAt(e.ctx, "old")
		require.NoError(t, err)
		require.True(t, listed)
		assert.Equal(t, want.Count, got.Count)
		assert.Equal(t, want.Consumers, got.Consumers)
		assert.Equal(t, e.clock.Now().UnixMilli(), got.Since.UnixMilli(), "held since the recount: the record did not know")
		st, err = e.store.RecountDeadLetters(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, 0, st.DeadMended)
	})
}

package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// skipFixture is a session whose first `others` heads belong to another
// consumer, the served consumer's heads behind them.
type skipFixture struct {
	*env
	session string
}

var mineOnly = []a2redis.Consumer{{Name: "mine"}}

// appendOthers appends n events for the consumer "other".
func (f skipFixture) appendOthers(n int) {
	others := make([]a2redis.Event, n)
	for i := range others {
		others[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "other"}}}
	}
	for part := range slices.Chunk(others, redisstore.DefaultMaxBatch) {
		_, err := f.store.Append(f.ctx, f.session, part, redisstore.AppendOptions{})
		require.NoError(f.t, err)
	}
}

// appendMine appends one event for "mine" (on lane when not "") and
// returns its index.
func (f skipFixture) appendMine(lane string) int64 {
	res, err := f.store.Append(f.ctx, f.session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "mine", Lane: lane}}}}, redisstore.AppendOptions{})
	require.NoError(f.t, err)
	return res.Events[0].Index
}

// claim claims up to limit heads of "mine" for holder and returns them.
func (f skipFixture) claim(holder string, limit int) []a2redis.HeadEvent {
	c, err := f.store.ClaimAvailable(f.ctx, redisstore.ClaimRequest{Session: f.session, Holder: holder, TTL: time.Minute, Consumers: mineOnly, Limit: limit})
	require.NoError(f.t, err)
	return c.Heads
}

// marks reads the session's scan marks (keys.Session.Skip); nil for none.
func (f skipFixture) marks() map[string]int64 {
	raw, err := f.client.Do(f.ctx, f.client.B().Get().Key(keys.For(f.prefix, f.session).Skip()).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return nil
	}
	require.NoError(f.t, err)
	var out map[string]int64
	require.NoError(f.t, json.Unmarshal([]byte(raw), &out), raw)
	return out
}

func headIndexes(heads []a2redis.HeadEvent) []int64 {
	out := make([]int64, len(heads))
	for i, h := range heads {
		out[i] = h.Index
	}
	return out
}

// TestSubsetClaimStartsAtItsMark: a claim serving one consumer that walked
// past hundreds of others' free heads records where that consumer's free
// heads begin (keys.Session.Skip), the next claims start there and keep it
// up to date, and every write that frees one of its heads below the mark
// lowers it, so the claim finds that head (the test fails with a "busy"
// or a missing index if one did not). Every target.
func TestSubsetClaimStartsAtItsMark(t *testing.T) {
	const others = 600 // past scripts.SkipAfter
	// Each case: heads a < b < c of "mine" behind the others'; a and b
	// claimed one at a time by w1, so the mark passed a; then the case frees
	// a head below the mark and says which it expects claimed next.
	type freeing func(f skipFixture, held []a2redis.HeadEvent, c int64) []int64
	cases := map[string]freeing{
		"release": func(f skipFixture, held []a2redis.HeadEvent, c int64) []int64 {
			out, err := f.store.Release(f.ctx, redisstore.ReleaseRequest{Session: f.session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(held[0])}})
			require.NoError(t, err)
			require.Equal(t, []redisstore.ReleaseOutcome{redisstore.Released}, out)
			return []int64{held[0].Index, c}
		},
		"retry": func(f skipFixture, held []a2redis.HeadEvent, c int64) []int64 {
			_, err := f.store.FailAttempt(f.ctx, redisstore.FailRequest{Session: f.session, Head: held[0].Ref(), Attempt: held[0].Attempts, Error: "again"})
			require.NoError(t, err)
			return []int64{held[0].Index, c}
		},
		"redrive": func(f skipFixture, held []a2redis.HeadEvent, c int64) []int64 {
			_, err := f.store.FailAttempt(f.ctx, redisstore.FailRequest{Session: f.session, Head: held[0].Ref(), Attempt: held[0].Attempts, Error: "bad", Permanent: true})
			require.NoError(t, err)
			// Dead-lettered: the claim takes c alone, and the mark passes it.
			require.Equal(t, []int64{c}, headIndexes(f.claim("w1", 1)))
			r, err := f.store.Redrive(f.ctx, redisstore.RedriveRequest{Session: f.session, Consumer: "mine", Index: held[0].Index, Action: redisstore.Retry})
			require.NoError(t, err)
			require.True(t, r.Redriven)
			return []int64{held[0].Index}
		},
		"takeover": func(f skipFixture, held []a2redis.HeadEvent, c int64) []int64 {
			// c claimed too, then all three lapse: the takeover takes a
			// alone and releases b and c, below the mark (past c).
			require.Equal(t, []int64{c}, headIndexes(f.claim("w1", 1)))
			f.clock.Advance(2 * time.Minute)
			require.Equal(t, []int64{held[0].Index}, headIndexes(f.claim("w2", 1)), "a taken over alone")
			return []int64{held[1].Index, c}
		},
	}
	for name, free := range cases {
		t.Run(name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				f := skipFixture{env: e, session: "s"}
				f.appendOthers(others)
				a, b := f.appendMine(""), f.appendMine("")
				c := f.appendMine("")
				require.Nil(t, f.marks(), "no claim walked yet")
				heldA := f.claim("w1", 1)
				require.Equal(t, []int64{a}, headIndexes(heldA))
				require.Equal(t, map[string]int64{"mine": a}, f.marks(), "the walk past the others' heads recorded")
				heldB := f.claim("w1", 1)
				require.Equal(t, []int64{b}, headIndexes(heldB))
				require.Equal(t, map[string]int64{"mine": b}, f.marks(), "raised by the next claim")
				want := free(f, append(heldA, heldB...), c)
				got := f.claim("w3", 16)
				assert.Equal(t, want, headIndexes(got), "the freed head found below the mark (marks %v)", f.marks())
			})
		})
	}
}

// TestLaneMovingBelowTheMarkLowersIt: a lane cursor's completion (the
// flat completing script) moves its head to the lane's next event, below
// where the claim's mark had gone; the mark comes down and the claim takes
// it. Every target.
func TestLaneMovingBelowTheMarkLowersIt(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		f := skipFixture{env: e, session: "s"}
		f.appendOthers(600)
		p, r := f.appendMine("x"), f.appendMine("x")
		q := f.appendMine("")
		held := f.claim("w", 1)
		require.Equal(t, []int64{p}, headIndexes(held))
		require.Equal(t, []int64{q}, headIndexes(f.claim("w", 1)), "the lane's next event is no head yet")
		require.Equal(t, map[string]int64{"mine": q}, f.marks())
		_, err := f.store.CompleteAttempts(f.ctx, redisstore.CompleteAttemptsRequest{Session: f.session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(held[0])}})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"mine": r}, f.marks(), "lowered to the lane's new head")
		require.Equal(t, []int64{r}, headIndexes(f.claim("w", 1)))
	})
}

// TestSubsetClaimAfterTheFirstWalksNothing: on one server, counted
// exactly: the first claim serving one consumer behind 3,000 free heads of
// another walks them in several calls (scripts.ClaimScan entries each);
// the next claim starts at the mark and takes one call of the general
// claim after the fast one's hand-over — before marks, it walked the
// 3,000 again.
func TestSubsetClaimAfterTheFirstWalksNothing(t *testing.T) {
	t.Parallel()
	client := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t)})
	require.NoError(t, err)
	f := skipFixture{env: &env{t: t, ctx: ctx, store: store, client: client, prefix: store.Prefix()}, session: "s"}
	f.appendOthers(3000)
	a, b := f.appendMine(""), f.appendMine("")

	calls := func(claim func()) int64 {
		require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
		claim()
		stats, err := redistest.CommandCalls(ctx, client)
		require.NoError(t, err)
		return stats["evalsha"]
	}
	first := calls(func() { require.Equal(t, []int64{a}, headIndexes(f.claim("w", 1))) })
	assert.GreaterOrEqual(t, first, int64(4), "the first walk: the fast claim's hand-over and three calls or more")
	next := calls(func() { require.Equal(t, []int64{b}, headIndexes(f.claim("w", 1))) })
	assert.Equal(t, int64(2), next, "the fast claim's hand-over and one general claim")
}

// TestSubsetClaimsFollowTheRunnableSet: a seeded run of claims serving one
// consumer behind hundreds of another's free heads, between completions,
// releases, retries, permanent failures, redrives and appends of its own
// (event and lane heads), checks after every step that a claim takes
// exactly the lowest free heads of the consumer that the runnable set
// holds (read before the claim), so no write leaves a scan mark above a
// free head. Every target.
func TestSubsetClaimsFollowTheRunnableSet(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		f := skipFixture{env: e, session: "s"}
		f.appendOthers(400)
		rnd := rand.New(rand.NewPCG(7, 9))
		k := keysFor(e, f.session)
		// freeMine: the indexes of "mine"'s free heads, lowest first.
		freeMine := func() []int64 {
			members, err := e.client.Do(e.ctx, e.client.B().Zrangebyscore().Key(k.Runnable()).Min("1").Max(fmt.Sprintf("(%d", keys.HeldOffset)).Withscores().Build()).AsZScores()
			require.NoError(t, err)
			var out []int64
			for _, m := range members {
				if c, _, _, ok := rows.ParseCursorID(m.Member); ok && c == "mine" {
					out = append(out, int64(m.Score))
				}
			}
			return out
		}
		var held []a2redis.HeadEvent
		take := func(i int) a2redis.HeadEvent {
			h := held[i]
			held = append(held[:i], held[i+1:]...)
			return h
		}
		var dead []a2redis.HeadEvent
		for step := range 300 {
			switch p := rnd.IntN(10); {
			case p < 2:
				lane := ""
				if rnd.IntN(2) == 0 {
					lane = fmt.Sprint("l", rnd.IntN(3))
				}
				f.appendMine(lane)
				if rnd.IntN(3) == 0 {
					f.appendOthers(1 + rnd.IntN(30))
				}
			case p < 5:
				limit := 1 + rnd.IntN(3)
				want := append([]int64{}, freeMine()...)
				want = want[:min(limit, len(want))]
				got := f.claim("w", limit)
				require.Equal(t, want, headIndexes(got), "step %d: a claim of %d (marks %v)", step, limit, f.marks())
				held = append(held, got...)
			case len(held) == 0:
			case p < 7:
				h := take(rnd.IntN(len(held)))
				_, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: f.session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}})
				require.NoError(t, err)
			case p < 8:
				h := take(rnd.IntN(len(held)))
				_, err := e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: f.session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}})
				require.NoError(t, err)
			case p < 9:
				h := take(rnd.IntN(len(held)))
				permanent := rnd.IntN(2) == 0
				_, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: f.session, Head: h.Ref(), Attempt: h.Attempts, Error: "x", Permanent: permanent})
				require.NoError(t, err)
				if permanent {
					dead = append(dead, h)
				}
			default:
				if len(dead) > 0 {
					h := dead[0]
					dead = dead[1:]
					_, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: f.session, Consumer: "mine", Lane: h.Lane, Index: h.Index, Action: redisstore.Retry})
					require.NoError(t, err)
				}
			}
		}
		require.NotNil(t, f.marks(), "the claims walked far enough to record marks")
	})
}

// TestMarkPastTheHeadIsDropped: a scan mark above the session head (no
// free head can lie there; a walk that found none of its consumer's heads
// once recorded the runnable set's cap) is dropped by the next claim,
// which finds the head below it. Every target.
func TestMarkPastTheHeadIsDropped(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		f := skipFixture{env: e, session: "s"}
		f.appendOthers(300)
		a := f.appendMine("")
		require.NoError(t, e.client.Do(e.ctx, e.client.B().Set().Key(keys.For(e.prefix, f.session).Skip()).Value(`{"mine":1125899906842624}`).Build()).Error())
		require.Equal(t, []int64{a}, headIndexes(f.claim("w", 1)))
		assert.Equal(t, map[string]int64{"mine": a}, f.marks())
	})
}

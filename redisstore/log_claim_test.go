package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// TestCompleteAndClaimTypedLog: a typed log consumer's head completed with
// CompleteAndClaim comes back with the log's next event of its types
// claimed for the holder (fresh, with its event) in the same script call —
// complete_fast, or complete_many with the general scripts only — until the
// log has none; events of other types are passed over, and a head the
// claim left stays held (a claim finds the session busy).
func TestCompleteAndClaimTypedLog(t *testing.T) {
	for _, general := range []bool{false, true} {
		name := "flat"
		if general {
			name = "general"
		}
		t.Run(name, func(t *testing.T) {
			if general {
				scripts.SetGeneralOnly(true)
				t.Cleanup(func() { scripts.SetGeneralOnly(false) })
			}
			for _, tg := range redistest.Targets {
				t.Run(tg.Name, func(t *testing.T) {
					e := newEnv(t, tg)
					served := []a2redis.Consumer{{Name: "g", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"a"}}}}
					var batch []a2redis.Event
					for _, typ := range []string{"a", "b", "a", "b", "b", "a"} {
						batch = append(batch, a2redis.Event{Type: typ, Payload: []byte(`{"t":"` + typ + `"}`)})
					}
					_, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{Consumers: served})
					require.NoError(t, err)
					cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: served})
					require.NoError(t, err)
					require.Len(t, cl.Heads, 1)
					head := cl.Heads[0]
					require.Equal(t, int64(1), head.Index)
					script := "complete_fast"
					if general {
						script = "complete_many"
					}
					runs := scripts.All()[script].Runs()
					var got []int64
					for range 4 {
						e.clock.Advance(time.Second)
						before := scripts.All()["claim"].Runs() + scripts.All()["claim_fast"].Runs()
						r, err := e.store.CompleteAndClaim(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}, Consumers: served},
							redisstore.NextClaim{Holder: "w2", TTL: time.Minute})
						require.NoError(t, err)
						assert.Equal(t, before, scripts.All()["claim"].Runs()+scripts.All()["claim_fast"].Runs(), "no claim script: the completion claims")
						require.Equal(t, redisstore.Completed, r.Results[0].Outcome)
						if r.Next.Outcome != redisstore.Claimed {
							assert.Equal(t, redisstore.Settled, r.Next.Outcome)
							break
						}
						require.Len(t, r.Next.Heads, 1)
						head = r.Next.Heads[0]
						got = append(got, head.Index)
						assert.Equal(t, "a", head.Type, "the next event of the log's type, with its event")
						assert.Equal(t, `{"t":"a"}`, string(head.Payload))
						assert.Equal(t, a2redis.LogCursor, head.Kind)
						assert.Equal(t, "audit", head.Lane)
						assert.Equal(t, int64(1), head.Attempts, "a fresh claim")
						assert.Equal(t, "w2", head.Holder)
						assert.Equal(t, e.clock.Now().Add(time.Minute).UnixMilli(), head.ClaimExpiresAt.UnixMilli())
						// Held by the claim: nothing else to take.
						busy, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "x", TTL: time.Minute, Consumers: served})
						require.NoError(t, err)
						assert.Equal(t, redisstore.Busy, busy.Outcome)
					}
					assert.Equal(t, []int64{3, 6}, got, "events 2, 4 and 5 are of another type")
					assert.Equal(t, int64(3), scripts.All()[script].Runs()-runs, "one %s call per completion", script)
					cursors, err := e.store.Cursors(e.ctx, "s")
					require.NoError(t, err)
					require.Len(t, cursors, 1)
					assert.Equal(t, int64(6), cursors[0].Position)
					assert.Equal(t, int64(0), cursors[0].Head, "the log has nothing left")
				})
			}
		})
	}
}

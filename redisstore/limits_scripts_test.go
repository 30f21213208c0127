package redisstore_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// limitTargets is the most event-cursor targets one event may carry.
const limitTargets = a2redis.MaxTargetsPerEvent

// runsOf reads the run counts of the scripts named.
func runsOf(names ...string) map[string]int64 {
	out := map[string]int64{}
	for _, name := range names {
		out[name] = scripts.All()[name].Runs()
	}
	return out
}

// TestLimitsTargetsPerEvent: events with limitTargets event-cursor targets
// go in through every append path — append_targeted (one event),
// append_plain (two), append (with a lane target too) — or, with the
// general scripts only, all through append; then all their heads (3,000)
// are claimed MaxBatch to a call, each call's heads renewed in one call,
// half released in one and the rest completed in one, on every target.
func TestLimitsTargetsPerEvent(t *testing.T) {
	for _, general := range []bool{false, true} {
		name := "flat"
		if general {
			name = "general"
		}
		t.Run(name, func(t *testing.T) {
			scripts.SetGeneralOnly(general)
			t.Cleanup(func() { scripts.SetGeneralOnly(false) })
			eachAtLimits(t, func(t *testing.T, e *env) {
				targets := make([]a2redis.Target, limitTargets)
				for i := range targets {
					targets[i] = a2redis.Target{Consumer: fmt.Sprintf("consumer-%04d", i)}
				}
				ev := a2redis.Event{Type: "t", Payload: []byte(`{}`), Targets: targets}
				// The limit counts lane targets too: limitTargets-1 event
				// cursors and a lane.
				withLane := ev
				withLane.Targets = append(append([]a2redis.Target{}, targets[:limitTargets-1]...), a2redis.Target{Consumer: "lane-c", Lane: "l"})
				for _, step := range []struct {
					events []a2redis.Event
					script string
				}{
					{[]a2redis.Event{ev}, "append_targeted"},
					// A batch holds at most MaxBatchTargets (1,000) targets:
					// the second event names none.
					{[]a2redis.Event{ev, {Type: "t"}}, "append_plain"},
					{[]a2redis.Event{withLane}, "append"},
				} {
					before := runsOf(step.script, "append")
					_, err := e.store.Append(e.ctx, "s", step.events, redisstore.AppendOptions{})
					require.NoError(t, err, step.script)
					if general {
						assert.Greater(t, scripts.All()["append"].Runs(), before["append"], "general: append ran")
					} else {
						assert.Greater(t, scripts.All()[step.script].Runs(), before[step.script], "%s ran", step.script)
					}
				}
				// The heads are claimed MaxBatch to a call, each call's
				// heads renewed in one call, half released in one and the
				// rest completed in one; then the released ones claimed
				// again and completed.
				const heads = 3 * limitTargets
				claimPages := func(n int) []a2redis.HeadEvent {
					var all []a2redis.HeadEvent
					for len(all) < n {
						cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Limit: redisstore.DefaultMaxBatch})
						require.NoError(t, err)
						require.Len(t, cl.Heads, min(redisstore.DefaultMaxBatch, n-len(all)))
						all = append(all, cl.Heads...)
					}
					return all
				}
				all := claimPages(heads)
				for page := range slices.Chunk(all, redisstore.DefaultMaxBatch) {
					renewed, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w", TTL: time.Minute, Claims: completions(page)})
					require.NoError(t, err)
					require.Len(t, renewed.Renewed, len(page))
					released, err := e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: completions(page[:len(page)/2])})
					require.NoError(t, err)
					require.Len(t, released, len(page)/2)
					completeAll(t, e, "s", page[len(page)/2:])
				}
				for page := range slices.Chunk(claimPages(heads/2), redisstore.DefaultMaxBatch) {
					completeAll(t, e, "s", page)
				}
				settled, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
				require.NoError(t, err)
				assert.Equal(t, redisstore.Settled, settled.Outcome)
			})
		})
	}
}

// TestScriptsTakeAnyNumberOfTargets: the append scripts slice every
// variadic call, so an event with far more targets than the store accepts
// (5,000: 10,000 ZADD arguments, past what unpack takes on redis-server,
// and twice what it takes on miniredis) still appends all or nothing. The
// scripts are called directly: the store refuses such an event.
func TestScriptsTakeAnyNumberOfTargets(t *testing.T) {
	const n = 5000
	eachAtLimits(t, func(t *testing.T, e *env) {
		prefixes := make([]string, n)
		for i := range prefixes {
			prefixes[i] = rows.EventRow(fmt.Sprintf("consumer-%04d", i))
		}
		now := strconv.FormatInt(e.clock.Now().UnixMilli(), 10)
		run := func(session, script string, args []string) {
			t.Helper()
			k := keys.For(e.prefix, session)
			err := scripts.All()[script].Lua(false).Exec(e.ctx, e.client, []string{k.Count(), k.Sentinel()}, args).Error()
			require.NoError(t, err, script)
			live, err := e.client.Do(e.ctx, e.client.B().Zcard().Key(k.Runnable()).Build()).AsInt64()
			require.NoError(t, err)
			assert.Equal(t, int64(n), live, "%s: runnable heads", script)
			count, err := e.client.Do(e.ctx, e.client.B().Get().Key(k.Count()).Build()).ToString()
			require.NoError(t, err)
			assert.Equal(t, "1", count, "%s: session head", script)
		}
		run("targeted", "append_targeted", append([]string{now, "id-1", "t", "{}", "", "", ""}, prefixes...))
		plain := []string{now, "", "1", "1", "", "", "1", "id-1", "t", "{}", strconv.Itoa(n)}
		run("plain", "append_plain", append(plain, prefixes...))
		targets := make([][]string, n)
		for i := range targets {
			targets[i] = []string{fmt.Sprintf("consumer-%04d", i), "#"}
		}
		raw, err := json.Marshal(targets)
		require.NoError(t, err)
		run("general", "append", []string{now, "1", "", "", "id-1", "t", "{}", "", string(raw)})
	})
}

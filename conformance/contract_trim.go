package conformance

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// §1 Trim: the handled past of a long-lived session leaves the log —
// the events below every head and up to every reducer's newest snapshot,
// with their id records and type-index entries — while indexes go on,
// reads start at the retained log, and what a consumer still needs stays.
func init() {
	contract("Trim/HandledPastGoes", func(t *testing.T, e *env) {
		e.appendN("s", 6, func(i int) a2redis.Event { return evID("e"+itoa(int64(i+1)), "t", to("c")) })
		c := e.claim(redisstore.ClaimRequest{Limit: 4})
		e.eq(len(c.Heads), 4, "claimed")
		for _, h := range c.Heads {
			e.complete(h)
		}
		e.no(e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{{Index: 3, State: json.RawMessage(`3`)}}), "snapshot")
		r, err := e.store.Trim(e.ctx, "s", redisstore.TrimRequest{})
		e.no(err, "trim")
		e.eq(r, redisstore.TrimResult{Floor: 3, Removed: 3, Bound: 3}, "up to the reducer's snapshot")
		e.no(e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{{Index: 6, State: json.RawMessage(`6`)}}), "snapshot")
		r, err = e.store.Trim(e.ctx, "s", redisstore.TrimRequest{})
		e.no(err, "trim")
		e.eq(r, redisstore.TrimResult{Floor: 4, Removed: 1, Bound: 4}, "up to the lowest head (5)")
		e.eq(e.bounds("s"), redisstore.Bounds{Head: 6, Floor: 4}, "bounds")
		e.eq(indexes(e.read("s")), []int64{5, 6}, "reads start at the retained log")
		_, err = e.store.Read(e.ctx, "s", 2, 0)
		e.is(err, a2redis.ErrTrimmed, "a read from inside the trimmed past")
		k := keys.For(e.prefix, "s")
		ids := 0
		for _, key := range e.allSessionKeys("s") {
			if strings.HasPrefix(key, k.ID("")) {
				ids++
			}
		}
		e.eq(ids, 2, "the id records of the trimmed events are gone")
		e.eq(e.append("s", evID("e1", "t")).Events[0].Index, int64(7), "a trimmed id is free again; indexes go on")
		e.eq(e.append("s", evID("e5", "t", to("c"))).Replayed, true, "a retained id replays")
		got := e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(got.Heads), []string{"c@5", "c@6"}, "the retained heads")
	})
}

package conformance

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/presence"
	"github.com/a2redis/a2redis/redisstore"
)

// §1 Snapshots: a reducer's state cache per session — a head snapshot that
// only moves forward, and history kept while live heads pin it.
func init() {
	state := func(e *env, session string, through int64) string {
		e.t.Helper()
		st, err := e.store.ReadState(e.ctx, session, "r", redisstore.ReadStateOptions{Through: through})
		e.no(err, "read state")
		if st.Snapshot == nil {
			return "none"
		}
		return itoa(st.SnapshotIndex) + "=" + string(st.Snapshot)
	}
	put := func(e *env, session string, writes ...redisstore.SnapshotWrite) {
		e.t.Helper()
		e.no(e.store.PutSnapshots(e.ctx, session, "r", writes), "put snapshots")
	}
	snap := func(idx int64, state string, pins ...a2redis.HeadRef) redisstore.SnapshotWrite {
		return redisstore.SnapshotWrite{Index: idx, State: json.RawMessage(state), Pins: pins}
	}

	contract("Snapshots/HeadMovesForwardHistoryNeedsPins", func(t *testing.T, e *env) {
		st, err := e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{})
		e.no(err, "read state of an empty session")
		e.eq(st, redisstore.State{}, "nothing yet")
		e.appendN("s", 10, func(i int) a2redis.Event { return ev("t", to("c")) })
		put(e, "s", snap(3, `{"n":3}`))
		e.eq(state(e, "s", 0), `3={"n":3}`, "the head snapshot")
		st, err = e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{})
		e.no(err, "read state")
		e.eq([]int64{st.Head, st.ClearIndex}, []int64{10, 0}, "ReadState reports the frontier")
		put(e, "s", snap(2, `{"n":2}`))
		e.eq(state(e, "s", 0), `3={"n":3}`, "the head never moves back")
		e.eq(state(e, "s", 2), "none", "an older unpinned snapshot is not kept")
		put(e, "s", snap(6, `{"n":6}`))
		e.eq(state(e, "s", 5), "none", "the replaced head was not pinned")

		c := e.claim(redisstore.ClaimRequest{Through: 2})
		e.eq(headRefs(c.Heads), []string{"c@1", "c@2"}, "two heads to pin with")
		put(e, "s", snap(4, `{"n":4}`, c.Heads[0].Ref()), snap(5, `{"n":5}`, c.Heads[1].Ref()), snap(7, `{"n":7}`))
		e.eq([]string{state(e, "s", 0), state(e, "s", 6), state(e, "s", 4), state(e, "s", 3)}, []string{`7={"n":7}`, `5={"n":5}`, `4={"n":4}`, "none"}, "pinned history below the head")
		e.complete(c.Heads[1])
		e.eq(state(e, "s", 6), `4={"n":4}`, "a completed head releases its pin")
		e.fail(c.Heads[0], 1, 0)
		e.eq(state(e, "s", 6), "none", "a dead-lettered head releases its pin")

		// Pins hold only on live heads of the current lifetime.
		put(e, "s", snap(6, `{"n":"6b"}`, c.Heads[0].Ref(), c.Heads[1].Ref(), a2redis.HeadRef{Consumer: "zz", Index: 9}))
		e.eq(state(e, "s", 6), "none", "pins on finished or unknown heads do not hold")
		free := e.claim(redisstore.ClaimRequest{Through: 3}).Heads[0]
		put(e, "s", snap(8, `8`), snap(8, `"8b"`, free.Ref()), snap(9, `9`))
		e.eq([]string{state(e, "s", 0), state(e, "s", 8)}, []string{`9=9`, `8="8b"`}, "writes at one index merge: the last state wins, pins add up")

		// A clear hides every snapshot of the past lifetime.
		marker := e.clearSession("s").ClearIndex
		e.eq(state(e, "s", 0), "none", "snapshots below the marker are ignored")
		put(e, "s", snap(5, `5`))
		e.eq(state(e, "s", 0), "none", "writes below the marker are dropped")
		put(e, "s", snap(marker, `"m"`))
		e.eq(state(e, "s", 0), itoa(marker)+`="m"`, "a snapshot at the marker belongs to the new lifetime")

		for _, bad := range [][]redisstore.SnapshotWrite{
			{{Index: -1, State: json.RawMessage(`1`)}},
			{{Index: 1}},
			{{Index: 1, State: json.RawMessage(`{`)}},
			{{Index: 1, State: json.RawMessage(`1`), Pins: []a2redis.HeadRef{{Consumer: "c"}}}},
		} {
			e.is(e.store.PutSnapshots(e.ctx, "s", "r", bad), a2redis.ErrInvalidArgument, "bad write %+v", bad)
		}
		e.is(e.store.PutSnapshots(e.ctx, "s", "", []redisstore.SnapshotWrite{snap(1, `1`)}), a2redis.ErrInvalidArgument, "no reducer")
		_, err = e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{Through: -1})
		e.is(err, a2redis.ErrInvalidArgument, "negative through")
	})

	// A reclaim that collapses an empty lifetime keeps what belongs to the
	// new lifetime: a snapshot taken at the marker describes it.
	contract("Snapshots/SurviveCollapseAtMarker", func(t *testing.T, e *env) {
		e.appendN("s", 3, func(int) a2redis.Event { return ev("t") })
		marker := e.clearSession("s").ClearIndex
		put(e, "s", snap(marker, `{"empty":true}`))
		e.eq(state(e, "s", 0), itoa(marker)+`={"empty":true}`, "before reclaim")
		_, err := e.store.Reclaim(e.ctx, "s")
		e.no(err, "reclaim")
		e.eq(state(e, "s", 0), itoa(marker)+`={"empty":true}`, "after the lifetime collapsed to its marker")
	})
}

// §1 Presence: field-wise last-writer-wins by the sender's at, expiry by the
// store clock, pruned on read; tombstones keep their stamp until they
// expire.
func init() {
	set := func(e *env, participant string, at time.Time, ttl time.Duration, values map[string]string) []string {
		e.t.Helper()
		vals := map[string]json.RawMessage{}
		for k, v := range values {
			if v == "" {
				vals[k] = nil
			} else {
				vals[k] = json.RawMessage(v)
			}
		}
		applied, err := e.store.PresenceSet(e.ctx, "s", redisstore.PresenceWrite{Participant: participant, Values: vals, At: at, TTL: ttl, Seen: at.UnixMilli() % 1000})
		e.no(err, "presence set")
		return applied
	}
	read := func(e *env) []string {
		e.t.Helper()
		rows, err := e.store.PresenceRead(e.ctx, "s")
		e.no(err, "presence read")
		out := []string{}
		for _, r := range rows {
			out = append(out, r.Participant+"."+r.Field+"="+string(r.Value))
		}
		return out
	}

	contract("Presence/LastWriterWinsTombstonesAndExpiry", func(t *testing.T, e *env) {
		t0 := time.UnixMilli(1_000_000)
		e.eq(set(e, "ann", t0, time.Minute, map[string]string{"cursor": `1`, "name": `"Ann"`}), []string{"cursor", "name"}, "applied, sorted")
		e.eq(set(e, "ann", t0.Add(-time.Second), time.Minute, map[string]string{"cursor": `0`}), []string{}, "an older write loses")
		e.eq(set(e, "ann", t0, time.Minute, map[string]string{"cursor": `2`}), []string{"cursor"}, "a tie goes to the incoming write")
		e.eq(set(e, "bob", t0, time.Minute, map[string]string{"cursor": `7`}), []string{"cursor"}, "another participant")
		e.eq(read(e), []string{"ann.cursor=2", "ann.name=\"Ann\"", "bob.cursor=7"}, "read")
		rows, err := e.store.PresenceRead(e.ctx, "s")
		e.no(err, "read")
		e.eq([]int64{rows[0].At.UnixMilli(), rows[0].ExpiresAt.UnixMilli(), rows[0].Seen}, []int64{t0.UnixMilli(), e.clock.Now().Add(time.Minute).UnixMilli(), t0.UnixMilli() % 1000}, "stamps: sender's at, store clock's expiry")

		e.eq(set(e, "ann", t0.Add(time.Second), time.Minute, map[string]string{"name": ""}), []string{"name"}, "a delete")
		e.eq(read(e), []string{"ann.cursor=2", "bob.cursor=7"}, "a tombstone is not read")
		e.eq(set(e, "ann", t0, time.Minute, map[string]string{"name": `"late"`}), []string{}, "an older write arriving after the delete still loses")

		e.clock.Advance(2 * time.Minute)
		e.eq(read(e), []string{}, "expired by the store clock")
		e.eq(set(e, "ann", t0, time.Minute, map[string]string{"name": `"back"`}), []string{"name"}, "an expired tombstone no longer wins")
		e.eq(read(e), []string{"ann.name=\"back\""}, "read")
		_, err = e.store.PresenceSet(e.ctx, "s", redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": json.RawMessage(`1`)}, TTL: time.Second})
		e.is(err, a2redis.ErrInvalidArgument, "no at")
		_, err = e.store.PresenceSet(e.ctx, "s", redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": json.RawMessage(`1`)}, At: t0})
		e.is(err, a2redis.ErrInvalidArgument, "no ttl")
	})

	// The presence hash also carries a real-time TTL, a coarse bound behind
	// the per-entry expiry.
	contract("Presence/HashExpiresInRealTime", func(t *testing.T, e *env) {
		written := time.Now()
		set(e, "ann", e.clock.Now(), 300*time.Millisecond, map[string]string{"f": `1`})
		key := keys.For(e.prefix, "s").Presence()
		ttl, err := e.client.Do(e.ctx, e.client.B().Pttl().Key(key).Build()).AsInt64()
		e.no(err, "PTTL")
		if ttl == -2 && time.Since(written) >= 300*time.Millisecond {
			// The machine stalled past the TTL between the write and the
			// PTTL: the hash has already expired in real time.
			return
		}
		e.check(ttl > 0 && ttl <= 300, "the presence hash has a TTL of at most the write's: %d ms", ttl)
		// Only an EXISTS sent 3s after the write (ten times the TTL) that
		// still finds the hash fails, however late the machine runs it.
		deadline := time.Now().Add(3 * time.Second)
		for {
			sent := time.Now()
			n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(key).Build()).AsInt64()
			e.no(err, "EXISTS")
			if n == 0 {
				break
			}
			e.check(sent.Before(deadline), "the presence hash did not expire in real time")
			time.Sleep(50 * time.Millisecond)
		}
	}, needExpiry)

	contract("Presence/PatchesArePublished", func(t *testing.T, e *env) {
		p := presence.New(e.store)
		sub := e.subscribe(keys.For(e.prefix, "s").PresenceChannel(), false)
		patch, err := p.Set(e.ctx, "s", "ann", map[string]json.RawMessage{"cursor": json.RawMessage(`5`), "gone": nil}, presence.Meta{Seen: 3, At: time.UnixMilli(1000), TTL: time.Minute})
		e.no(err, "set")
		e.check(patch != nil && len(patch.Values) == 2, "patch %+v", patch)
		got, err := presence.DecodePatch(sub.next(t, 0))
		e.no(err, "decode")
		e.eq(got, *patch, "the published patch is the applied one")
		none, err := p.Set(e.ctx, "s", "ann", map[string]json.RawMessage{"cursor": json.RawMessage(`4`)}, presence.Meta{At: time.UnixMilli(999), TTL: time.Minute})
		e.no(err, "losing set")
		e.check(none == nil, "a write where every field lost applies nothing")
		rows, err := p.Read(e.ctx, "s")
		e.no(err, "read")
		e.eq(len(rows), 1, "one live field")
		time.Sleep(100 * time.Millisecond)
		e.eq(sub.count(), 1, "nothing is published for a write that lost")
	})
}

package conformance

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// §1 Clear: a clear marker ends the lifetime — no head survives, log
// cursors count from the marker, reads start at it, ids below it are free
// again. Reclaim later deletes the old entries and sweeps what the old
// lifetime left; an empty lifetime collapses to the marker.
func init() {
	contract("Clear/MarkerEndsTheLifetime", func(t *testing.T, e *env) {
		served := []a2redis.Consumer{{Name: "c"}, {Name: "l"}, logc("g", "all", false)}
		e.appendServed("s", served, evID("a", "t", to("c"), lane("l", "x")), evID("b", "t", lane("l", "x")))
		c := e.claim(redisstore.ClaimRequest{Consumers: served})
		e.eq(headRefs(c.Heads), []string{"c@1", "g/all@1", "l/x@1"}, "claimed")
		e.fail(c.Heads[0], 1, 0) // a dead letter
		e.clock.Advance(time.Second)
		r := e.clearSession("s")
		e.eq(r, redisstore.ClearResult{Cleared: true, Index: 3, ClearIndex: 3}, "cleared")
		got := e.read("s")
		e.eq(len(got), 1, "reads start at the marker")
		m := got[0]
		e.eq([]any{m.Index, m.Type, string(m.Payload), m.Cause == nil, m.CreatedAt.UnixMilli()}, []any{3, a2redis.ClearEventType, "null", true, e.clock.Now().UnixMilli()}, "the marker")
		e.check(m.ID != "" && m.ID != "a" && m.ID != "b", "the marker has a generated id: %q", m.ID)
		e.eq(cursorLines(e.cursors("s")), []string{"log g/all pos=3 head=0 att=0 fail=0 dead=false"}, "no head survives; log cursors count from the marker")
		dead, err := e.store.DeadLetters(e.ctx, "s")
		e.no(err, "dead letters")
		e.eq(len(dead), 0, "dead letters of the past lifetime are gone")
		e.eq(e.claim(redisstore.ClaimRequest{Consumers: served}).Outcome, redisstore.Settled, "nothing to claim")
		for _, h := range c.Heads {
			done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Events: []a2redis.Event{ev("x")}})
			e.no(err, "complete after clear")
			e.eq(done.Outcome, redisstore.CompleteSuperseded, "a head of the past lifetime is superseded")
			f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, MaxFailures: 1})
			e.no(err, "fail after clear")
			e.eq(f, redisstore.FailResult{Outcome: redisstore.FailSuperseded}, "fail after clear")
			rn, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: []redisstore.Attempt{redisstore.AttemptOf(h)}})
			e.no(err, "renew after clear")
			e.eq(rn.Superseded, []a2redis.HeadRef{h.Ref()}, "renew after clear")
		}
		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Index: 1, Action: redisstore.Retry})
		e.no(err, "redrive after clear")
		e.eq(rd, redisstore.RedriveResult{}, "nothing to redrive")

		// Ids of the past lifetime are free again; new work starts afresh.
		again := e.appendServed("s", served, evID("a", "t", lane("l", "x")))
		e.check(!again.Replayed && again.Events[0].Index == 4, "id a names a new event: %+v", again.Events)
		replay := e.append("s", evID("a", "t"))
		e.check(replay.Replayed && replay.Events[0].Index == 4, "and replays the new one")
		c = e.claim(redisstore.ClaimRequest{Consumers: served})
		e.eq(headRefs(c.Heads), []string{"g/all@4", "l/x@4"}, "lane and log cursors restart after the marker")
		e.eq(cursorLines(e.cursors("s")), []string{
			"log g/all pos=3 head=4 att=1 fail=0 dead=false",
			"lane l/x pos=3 head=4 att=1 fail=0 dead=false",
		}, "cursors of the new lifetime")
	})

	contract("Clear/NoOpsAndConditions", func(t *testing.T, e *env) {
		r := e.clearSession("empty")
		e.eq(r, redisstore.ClearResult{Cleared: true}, "clearing an empty session")
		e.eq(e.allSessionKeys("empty"), []string(nil), "writes nothing")
		e.appendN("s", 2, func(int) a2redis.Event { return ev("t") })
		two, three := int64(2), int64(3)
		r, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &three})
		e.no(err, "conditional clear")
		e.eq(r, redisstore.ClearResult{Cleared: false, Index: 2}, "the head is not 3")
		r, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &two})
		e.no(err, "conditional clear")
		e.eq(r, redisstore.ClearResult{Cleared: true, Index: 3, ClearIndex: 3}, "the head is 2")
		r, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &two})
		e.no(err, "retry")
		e.eq(r, redisstore.ClearResult{Cleared: true, Index: 3, ClearIndex: 3}, "a retry of the same conditional clear reports it cleared")
		r = e.clearSession("s")
		e.eq(r, redisstore.ClearResult{Cleared: true, Index: 3, ClearIndex: 3}, "clearing a cleared session appends no second marker")
		e.eq(len(e.read("s")), 1, "one marker")
		neg := int64(-1)
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &neg})
		e.is(err, a2redis.ErrInvalidArgument, "negative IfLastIndex")
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{Cause: &a2redis.Cause{Consumer: "c"}})
		e.is(err, a2redis.ErrInvalidArgument, "incomplete cause")

		// A marker id that names an event of the lifetime is refused.
		taken := e.newStore(func(c *redisstore.Config) { c.IDs = func() string { return "taken" } })
		_, err = taken.Append(e.ctx, "s", []a2redis.Event{evID("taken", "t")}, redisstore.AppendOptions{})
		e.no(err, "append")
		_, err = taken.Clear(e.ctx, "s", redisstore.ClearOptions{})
		e.is(err, a2redis.ErrPartialDuplicateBatch, "marker id already stored")
		e.eq(e.bounds("s"), redisstore.Bounds{Head: 4, ClearIndex: 3}, "nothing written")
	})

	// §5: clear + reclaim leave no key of the old lifetime except what the
	// new one needs.
	contract("Reclaim/LeavesOnlyTheCurrentLifetime", func(t *testing.T, e *env) {
		served := []a2redis.Consumer{{Name: "c"}, {Name: "l"}, logc("g", "typed", true, "rare")}
		const old = 2400 // several head chunks and reclaim pages
		batch := make([]a2redis.Event, old)
		for i := range batch {
			batch[i] = evID("e"+strconv.Itoa(i), "common")
			switch {
			case i%500 == 7:
				batch[i].Type = "rare"
			case i%3 == 0:
				batch[i].Targets = []a2redis.Target{to("c"), lane("l", "x"+strconv.Itoa(i%4))}
			}
		}
		for part := range slices.Chunk(batch, redisstore.DefaultMaxBatch) {
			e.appendServed("s", served, part...)
		}
		c := e.claim(redisstore.ClaimRequest{Consumers: served, Limit: 40})
		for i, h := range c.Heads {
			switch i % 4 {
			case 0:
				e.complete(h, ev("returned"))
			case 1:
				e.fail(h, 1, 0)
			}
		}
		pins := []a2redis.HeadRef{c.Heads[2].Ref(), c.Heads[3].Ref()}
		e.no(e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{
			{Index: 10, State: json.RawMessage(`1`), Pins: pins},
			{Index: 2000, State: json.RawMessage(`2`), Pins: pins},
		}), "snapshots")
		marker := e.clearSession("s").ClearIndex
		// The new lifetime reuses two old ids and has work of its own.
		e.appendServed("s", served, evID("e0", "rare", lane("l", "x0")), evID("e1", "common", to("c")))
		e.no(e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{{Index: marker + 1, State: json.RawMessage(`3`)}}), "snapshot")
		head := e.bounds("s").Head

		// Two reclaims at once: together they delete every old entry once.
		var wg sync.WaitGroup
		results := make([]redisstore.ReclaimResult, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = e.store.Reclaim(e.ctx, "s")
			}()
		}
		wg.Wait()
		e.no(errs[0], "reclaim")
		e.no(errs[1], "reclaim")
		e.check(results[0].Done && results[1].Done, "both done")
		e.eq(results[0].Deleted+results[1].Deleted, marker-1, "every entry below the marker deleted once")
		r, err := e.store.Reclaim(e.ctx, "s")
		e.no(err, "reclaim again")
		e.eq(r, redisstore.ReclaimResult{Done: true}, "a finished session only sweeps again")

		e.checkLifetimeKeys("s")
		got := e.read("s")
		e.eq(indexes(got), []int64{marker, marker + 1, marker + 2}, "the current lifetime reads whole")
		got, err = e.store.Read(e.ctx, "s", 5, 0)
		e.no(err, "read from inside the reclaimed lifetime")
		e.eq(indexes(got), []int64{marker, marker + 1, marker + 2}, "a read that starts below the marker starts at it")
		e.check(e.append("s", evID("e0", "rare")).Replayed, "a reused id keeps its new owner")
		st, err := e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{})
		e.no(err, "state")
		e.eq([]any{string(st.Snapshot), st.SnapshotIndex, st.Head, st.ClearIndex}, []any{"3", marker + 1, head, marker}, "the new lifetime's snapshot")
		c = e.claim(redisstore.ClaimRequest{Consumers: served})
		e.eq(headRefs(c.Heads), []string{"g/typed@" + itoa(marker+1), "l/x0@" + itoa(marker+1), "c@" + itoa(marker+2)}, "the new lifetime's work survives reclaim")
	})

	contract("Reclaim/CollapsesAnEmptyLifetime", func(t *testing.T, e *env) {
		served := []a2redis.Consumer{{Name: "c"}, {Name: "l"}, logc("g", "all", false), logc("h", "typed", false, "t")}
		e.appendServed("s", served, ev("t", to("c"), lane("l", "x")), ev("u", lane("l", "x")))
		c := e.claim(redisstore.ClaimRequest{Consumers: served})
		e.fail(c.Heads[0], 1, 0)
		e.no(e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{{Index: 2, State: json.RawMessage(`{}`), Pins: []a2redis.HeadRef{c.Heads[1].Ref()}}}), "snapshot")
		_, err := e.store.PresenceSet(e.ctx, "s", redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": json.RawMessage(`1`)}, At: e.clock.Now(), TTL: time.Hour})
		e.no(err, "presence")
		marker := e.clearSession("s")
		_, err = e.store.Reclaim(e.ctx, "s")
		e.no(err, "reclaim")
		k := keys.For(e.prefix, "s")
		for _, key := range e.allSessionKeys("s") {
			switch key {
			case k.Log(), k.Clear(), k.Presence(), k.Cursors():
			default:
				e.fatalf("a collapsed lifetime keeps only its marker (log, clear), log cursor records and presence; found %q", key)
			}
		}
		e.checkLifetimeKeys("s")
		e.checkForgotten("s", "a collapsed session has no work")
		e.eq(e.bounds("s"), redisstore.Bounds{Head: marker.Index, ClearIndex: marker.Index}, "bounds after the collapse")
		e.eq(indexes(e.read("s")), []int64{3}, "the marker still reads")
		e.eq(cursorLines(e.cursors("s")), []string{
			"log g/all pos=3 head=0 att=0 fail=0 dead=false",
			"log h/typed pos=3 head=0 att=0 fail=0 dead=false",
		}, "log cursors survive at the marker")
		p, err := e.store.PresenceRead(e.ctx, "s")
		e.no(err, "presence")
		e.eq(len(p), 1, "presence is not part of the lifetime")
		r := e.appendServed("s", served, ev("t", lane("l", "x")))
		e.eq(r.Events[0].Index, int64(4), "the next append continues after the marker")
		e.eq(headRefs(e.claim(redisstore.ClaimRequest{Consumers: served}).Heads), []string{"g/all@4", "h/typed@4", "l/x@4"}, "and starts work afresh")
	})
}

var (
	headsField  = regexp.MustCompile(`^(\d+):`)
	snapshotIdx = regexp.MustCompile(`^\{"index":(\d+),`)
)

// checkLifetimeKeys checks, on every node, that every key of the session is
// one the layout (design §2) names and that none holds anything of a past
// lifetime: id records name events of the current lifetime, head rows,
// type-index entries, checkpoints and pin counts lie at or above the clear
// marker, the log holds no entry below it, and no idle lane cursor record
// of the past is left.
func (e *env) checkLifetimeKeys(session string) {
	e.t.Helper()
	b := e.bounds(session)
	k := keys.For(e.prefix, session)
	base := k.Base()
	ids := map[string]bool{}
	for _, ev := range e.read(session) {
		ids[ev.ID] = true
	}
	singles := map[string]bool{}
	for _, key := range []string{k.Count(), k.Clear(), k.Log(), k.Cursors(), k.Runnable(), k.Typed(), k.Pins(), k.SnapReducers(), k.Presence(), k.Live(), k.Flight(), k.Skip(), k.Floor(), k.Listed(), k.Sweep()} {
		singles[key] = true
	}
	below := "(" + itoa(b.ClearIndex)
	perNode := e.sessionKeys(session)
	nodesWithKeys := 0
	for node, list := range perNode {
		if len(list) > 0 {
			nodesWithKeys++
		}
		c := nodes(e.client)[node]
		do := func(cmd []string) []string {
			e.t.Helper()
			got, err := c.Do(e.ctx, c.B().Arbitrary(cmd[0]).Keys(cmd[1]).Args(cmd[2:]...).Build()).AsStrSlice()
			e.no(err, "%v", cmd)
			return got
		}
		for _, key := range list {
			name := strings.TrimPrefix(key, base)
			switch {
			case key == k.Log():
				if b.ClearIndex > 1 {
					old := do([]string{"XRANGE", key, "-", itoa(b.ClearIndex-1) + "-0", "COUNT", "1"})
					e.check(len(old) == 0, "the log keeps an entry below the marker %d", b.ClearIndex)
				}
			case key == k.Pins():
				for _, field := range do([]string{"HKEYS", key}) {
					var ref []string
					e.no(json.Unmarshal([]byte(field), &ref), "pin field %q", field)
					idx, _ := strconv.ParseInt(ref[len(ref)-1], 10, 64)
					e.check(idx >= b.ClearIndex, "pin count %q of a past lifetime", field)
				}
			case key == k.Cursors():
				records := map[string]map[string]string{}
				fields, err := c.Do(e.ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
				e.no(err, "HGETALL cursors")
				for f, v := range fields {
					cut := strings.LastIndexByte(f, ':')
					cid, suffix := f[:cut], f[cut+1:]
					if records[cid] == nil {
						records[cid] = map[string]string{}
					}
					records[cid][suffix] = v
				}
				for cid, rec := range records {
					_, kind, _, ok := rows.ParseCursorID(cid)
					e.check(ok, "cursor record %q", cid)
					pos, _ := strconv.ParseInt(rec["p"], 10, 64)
					head, _ := strconv.ParseInt(rec["h"], 10, 64)
					if kind == 'L' && head <= b.ClearIndex && pos <= b.ClearIndex {
						e.fatalf("idle lane cursor record %q of a past lifetime: %v", cid, rec)
					}
				}
			case singles[key]:
			case strings.HasPrefix(name, "id:"):
				e.check(ids[strings.TrimPrefix(name, "id:")], "id record %q names no event of the current lifetime", key)
			case strings.HasPrefix(name, "ids:"):
				got, err := c.Do(e.ctx, c.B().Get().Key(key).Build()).ToString()
				e.no(err, "GET %s", key)
				first, _, _ := strings.Cut(got, ":")
				idx, _ := strconv.ParseInt(first, 10, 64)
				e.check(idx >= b.ClearIndex, "id block %q (%s) names a batch below the marker %d", key, got, b.ClearIndex)
			case strings.HasPrefix(name, "heads:"):
				chunk, err := strconv.ParseInt(strings.TrimPrefix(name, "heads:"), 10, 64)
				e.no(err, "chunk of %q", key)
				e.check(chunk >= rows.HeadChunk(max(b.ClearIndex, 1)), "head chunk %q lies wholly below the marker %d", key, b.ClearIndex)
				for _, field := range do([]string{"HKEYS", key}) {
					if field == rows.ChunkPin {
						continue
					}
					m := headsField.FindStringSubmatch(field)
					e.check(m != nil, "head row field %q", field)
					idx, _ := strconv.ParseInt(m[1], 10, 64)
					e.check(idx >= b.ClearIndex, "head row %q of a past lifetime in %q", field, key)
				}
			case strings.HasPrefix(name, "type:"):
				e.check(len(do([]string{"ZRANGEBYSCORE", key, "-inf", below})) == 0, "type index %q holds entries below the marker", key)
			case strings.HasPrefix(name, "snap-history:"):
				e.check(len(do([]string{"ZRANGEBYSCORE", key, "-inf", below})) == 0, "snapshot history %q holds checkpoints below the marker", key)
			case strings.HasPrefix(name, "snap:"):
				got, err := c.Do(e.ctx, c.B().Get().Key(key).Build()).ToString()
				e.no(err, "GET %s", key)
				m := snapshotIdx.FindStringSubmatch(got)
				e.check(m != nil, "snapshot %q: %.40q", key, got)
				idx, _ := strconv.ParseInt(m[1], 10, 64)
				e.check(idx >= b.ClearIndex, "head snapshot %q at %d is below the marker %d", key, idx, b.ClearIndex)
			default:
				e.fatalf("key %q is not one the layout names", key)
			}
		}
	}
	e.check(nodesWithKeys <= 1, "the session's keys spread over %d nodes", nodesWithKeys)
}

// §1b Drop: a session's every key, and its entry and version in its shard
// of the ready index, deleted; the next append starts a fresh session.
func init() {
	contract("Drop/LeavesNothing", func(t *testing.T, e *env) {
		served := []a2redis.Consumer{{Name: "c"}, {Name: "l"}, logc("g", "all", false), logc("h", "typed", false, "t")}
		e.appendServed("s", served, ev("t", to("c"), lane("l", "x")), ev("u", lane("l", "x")), evID("named", "t", to("c")))
		c := e.claim(redisstore.ClaimRequest{Consumers: served})
		e.fail(c.Heads[0], 1, 0)
		e.no(e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{{Index: 2, State: json.RawMessage(`{}`), Pins: []a2redis.HeadRef{c.Heads[1].Ref()}}}), "snapshot")
		_, err := e.store.PresenceSet(e.ctx, "s", redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": json.RawMessage(`1`)}, At: e.clock.Now(), TTL: time.Hour})
		e.no(err, "presence")
		e.append("other", ev("t", to("c")))
		r, err := e.store.Drop(e.ctx, "s")
		e.no(err, "drop")
		e.eq(r, redisstore.DropResult{Dropped: true, ClearIndex: 4, Deleted: 3}, "dropped")
		e.eq(e.allSessionKeys("s"), []string(nil), "a dropped session has no key")
		e.checkForgotten("s", "a dropped session")
		e.eq(e.bounds("s"), redisstore.Bounds{}, "bounds after the drop")
		e.eq(len(e.read("s")), 0, "nothing reads")
		e.eq(len(e.cursors("s")), 0, "no cursors")
		p, err := e.store.PresenceRead(e.ctx, "s")
		e.no(err, "presence")
		e.eq(len(p), 0, "no presence")
		for _, h := range c.Heads {
			done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts})
			e.check(errors.Is(err, a2redis.ErrNoEvent), "completing a dropped head: %v %+v", err, done)
		}
		e.eq(e.allSessionKeys("s"), []string(nil), "refused completions write nothing")
		e.check(len(e.allSessionKeys("other")) > 0, "another session is untouched")

		// A fresh session: index 1, the old ids free, listed again.
		again := e.appendServed("s", served, evID("named", "t", to("c")))
		e.check(!again.Replayed && again.Events[0].Index == 1, "a fresh session at index 1: %+v", again.Events)
		ready, err := e.store.ReadyAt(e.ctx, "s")
		e.no(err, "ready at")
		e.check(ready.Listed, "the fresh session is in the ready index: %+v", ready)
		next := e.claim(redisstore.ClaimRequest{Consumers: served})
		e.eq(headRefs(next.Heads), []string{"c@1", "g/all@1", "h/typed@1"}, "its work is claimable")
	})
}

// checkForgotten: the session's shard of the ready index holds neither an
// entry nor a version for it.
func (e *env) checkForgotten(session, what string) {
	e.t.Helper()
	r := keys.ReadyFor(e.prefix, keys.ReadyShard(session, e.store.ReadyShards()))
	known, err := e.client.Do(e.ctx, e.client.B().Hexists().Key(r.Versions()).Field(session).Build()).AsBool()
	e.no(err, "ready version")
	e.check(!known, "%s: its ready shard keeps no version", what)
	_, err = e.client.Do(e.ctx, e.client.B().Zscore().Key(r.Index()).Member(session).Build()).AsFloat64()
	e.check(rueidis.IsRedisNil(err), "%s: its ready shard lists it no more (%v)", what, err)
}

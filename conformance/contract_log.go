package conformance

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// §1: every event gets a dense index 1, 2, 3 … within its session; the
// log is append-only and read back verbatim.
func init() {
	contract("Append/DenseIndexesAndVerbatimRows", func(t *testing.T, e *env) {
		first := e.append("s",
			a2redis.Event{Type: "a", Payload: json.RawMessage(`{"n": 1, "x": [1,2]}`)},
			a2redis.Event{Type: "b"}, // nil payload: stored as JSON null
		)
		e.eq(indexes(first.Events), []int64{1, 2}, "first batch indexes")
		e.clock.Advance(time.Second)
		second := e.append("s", a2redis.Event{Type: "a", ID: "mine", Payload: json.RawMessage(`"text"`)})
		e.eq(indexes(second.Events), []int64{3}, "second batch continues densely")

		got := e.read("s")
		e.eq(indexes(got), []int64{1, 2, 3}, "read")
		e.eq(string(got[0].Payload), `{"n": 1, "x": [1,2]}`, "payload stored verbatim")
		e.eq(string(got[1].Payload), "null", "nil payload reads as null")
		e.eq(got[2].ID, "mine", "caller id kept")
		e.check(got[0].ID != "" && got[1].ID != "" && got[0].ID != got[1].ID, "generated ids are distinct and non-empty: %q %q", got[0].ID, got[1].ID)
		for i, g := range got {
			e.eq(g.Session, "s", "session of event %d", i)
			e.check(g.Cause == nil, "event %d has no cause", i)
		}
		e.eq(got[0].CreatedAt.UnixMilli(), e.clock.Now().Add(-time.Second).UnixMilli(), "created_at comes from the store clock")
		e.eq(got[2].CreatedAt.UnixMilli(), e.clock.Now().UnixMilli(), "created_at of the later batch")
		e.eq(first.Events, got[:2], "append returns the stored rows")
		e.eq(e.bounds("s"), redisstore.Bounds{Head: 3}, "bounds")
		e.eq(e.bounds("empty"), redisstore.Bounds{}, "bounds of an empty session")

		tail, err := e.store.ReadTail(e.ctx, "s", 2)
		e.no(err, "tail")
		e.eq(indexes(tail), []int64{2, 3}, "tail")
		tail, err = e.store.ReadTail(e.ctx, "s", 50)
		e.no(err, "tail")
		e.eq(indexes(tail), []int64{1, 2, 3}, "tail longer than the log")
	})

	contract("Append/LostAckRetryReplaysOriginalRows", func(t *testing.T, e *env) {
		batch := []a2redis.Event{evID("x", "t", to("c")), evID("y", "u")}
		first := e.append("s", batch...)
		e.check(!first.Replayed, "first append is not a replay")
		e.clock.Advance(time.Minute)
		again := e.append("s", batch...)
		e.check(again.Replayed, "retry is a replay")
		e.eq(again.Events, first.Events, "replay returns the original rows, created_at included")
		swapped := e.append("s", batch[1], batch[0])
		e.eq(indexes(swapped.Events), []int64{2, 1}, "replay in request order")
		e.eq(e.bounds("s").Head, int64(2), "nothing appended twice")
		c := e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"c@1"}, "a replay starts no cursor work")

		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{evID("x", "t"), evID("z", "t")}, redisstore.AppendOptions{})
		e.is(err, a2redis.ErrPartialDuplicateBatch, "some ids stored")
		e.eq(e.bounds("s").Head, int64(2), "a partial duplicate writes nothing")
		e.check(e.append("s", evID("z", "t")).Events[0].Index == 3, "z was not written by the refused batch")

		// Ids are unique per session, not globally.
		other := e.append("s2", batch...)
		e.check(!other.Replayed, "another session may reuse ids")
		e.eq(indexes(other.Events), []int64{1, 2}, "other session")
	})

	contract("Append/RejectsBadInputWritingNothing", func(t *testing.T, e *env) {
		cause := &a2redis.Cause{Consumer: "c", Index: 1, Attempt: 1}
		cases := []struct {
			name    string
			session string
			events  []a2redis.Event
			opts    redisstore.AppendOptions
		}{
			{"empty session", "", []a2redis.Event{ev("t")}, redisstore.AppendOptions{}},
			{"empty type", "s", []a2redis.Event{ev("")}, redisstore.AppendOptions{}},
			{"reserved type", "s", []a2redis.Event{ev(a2redis.ClearEventType)}, redisstore.AppendOptions{}},
			{"invalid utf-8 type", "s", []a2redis.Event{ev("\xff")}, redisstore.AppendOptions{}},
			{"invalid json", "s", []a2redis.Event{{Type: "t", Payload: json.RawMessage(`{"a":`)}}, redisstore.AppendOptions{}},
			{"repeated id", "s", []a2redis.Event{evID("a", "t"), evID("a", "t")}, redisstore.AppendOptions{}},
			{"empty target consumer", "s", []a2redis.Event{ev("t", to(""))}, redisstore.AppendOptions{}},
			{"repeated target", "s", []a2redis.Event{ev("t", lane("c", "x"), lane("c", "x"))}, redisstore.AppendOptions{}},
			{"cause without index", "s", []a2redis.Event{{Type: "t", Cause: &a2redis.Cause{Consumer: "c", Attempt: 1}}}, redisstore.AppendOptions{}},
			{"cause without attempt", "s", []a2redis.Event{{Type: "t", Cause: &a2redis.Cause{Consumer: "c", Index: 1}}}, redisstore.AppendOptions{}},
			{"negative origin", "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{OriginIndex: -1}},
			{"unnamed consumer", "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{}}}},
			{"log without lane", "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{Name: "g", Log: &a2redis.LogSpec{}}}}},
			{"log taking the clear marker", "s", []a2redis.Event{ev("t")}, redisstore.AppendOptions{Consumers: []a2redis.Consumer{logc("g", "l", false, a2redis.ClearEventType)}}},
			{"valid event after a bad one", "s", []a2redis.Event{ev("t"), ev(""), {Type: "t", Cause: cause}}, redisstore.AppendOptions{}},
		}
		for _, c := range cases {
			_, err := e.store.Append(e.ctx, c.session, c.events, c.opts)
			e.is(err, a2redis.ErrInvalidArgument, "%s", c.name)
			var arg *a2redis.ArgumentError
			e.check(errors.As(err, &arg) && arg.Arg != "", "%s: want an *ArgumentError naming the argument, got %v", c.name, err)
		}
		e.eq(e.bounds("s"), redisstore.Bounds{}, "nothing was written")
		e.eq(e.allSessionKeys("s"), []string(nil), "no key was created")
	})

	contract("Append/BatchesBeyondOneThousandArguments", func(t *testing.T, e *env) {
		// MaxBatch events: the variadic calls over them carry two or more
		// arguments per event, past SliceArgs (1000), so each is sliced.
		const n = redisstore.DefaultMaxBatch
		batch := make([]a2redis.Event, n)
		for i := range batch {
			batch[i] = a2redis.Event{ID: "e" + strconv.Itoa(i), Type: []string{"a", "b"}[i%2], Payload: json.RawMessage(strconv.Itoa(i))}
			if i%3 == 0 {
				batch[i].Targets = []a2redis.Target{to("c"), lane("l", "x")}
			}
		}
		r := e.append("s", batch...)
		e.eq(len(r.Events), n, "stored")
		again := e.append("s", batch...)
		e.check(again.Replayed && len(again.Events) == n, "a big batch replays whole")
		got := e.read("s")
		e.eq(len(got), n, "read back")
		for i, g := range got {
			if g.Index != int64(i+1) || string(g.Payload) != strconv.Itoa(i) {
				e.fatalf("event %d: index %d payload %s", i, g.Index, g.Payload)
			}
		}
		var pages int
		e.no(e.store.ReadPages(e.ctx, "s", 0, 0, func(p []a2redis.StoredEvent) error {
			pages++
			e.check(len(p) <= redisstore.ReadPageSize, "page of %d", len(p))
			return nil
		}), "pages")
		e.check(pages >= n/redisstore.ReadPageSize, "read in %d pages", pages)
		c := e.claim(redisstore.ClaimRequest{Limit: redisstore.DefaultMaxBatch})
		e.eq(len(c.Heads), (n+2)/3+1, "every event cursor and the lane head")

		small := e.newStore(func(c *redisstore.Config) { c.MaxBatch = 3 })
		_, err := small.Append(e.ctx, "s", make([]a2redis.Event, 4), redisstore.AppendOptions{})
		e.is(err, a2redis.ErrInvalidArgument, "a batch over MaxBatch")
	})

	// §2: no caller string may spell another key; every key of a session
	// shares its hash tag.
	contract("Append/OddNamesStayInTheirSession", func(t *testing.T, e *env) {
		names := []string{"a", "{b}", "}{", `"q"`, `\`, "c:d", "*", "[x]", "?", "%s", "nul\x00byte", "\xff\xfe", "日本語", "count", `a"}:count`, "id:x", strings.Repeat("L", 300)}
		// Types, consumers and lanes must be valid UTF-8; ids and sessions
		// may be any bytes.
		typeOf := func(id string) string {
			if utf8.ValidString(id) {
				return id + "t"
			}
			return "t"
		}
		var consumers []string
		for _, id := range names {
			if utf8.ValidString(id) {
				consumers = append(consumers, id)
			}
		}
		for _, session := range names {
			for j, id := range names {
				event := a2redis.Event{ID: id, Type: typeOf(id), Payload: json.RawMessage(strconv.Itoa(j))}
				if utf8.ValidString(id) {
					event.Targets = []a2redis.Target{{Consumer: id, Lane: id}}
				}
				e.append(session, event)
			}
		}
		for _, session := range names {
			got := e.read(session)
			e.eq(len(got), len(names), "session %q holds only its own events", session)
			for j, g := range got {
				e.eq([]string{g.ID, g.Type, string(g.Payload), g.Session}, []string{names[j], typeOf(names[j]), strconv.Itoa(j), session}, "session %q event %d", session, j)
			}
			c := e.claim(redisstore.ClaimRequest{Session: session, Limit: 100})
			e.eq(len(c.Heads), len(consumers), "session %q: one lane head per odd consumer", session)
			for j, h := range c.Heads {
				e.eq([]string{h.Consumer, h.Lane}, []string{consumers[j], consumers[j]}, "head %d of session %q", j, session)
			}
			tag := "{" + keys.Tag(session) + "}"
			for _, k := range e.allSessionKeys(session) {
				e.check(strings.HasPrefix(k, e.prefix+":"+tag+":"), "key %q of session %q carries its tag", k, session)
				if open := strings.IndexByte(k, '{'); open < 0 || k[open:open+strings.IndexByte(k[open:], '}')+1] != tag {
					e.fatalf("key %q of session %q hashes on another tag than %s", k, session, tag)
				}
			}
		}
	})

	contract("Read/RangesAndPages", func(t *testing.T, e *env) {
		e.appendN("s", 600, func(i int) a2redis.Event { return ev("t") })
		for _, c := range []struct{ after, through, first, n int64 }{
			{0, 0, 1, 600}, {10, 0, 11, 590}, {10, 20, 11, 10}, {0, 1, 1, 1}, {599, 0, 600, 1},
			{600, 0, 0, 0}, {700, 0, 0, 0}, {20, 10, 0, 0}, {0, 9999, 1, 600},
		} {
			got, err := e.store.Read(e.ctx, "s", c.after, c.through)
			e.no(err, "read (%d, %d]", c.after, c.through)
			e.check(got != nil, "read returns an empty slice, not nil")
			e.eq(int64(len(got)), c.n, "read (%d, %d] length", c.after, c.through)
			if c.n > 0 {
				e.eq(got[0].Index, c.first, "read (%d, %d] first", c.after, c.through)
				for i := range got {
					e.eq(got[i].Index, c.first+int64(i), "read (%d, %d] is contiguous", c.after, c.through)
				}
			}
		}
		_, err := e.store.Read(e.ctx, "s", -1, 0)
		e.is(err, a2redis.ErrInvalidArgument, "negative after")
		stop := errors.New("stop")
		var seen int
		err = e.store.ReadPages(e.ctx, "s", 0, 0, func(p []a2redis.StoredEvent) error { seen += len(p); return stop })
		e.check(errors.Is(err, stop) && seen == redisstore.ReadPageSize, "an error from fn stops the read after one page (err %v, %d events)", err, seen)
		_, err = e.store.ReadTail(e.ctx, "s", 0)
		e.is(err, a2redis.ErrInvalidArgument, "tail limit 0")
		got, err := e.store.Read(e.ctx, "never-written", 0, 0)
		e.no(err, "read of an empty session")
		e.check(got != nil && len(got) == 0, "an empty session reads as an empty slice")
	})

	// §1 Append: scheduled work carries an originIndex and is refused once a
	// clear passed it.
	contract("Append/ScheduledWorkAfterAClear", func(t *testing.T, e *env) {
		e.appendN("s", 3, func(int) a2redis.Event { return ev("t") })
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{ev("later")}, redisstore.AppendOptions{OriginIndex: 3})
		e.no(err, "scheduled work before any clear")
		e.clearSession("s") // marker at 5
		for _, origin := range []int64{1, 4, 5} {
			_, err = e.store.Append(e.ctx, "s", []a2redis.Event{ev("later")}, redisstore.AppendOptions{OriginIndex: origin})
			e.is(err, a2redis.ErrSessionCleared, "origin %d at or below the marker", origin)
		}
		e.eq(e.bounds("s").Head, int64(5), "refused scheduled work wrote nothing")
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{ev("later")}, redisstore.AppendOptions{OriginIndex: 6})
		e.no(err, "origin above the marker")
	})

	// §5: a read never returns a gap. A log that really has one (here an
	// entry deleted behind the store's back) fails the read with
	// ErrRangeGap rather than skipping it.
	contract("Read/AGapIsAnError", func(t *testing.T, e *env) {
		e.appendN("s", 5, func(int) a2redis.Event { return ev("t") })
		log := keys.For(e.prefix, "s").Log()
		e.no(e.client.Do(e.ctx, e.client.B().Xdel().Key(log).Id("3-0").Build()).Error(), "XDEL")
		_, err := e.store.Read(e.ctx, "s", 0, 0)
		e.is(err, a2redis.ErrRangeGap, "read across the gap")
		_, err = e.store.ReadTail(e.ctx, "s", 5)
		e.is(err, a2redis.ErrRangeGap, "tail across the gap")
		got, err := e.store.Read(e.ctx, "s", 3, 0)
		e.no(err, "read after the gap")
		e.eq(indexes(got), []int64{4, 5}, "reads beyond the gap")
	})

	// §5: a read that meets the gap a concurrent clear and reclaim leave
	// starts again from the new marker: no read fails, and the only jump in
	// its indexes lands on a clear marker.
	contract("Read/ConcurrentClearAndReclaimNeverShowAGap", func(t *testing.T, e *env) {
		stop := make(chan struct{})
		errs := make(chan error, 1)
		var rounds atomic.Int64
		var writerDone atomic.Bool
		go func() {
			defer close(errs)
			defer writerDone.Store(true)
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				batch := make([]a2redis.Event, 300)
				for i := range batch {
					batch[i] = ev("t")
				}
				if _, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{}); err != nil {
					errs <- err
					return
				}
				if _, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{}); err != nil {
					errs <- err
					return
				}
				if _, err := e.store.Reclaim(e.ctx, "s"); err != nil {
					errs <- err
					return
				}
				rounds.Add(1)
			}
		}()
		// Reads go on until the writer has been through 5 rounds and 20
		// reads ran (or a minute passed: then the check below fails).
		deadline := time.Now().Add(time.Minute)
		reads := 0
		for (rounds.Load() < 5 || reads < 20) && !writerDone.Load() && time.Now().Before(deadline) {
			got, err := e.store.Read(e.ctx, "s", 0, 0)
			e.no(err, "read %d", reads)
			for i := 1; i < len(got); i++ {
				e.check(got[i].Index == got[i-1].Index+1 || (got[i].Index > got[i-1].Index && got[i].Type == a2redis.ClearEventType),
					"read %d: index %d (%s) follows %d", reads, got[i].Index, got[i].Type, got[i-1].Index)
			}
			if len(got) > 0 {
				e.check(got[0].Index == 1 || got[0].Type == a2redis.ClearEventType, "read %d starts at %d, neither the first event nor a marker", reads, got[0].Index)
			}
			reads++
		}
		close(stop)
		for err := range errs {
			e.no(err, "writer")
		}
		e.check(reads >= 20 && rounds.Load() >= 5, "only %d reads over %d rounds of the writer", reads, rounds.Load())
	})
}

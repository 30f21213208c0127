package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/conformance/internal/model"
	"github.com/a2redis/a2redis/redisstore"
)

// The model is checked against Redis by the conformance suite's
// differential test; these tests pin a few of its rules on their own, so a
// change to the model that breaks the contract fails here first.

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newModel() (*model.Store, *clock) {
	c := &clock{now: time.UnixMilli(1_800_000_000_000)}
	n := 0
	return model.New(model.Config{Clock: c.Now, IDs: func() string { n++; return fmt.Sprintf("g%d", n) }}), c
}

// must returns v, failing the test (by panicking) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func refs(heads []a2redis.HeadEvent) string {
	out := ""
	for _, h := range heads {
		out += fmt.Sprintf("%s/%s@%d ", h.Consumer, h.Lane, h.Index)
	}
	return out
}

func TestLaneFencingAndReplay(t *testing.T) {
	ctx := context.Background()
	m, clk := newModel()
	lane := []a2redis.Target{{Consumer: "c", Lane: "x"}}
	must(m.Append(ctx, "s", []a2redis.Event{{Type: "t", Targets: lane}, {Type: "t", Targets: lane}}, redisstore.AppendOptions{}))
	claim := func(holder string) redisstore.ClaimResult {
		return must(m.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: holder, TTL: time.Second}))
	}
	first := claim("a")
	if got := refs(first.Heads); got != "c/x@1 " {
		t.Fatalf("first claim %q", got)
	}
	if r := claim("b"); r.Outcome != redisstore.Busy || r.RetryAt.UnixMilli() != clk.now.Add(time.Second).UnixMilli() {
		t.Fatalf("the lane's next event waits: %+v", r)
	}
	clk.now = clk.now.Add(2 * time.Second)
	second := claim("b")
	if h := second.Heads[0]; h.Attempts != 2 || h.Failures != 1 {
		t.Fatalf("takeover: %+v", h.HeadState)
	}
	stale := first.Heads[0].Cause()
	if _, err := m.Append(ctx, "s", []a2redis.Event{{Type: "t", Cause: &stale}}, redisstore.AppendOptions{}); !errors.Is(err, a2redis.ErrSupersededAttempt) {
		t.Fatalf("stale caused append: %v", err)
	}
	req := redisstore.CompleteRequest{Session: "s", Head: second.Heads[0].Ref(), Attempt: 2, Events: []a2redis.Event{{ID: "r", Type: "done"}}}
	done := must(m.CompleteAttempt(ctx, req))
	again := must(m.CompleteAttempt(ctx, req))
	if !again.Replayed || again.Events[0].Index != done.Events[0].Index {
		t.Fatalf("replay: %+v", again)
	}
	req.Events[0].ID = "other"
	if _, err := m.CompleteAttempt(ctx, req); !errors.Is(err, a2redis.ErrPartialDuplicateBatch) {
		t.Fatalf("retry with other ids: %v", err)
	}
	if got := refs(claim("a").Heads); got != "c/x@2 " {
		t.Fatalf("the lane moved on: %q", got)
	}
}

func TestClearEndsTheLifetime(t *testing.T) {
	ctx := context.Background()
	m, _ := newModel()
	logc := []a2redis.Consumer{{Name: "g", Log: &a2redis.LogSpec{Lane: "all"}}}
	must(m.Append(ctx, "s", []a2redis.Event{{ID: "a", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{Consumers: logc}))
	r := must(m.Clear(ctx, "s", redisstore.ClearOptions{}))
	if r != (redisstore.ClearResult{Cleared: true, Index: 2, ClearIndex: 2}) {
		t.Fatalf("clear: %+v", r)
	}
	cursors := must(m.Cursors(ctx, "s"))
	if len(cursors) != 1 || cursors[0].Kind != a2redis.LogCursor || cursors[0].Position != 2 || cursors[0].Head != 0 {
		t.Fatalf("only the log cursor survives, at the marker: %+v", cursors)
	}
	again := must(m.Append(ctx, "s", []a2redis.Event{{ID: "a", Type: "t"}}, redisstore.AppendOptions{}))
	if again.Replayed || again.Events[0].Index != 3 {
		t.Fatalf("ids of the past lifetime are free: %+v", again)
	}
	del := must(m.Reclaim(ctx, "s"))
	if del.Deleted != 1 || !del.Done {
		t.Fatalf("reclaim: %+v", del)
	}
	got := must(m.Read(ctx, "s", 0, 0))
	if len(got) != 2 || got[0].Type != a2redis.ClearEventType {
		t.Fatalf("reads start at the marker: %+v", got)
	}
}

func TestSnapshotPins(t *testing.T) {
	ctx := context.Background()
	m, _ := newModel()
	must(m.Append(ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}, {Type: "t"}}, redisstore.AppendOptions{}))
	h := must(m.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})).Heads[0]
	put := func(idx int64, pins ...a2redis.HeadRef) {
		if err := m.PutSnapshots(ctx, "s", "r", []redisstore.SnapshotWrite{{Index: idx, State: json.RawMessage(fmt.Sprint(idx)), Pins: pins}}); err != nil {
			t.Fatal(err)
		}
	}
	state := func(through int64) int64 {
		return must(m.ReadState(ctx, "s", "r", redisstore.ReadStateOptions{Through: through})).SnapshotIndex
	}
	put(1, h.Ref())
	put(2)
	if state(0) != 2 || state(1) != 1 {
		t.Fatalf("a pinned snapshot stays in the history: %d %d", state(0), state(1))
	}
	must(m.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts}))
	if state(1) != 0 {
		t.Fatalf("completing the head releases it: %d", state(1))
	}
}

func TestClaimOrderBreaksTiesByCursorID(t *testing.T) {
	ctx := context.Background()
	m, _ := newModel()
	must(m.Append(ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "b"}, {Consumer: "a", Lane: "x"}, {Consumer: "a"}}}}, redisstore.AppendOptions{}))
	order := m.ClaimOrder(redisstore.ClaimRequest{Session: "s"})
	want := []a2redis.HeadRef{{Consumer: "a", Index: 1}, {Consumer: "a", Lane: "x", Index: 1}, {Consumer: "b", Index: 1}}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("ClaimOrder = %v, want %v", order, want)
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// MemoryOptions configure MeasureMemory.
type MemoryOptions struct {
	// RedisServer is the redis-server binary to spawn. Default: found on
	// PATH. The measurement always runs on a server of its own (it reads
	// used_memory, which any other client's keys would move).
	RedisServer string
	// Sessions is how many sessions (and asynq tasks) each row averages
	// over. Default 500.
	Sessions int
	// Log receives progress lines. Default: discarded.
	Log func(format string, a ...any)
}

// MemoryRow is one row of MeasureMemory's table: what a session (an
// a2redis session of Events events, or an asynq task) costs in a state.
type MemoryRow struct {
	System string `json:"system"`
	Events int    `json:"events"`
	State  string `json:"state"`
	// Bytes is the growth of used_memory (less client buffers and script
	// caches) per session since the server held none, prefix-wide keys
	// (the ready index) included.
	Bytes float64 `json:"bytes"`
	// Keys is the growth of DBSIZE per session.
	Keys float64 `json:"keys"`
}

// MeasureMemory measures what a session costs through its life on a
// spawned redis-server with the default configuration: a2redis sessions of
// 1, 10 and 100 events (one event consumer) appended, handled (claimed and
// completed), ended (Clear + Reclaim) and dropped, with the store's
// defaults and with Config.NoCompaction; and asynq tasks enqueued,
// processed with its defaults (a completed task is deleted) and processed
// with Retention (a completed task is kept), the figure to set beside a
// log's handled events.
func MeasureMemory(ctx context.Context, opts MemoryOptions) ([]MemoryRow, error) {
	if opts.Sessions <= 0 {
		opts.Sessions = 500
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	server, err := StartServer(opts.RedisServer)
	if err != nil {
		return nil, err
	}
	defer server.Stop()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{server.Addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	h := &harness{client: client, admin: client, own: true, asynqOpt: asynq.RedisClientOpt{Addr: server.Addr}}
	// A warm-up life, not recorded: the first scripts loaded, the
	// connections opened and the allocator's first arenas would otherwise
	// land in the first row.
	if _, err := memoryA2(ctx, h, 50, 10, false); err != nil {
		return nil, err
	}
	var rows []MemoryRow
	for _, compaction := range []bool{true, false} {
		for _, n := range []int{1, 10, 100} {
			got, err := memoryA2(ctx, h, opts.Sessions, n, !compaction)
			if err != nil {
				return rows, err
			}
			opts.Log("a2bench: a2redis, %d events, compaction %v: %v", n, compaction, got)
			rows = append(rows, got...)
		}
	}
	for _, retention := range []time.Duration{0, 24 * time.Hour} {
		got, err := memoryAsynq(ctx, h, opts.Sessions, retention)
		if err != nil {
			return rows, err
		}
		opts.Log("a2bench: asynq, retention %v: %v", retention, got)
		rows = append(rows, got...)
	}
	return rows, nil
}

// reading is used_memory and DBSIZE at one point.
type reading struct{ bytes, keys float64 }

func (h *harness) read(ctx context.Context) (reading, error) {
	// Let lazy frees (UNLINK) and the allocator settle.
	time.Sleep(200 * time.Millisecond)
	b, err := h.usedMemory(ctx)
	if err != nil {
		return reading{}, err
	}
	k, err := h.admin.Do(ctx, h.admin.B().Dbsize().Build()).AsInt64()
	return reading{bytes: b, keys: float64(k)}, err
}

func memoryA2(ctx context.Context, h *harness, sessions, n int, noCompaction bool) ([]MemoryRow, error) {
	if err := h.cleanup(ctx); err != nil {
		return nil, err
	}
	st, err := redisstore.New(ctx, h.client, redisstore.Config{Prefix: "a2", NoCompaction: noCompaction})
	if err != nil {
		return nil, err
	}
	system := "a2redis"
	if noCompaction {
		system = "a2redis, NoCompaction"
	}
	base, err := h.read(ctx)
	if err != nil {
		return nil, err
	}
	var rows []MemoryRow
	row := func(state string) error {
		r, err := h.read(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, MemoryRow{System: system, Events: n, State: state,
			Bytes: (r.bytes - base.bytes) / float64(sessions), Keys: (r.keys - base.keys) / float64(sessions)})
		return nil
	}
	names := sessionNames(sessions)
	each := func(op func(s string) error) error {
		_, err := parallel(ctx, 16, sessions, nil, func(ctx context.Context, i int) error { return op(names[i]) })
		return err
	}
	target := []a2redis.Target{{Consumer: "c"}}
	if err := each(func(s string) error {
		events := make([]a2redis.Event, n)
		for i := range events {
			events[i] = a2redis.Event{Type: "order.placed", Payload: payload, Targets: target}
		}
		_, err := st.Append(ctx, s, events, redisstore.AppendOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := row("appended"); err != nil {
		return nil, err
	}
	if err := each(func(s string) error {
		for {
			c, err := st.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute, Limit: 100})
			if err != nil || len(c.Heads) == 0 {
				return err
			}
			done := make([]redisstore.Attempt, len(c.Heads))
			for i, hd := range c.Heads {
				done[i] = redisstore.AttemptOf(hd)
			}
			if _, err := st.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: done}); err != nil {
				return err
			}
		}
	}); err != nil {
		return nil, err
	}
	if err := row("handled"); err != nil {
		return nil, err
	}
	if err := each(func(s string) error {
		if _, err := st.Clear(ctx, s, redisstore.ClearOptions{}); err != nil {
			return err
		}
		_, err := st.Reclaim(ctx, s)
		return err
	}); err != nil {
		return nil, err
	}
	if err := row("ended"); err != nil {
		return nil, err
	}
	if err := each(func(s string) error {
		r, err := st.Drop(ctx, s)
		if err == nil && !r.Dropped {
			err = fmt.Errorf("a2bench: session %s not dropped", s)
		}
		return err
	}); err != nil {
		return nil, err
	}
	return rows, row("dropped")
}

func memoryAsynq(ctx context.Context, h *harness, tasks int, retention time.Duration) ([]MemoryRow, error) {
	if err := h.cleanup(ctx); err != nil {
		return nil, err
	}
	system := "asynq"
	var opts []asynq.Option
	if retention > 0 {
		system = fmt.Sprintf("asynq, Retention %v", retention)
		opts = append(opts, asynq.Retention(retention))
	}
	client := asynq.NewClient(h.asynqOpt)
	defer client.Close()
	base, err := h.read(ctx)
	if err != nil {
		return nil, err
	}
	var rows []MemoryRow
	row := func(state string) error {
		r, err := h.read(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, MemoryRow{System: system, Events: 1, State: state,
			Bytes: (r.bytes - base.bytes) / float64(tasks), Keys: (r.keys - base.keys) / float64(tasks)})
		return nil
	}
	queue := "default"
	if _, err := parallel(ctx, asynqInFlight, tasks, nil, func(ctx context.Context, i int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("order.placed", payload), append(opts, asynq.Queue(queue))...)
		return err
	}); err != nil {
		return nil, err
	}
	if err := row("enqueued"); err != nil {
		return nil, err
	}
	var handled atomic.Int64
	srv, err := h.asynqServer(queue, 16, func(context.Context, *asynq.Task) error {
		handled.Add(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	inspector := asynq.NewInspector(h.asynqOpt)
	defer inspector.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := inspector.GetQueueInfo(queue)
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			srv.Shutdown()
			return nil, err
		}
		if handled.Load() >= int64(tasks) && info != nil && info.Pending == 0 && info.Active == 0 &&
			(retention == 0 || info.Completed == tasks) {
			break
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			return nil, fmt.Errorf("a2bench: asynq handled %d of %d tasks", handled.Load(), tasks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Shutdown()
	// The server's own records (its heartbeat, its processed/failed
	// counters per day) are the queue's, not a task's: leave them out.
	if err := deleteMatching(ctx, h.admin, "asynq:{default}:processed*", "asynq:{default}:failed*", "asynq:servers*", "asynq:workers*"); err != nil {
		return nil, err
	}
	return rows, row("processed")
}

// deleteMatching deletes the keys matching any of patterns (SCAN, UNLINK).
func deleteMatching(ctx context.Context, c rueidis.Client, patterns ...string) error {
	for _, p := range patterns {
		var cursor uint64
		for {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(p).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return err
			}
			if len(e.Elements) > 0 {
				if err := c.Do(ctx, c.B().Unlink().Key(e.Elements...).Build()).Error(); err != nil {
					return err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// MemoryMarkdown renders MeasureMemory's rows as a Markdown table.
func MemoryMarkdown(rows []MemoryRow) string {
	var b strings.Builder
	b.WriteString("| system | events per session | state | B per session | keys per session | B per event |\n|---|--:|---|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %.2f | %.0f |\n", r.System, r.Events, r.State, r.Bytes, r.Keys, r.Bytes/float64(r.Events))
	}
	return b.String()
}

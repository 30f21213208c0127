package inspect

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/a2redis/a2redis/redisstore"
)

// headsShown is how many held heads a workers table row names.
const headsShown = 3

func workersCommand() command {
	return command{
		name:    "workers",
		summary: "list the live worker processes: host, pid, heartbeat, consumers, in-flight and held heads",
		details: `Lists the workers (worker.Worker) registered under the prefix whose
heartbeat has not expired: a worker rewrites its record every
HeartbeatTTL/3 (default TTL 15s) and removes it when it stops, so one that
died disappears within its TTL. Read from the registry's listing page by
page (no SCAN). Sorted by id.
Columns: ID, HOST, PID, STARTED, HEARTBEAT (age of the last heartbeat),
CONSUMERS, SLOTS (concurrency), IN_FLIGHT (handlers running), HELD (heads it
holds), HEADS (the first few as session:consumer[/lane]@index; up to 100 in
JSON).
JSON: {"id","host","pid","started_at","heartbeat_at","expires_at",
"consumers","concurrency","in_flight","held","heads":[{"session",
"consumer","lane","index"}]}, one object per line (NDJSON).`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, _ []string) error { return a.workers(ctx) }}
		},
	}
}

type workerHeadJSON struct {
	Session  string `json:"session"`
	Consumer string `json:"consumer"`
	Lane     string `json:"lane"`
	Index    int64  `json:"index"`
}

type workerJSON struct {
	ID          string           `json:"id"`
	Host        string           `json:"host"`
	PID         int              `json:"pid"`
	StartedAt   jsonTime         `json:"started_at"`
	HeartbeatAt jsonTime         `json:"heartbeat_at"`
	ExpiresAt   jsonTime         `json:"expires_at"`
	Consumers   []string         `json:"consumers"`
	Concurrency int              `json:"concurrency"`
	InFlight    int              `json:"in_flight"`
	Held        int              `json:"held"`
	Heads       []workerHeadJSON `json:"heads"`
}

// listWorkers reads every page of the registry, each worker once (its
// newest heartbeat), sorted by id.
func (a *app) listWorkers(ctx context.Context) ([]redisstore.WorkerInfo, error) {
	byID := map[string]redisstore.WorkerInfo{}
	req := redisstore.PageRequest{Limit: a.pageLimit()}
	for {
		cctx, cancel := a.call(ctx)
		page, err := a.store.Workers(cctx, req)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, w := range page.Workers {
			if old, ok := byID[w.ID]; !ok || w.HeartbeatAt.After(old.HeartbeatAt) {
				byID[w.ID] = w
			}
		}
		if page.Next == "" {
			break
		}
		req.After = page.Next
	}
	out := make([]redisstore.WorkerInfo, 0, len(byID))
	for _, w := range byID {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func headText(h redisstore.WorkerHead) string {
	if h.Lane == "" {
		return fmt.Sprintf("%s:%s@%d", h.Session, h.Consumer, h.Index)
	}
	return fmt.Sprintf("%s:%s/%s@%d", h.Session, h.Consumer, h.Lane, h.Index)
}

func (a *app) workers(ctx context.Context) error {
	ws, err := a.listWorkers(ctx)
	if err != nil {
		return err
	}
	if a.opts.json {
		for _, w := range ws {
			heads := make([]workerHeadJSON, len(w.Heads))
			for i, h := range w.Heads {
				heads[i] = workerHeadJSON{Session: h.Session, Consumer: h.Consumer, Lane: h.Lane, Index: h.Index}
			}
			consumers := w.Consumers
			if consumers == nil {
				consumers = []string{}
			}
			if err := writeLine(a.out, workerJSON{ID: w.ID, Host: w.Host, PID: w.PID, StartedAt: jsonTime(w.StartedAt),
				HeartbeatAt: jsonTime(w.HeartbeatAt), ExpiresAt: jsonTime(w.ExpiresAt), Consumers: consumers,
				Concurrency: w.Concurrency, InFlight: w.InFlight, Held: w.HeadsTotal, Heads: heads}); err != nil {
				return err
			}
		}
		return nil
	}
	now := a.env.Now()
	t := newTable(a.out, fmt.Sprintf("no live workers under prefix %q", a.opts.prefix),
		"ID", "HOST", "PID", "STARTED", "HEARTBEAT", "CONSUMERS", "SLOTS", "IN_FLIGHT", "HELD", "HEADS")
	for _, w := range ws {
		var heads []string
		for _, h := range w.Heads[:min(len(w.Heads), headsShown)] {
			heads = append(heads, printable(headText(h)))
		}
		shown := strings.Join(heads, ", ")
		if more := w.HeadsTotal - len(heads); more > 0 {
			shown += fmt.Sprintf(" (+%d more)", more)
		}
		t.row(w.ID, w.Host, itoa(int64(w.PID)), formatTime(w.StartedAt), age(w.HeartbeatAt, now)+" ago",
			strings.Join(w.Consumers, ","), itoa(int64(w.Concurrency)), itoa(int64(w.InFlight)), itoa(int64(w.HeadsTotal)), shown)
	}
	return t.close()
}

package inspect

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/a2redis/a2redis/redisstore"
)

// The dashboard's per-consumer counts and their history.
//
// fleetStats and consumerStats have the shape of redisstore.Stats and
// redisstore.ConsumerStats (issue 24, item 1), which another branch adds:
// readFleetStats is the one place that builds them, so switching to
// Store.Stats replaces its body and nothing else.

// consumerStats is one consumer's counts (redisstore.ConsumerStats).
type consumerStats struct {
	Consumer                  string
	Due, Held, InFlight, Dead int64
	Completed, Failed         int64     // monotonic totals
	OldestDue                 time.Time // zero when nothing is due
}

// fleetStats is the prefix's counts (redisstore.Stats).
type fleetStats struct {
	At        time.Time
	Sessions  int64
	Consumers []consumerStats // sorted by Consumer
	// Approximate reports that the counts come from bounded samples, not
	// from counts the store keeps (until Store.Stats).
	Approximate bool
}

// statsSampleSessions bounds how many ready sessions' cursors
// readFleetStats reads for due and held.
const statsSampleSessions = 20

// readFleetStats reads the counts per consumer.
//
// Replaced by Store.Stats: until it lands, the counts are built from
// existing bounded calls and are approximate. Due and held count the
// cursors with work among the first statsSampleSessions sessions of the
// ready index (due when the session is due), oldest due is the oldest of
// those sessions' ready times; in flight counts the heads the live
// workers' records list; dead counts the dead letters of one
// DeadLettersAcross page (at most dashboardPage); completed and failed
// are not kept by the store and read 0; sessions is the ready index's
// due and held sessions.
func (a *app) readFleetStats(ctx context.Context) (fleetStats, error) {
	st := a.store
	now := a.env.Now()
	out := fleetStats{At: now, Approximate: true}
	by := map[string]*consumerStats{}
	get := func(name string) *consumerStats {
		c := by[name]
		if c == nil {
			c = &consumerStats{Consumer: name}
			by[name] = c
		}
		return c
	}
	for _, c := range st.Consumers() {
		get(c.Name)
	}
	cctx, cancel := a.call(ctx)
	shards, err := st.ReadyStats(cctx)
	cancel()
	if err != nil {
		return fleetStats{}, err
	}
	type ready struct {
		session string
		at      time.Time
	}
	var sample []ready
	per := max(statsSampleSessions/max(len(shards), 1), 1)
	for _, sh := range shards {
		out.Sessions += int64(sh.Due + sh.Held)
		cctx, cancel := a.call(ctx)
		page, _, err := st.ReadyPage(cctx, sh.Shard, time.Time{}, per)
		cancel()
		if err != nil {
			return fleetStats{}, err
		}
		for _, p := range page {
			sample = append(sample, ready{p.Session, p.At})
		}
	}
	ids := make([]string, len(sample))
	for i, s := range sample {
		ids[i] = s.session
	}
	rows, err := a.sessionStats(ctx, ids)
	if err != nil {
		return fleetStats{}, err
	}
	heads := map[string]int64{}
	for _, row := range rows {
		heads[row.Session] = row.Head
	}
	for _, s := range sample {
		page, _, err := a.cursorPage(ctx, s.session, "")
		if err != nil {
			return fleetStats{}, err
		}
		for _, c := range page {
			if c.DeadLettered() || lag(c, heads[s.session]) == 0 {
				continue
			}
			cs := get(c.Consumer)
			if s.at.After(now) {
				cs.Held++
				continue
			}
			cs.Due++
			if cs.OldestDue.IsZero() || s.at.Before(cs.OldestDue) {
				cs.OldestDue = s.at
			}
		}
	}
	cctx, cancel = a.call(ctx)
	wp, err := st.Workers(cctx, redisstore.PageRequest{Limit: dashboardPage})
	cancel()
	if err != nil {
		return fleetStats{}, err
	}
	for _, w := range wp.Workers {
		for _, h := range w.Heads {
			get(h.Consumer).InFlight++
		}
	}
	cctx, cancel = a.call(ctx)
	dl, err := st.DeadLettersAcross(cctx, redisstore.DeadLetterQuery{Limit: dashboardPage})
	cancel()
	if err != nil {
		return fleetStats{}, err
	}
	for _, h := range dl.DeadLetters {
		get(h.Consumer).Dead++
	}
	for _, c := range by {
		out.Consumers = append(out.Consumers, *c)
	}
	sort.Slice(out.Consumers, func(i, j int) bool { return out.Consumers[i].Consumer < out.Consumers[j].Consumer })
	return out, nil
}

// Chart samples: the serving process reads the counts every sampleEvery
// and keeps an hour of them in memory (historyLen samples); a restart
// starts the charts afresh.
const (
	sampleEvery = 10 * time.Second
	historyLen  = int(time.Hour / sampleEvery)
)

// sample is one point of the charts: per consumer, the backlog (due +
// held), dead letters and the completed and failed per minute since the
// sample before.
type sample struct {
	At        time.Time                `json:"at"`
	Consumers map[string]samplePerCons `json:"consumers"`
}

// samplePerCons is one consumer's point of a sample.
type samplePerCons struct {
	Backlog         int64   `json:"backlog"`
	Dead            int64   `json:"dead"`
	CompletedPerMin float64 `json:"completed_per_min"`
	FailedPerMin    float64 `json:"failed_per_min"`
}

// history is the ring of the last hour's samples.
type history struct {
	mu      sync.Mutex
	samples []sample // oldest first, at most historyLen
	last    fleetStats
}

// add records s: rates from the monotonic totals' deltas since the last
// sample (a total that went down, as after a recount, gives no rate).
func (h *history) add(s fleetStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := map[string]consumerStats{}
	for _, c := range h.last.Consumers {
		prev[c.Consumer] = c
	}
	minutes := s.At.Sub(h.last.At).Minutes()
	p := sample{At: s.At, Consumers: map[string]samplePerCons{}}
	for _, c := range s.Consumers {
		pc := samplePerCons{Backlog: c.Due + c.Held, Dead: c.Dead}
		if b, ok := prev[c.Consumer]; ok && minutes > 0 {
			if d := c.Completed - b.Completed; d >= 0 {
				pc.CompletedPerMin = float64(d) / minutes
			}
			if d := c.Failed - b.Failed; d >= 0 {
				pc.FailedPerMin = float64(d) / minutes
			}
		}
		p.Consumers[c.Consumer] = pc
	}
	h.samples = append(h.samples, p)
	if len(h.samples) > historyLen {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-historyLen:]...)
	}
	h.last = s
}

// rates returns the latest per-minute rates per consumer.
func (h *history) rates() map[string]samplePerCons {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return nil
	}
	return h.samples[len(h.samples)-1].Consumers
}

// list returns a copy of the samples, oldest first.
func (h *history) list() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sample(nil), h.samples...)
}

// due reports whether the last sample is older than sampleEvery.
func (h *history) due(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last.At.IsZero() || now.Sub(h.last.At) >= sampleEvery
}

// sampleLoop samples the counts every sampleEvery until ctx ends.
func (d *dash) sampleLoop(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		if s, err := d.a.readFleetStats(ctx); err == nil {
			d.hist.add(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

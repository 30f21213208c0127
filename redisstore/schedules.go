package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
)

// ScheduleInfo is a periodic producer (package schedule) as the prefix's
// schedule listing holds it (RecordSchedule, Schedules).
type ScheduleInfo struct {
	// Name is the schedule's name.
	Name string `json:"name"`
	// Spec is its cron spec, or "every <interval>".
	Spec string `json:"spec"`
	// Session is the session its events go to.
	Session string `json:"session"`
	// Type is the type of its events.
	Type string `json:"type"`
	// Next is its next tick, as of the record's last write.
	Next time.Time `json:"-"`
	// Last is the newest tick a process stored (zero: none yet).
	Last time.Time `json:"-"`
	// By names the process that wrote the record last.
	By string `json:"by"`
	// Seen is when the record was last written, by the writer's clock.
	Seen time.Time `json:"-"`
}

// scheduleRecord is ScheduleInfo as the listing hash stores it: Seen in
// epoch ms; Next and Last are in zsets of their own, written with ZADD GT so
// that neither goes back when processes race.
type scheduleRecord struct {
	ScheduleInfo
	Seen int64 `json:"seen"`
}

// scheduleScan is the HSCAN COUNT of one listing page.
const scheduleScan = 100

// RecordSchedule writes a schedule's record into the prefix's schedule
// listing (one field of one hash; Last, when set, into the tick hash). The
// schedule runner calls it when it starts a schedule and when its append
// stores a tick.
func (s *Store) RecordSchedule(ctx context.Context, info ScheduleInfo) error {
	if err := check.Name("ScheduleInfo.Name", info.Name); err != nil {
		return err
	}
	rec := scheduleRecord{ScheduleInfo: info, Seen: info.Seen.UnixMilli()}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("a2redis: encoding schedule %q: %w", info.Name, err)
	}
	c := s.client
	if err := s.do(ctx, c.B().Hset().Key(keys.Schedules(s.cfg.Prefix)).FieldValue().FieldValue(info.Name, string(b)).Build()).Error(); err != nil {
		return fmt.Errorf("a2redis: recording schedule %q: %w", info.Name, err)
	}
	for key, at := range map[string]time.Time{keys.ScheduleNext(s.cfg.Prefix): info.Next, keys.ScheduleTicks(s.cfg.Prefix): info.Last} {
		if at.IsZero() {
			continue
		}
		if err := s.do(ctx, c.B().Zadd().Key(key).Gt().ScoreMember().ScoreMember(float64(at.UnixMilli()), info.Name).Build()).Error(); err != nil {
			return fmt.Errorf("a2redis: recording schedule %q: %w", info.Name, err)
		}
	}
	return nil
}

// Schedules lists the prefix's schedules, by name: HSCAN pages of the
// listing (one field per schedule) and one HMGET of their newest ticks per
// page.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	c := s.client
	var out []ScheduleInfo
	cursor := uint64(0)
	for {
		entry, err := s.do(ctx, c.B().Hscan().Key(keys.Schedules(s.cfg.Prefix)).Cursor(cursor).Count(scheduleScan).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("a2redis: listing schedules: %w", err)
		}
		var names []string
		for i := 0; i+1 < len(entry.Elements); i += 2 {
			var rec scheduleRecord
			if err := json.Unmarshal([]byte(entry.Elements[i+1]), &rec); err != nil {
				return nil, fmt.Errorf("a2redis: schedule %q: %w", entry.Elements[i], err)
			}
			info := rec.ScheduleInfo
			info.Name = entry.Elements[i]
			info.Seen = time.UnixMilli(rec.Seen)
			out = append(out, info)
			names = append(names, info.Name)
		}
		if len(names) > 0 {
			base := len(out) - len(names)
			for _, z := range []struct {
				key string
				set func(*ScheduleInfo, time.Time)
			}{
				{keys.ScheduleNext(s.cfg.Prefix), func(i *ScheduleInfo, t time.Time) { i.Next = t }},
				{keys.ScheduleTicks(s.cfg.Prefix), func(i *ScheduleInfo, t time.Time) { i.Last = t }},
			} {
				scores, err := s.do(ctx, c.B().Zmscore().Key(z.key).Member(names...).Build()).ToArray()
				if err != nil {
					return nil, fmt.Errorf("a2redis: listing schedules: %w", err)
				}
				for i, sc := range scores {
					if ms, err := sc.AsInt64(); err == nil {
						z.set(&out[base+i], time.UnixMilli(ms))
					}
				}
			}
		}
		if entry.Cursor == 0 {
			break
		}
		cursor = entry.Cursor
	}
	slices.SortFunc(out, func(a, b ScheduleInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(a, b ScheduleInfo) bool { return a.Name == b.Name }), nil
}

// RemoveSchedule removes a schedule from the listing (a schedule no process
// runs any more). A process still running it writes it again.
func (s *Store) RemoveSchedule(ctx context.Context, name string) error {
	if err := check.Name("name", name); err != nil {
		return err
	}
	c := s.client
	if err := s.do(ctx, c.B().Hdel().Key(keys.Schedules(s.cfg.Prefix)).Field(name).Build()).Error(); err != nil {
		return fmt.Errorf("a2redis: removing schedule %q: %w", name, err)
	}
	for _, key := range []string{keys.ScheduleNext(s.cfg.Prefix), keys.ScheduleTicks(s.cfg.Prefix)} {
		if err := s.do(ctx, c.B().Zrem().Key(key).Member(name).Build()).Error(); err != nil {
			return fmt.Errorf("a2redis: removing schedule %q: %w", name, err)
		}
	}
	return nil
}

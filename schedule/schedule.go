// Package schedule runs periodic producers: a Schedule appends one event per
// tick to a named session, exactly once across any number of processes
// running it, with no leader election. Every process computes the same
// ticks (a cron spec, or a fixed interval counted from the Unix epoch) and
// appends each tick's event with an id derived from the schedule's name and
// the tick's instant; the store's idempotent append writes the first and
// replays every later one, so a tick is stored once however many processes
// race for it.
//
//	r, err := schedule.NewRunner(store, schedule.Config{},
//		schedule.Schedule{Name: "nightly-report", Cron: "0 3 * * *", Session: "reports",
//			Event: a2redis.Event{Type: "report.due", Targets: []a2redis.Target{{Consumer: "reporter"}}}},
//		schedule.Schedule{Name: "sweep", Every: time.Minute, Session: "maintenance",
//			Event: a2redis.Event{Type: "sweep.due", Targets: []a2redis.Target{{Consumer: "sweeper"}}}},
//	)
//	err = r.Run(ctx) // until ctx ends
//
// # Missed ticks
//
// Ticks that fell due while no process ran the schedule are skipped by
// default: a Runner appends the ticks that fall due from its start on. A
// schedule's CatchUp appends, at start, the ticks of that window before the
// start that are not stored yet (at most Config.MaxCatchUp of them, the
// latest). A running process that wakes late (suspended, or its store
// unavailable) appends every tick it missed, oldest first, also at most
// MaxCatchUp.
//
// # Order
//
// Each process appends a schedule's ticks oldest first, so a session's
// tick events are in tick order, except when a process that was behind
// stores an older tick another process skipped (it started after that tick
// with no CatchUp): the late tick then follows the newer one.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// DefaultMaxCatchUp is Config.MaxCatchUp's default.
const DefaultMaxCatchUp = 100

// IDPrefix starts the id of every event a schedule appends:
// "a2s:<name>:<tick as epoch milliseconds>".
const IDPrefix = "a2s:"

// Schedule is one periodic producer. Exactly one of Cron and Every is set.
type Schedule struct {
	// Name identifies the schedule in the prefix: the ids of its events
	// derive from it (processes running the same schedule must give it the
	// same name, and different schedules different names). Required.
	Name string
	// Cron is a standard five-field cron spec ("*/15 * * * *"), or one of
	// @yearly, @monthly, @weekly, @daily, @midnight, @hourly, in UTC unless
	// it starts with "CRON_TZ=<zone> ". @every is refused: use Every, whose
	// ticks are the same in every process.
	Cron string
	// Every ticks at a fixed interval: the instants that are a whole number
	// of Every after the Unix epoch, plus Offset (so every process agrees
	// on them). At least a millisecond.
	Every time.Duration
	// Offset shifts Every's ticks (e.g. Every 24h, Offset 3h: 03:00 UTC).
	Offset time.Duration
	// Session is the session the events are appended to. Required.
	Session string
	// Event is the event each tick appends: its Type and Targets. When its
	// Payload is nil, the payload is {"schedule": name, "tick": instant}
	// (RFC 3339, UTC). Its ID is always set by the runner.
	Event a2redis.Event
	// Build, when set, makes each tick's event instead of Event (its ID is
	// still set by the runner). It must depend on the tick only: when
	// processes race for a tick, one of their events is stored.
	Build func(tick time.Time) a2redis.Event
	// CatchUp is how far back a Runner, when it starts, looks for ticks
	// that no process appended (they are appended, oldest first, if not
	// stored yet). Zero: missed ticks are skipped.
	CatchUp time.Duration
}

// ticker computes a schedule's ticks: the first tick after t.
type ticker func(t time.Time) time.Time

// ticks returns the schedule's tick function, or an ErrInvalidArgument.
func (s Schedule) ticks() (ticker, error) {
	switch {
	case s.Cron != "" && s.Every != 0:
		return nil, invalid(s.Name, "sets both Cron and Every")
	case s.Every != 0:
		if s.Every < time.Millisecond {
			return nil, invalid(s.Name, "Every is %v, less than a millisecond", s.Every)
		}
		every, offset := s.Every, s.Offset%s.Every
		return func(t time.Time) time.Time {
			// The next multiple of every (+offset) strictly after t.
			since := t.Sub(time.Unix(0, 0).Add(offset))
			n := since / every
			if since < 0 && since%every != 0 {
				n--
			}
			return time.Unix(0, 0).Add(offset).Add((n + 1) * every)
		}, nil
	case s.Cron != "":
		if strings.Contains(s.Cron, "@every") {
			return nil, invalid(s.Name, "Cron %q uses @every, whose ticks depend on when a process started: use Every", s.Cron)
		}
		spec := s.Cron
		if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
			spec = "CRON_TZ=UTC " + spec
		}
		sched, err := cron.ParseStandard(spec)
		if err != nil {
			return nil, invalid(s.Name, "Cron %q: %v", s.Cron, err)
		}
		return func(t time.Time) time.Time {
			// cron works in whole seconds: a tick is the first second after t.
			return sched.Next(t)
		}, nil
	default:
		return nil, invalid(s.Name, "sets neither Cron nor Every")
	}
}

// describe is the schedule's spec as listed (Cron, or "every <d>").
func (s Schedule) describe() string {
	if s.Cron != "" {
		return s.Cron
	}
	if s.Offset%s.Every != 0 {
		return fmt.Sprintf("every %v (+%v)", s.Every, s.Offset%s.Every)
	}
	return fmt.Sprintf("every %v", s.Every)
}

// EventID is the id of the event schedule name appends for tick.
func EventID(name string, tick time.Time) string {
	return fmt.Sprintf("%s%s:%d", IDPrefix, name, tick.UnixMilli())
}

// event is the event schedule s appends for tick.
func (s Schedule) event(tick time.Time) a2redis.Event {
	ev := s.Event
	if s.Build != nil {
		ev = s.Build(tick)
	}
	if ev.Payload == nil {
		ev.Payload, _ = json.Marshal(struct {
			Schedule string `json:"schedule"`
			Tick     string `json:"tick"`
		}{s.Name, tick.UTC().Format(time.RFC3339Nano)})
	}
	ev.ID = EventID(s.Name, tick)
	ev.Targets = slices.Clone(ev.Targets)
	return ev
}

func invalid(name, format string, a ...any) error {
	return fmt.Errorf("%w: schedule %q: %s", a2redis.ErrInvalidArgument, name, fmt.Sprintf(format, a...))
}

// Clock is the time a Runner runs by; the default is the system clock.
// Tests pass one they move by hand.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures a Runner. The zero value is ready to use.
type Config struct {
	// Clock is the runner's clock. Default the system clock.
	Clock Clock
	// MaxCatchUp bounds how many past ticks of one schedule a start (its
	// CatchUp window) or a late wake-up appends: the latest ones; older
	// ones are skipped. Default DefaultMaxCatchUp (100).
	MaxCatchUp int
	// Retry is how long the runner waits before trying a tick whose append
	// failed again (the tick stays due; its id makes the retry safe).
	// Default 1s.
	Retry time.Duration
	// ID names this process in the schedule listing (Store.Schedules).
	// Default the hostname and pid.
	ID string
	// Logger receives failed appends (Warn). Default slog.Default().
	Logger *slog.Logger
	// OnTick, when set, is called after each tick's append with what the
	// store did (Replayed: another process had stored it), or its error.
	// An append under way when Run's ctx ends is finished (within
	// appendGrace) and reported, so the calls add up to what was stored.
	OnTick func(name string, tick time.Time, res redisstore.AppendResult, err error)
}

// appendGrace bounds one tick's append, which is not cut short by the end
// of Run's ctx.
const appendGrace = 5 * time.Second

// Runner runs schedules on a store until its Run's ctx ends.
type Runner struct {
	store     *redisstore.Store
	cfg       Config
	schedules []Schedule
	tickers   []ticker
}

// NewRunner checks the schedules and returns a runner for them; an invalid
// schedule (no name or session, both or neither of Cron and Every, a spec
// that does not parse, two schedules with one name) is an
// ErrInvalidArgument.
func NewRunner(store *redisstore.Store, cfg Config, schedules ...Schedule) (*Runner, error) {
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.MaxCatchUp <= 0 {
		cfg.MaxCatchUp = DefaultMaxCatchUp
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	r := &Runner{store: store, cfg: cfg}
	seen := map[string]bool{}
	for _, s := range schedules {
		if s.Name == "" {
			return nil, invalid(s.Name, "has no Name")
		}
		if strings.ContainsAny(s.Name, ":") {
			return nil, invalid(s.Name, "Name may not contain ':'")
		}
		if seen[s.Name] {
			return nil, invalid(s.Name, "is given twice")
		}
		seen[s.Name] = true
		if s.Session == "" {
			return nil, invalid(s.Name, "has no Session")
		}
		if s.CatchUp < 0 {
			return nil, invalid(s.Name, "CatchUp is negative")
		}
		tk, err := s.ticks()
		if err != nil {
			return nil, err
		}
		if s.Build == nil && s.Event.Type == "" {
			return nil, invalid(s.Name, "has no Event.Type (and no Build)")
		}
		r.schedules = append(r.schedules, s)
		r.tickers = append(r.tickers, tk)
	}
	return r, nil
}

// Run appends each schedule's ticks as they fall due, until ctx ends (it
// then returns nil). At its start it appends each schedule's CatchUp ticks
// and records the schedules in the store's listing.
func (r *Runner) Run(ctx context.Context) error {
	if len(r.schedules) == 0 {
		<-ctx.Done()
		return nil
	}
	now := r.cfg.Clock.Now()
	// last[i] is the newest tick of schedule i this runner has handled (or
	// chose to skip): the next one due is tickers[i](last[i]).
	last := make([]time.Time, len(r.schedules))
	for i, s := range r.schedules {
		last[i] = now.Add(-s.CatchUp)
		r.record(ctx, i, time.Time{}, r.tickers[i](now))
	}
	for {
		now = r.cfg.Clock.Now()
		wait := time.Duration(-1)
		for i := range r.schedules {
			due := r.due(i, last[i], now)
			for _, tick := range due {
				if ctx.Err() != nil {
					return nil
				}
				if err := r.appendTick(ctx, i, tick); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					r.cfg.Logger.Warn("schedule: append failed; the tick stays due", "schedule", r.schedules[i].Name, "tick", tick, "err", err)
					break
				}
				last[i] = tick
			}
			if len(due) > 0 && last[i].Before(due[len(due)-1]) {
				wait = 0 // a failed tick: retry after cfg.Retry
				continue
			}
			next := r.tickers[i](maxTime(last[i], now))
			if d := next.Sub(now); wait < 0 || d < wait {
				wait = d
			}
		}
		if wait == 0 {
			wait = r.cfg.Retry
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.cfg.Clock.After(wait):
		}
	}
}

// due lists schedule i's ticks after last and at or before now, oldest
// first: at most MaxCatchUp, the latest.
func (r *Runner) due(i int, last, now time.Time) []time.Time {
	var ticks []time.Time
	for t := r.tickers[i](last); !t.After(now); t = r.tickers[i](t) {
		ticks = append(ticks, t)
		if len(ticks) > r.cfg.MaxCatchUp {
			ticks = ticks[1:]
		}
	}
	return ticks
}

// appendTick appends schedule i's event for tick, and records the schedule
// in the listing when this process stored it.
// The append runs to its end even when ctx ends meanwhile (bounded by
// appendGrace): a shutdown never leaves a tick stored without the process
// knowing it.
func (r *Runner) appendTick(ctx context.Context, i int, tick time.Time) error {
	s := r.schedules[i]
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendGrace)
	res, err := r.store.Append(actx, s.Session, []a2redis.Event{s.event(tick)}, redisstore.AppendOptions{})
	cancel()
	if r.cfg.OnTick != nil {
		r.cfg.OnTick(s.Name, tick, res, err)
	}
	if err != nil {
		return err
	}
	if !res.Replayed {
		r.record(ctx, i, tick, r.tickers[i](tick))
	}
	return nil
}

// record writes schedule i into the store's listing; a failure is logged
// only (the listing is for operators; the ticks do not depend on it).
func (r *Runner) record(ctx context.Context, i int, tick, next time.Time) {
	s := r.schedules[i]
	info := redisstore.ScheduleInfo{
		Name: s.Name, Spec: s.describe(), Session: s.Session, Type: s.event(next).Type,
		Next: next, By: r.cfg.ID, Seen: r.cfg.Clock.Now(),
	}
	if !tick.IsZero() {
		info.Last = tick
	}
	if err := r.store.RecordSchedule(ctx, info); err != nil && !errors.Is(err, context.Canceled) {
		r.cfg.Logger.Warn("schedule: recording the schedule failed", "schedule", s.Name, "err", err)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

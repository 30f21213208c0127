package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// served returns the consumers a call serves: its own, with the settings
// (PerSession, MaxFailures) the registry holds for them, else the registry's (nil:
// every consumer).
func (s *Store) served(ctx context.Context, consumers []a2redis.Consumer) []a2redis.Consumer {
	if consumers != nil {
		return withSettings(consumers, s.registered(ctx))
	}
	return s.registered(ctx)
}

// servedFor returns the consumers a call serves (see served) and their
// script argument (see servedArg): what every write that names its served
// consumers sends.
func (s *Store) servedFor(ctx context.Context, consumers []a2redis.Consumer) ([]a2redis.Consumer, string, error) {
	list := s.served(ctx, consumers)
	arg, err := servedArg(list)
	return list, arg, err
}

// declared reports whether name is a registered consumer (always, with
// none registered). A name the store's copy lacks is looked up once more
// in the registry itself, in case another store added it since.
func (s *Store) declared(ctx context.Context, name string) bool {
	has := func(list []a2redis.Consumer) bool {
		return len(list) == 0 || slices.ContainsFunc(list, func(c a2redis.Consumer) bool { return c.Name == name })
	}
	if has(s.registered(ctx)) {
		return true
	}
	cp, err := s.readRegistry(ctx)
	return err == nil && has(cp.consumers)
}

// checkDeclared refuses a consumer name that is not registered.
func (s *Store) checkDeclared(ctx context.Context, field, name string) error {
	if s.declared(ctx, name) {
		return nil
	}
	return check.Invalid(field, "names consumer %q, which the prefix's consumer registry does not hold (Config.Consumers, Store.AddConsumers)", name)
}

func (s *Store) checkDeclaredCauses(ctx context.Context, field string, causes []a2redis.Cause) error {
	for i, c := range causes {
		if err := s.checkDeclared(ctx, fmt.Sprintf("%s[%d].Consumer", field, i), c.Consumer); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) checkDeclaredConsumers(ctx context.Context, field string, consumers []a2redis.Consumer) error {
	for i, c := range consumers {
		if err := s.checkDeclared(ctx, fmt.Sprintf("%s[%d].Name", field, i), c.Name); err != nil {
			return err
		}
	}
	return nil
}

// claimable returns the consumers a claim serving consumers may take heads
// of: consumers (nil: the registry's) less the paused ones; ok is false when
// every one is paused (the claim then takes nothing, without a call).
func (s *Store) claimable(ctx context.Context, consumers []a2redis.Consumer) (_ []a2redis.Consumer, ok bool) {
	cp := s.registryNow(ctx)
	if consumers == nil {
		consumers = cp.consumers
	}
	if len(cp.paused) == 0 || consumers == nil {
		return consumers, true
	}
	out := make([]a2redis.Consumer, 0, len(consumers))
	for _, c := range consumers {
		if !slices.Contains(cp.paused, c.Name) {
			out = append(out, c)
		}
	}
	return out, len(out) > 0
}

// servedArg encodes the served consumers: ” for all, else a JSON list of
// [name], [name, per-session limit (0: none)], [name, per-session limit,
// max failures] or [name, lane, types ('*' or a JSON list as text),
// backfill] with max failures as a fifth element when set.
func servedArg(consumers []a2redis.Consumer) (string, error) {
	if consumers == nil {
		return "", nil
	}
	list := make([]any, len(consumers))
	for i, c := range consumers {
		at := fmt.Sprintf("Consumers[%d]", i)
		if err := checkName(at+".Name", c.Name); err != nil {
			return "", err
		}
		if c.PerSession < 0 {
			return "", check.Invalid(at+".PerSession", "is negative (%d)", c.PerSession)
		}
		if c.MaxFailures < 0 {
			return "", check.Invalid(at+".MaxFailures", "is negative (%d)", c.MaxFailures)
		}
		if c.Log == nil {
			switch {
			case c.MaxFailures > 0:
				list[i] = []any{c.Name, c.PerSession, c.MaxFailures}
			case c.PerSession > 0:
				list[i] = []any{c.Name, c.PerSession}
			default:
				list[i] = []any{c.Name}
			}
			continue
		}
		if c.PerSession != 0 {
			return "", check.Invalid(at+".PerSession", "is for event and lane consumers; a Log consumer has one head in flight at most")
		}
		if err := checkName(at+".Log.Lane", c.Log.Lane); err != nil {
			return "", err
		}
		types := "*"
		if c.Log.Types != nil {
			for j, t := range c.Log.Types {
				if err := checkType(fmt.Sprintf("%s.Log.Types[%d]", at, j), t); err != nil {
					return "", err
				}
			}
			raw, _ := json.Marshal(c.Log.Types)
			types = string(raw)
		}
		backfill := 0
		if c.Log.Backfill {
			backfill = 1
		}
		list[i] = []any{c.Name, c.Log.Lane, types, backfill}
		if c.MaxFailures > 0 {
			list[i] = []any{c.Name, c.Log.Lane, types, backfill, c.MaxFailures}
		}
	}
	raw, _ := json.Marshal(list)
	return string(raw), nil
}

package model

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
)

// registry is the model's consumer registry of the prefix (see
// redisstore.Store.AddConsumers): the consumers by name, the paused names,
// and the version every change bumps.
type registry struct {
	consumers []a2redis.Consumer
	paused    []string
	version   int64
}

// served is a request's served consumers: its own, else the registry's
// (nil, every consumer, when the registry is empty).
func (m *Store) served(consumers []a2redis.Consumer) []a2redis.Consumer {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	if consumers == nil {
		return cloneConsumers(m.reg.consumers)
	}
	return withSettings(consumers, m.reg.consumers)
}

// withSettings is consumers with the settings (PerSession) of the
// registered consumers of their names: the registry's settings win.
func withSettings(consumers, registered []a2redis.Consumer) []a2redis.Consumer {
	var out []a2redis.Consumer
	for i, c := range consumers {
		j := slices.IndexFunc(registered, func(r a2redis.Consumer) bool { return r.Name == c.Name })
		if j < 0 || c.PerSession < 0 || c.MaxFailures < 0 || sameSettings(registered[j], c) || !sameConsumer(registered[j], c) {
			continue
		}
		if out == nil {
			out = slices.Clone(consumers)
		}
		out[i].PerSession, out[i].MaxFailures = registered[j].PerSession, registered[j].MaxFailures
	}
	if out == nil {
		return consumers
	}
	return out
}

// checkDeclared refuses a consumer name the registry does not hold (any
// name, with the registry empty).
func (m *Store) checkDeclared(field, name string) error {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	if len(m.reg.consumers) == 0 || slices.ContainsFunc(m.reg.consumers, func(c a2redis.Consumer) bool { return c.Name == name }) {
		return nil
	}
	return check.Invalid(field, "names consumer %q, which the prefix's consumer registry does not hold", name)
}

// claimable is consumers less the paused ones; ok is false when every one
// is paused.
func (m *Store) claimable(consumers []a2redis.Consumer) (_ []a2redis.Consumer, ok bool) {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	if len(m.reg.paused) == 0 || consumers == nil {
		return consumers, true
	}
	out := []a2redis.Consumer{}
	for _, c := range consumers {
		if !slices.Contains(m.reg.paused, c.Name) {
			out = append(out, c)
		}
	}
	return out, len(out) > 0
}

// stored is a consumer as the registry gives it back (a log consumer's
// empty type list reads back as none given).
func stored(c a2redis.Consumer) a2redis.Consumer {
	out := a2redis.Consumer{Name: c.Name, PerSession: c.PerSession, MaxFailures: c.MaxFailures}
	if c.Log != nil {
		l := *c.Log
		l.Types = slices.Clone(c.Log.Types)
		if len(l.Types) == 0 {
			l.Types = nil
		}
		out.Log = &l
	}
	return out
}

func cloneConsumers(cs []a2redis.Consumer) []a2redis.Consumer {
	if len(cs) == 0 {
		return nil
	}
	out := make([]a2redis.Consumer, len(cs))
	for i, c := range cs {
		out[i] = stored(c)
	}
	return out
}

// sameConsumer reports whether a and b declare the same consumer (a log
// consumer's types compared as a set).
func sameConsumer(a, b a2redis.Consumer) bool {
	if a.Name != b.Name || (a.Log == nil) != (b.Log == nil) {
		return false
	}
	if a.Log == nil {
		return true
	}
	if a.Log.Lane != b.Log.Lane || a.Log.Backfill != b.Log.Backfill || (a.Log.Types == nil) != (b.Log.Types == nil) {
		return false
	}
	x, y := slices.Clone(a.Log.Types), slices.Clone(b.Log.Types)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// sameSettings reports whether a and b are the same consumer with the same
// settings.
func sameSettings(a, b a2redis.Consumer) bool {
	return sameConsumer(a, b) && a.PerSession == b.PerSession && a.MaxFailures == b.MaxFailures
}

// declaredMaxFailures is the registry's MaxFailures for consumer (0: none).
func (m *Store) declaredMaxFailures(consumer string) int {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	for _, c := range m.reg.consumers {
		if c.Name == consumer {
			return c.MaxFailures
		}
	}
	return 0
}

// change applies a registry change, bumping the version when it changed
// anything.
func (m *Store) change(fn func(registry) (registry, error)) error {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	next, err := fn(registry{consumers: slices.Clone(m.reg.consumers), paused: slices.Clone(m.reg.paused)})
	if err != nil {
		return err
	}
	slices.Sort(next.paused)
	next.paused = slices.Compact(next.paused)
	if slices.EqualFunc(next.consumers, m.reg.consumers, sameSettings) && slices.Equal(next.paused, m.reg.paused) {
		return nil
	}
	if len(next.consumers) > redisstore.MaxConsumers {
		return check.Invalid("consumers", "would make %d registered consumers, more than %d", len(next.consumers), redisstore.MaxConsumers)
	}
	slices.SortFunc(next.consumers, func(a, b a2redis.Consumer) int { return strings.Compare(a.Name, b.Name) })
	for i, c := range next.consumers {
		next.consumers[i] = stored(c)
	}
	if len(next.consumers) == 0 {
		next.consumers = nil
	}
	if len(next.paused) == 0 {
		next.paused = nil
	}
	next.version = m.reg.version + 1
	m.reg = next
	return nil
}

// ReadConsumers returns the registry's consumers and version (see
// redisstore.Store.ReadConsumers).
func (m *Store) ReadConsumers(ctx context.Context) ([]a2redis.Consumer, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.regMu.Lock()
	defer m.regMu.Unlock()
	return cloneConsumers(m.reg.consumers), m.reg.version, nil
}

// Paused returns the paused consumers' names (see redisstore.Store.Paused).
func (m *Store) Paused() []string {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	return slices.Clone(m.reg.paused)
}

// AddConsumers registers consumers (see redisstore.Store.AddConsumers).
func (m *Store) AddConsumers(ctx context.Context, consumers ...a2redis.Consumer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if consumers == nil {
		consumers = []a2redis.Consumer{}
	}
	if _, err := parseServed(consumers); err != nil {
		return err
	}
	for i, c := range consumers {
		for _, d := range consumers[:i] {
			if d.Name == c.Name && !sameConsumer(c, d) {
				return check.Invalid("consumers", "consumer %q is given twice, unlike", c.Name)
			}
		}
	}
	return m.change(func(r registry) (registry, error) {
		for _, c := range consumers {
			i := slices.IndexFunc(r.consumers, func(d a2redis.Consumer) bool { return d.Name == c.Name })
			switch {
			case i < 0:
				r.consumers = append(r.consumers, c)
			case !sameConsumer(r.consumers[i], c):
				return r, &redisstore.ConsumerMismatchError{Declared: c, Registered: r.consumers[i]}
			default:
				r.consumers[i].PerSession, r.consumers[i].MaxFailures = c.PerSession, c.MaxFailures
			}
		}
		return r, nil
	})
}

// RemoveConsumers removes consumers from the registry (see
// redisstore.Store.RemoveConsumers).
func (m *Store) RemoveConsumers(ctx context.Context, names ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, n := range names {
		if err := checkName(fmt.Sprintf("names[%d]", i), n); err != nil {
			return err
		}
	}
	return m.change(func(r registry) (registry, error) {
		r.consumers = slices.DeleteFunc(r.consumers, func(c a2redis.Consumer) bool { return slices.Contains(names, c.Name) })
		r.paused = slices.DeleteFunc(r.paused, func(n string) bool { return slices.Contains(names, n) })
		return r, nil
	})
}

// PauseConsumer pauses a registered consumer (see
// redisstore.Store.PauseConsumer).
func (m *Store) PauseConsumer(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkName("name", name); err != nil {
		return err
	}
	return m.change(func(r registry) (registry, error) {
		if !slices.ContainsFunc(r.consumers, func(c a2redis.Consumer) bool { return c.Name == name }) {
			return r, check.Invalid("name", "names consumer %q, which the prefix's consumer registry does not hold", name)
		}
		r.paused = append(r.paused, name)
		return r, nil
	})
}

// ResumeConsumer resumes a paused consumer (see
// redisstore.Store.ResumeConsumer).
func (m *Store) ResumeConsumer(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkName("name", name); err != nil {
		return err
	}
	return m.change(func(r registry) (registry, error) {
		r.paused = slices.DeleteFunc(r.paused, func(n string) bool { return n == name })
		return r, nil
	})
}

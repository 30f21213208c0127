package model

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// The argument rules below restate the contract's input checks: a request
// the store refuses with ErrInvalidArgument is refused here too, before any
// state changes (and, like the store, after the same id-source calls).

var (
	checkSession = check.Session
	checkType    = check.Type
	checkName    = check.Name
	checkLane    = check.Lane
	checkCause   = check.Cause
)

// logSpec is a served log consumer.
type logSpec struct {
	name, lane string
	types      []string // nil: every type but the clear marker
	backfill   bool
}

// served is the set of consumers a request serves.
type served struct {
	all   bool
	names map[string]bool
	logs  []logSpec
}

func (s served) has(consumer string) bool { return s.all || s.names[consumer] }

// spec returns the served log spec of a consumer's log lane, if any.
func (s served) spec(consumer, lane string) (logSpec, bool) {
	for _, l := range s.logs {
		if l.name == consumer && l.lane == lane {
			return l, true
		}
	}
	return logSpec{}, false
}

func parseServed(consumers []a2redis.Consumer) (served, error) {
	if consumers == nil {
		return served{all: true}, nil
	}
	out := served{names: map[string]bool{}}
	for i, c := range consumers {
		at := fmt.Sprintf("Consumers[%d]", i)
		if err := checkName(at+".Name", c.Name); err != nil {
			return served{}, err
		}
		out.names[c.Name] = true
		if c.Log == nil {
			continue
		}
		if err := checkName(at+".Log.Lane", c.Log.Lane); err != nil {
			return served{}, err
		}
		if c.Log.Types != nil {
			for j, t := range c.Log.Types {
				if err := checkType(fmt.Sprintf("%s.Log.Types[%d]", at, j), t); err != nil {
					return served{}, err
				}
			}
		}
		out.logs = append(out.logs, logSpec{name: c.Name, lane: c.Log.Lane, types: c.Log.Types, backfill: c.Log.Backfill})
	}
	return out, nil
}

// prepared is one validated event of a batch.
type prepared struct {
	id, typ string
	payload json.RawMessage
	targets []a2redis.Target
	cause   *a2redis.Cause
}

func (m *Store) prepare(events []a2redis.Event, arg string) ([]prepared, error) {
	if len(events) > m.cfg.MaxBatch {
		return nil, a2redis.Invalid(arg, "holds %d events, more than the maximum batch of %d", len(events), m.cfg.MaxBatch)
	}
	out := make([]prepared, len(events))
	seen := make(map[string]int, len(events))
	for i, e := range events {
		at := fmt.Sprintf("%s[%d]", arg, i)
		if err := checkType(at+".Type", e.Type); err != nil {
			return nil, err
		}
		payload := e.Payload
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		} else if !json.Valid(payload) {
			return nil, a2redis.Invalid(at+".Payload", "is not valid JSON")
		}
		id := e.ID
		if id == "" {
			id = m.cfg.IDs()
		}
		if j, dup := seen[id]; dup {
			return nil, a2redis.Invalid(at+".ID", "repeats the id of %s[%d] (%q)", arg, j, id)
		}
		seen[id] = i
		targets := make(map[a2redis.Target]bool, len(e.Targets))
		for j, t := range e.Targets {
			tat := fmt.Sprintf("%s.Targets[%d]", at, j)
			if err := checkName(tat+".Consumer", t.Consumer); err != nil {
				return nil, err
			}
			if err := checkLane(tat+".Lane", t.Lane); err != nil {
				return nil, err
			}
			if targets[t] {
				return nil, a2redis.Invalid(tat, "repeats target %q lane %q", t.Consumer, t.Lane)
			}
			targets[t] = true
		}
		out[i] = prepared{id: id, typ: e.Type, payload: append(json.RawMessage(nil), payload...), targets: append([]a2redis.Target(nil), e.Targets...)}
	}
	return out, nil
}

// expiry is a lease's end in epoch milliseconds: at when set, else now+ttl.
func expiry(now int64, ttl time.Duration, at time.Time) (int64, error) {
	if !at.IsZero() {
		return at.UnixMilli(), nil
	}
	if ttl <= 0 {
		return 0, a2redis.Invalid("TTL", "must be positive (got %v)", ttl)
	}
	return now + max(ttl.Milliseconds(), 1), nil
}

func isNullJSON(v json.RawMessage) bool {
	if len(v) == 0 {
		return true
	}
	var x any
	return json.Unmarshal(v, &x) == nil && x == nil
}

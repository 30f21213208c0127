package model

import (
	"encoding/json"
	"fmt"

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
	// limits are the served consumers' per-session limits
	// (a2redis.Consumer.PerSession), by name.
	limits map[string]int
	// maxFailures are the served consumers' own MaxFailures, by name.
	maxFailures map[string]int
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
		if c.PerSession < 0 {
			return served{}, check.Invalid(at+".PerSession", "is negative (%d)", c.PerSession)
		}
		if c.MaxFailures < 0 {
			return served{}, check.Invalid(at+".MaxFailures", "is negative (%d)", c.MaxFailures)
		}
		if c.MaxFailures > 0 {
			if out.maxFailures == nil {
				out.maxFailures = map[string]int{}
			}
			out.maxFailures[c.Name] = c.MaxFailures
		}
		if c.Log == nil {
			if c.PerSession > 0 {
				if out.limits == nil {
					out.limits = map[string]int{}
				}
				out.limits[c.Name] = c.PerSession
			}
			continue
		}
		if c.PerSession != 0 {
			return served{}, check.Invalid(at+".PerSession", "is for event and lane consumers; a Log consumer has one head in flight at most")
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
	// notBefore is the event's scheduled time, epoch ms (0: none).
	notBefore int64
	cause     *a2redis.Cause
}

func (m *Store) prepare(events []a2redis.Event, arg string) ([]prepared, error) {
	valid, err := check.Batch(events, arg, m.cfg.MaxBatch, m.cfg.IDs)
	if err != nil {
		return nil, err
	}
	out := make([]prepared, len(valid))
	for i, e := range valid {
		out[i] = prepared{id: e.ID, typ: e.Type, payload: append(json.RawMessage(nil), e.Payload...), targets: append([]a2redis.Target(nil), events[i].Targets...), notBefore: e.NotBefore}
	}
	return out, nil
}

func isNullJSON(v json.RawMessage) bool {
	if len(v) == 0 {
		return true
	}
	var x any
	return json.Unmarshal(v, &x) == nil && x == nil
}

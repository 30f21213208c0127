package conformance

import (
	"fmt"
	"sort"
	"strings"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// canonical puts what the contract leaves unordered into one order: heads
// at the same index of the same consumer (an event cursor and lane or log
// cursors) come in no specified order, nor do renewed or superseded refs
// with the same index and consumer.
func canonical(res any) any {
	switch r := res.(type) {
	case redisstore.ClaimResult:
		r.Heads = sortedHeads(r.Heads)
		r.DeadLettered = sortedHeads(r.DeadLettered)
		return r
	case []a2redis.HeadEvent:
		return sortedHeads(r)
	case redisstore.RetentionResult:
		// A pass meets sessions in SCAN order (the model in name order),
		// and counts what it scanned: the sessions it names and what it
		// did to them are the contract.
		r.Idle = append([]string(nil), r.Idle...)
		sort.Strings(r.Idle)
		r.Trimmed = append([]redisstore.SessionTrim(nil), r.Trimmed...)
		sort.Slice(r.Trimmed, func(i, j int) bool { return r.Trimmed[i].Session < r.Trimmed[j].Session })
		r.Scanned, r.Cursor = 0, ""
		return r
	case redisstore.RenewResult:
		r.Renewed = sortedRefs(r.Renewed)
		r.Superseded = sortedRefs(r.Superseded)
		return r
	}
	return res
}

func sortedHeads(heads []a2redis.HeadEvent) []a2redis.HeadEvent {
	out := append([]a2redis.HeadEvent(nil), heads...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Lane < b.Lane
	})
	return out
}

func sortedRefs(refs []a2redis.HeadRef) []a2redis.HeadRef {
	out := append([]a2redis.HeadRef(nil), refs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		return a.Lane < b.Lane
	})
	return out
}

// diff describes where two normalized values differ, path by path, at
// most max differences.
func diff(a, b any, max int) []string {
	var out []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		if len(out) >= max {
			return
		}
		switch xv := x.(type) {
		case map[string]any:
			yv, ok := y.(map[string]any)
			if !ok {
				out = append(out, fmt.Sprintf("%s: redis %s, model %s", path, short(x), short(y)))
				return
			}
			keys := map[string]bool{}
			for k := range xv {
				keys[k] = true
			}
			for k := range yv {
				keys[k] = true
			}
			names := make([]string, 0, len(keys))
			for k := range keys {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				walk(path+"."+k, xv[k], yv[k])
			}
		case []any:
			yv, ok := y.([]any)
			if !ok {
				out = append(out, fmt.Sprintf("%s: redis %s, model %s", path, short(x), short(y)))
				return
			}
			if len(xv) != len(yv) {
				out = append(out, fmt.Sprintf("%s: redis has %d items, model %d", path, len(xv), len(yv)))
			}
			for i := 0; i < len(xv) && i < len(yv); i++ {
				walk(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i])
			}
		default:
			if render(x) != render(y) {
				out = append(out, fmt.Sprintf("%s: redis %s, model %s", path, short(x), short(y)))
			}
		}
	}
	walk("", a, b)
	return out
}

func short(v any) string {
	s := render(v)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// describe renders a difference between the two sides' results.
func describe(store, model any) string {
	var b strings.Builder
	for _, d := range diff(normalize(store), normalize(model), 8) {
		fmt.Fprintf(&b, "  %s\n", strings.TrimPrefix(d, "."))
	}
	fmt.Fprintf(&b, "  redis: %s\n  model: %s", short(store), short(model))
	return b.String()
}

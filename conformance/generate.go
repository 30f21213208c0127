package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/conformance/internal/model"
	"github.com/a2redis/a2redis/redisstore"
)

// The world of generated operations: a few sessions, consumers, lanes,
// types and ids, so that operations collide often.
var (
	genSessions = []string{"s1", "s1", "s1", "s2", "s2", "s{3}", "s\xff:4"}
	// Mostly plain ids; the rest must round-trip byte-exact too.
	genIDPrefixes = []string{"", "", "\xff", "{x}:", "\x00%"}
	genTypes      = []string{"a", "b", "c", "d"}
	genHolders    = []string{"h1", "h2", "h3"}
	genReducers   = []string{"r1", "r2"}
	genTargets    = []a2redis.Target{{Consumer: "c1"}, {Consumer: "c2"}, {Consumer: "c1", Lane: "x"}, {Consumer: "c1", Lane: "y"}, {Consumer: "c2", Lane: "x"}}
	genLogs       = []a2redis.Consumer{logc("g1", "all", false), logc("g2", "ab", true, "a", "b"), logc("g3", "cc", false, "c")}
	genPlain      = []a2redis.Consumer{{Name: "c1"}, {Name: "c2"}}
	genFields     = []string{"f1", "f2", "f3"}
	genPeople     = []string{"p1", "p2"}
	genPresenceT  = time.UnixMilli(1_700_000_000_000)
)

// generator produces a random but plausible sequence of operations: it runs
// each operation on a model of its own and draws later arguments (claimed
// heads, attempts, stored ids, dead letters) from the results.
type generator struct {
	sessions []string // the sessions to touch; default genSessions
	rnd      *rand.Rand
	m        *model.Store
	clock    *Clock
	ctx      context.Context
	held     []a2redis.HeadEvent          // claimed heads, newest last
	dones    []redisstore.CompleteRequest // committed completions
	sent     [][]a2redis.Event            // appended batches with their stored ids
	n        int                          // generated-id counter of the model
	queue    []func() op                  // a scenario's next operations
	noLimits bool                         // claims never carry a limit
	// noRegistry: no registry operations (the registry is the prefix's,
	// and the fault tests run several sequences on one prefix at once).
	noRegistry bool
}

func newGenerator(seed int64) *generator {
	g := &generator{sessions: genSessions, rnd: rand.New(rand.NewPCG(uint64(seed), 0x5eed)), clock: NewClock(), ctx: context.Background()}
	g.m = model.New(model.Config{Clock: g.clock.Now, IDs: func() string { g.n++; return fmt.Sprintf("g%d", g.n) }, Trace: traceContext})
	return g
}

func (g *generator) pick(n int) int        { return g.rnd.IntN(n) }
func (g *generator) chance(p float64) bool { return g.rnd.Float64() < p }

func pickOne[T any](g *generator, list []T) T { return list[g.pick(len(list))] }

// generate returns n operations.
func (g *generator) generate(n int) []op {
	ops := make([]op, 0, n)
	for len(ops) < n {
		o := g.next()
		ops = append(ops, o)
		g.apply(o)
	}
	return ops
}

// apply runs an operation on the generator's model and remembers what later
// operations may refer to.
func (g *generator) apply(o op) {
	if o.Kind == opAdvance {
		g.clock.Advance(o.Advance)
		return
	}
	res, err := o.run(g.ctx, g.m)
	if err != nil {
		return
	}
	switch r := res.(type) {
	case redisstore.ClaimResult:
		g.hold(r.Heads)
	case redisstore.CompleteAndClaimResult:
		g.hold(r.Next.Heads)
	case redisstore.AppendResult:
		if len(r.Events) > 0 && !r.Replayed {
			batch := make([]a2redis.Event, len(o.Events))
			copy(batch, o.Events)
			for i := range batch {
				batch[i].ID = r.Events[i].ID
			}
			g.sent = append(g.sent, batch)
		}
	case redisstore.CompleteResult:
		if r.Outcome == redisstore.Completed && !r.Replayed {
			req := o.Complete
			req.Events = append([]a2redis.Event(nil), req.Events...)
			for i := range req.Events {
				req.Events[i].ID = r.Events[i].ID
			}
			g.dones = append(g.dones, req)
		}
	}
}

// hold remembers claimed heads (the newest 40).
func (g *generator) hold(heads []a2redis.HeadEvent) {
	g.held = append(g.held, heads...)
	if len(g.held) > 40 {
		g.held = g.held[len(g.held)-40:]
	}
}

func (g *generator) session() string { return pickOne(g, g.sessions) }

func (g *generator) bounds(session string) redisstore.Bounds {
	b, _ := g.m.Bounds(g.ctx, session)
	return b
}

// served draws the served consumers of a request: every consumer (nil),
// none, or a subset that may declare log consumers.
func (g *generator) served(logs bool) []a2redis.Consumer {
	switch p := g.rnd.Float64(); {
	case p < 0.35:
		return nil
	case p < 0.40:
		return []a2redis.Consumer{}
	}
	var out []a2redis.Consumer
	for _, c := range genPlain {
		if g.chance(0.6) {
			out = append(out, g.limited(c))
		}
	}
	if logs {
		for _, c := range genLogs {
			if g.chance(0.5) {
				out = append(out, c)
			}
		}
	}
	if out == nil {
		out = []a2redis.Consumer{genPlain[g.pick(len(genPlain))]}
	}
	return out
}

// limited gives a plain consumer a per-session limit now and then (1 or
// 2 heads of a session in flight), and any consumer its own MaxFailures
// (1 to 3); a registered consumer's settings are the ones the store keeps.
func (g *generator) limited(c a2redis.Consumer) a2redis.Consumer {
	if c.Log == nil && g.chance(0.3) {
		c.PerSession = 1 + g.pick(2)
	}
	if g.chance(0.2) {
		c.MaxFailures = 1 + g.pick(3)
	}
	return c
}

func (g *generator) events(max int, withIDs bool) []a2redis.Event {
	n := 1 + g.pick(max)
	out := make([]a2redis.Event, n)
	used := map[string]bool{}
	for i := range out {
		e := a2redis.Event{Type: pickOne(g, genTypes)}
		if withIDs && g.chance(0.4) {
			// Ids are any string: some carry bytes that are not UTF-8,
			// braces, colons and NUL, which must round-trip byte-exact.
			id := fmt.Sprintf("%se%d", pickOne(g, genIDPrefixes), g.pick(40))
			if !used[id] {
				used[id] = true
				e.ID = id
			}
		}
		if g.chance(0.5) {
			e.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d}`, g.pick(100)))
		}
		perm := g.rnd.Perm(len(genTargets))
		for _, j := range perm[:g.pick(3)] {
			e.Targets = append(e.Targets, genTargets[j])
		}
		if len(e.Targets) > 0 && g.chance(0.15) {
			// Scheduled: its heads wait until then (some already due).
			e.NotBefore = g.clock.Now().Add(time.Duration(g.pick(40)-5) * time.Second)
		}
		out[i] = e
	}
	return out
}

// heldHead returns a claimed head (possibly stale by now) and whether one
// exists.
func (g *generator) heldHead() (a2redis.HeadEvent, bool) {
	if len(g.held) == 0 {
		return a2redis.HeadEvent{}, false
	}
	// Prefer recent claims.
	i := len(g.held) - 1 - g.pick(min(len(g.held), 8))
	if g.chance(0.2) {
		i = g.pick(len(g.held))
	}
	return g.held[i], true
}

// attempt is usually the head's attempt, sometimes a stale or future one.
func (g *generator) attempt(h a2redis.HeadEvent) int64 {
	switch p := g.rnd.Float64(); {
	case p < 0.06 && h.Attempts > 1:
		return h.Attempts - 1
	case p < 0.09:
		return h.Attempts + 1
	}
	return h.Attempts
}

// randomRef names a head that may or may not exist.
func (g *generator) randomRef(session string) a2redis.HeadRef {
	t := pickOne(g, genTargets)
	b := g.bounds(session)
	return a2redis.HeadRef{Consumer: t.Consumer, Lane: t.Lane, Index: 1 + g.rnd.Int64N(b.Head+2)}
}

func (g *generator) next() op {
	if len(g.queue) > 0 {
		next := g.queue[0]
		g.queue = g.queue[1:]
		return next()
	}
	if g.chance(0.01) {
		return g.crashScenario()
	}
	if !g.noRegistry && g.chance(0.03) {
		return g.registryOp()
	}
	switch p := g.rnd.Float64(); {
	case p < 0.22:
		return g.appendOp()
	case p < 0.37:
		return g.claimOp()
	case p < 0.51:
		return g.completeOp()
	case p < 0.58:
		return g.failOp()
	case p < 0.62:
		if g.chance(0.3) {
			return g.releaseOp()
		}
		return g.renewOp()
	case p < 0.70:
		d := time.Duration(1+g.pick(90)) * time.Second
		if g.chance(0.08) {
			d = time.Duration(5+g.pick(60)) * time.Minute
		}
		return op{Kind: opAdvance, Advance: d}
	case p < 0.73:
		if g.chance(0.4) {
			return g.cancelOp()
		}
		return g.redriveOp()
	case p < 0.76:
		return op{Kind: opWakeLog, Session: g.session(), Consumer: pickOne(g, genLogs)}
	case p < 0.79:
		return g.clearOp()
	case p < 0.82:
		switch q := g.rnd.Float64(); {
		case q < 0.4:
			return op{Kind: opReclaimPage, Session: g.session()}
		case q < 0.8:
			return op{Kind: opReclaim, Session: g.session()}
		}
		if g.chance(0.3) {
			// A retention pass over the whole prefix (the test's own):
			// idle for a drawn time, ended or dropped, now and then a dry
			// run. (A pass cut short by MaxSessions would pick sessions in
			// SCAN order, which the model cannot follow.)
			policy := redisstore.RetentionPolicy{IdleFor: pickOne(g, []time.Duration{time.Millisecond, 5 * time.Second, time.Minute}),
				Drop: g.chance(0.4), DryRun: g.chance(0.2), MaxScan: 1 << 30}
			if g.chance(0.4) {
				// With trims of the sessions it does not end (now and
				// then a pass that only trims).
				policy.Trim = &redisstore.TrimRequest{KeepLast: g.rnd.IntN(4), OlderThan: pickOne(g, []time.Duration{0, 5 * time.Second})}
				if g.chance(0.3) {
					policy.IdleFor = 0
				}
			}
			return op{Kind: opRetention, Retention: policy}
		}
		if g.chance(0.5) {
			// A trim of the handled past: everything that may go, or
			// within a drawn bound; now and then a dry run.
			req := redisstore.TrimRequest{DryRun: g.chance(0.2)}
			switch q := g.rnd.Float64(); {
			case q < 0.3:
				req.KeepLast = g.rnd.IntN(4)
			case q < 0.5:
				req.OlderThan = pickOne(g, []time.Duration{time.Millisecond, 5 * time.Second, time.Minute})
			case q < 0.6:
				req.Through = g.rnd.Int64N(g.bounds(g.session()).Head + 2)
			}
			return op{Kind: opTrim, Session: g.session(), Trim: req}
		}
		return op{Kind: opDrop, Session: g.session()}
	case p < 0.86:
		return g.snapshotOp()
	case p < 0.88:
		s := g.session()
		through := int64(0)
		if g.chance(0.4) {
			through = g.rnd.Int64N(g.bounds(s).Head + 2)
		}
		return op{Kind: opReadState, Session: s, Reducer: pickOne(g, genReducers), Through: through}
	case p < 0.90:
		s := g.session()
		b := g.bounds(s)
		return op{Kind: opRead, Session: s, After: g.rnd.Int64N(b.Head + 2), Through: g.rnd.Int64N(b.Head + 3)}
	case p < 0.91:
		return op{Kind: opReadTail, Session: g.session(), Limit: 1 + g.pick(5)}
	case p < 0.92:
		return op{Kind: opBounds, Session: g.session()}
	case p < 0.94:
		return op{Kind: opCursors, Session: g.session()}
	case p < 0.95:
		return op{Kind: opDeadLetters, Session: g.session()}
	case p < 0.97:
		return g.presenceOp()
	case p < 0.975:
		o := op{Kind: opPresencePrune, Session: g.session()}
		for _, person := range genPeople {
			for _, f := range genFields {
				if g.chance(0.4) {
					o.Fields = append(o.Fields, redisstore.PresenceField{Participant: person, Field: f})
				}
			}
		}
		return o
	case p < 0.985:
		return g.invalidOp()
	}
	return op{Kind: opPresenceRead, Session: g.session()}
}

// crashScenario is a holder that takes many heads and vanishes: a burst of
// work is appended, one holder claims all of it, its leases lapse, and
// others take the heads over a few at a time.
func (g *generator) crashScenario() op {
	s := g.session()
	events := make([]a2redis.Event, 30+g.pick(30))
	for i := range events {
		perm := g.rnd.Perm(len(genTargets))
		events[i] = a2redis.Event{Type: pickOne(g, genTypes), Targets: []a2redis.Target{genTargets[perm[0]], genTargets[perm[1]]}}
	}
	g.queue = append(g.queue,
		func() op {
			return op{Kind: opClaim, Claim: redisstore.ClaimRequest{Session: s, Holder: "crashed", TTL: 10 * time.Second, Limit: 500}}
		},
		func() op { return op{Kind: opAdvance, Advance: time.Minute} },
	)
	for range 3 {
		g.queue = append(g.queue, func() op { return g.claimIn(s, true) })
	}
	return op{Kind: opAppend, Session: s, Events: events, Append: redisstore.AppendOptions{Consumers: g.served(true)}}
}

// invalidOp is a request the contract refuses before anything is written
// (after the same id-source calls on both sides).
func (g *generator) invalidOp() op {
	s := g.session()
	switch g.pick(10) {
	case 0:
		events := g.events(3, true)
		events[len(events)-1].Type = ""
		return op{Kind: opAppend, Session: s, Events: events}
	case 1:
		events := g.events(2, false)
		events[0].Payload = json.RawMessage(`{"broken":`)
		return op{Kind: opAppend, Session: s, Events: events}
	case 2:
		return op{Kind: opClaim, Claim: redisstore.ClaimRequest{Session: s, Holder: pickOne(g, genHolders), TTL: -time.Second}}
	case 3:
		return op{Kind: opClaim, Claim: redisstore.ClaimRequest{Session: s, Holder: pickOne(g, genHolders), TTL: time.Second, Consumers: []a2redis.Consumer{{Name: "g", Log: &a2redis.LogSpec{}}}}}
	case 4:
		h, _ := g.heldHead()
		return op{Kind: opFail, Fail: redisstore.FailRequest{Session: s, Head: h.Ref(), Attempt: h.Attempts, MaxFailures: 0}}
	case 5:
		return op{Kind: opRedrive, Redrive: redisstore.RedriveRequest{Session: s, Consumer: "c1", Index: 1, Action: "later"}}
	case 7:
		events := g.events(2, false)
		events[0].Targets, events[0].NotBefore = nil, g.clock.Now().Add(time.Second)
		return op{Kind: opAppend, Session: s, Events: events}
	case 8:
		events := g.events(2, false)
		events[len(events)-1].Targets = genTargets[:1]
		events[len(events)-1].NotBefore = time.UnixMilli(1 << 50)
		return op{Kind: opAppend, Session: s, Events: events}
	case 6:
		return op{Kind: opPutSnapshots, Session: s, Reducer: "r1", Snaps: []redisstore.SnapshotWrite{{Index: 1, State: json.RawMessage(`1`)}, {Index: -1, State: json.RawMessage(`2`)}}}
	}
	events := g.events(2, false)
	return op{Kind: opComplete, Complete: redisstore.CompleteRequest{Session: s, Head: a2redis.HeadRef{Consumer: "c1", Index: 1}, Attempt: 1, Events: append(events, a2redis.Event{Type: a2redis.ClearEventType})}}
}

func (g *generator) appendOp() op {
	s := g.session()
	if len(g.sent) > 0 && g.chance(0.1) {
		// A lost-ack retry of an earlier batch (possibly of another
		// session, or since cleared), or a partial duplicate.
		batch := append([]a2redis.Event(nil), g.sent[g.pick(len(g.sent))]...)
		if g.chance(0.3) {
			batch = append(batch, a2redis.Event{Type: "a"})
		}
		return op{Kind: opAppend, Session: s, Events: batch, Append: redisstore.AppendOptions{Consumers: g.served(true)}}
	}
	n := 4
	if g.chance(0.05) {
		n = 40 // now and then a burst: many heads to claim, lapse and take over
	}
	o := op{Kind: opAppend, Session: s, Events: g.events(n, true), Append: redisstore.AppendOptions{Consumers: g.served(true)}}
	if g.chance(0.15) {
		if h, ok := g.heldHead(); ok && h.Session == s {
			c := h.Cause()
			c.Attempt = g.attempt(h)
			o.Events[g.pick(len(o.Events))].Cause = &c
		}
	}
	if g.chance(0.08) {
		o.Append.OriginIndex = 1 + g.rnd.Int64N(g.bounds(s).Head+1)
	}
	if g.chance(0.25) {
		// A traced append: its events store the trace context.
		o.Trace = fmt.Sprintf("00-%032x-%016x-01", g.rnd.Int64(), g.rnd.Int64())
	}
	return o
}

func (g *generator) claimOp() op { return g.claimIn(g.session(), g.chance(0.3)) }

// claimIn is a claim in session s, limited to a few heads when limited.
func (g *generator) claimIn(s string, limited bool) op {
	req := redisstore.ClaimRequest{Session: s, Holder: pickOne(g, genHolders), TTL: time.Duration(5+g.pick(55)) * time.Second}
	if g.chance(0.05) {
		req.TTL, req.ExpiresAt = 0, g.clock.Now().Add(time.Duration(g.pick(40))*time.Second)
	}
	if g.chance(0.2) {
		req.Through = 1 + g.rnd.Int64N(g.bounds(s).Head+1)
	}
	if g.chance(0.15) {
		for range 1 + g.pick(2) {
			if h, ok := g.heldHead(); ok && g.chance(0.7) {
				req.Exclude = append(req.Exclude, h.Ref())
			} else {
				req.Exclude = append(req.Exclude, g.randomRef(s))
			}
		}
	}
	if g.chance(0.3) {
		req.Consumers = g.served(true)
	}
	if g.chance(0.3) {
		req.MaxFailures = 1 + g.pick(3)
	}
	if limited && !g.noLimits {
		// A limit never splits heads tied on index and consumer: which of
		// those a store takes first is not specified.
		order := g.m.ClaimOrder(req)
		for limit := 1 + g.pick(3); limit < len(order); limit++ {
			a, b := order[limit-1], order[limit]
			if a.Index != b.Index || a.Consumer != b.Consumer {
				req.Limit = limit
				break
			}
		}
	}
	return op{Kind: opClaim, Claim: req}
}

func (g *generator) completeOp() op {
	if g.chance(0.15) {
		if o, ok := g.completeAndClaimOp(); ok {
			return o
		}
	}
	if g.chance(0.3) {
		return g.completeManyOp()
	}
	if len(g.dones) > 0 && g.chance(0.08) {
		// A retry of a committed completion: the same ids replay, others
		// are a partial duplicate.
		req := g.dones[g.pick(len(g.dones))]
		req.Events = append([]a2redis.Event(nil), req.Events...)
		if len(req.Events) > 0 && g.chance(0.3) {
			req.Events[0].ID = fmt.Sprintf("e%d", g.pick(40))
		}
		return op{Kind: opComplete, Complete: req}
	}
	h, ok := g.heldHead()
	if !ok || g.chance(0.05) {
		s := g.session()
		return op{Kind: opComplete, Complete: redisstore.CompleteRequest{Session: s, Head: g.randomRef(s), Attempt: 1 + int64(g.pick(3))}}
	}
	req := redisstore.CompleteRequest{Session: h.Session, Head: h.Ref(), Attempt: g.attempt(h)}
	if g.chance(0.5) {
		req.Events = g.events(2, true)
	}
	if g.chance(0.5) {
		req.Consumers = g.served(true)
	}
	return op{Kind: opComplete, Complete: req}
}

// completeAndClaimOp is what a worker does with a lane or log head that
// returned nothing: it completes the newest such head held and claims the
// cursor's next head for the same holder (and often the served consumers
// that name the log, as a worker's are). False when no such head is held.
func (g *generator) completeAndClaimOp() (op, bool) {
	for i := len(g.held) - 1; i >= 0; i-- {
		h := g.held[i]
		if h.Lane == "" {
			continue
		}
		req := redisstore.CompleteAttemptsRequest{Session: h.Session, Attempts: []redisstore.Attempt{{Head: h.Ref(), Attempt: g.attempt(h)}}}
		if g.chance(0.6) {
			req.Consumers = g.served(true)
		}
		g.held = append(g.held[:i], g.held[i+1:]...)
		return op{Kind: opCompleteClaim, Many: req, Next: redisstore.NextClaim{Holder: h.Holder, TTL: time.Duration(1+g.pick(30)) * time.Second}}, true
	}
	return op{}, false
}

// completeManyOp completes a few heads of one session at once: mostly held
// ones, sometimes a stale attempt, a head that may not exist, or a head
// named twice.
func (g *generator) completeManyOp() op {
	h, ok := g.heldHead()
	s := g.session()
	if ok {
		s = h.Session
	}
	req := redisstore.CompleteAttemptsRequest{Session: s}
	seen := map[a2redis.HeadRef]bool{}
	for range 1 + g.pick(5) {
		var a redisstore.Attempt
		if h, ok := g.heldHead(); ok && h.Session == s && !g.chance(0.05) {
			a = redisstore.Attempt{Head: h.Ref(), Attempt: g.attempt(h)}
		} else {
			a = redisstore.Attempt{Head: g.randomRef(s), Attempt: 1 + int64(g.pick(3))}
		}
		if seen[a.Head] && !g.chance(0.05) {
			continue
		}
		seen[a.Head] = true
		req.Attempts = append(req.Attempts, a)
	}
	if g.chance(0.4) {
		req.Consumers = g.served(true)
	}
	if g.chance(0.5) {
		// Complete and claim next: the moved cursors' new heads, claimed
		// for a holder (now and then an invalid lease).
		next := redisstore.NextClaim{Holder: pickOne(g, genHolders), TTL: time.Duration(1+g.pick(30)) * time.Second}
		if g.chance(0.03) {
			next.TTL = -time.Second
		}
		return op{Kind: opCompleteClaim, Many: req, Next: next}
	}
	return op{Kind: opCompleteMany, Many: req}
}

func (g *generator) failOp() op {
	h, ok := g.heldHead()
	if !ok {
		s := g.session()
		return op{Kind: opFail, Fail: redisstore.FailRequest{Session: s, Head: g.randomRef(s), Attempt: 1, MaxFailures: 1}}
	}
	req := redisstore.FailRequest{Session: h.Session, Head: h.Ref(), Attempt: g.attempt(h), Error: fmt.Sprintf("err%d", g.pick(5)), MaxFailures: 1 + g.pick(3)}
	if g.chance(0.5) {
		req.RetryAfter = time.Duration(1+g.pick(30)) * time.Second
	}
	return op{Kind: opFail, Fail: req}
}

func (g *generator) releaseOp() op {
	s := g.session()
	req := redisstore.ReleaseRequest{Session: s}
	seen := map[a2redis.HeadRef]bool{}
	for _, h := range g.held {
		if h.Session == s && g.chance(0.5) && !seen[h.Ref()] {
			seen[h.Ref()] = true
			req.Attempts = append(req.Attempts, redisstore.Attempt{Head: h.Ref(), Attempt: g.attempt(h)})
		}
	}
	if g.chance(0.1) {
		if ref := g.randomRef(s); !seen[ref] {
			req.Attempts = append(req.Attempts, redisstore.Attempt{Head: ref, Attempt: 1})
		}
	}
	if g.chance(0.4) {
		req.Delay = time.Duration(1+g.pick(30)) * time.Second
	}
	return op{Kind: opRelease, Release: req}
}

func (g *generator) renewOp() op {
	holder := pickOne(g, genHolders)
	s := g.session()
	req := redisstore.RenewRequest{Session: s, Holder: holder, TTL: time.Duration(5+g.pick(60)) * time.Second}
	for _, h := range g.held {
		if h.Session == s && (h.Holder == holder || g.chance(0.1)) && g.chance(0.6) {
			req.Claims = append(req.Claims, redisstore.Attempt{Head: h.Ref(), Attempt: g.attempt(h)})
		}
	}
	if g.chance(0.1) {
		req.Claims = append(req.Claims, redisstore.Attempt{Head: g.randomRef(s), Attempt: 1})
	}
	return op{Kind: opRenew, Renew: req}
}

func (g *generator) redriveOp() op {
	s := g.session()
	req := redisstore.RedriveRequest{Session: s, Action: redisstore.Retry, Consumers: g.served(true)}
	if g.chance(0.5) {
		req.Action = redisstore.Skip
	}
	dead, _ := g.m.DeadLetters(g.ctx, s)
	if len(dead) > 0 && g.chance(0.85) {
		d := dead[g.pick(len(dead))]
		req.Consumer, req.Lane, req.Index = d.Consumer, d.Lane, d.Index
	} else {
		ref := g.randomRef(s)
		req.Consumer, req.Lane, req.Index = ref.Consumer, ref.Lane, ref.Index
	}
	return op{Kind: opRedrive, Redrive: req}
}

// cancelOp cancels a live head (claimed ones included) most of the time,
// else a dead letter or a random ref.
func (g *generator) cancelOp() op {
	s := g.session()
	req := redisstore.CancelRequest{Session: s, Consumers: g.served(true)}
	cursors, _ := g.m.Cursors(g.ctx, s)
	var heads []a2redis.Cursor
	for _, c := range cursors {
		if c.Head > 0 {
			heads = append(heads, c)
		}
	}
	if len(heads) > 0 && g.chance(0.85) {
		c := heads[g.pick(len(heads))]
		req.Consumer, req.Lane, req.Index = c.Consumer, c.Lane, c.Head
	} else {
		ref := g.randomRef(s)
		req.Consumer, req.Lane, req.Index = ref.Consumer, ref.Lane, ref.Index
	}
	return op{Kind: opCancel, Cancel: req}
}

func (g *generator) clearOp() op {
	s := g.session()
	o := op{Kind: opClear, Session: s}
	if g.chance(0.25) {
		last := g.bounds(s).Head + int64(g.pick(3)) - 1
		if last < 0 {
			last = 0
		}
		o.ClearOpt.IfLastIndex = &last
	}
	if g.chance(0.15) {
		if h, ok := g.heldHead(); ok && h.Session == s {
			c := h.Cause()
			c.Attempt = g.attempt(h)
			o.ClearOpt.Cause = &c
		}
	}
	return o
}

func (g *generator) snapshotOp() op {
	s := g.session()
	b := g.bounds(s)
	o := op{Kind: opPutSnapshots, Session: s, Reducer: pickOne(g, genReducers)}
	cursors, _ := g.m.Cursors(g.ctx, s)
	for range 1 + g.pick(3) {
		idx := b.ClearIndex + g.rnd.Int64N(b.Head-b.ClearIndex+1)
		if g.chance(0.1) && b.ClearIndex > 0 {
			idx = g.rnd.Int64N(b.ClearIndex)
		}
		w := redisstore.SnapshotWrite{Index: idx, State: json.RawMessage(fmt.Sprintf(`{"at":%d,"v":%d}`, idx, g.pick(1000)))}
		for _, c := range cursors {
			if c.Head > 0 && g.chance(0.35) {
				w.Pins = append(w.Pins, a2redis.HeadRef{Consumer: c.Consumer, Lane: c.Lane, Index: c.Head})
			}
		}
		if g.chance(0.1) {
			w.Pins = append(w.Pins, g.randomRef(s))
		}
		o.Snaps = append(o.Snaps, w)
	}
	return o
}

func (g *generator) presenceOp() op {
	w := redisstore.PresenceWrite{
		Participant: pickOne(g, genPeople),
		Values:      map[string]json.RawMessage{},
		Seen:        int64(g.pick(10)),
		At:          genPresenceT.Add(time.Duration(g.pick(20)) * time.Second),
		TTL:         time.Duration(1+g.pick(3)) * time.Hour,
	}
	for _, f := range genFields {
		switch p := g.rnd.Float64(); {
		case p < 0.4:
			w.Values[f] = json.RawMessage(fmt.Sprintf("%d", g.pick(100)))
		case p < 0.5:
			w.Values[f] = nil
		}
	}
	return op{Kind: opPresenceSet, Session: g.session(), Presence: w}
}

// registryOp draws an operation on the consumer registry: consumers added
// (now and then one declared unlike its registered self), removed (often
// all of them, so most operations run with the registry empty as well as
// full), paused, resumed, or the registry read.
func (g *generator) registryOp() op {
	all := append(append([]a2redis.Consumer(nil), genPlain...), genLogs...)
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.Name
	}
	switch p := g.rnd.Float64(); {
	case p < 0.35:
		var add []a2redis.Consumer
		for range 1 + g.pick(2) {
			add = append(add, g.limited(pickOne(g, all)))
		}
		if g.chance(0.1) {
			add = append(add, logc("g1", "other", false)) // unlike the registered g1
		}
		return op{Kind: opConsumersAdd, Registry: add}
	case p < 0.6:
		if registered, _, _ := g.m.ReadConsumers(g.ctx); len(registered) > 0 && g.chance(0.5) {
			var out []string
			for _, c := range registered {
				out = append(out, c.Name)
			}
			return op{Kind: opConsumersRemove, Names: out}
		}
		return op{Kind: opConsumersRemove, Names: []string{pickOne(g, names)}}
	case p < 0.75:
		return op{Kind: opConsumerPause, Names: []string{pickOne(g, names)}}
	case p < 0.9:
		return op{Kind: opConsumerResume, Names: []string{pickOne(g, names)}}
	}
	return op{Kind: opConsumersRead}
}

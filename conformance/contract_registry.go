package conformance

import (
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// The consumer registry: consumers declared by one store (Config.Consumers)
// or added later are what every store of the prefix serves and starts log
// cursors for, with no consumer config of its own; removed, they are not;
// paused, claims skip them until resumed.
func init() {
	contract("Registry/DeclaredAddedRemoved", func(t *testing.T, e *env) {
		audit := logc("audit", "log", false, "flagged")
		worker := e.newStore(func(c *redisstore.Config) { c.Consumers = []a2redis.Consumer{{Name: "mod"}, audit} })
		registered, v, err := worker.ReadConsumers(e.ctx)
		e.no(err, "read")
		e.eq(registered, []a2redis.Consumer{audit, {Name: "mod"}}, "declared at New, by name")
		e.check(v > 0, "a version: %d", v)

		// A producer with no consumer config starts the registered log
		// cursor and its claims serve the registry.
		producer := e.newStore()
		_, _, err = producer.ReadConsumers(e.ctx)
		e.no(err, "producer reads the registry")
		_, err = producer.Append(e.ctx, "s", []a2redis.Event{ev("flagged", to("mod"))}, redisstore.AppendOptions{})
		e.no(err, "append")
		c, err := producer.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		e.no(err, "claim")
		e.eq(headRefs(c.Heads), []string{"audit/log@1", "mod@1"}, "both registered consumers' heads")
		for _, h := range c.Heads {
			_, err := producer.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts})
			e.no(err, "complete %s", refOf(h.Ref()))
		}

		// Removed: appends start no cursor for it and claims naming it are
		// refused.
		e.no(producer.RemoveConsumers(e.ctx, "audit"), "remove")
		_, v2, err := worker.ReadConsumers(e.ctx)
		e.no(err, "read")
		e.eq(v2, v+1, "one change, one version")
		_, err = producer.Append(e.ctx, "s", []a2redis.Event{ev("flagged")}, redisstore.AppendOptions{})
		e.no(err, "append")
		e.eq(e.claimWith(producer, nil).Outcome, redisstore.Settled, "nothing for the removed consumer")
		_, err = producer.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{audit}})
		e.is(err, a2redis.ErrInvalidArgument, "a claim naming an unregistered consumer")

		// Added back: the next append starts it again.
		e.no(worker.AddConsumers(e.ctx, audit), "add back")
		_, _, err = producer.ReadConsumers(e.ctx)
		e.no(err, "producer reads the registry")
		_, err = producer.Append(e.ctx, "s", []a2redis.Event{ev("flagged")}, redisstore.AppendOptions{})
		e.no(err, "append")
		// The session's cursor stayed: the event appended meanwhile is not
		// lost, and the next follows.
		back := e.claimWith(producer, nil)
		e.eq(headRefs(back.Heads), []string{"audit/log@2"}, "the re-added consumer resumes its cursor")
		_, err = producer.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: back.Heads[0].Ref(), Attempt: back.Heads[0].Attempts})
		e.no(err, "complete")
		e.eq(headRefs(e.claimWith(producer, nil).Heads), []string{"audit/log@3"}, "and takes the next")

		// Declared unlike the registry: a mismatch, nothing written.
		err = producer.AddConsumers(e.ctx, logc("audit", "other", false))
		e.is(err, a2redis.ErrConsumerMismatch, "unlike the registered one")
		_, v3, err := worker.ReadConsumers(e.ctx)
		e.no(err, "read")
		e.eq(v3, v2+1, "the mismatch wrote nothing")
	})

	// A consumer's PerSession limit, a registry setting: two stores
	// together never hold more of a session's heads of it than the limit;
	// another consumer's heads are not held back; a completion frees a
	// place; the setting changes through AddConsumers and overrides a
	// request's own declaration; the count in flight follows.
	contract("Registry/PerSession", func(t *testing.T, e *env) {
		a := e.newStore(func(c *redisstore.Config) {
			c.Consumers = []a2redis.Consumer{{Name: "mail", PerSession: 2}, {Name: "log"}}
		})
		b := e.newStore()
		_, _, err := b.ReadConsumers(e.ctx)
		e.no(err, "read")
		_, err = a.Append(e.ctx, "s", []a2redis.Event{ev("t", to("mail")), ev("t", to("mail")), ev("t", to("mail"), to("log")), ev("t", to("mail"))}, redisstore.AppendOptions{})
		e.no(err, "append")
		first, err := a.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "wa", TTL: time.Minute, Limit: 1})
		e.no(err, "claim a")
		e.eq(headRefs(first.Heads), []string{"mail@1"}, "one")
		second, err := b.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "wb", TTL: time.Minute,
			Consumers: []a2redis.Consumer{{Name: "mail"}, {Name: "log"}}})
		e.no(err, "claim b")
		e.eq(headRefs(second.Heads), []string{"mail@2", "log@3"}, "one more of mail (the registry's limit, not the request's none), and log's")
		inFlight, err := b.InFlight(e.ctx, "s")
		e.no(err, "in flight")
		e.eq(inFlight, map[string]int64{"mail": 2, "log": 1}, "counted")
		e.eq(e.claimWith(a, nil).Outcome, redisstore.Busy, "mail is at its limit")
		_, err = b.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: second.Heads[0].Ref(), Attempt: 1})
		e.no(err, "complete")
		e.eq(headRefs(e.claimWith(a, nil).Heads), []string{"mail@3"}, "a place freed")
		e.no(b.AddConsumers(e.ctx, a2redis.Consumer{Name: "mail", PerSession: 3}), "raise the limit")
		_, _, err = a.ReadConsumers(e.ctx)
		e.no(err, "read")
		e.eq(headRefs(e.claimWith(a, nil).Heads), []string{"mail@4"}, "a third at once")
		inFlight, err = a.InFlight(e.ctx, "s")
		e.no(err, "in flight")
		e.eq(inFlight, map[string]int64{"mail": 3, "log": 1}, "counted")
	})

	contract("Registry/PauseResume", func(t *testing.T, e *env) {
		st := e.newStore(func(c *redisstore.Config) { c.Consumers = []a2redis.Consumer{{Name: "a"}, {Name: "b"}} })
		e.is(st.PauseConsumer(e.ctx, "zz"), a2redis.ErrInvalidArgument, "pausing an unregistered consumer")
		e.no(st.PauseConsumer(e.ctx, "a"), "pause")
		e.eq(st.Paused(), []string{"a"}, "paused")
		_, err := st.Append(e.ctx, "s", []a2redis.Event{ev("t", to("a"), to("b"))}, redisstore.AppendOptions{})
		e.no(err, "append")
		c := e.claimWith(st, nil)
		e.eq(headRefs(c.Heads), []string{"b@1"}, "claims skip the paused consumer")
		e.eq(e.claimWith(st, []a2redis.Consumer{{Name: "a"}}).Outcome, redisstore.Settled, "a claim serving only paused consumers takes nothing")
		e.no(st.ResumeConsumer(e.ctx, "a"), "resume")
		e.eq(st.Paused(), []string{}, "resumed")
		e.eq(headRefs(e.claimWith(st, nil).Heads), []string{"a@1"}, "claimable again")
		e.no(st.ResumeConsumer(e.ctx, "a"), "resuming what runs changes nothing")
		e.no(st.RemoveConsumers(e.ctx, "a", "b"), "remove all")
		regs, _, err := st.ReadConsumers(e.ctx)
		e.no(err, "read")
		e.eq(len(regs), 0, "an empty registry")
	})
}

// claimWith claims session "s" on store st for holder "w".
func (e *env) claimWith(st *redisstore.Store, consumers []a2redis.Consumer) redisstore.ClaimResult {
	e.t.Helper()
	c, err := st.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: consumers})
	e.no(err, "claim")
	return c
}

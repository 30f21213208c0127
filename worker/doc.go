// Package worker is the a2redis worker runtime: it runs handlers for a
// store's consumers — event, lane and typed log consumers alike — finding
// work in every session through the ready index, with leases renewed while
// handlers run, retries with backoff, dead letters, snoozes, middleware and
// a graceful shutdown.
//
//	w, err := worker.New(store, worker.Config{Concurrency: 32},
//		worker.Handle("mailer", sendMail),
//		worker.Handle("billing", charge),
//	)
//	err = w.Run(ctx) // until ctx is cancelled; then a graceful stop
//
// # Handlers
//
// A Handler gets one head (a2redis.HeadEvent: the event, its consumer,
// lane, attempt and failures) and returns the events it caused. Returned
// events are appended with the completion in one atomic, fenced step, so
// they exist exactly when the head is done. Heads that return nothing are
// completed in batches: the completions of one session's heads wait up to
// Config.CompleteLinger (1 ms) for that session's other running handlers
// and go in one script call, and never wait when none run. A lane head
// that returns nothing is completed with redisstore.Store.CompleteAndClaim,
// which claims the lane's next head in the same call; it runs at once in
// the same slot, so an ordered lane costs one script call per event.
//
// # Finding work
//
// The worker subscribes to the work channels of every ready-index shard
// (notify.WorkWatcher) and claims with redisstore.Store.ClaimNext, naming
// the sessions that wake-ups announced first. When a claim finds nothing,
// it waits for a wake-up, for the time the index names (a retry hold or a
// lease that ends) or a hold it set itself ends, or at most Config.MaxWait
// (10 s: how late it notices what nothing announces, such as the claims of
// a process that died) — it never polls. A
// subscription that (re)starts triggers one claim pass, so nothing
// announced while it was away is missed. Every worker also tries the
// ready-index repair every Config.RepairEvery (30 s); one per prefix and
// interval runs it (redisstore.Store.TryRepairReady).
//
// # Concurrency and order
//
// Config.Concurrency bounds the handlers in flight per process, and claims
// are sized to the free slots; MaxInFlight bounds one consumer's. Only a
// lane's head is ever claimable, so a lane's events run one at a time and
// in order however many processes run workers; event cursors and
// different lanes run concurrently.
//
// # Leases
//
// Every claim is leased for Config.TTL (30 s) and renewed every
// Config.RenewEvery (TTL/3) while its handler runs, one RenewClaims call
// per session. A claim reported lost (another holder took the head over)
// or whose lease ran out before a renewal succeeded has its handler's
// context cancelled with cause ErrLeaseLost, and nothing the handler
// returns is recorded: the store's fence would refuse it anyway. When a
// process dies, its claims lapse after TTL and any worker takes them over
// (counting a failure).
//
// # Retries
//
// A handler error counts a failure and holds the head for the consumer's
// Backoff (default DefaultBackoff: 1 s × 4^(failures−1), capped at 5 min,
// ±20% jitter); at Config.MaxFailures (5) the head is dead-lettered,
// waiting for a redrive (a2redis-inspect redrive). An error marked with
// Permanent dead-letters at once; Snooze(d) runs the head again after d
// without counting a failure; a panic is a failure whose recorded error
// carries the panic value and stack (PanicError).
//
// The worker retries no store call itself: its completions, failures and
// releases are retried by the store (redisstore.Config.Retries), and one
// the store gave up on is reported as OutcomeWriteFailed.
//
// # Shutdown
//
// Cancelling Run's context, or calling Shutdown, stops claiming and lets
// in-flight handlers finish for up to Config.StopTimeout (10 s); then
// their contexts are cancelled (cause ErrShutdown) and their claims
// released without counting failures; Config.StopDeadline bounds the whole
// stop. A clean stop loses nothing, runs nothing twice and counts no
// failure: a handler that returns success, even after its context was
// cancelled, is completed; one that returns an error is released and runs
// again in the next worker.
//
// # Splitting consumers across processes
//
// Declare every consumer in the Config.Consumers of every store on the
// prefix — producers' and workers' alike — so that appends start the typed
// log cursors (a typed log consumer must be declared). Each worker handles
// any subset of them: its claims serve only the consumers it has handlers
// for, so one deployment may run a process for mailer and billing and
// another for auditor, or several processes for the same consumers (lanes
// stay ordered). A worker that handles every declared consumer claims for
// all of them (ClaimNext's Consumers nil). Work of a consumer no worker
// handles waits in the store (a2redis-inspect cursors shows it). With no
// consumers declared, a worker claims only the consumers it handles.
//
// # Observability
//
// Middleware (Config.Middleware, WithMiddleware) wraps handlers for
// logging, tracing and metrics; Hooks.OnOutcome reports what became of
// every claimed head (completed, failed, dead-lettered, snoozed, released,
// lease lost, superseded); Config.Logger gets the runtime's log and
// Config.ErrorHandler every handler failure and runtime error.
//
// # Liveness
//
// A running worker registers itself in the prefix's worker registry: its
// id, host (Config.Host), pid, start time, consumers, concurrency, the
// handlers in flight and the heads it holds (up to 100 named, all
// counted), rewritten every Config.HeartbeatTTL/3 (TTL default 15 s) and
// removed when Run returns. A process that dies disappears within
// HeartbeatTTL. redisstore.Store.Workers lists the live workers; so does
// a2redis-inspect workers.
package worker

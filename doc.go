// Package a2redis turns Redis into a durable per-session event log with
// consumer cursors: idempotent batched appends, event, lane and typed-log
// cursors, leased claims fenced by attempt numbers, retries, dead letters,
// clear and reclaim, and wake-ups that carry the new events.
//
// This package holds the types every other package shares ([Event],
// [StoredEvent], [Consumer], [HeadEvent], [Cursor], …) and the errors they
// return (match them with errors.Is), and embeds the Lua scripts (lua/,
// scripts.go). The work happens elsewhere. The packages, every one:
//
//   - [github.com/a2redis/a2redis/redisstore]: the store. Connect with
//     redisstore.Dial, open it with redisstore.New, then Append, ClaimAvailable,
//     CompleteAttempt, FailAttempt, Redrive, Clear and the reads.
//   - [github.com/a2redis/a2redis/worker]: the worker runtime: handlers run
//     for a store's consumers, work found in every session through the
//     ready index, leases renewed, completions batched;
//     [github.com/a2redis/a2redis/worker/workertest] runs one handler
//     through it in a test.
//   - [github.com/a2redis/a2redis/schedule]: periodic producers, one event
//     per tick exactly once across processes.
//   - [github.com/a2redis/a2redis/notify]: wake-ups and a gap-free live feed
//     of a session's events.
//   - [github.com/a2redis/a2redis/presence]: who is present in a session.
//   - [github.com/a2redis/a2redis/keys]: the name of every key and channel,
//     for operators and tools.
//   - [github.com/a2redis/a2redis/a2otel]: OpenTelemetry spans and metrics
//     for the store and the worker.
//   - [github.com/a2redis/a2redis/conformance]: the store's contract as an
//     executable suite, and the differential test against the reference
//     model (conformance/internal/model: the contract as plain in-memory
//     Go).
//   - cmd/a2redis-inspect: the operator CLI and dashboard (its commands
//     in cmd/a2redis-inspect/inspect).
//   - examples/quickstart and examples/worker: runnable walk-throughs
//     (examples/quickstart covers every main flow).
//
// Internal packages: internal/scripts composes the Lua scripts
// (includes, pasted blocks, the generated layout); internal/check holds
// the argument rules the store and the model share; internal/rows lays
// out the fields inside a session's heads and cursors hashes;
// internal/wire is the wake-up codec (the store writes it, notify's feed
// reads it); internal/workerreg is the worker registry's write side (the
// worker runtime registers through it); internal/redistest
// starts servers and clusters for tests; internal/keylockproxy emulates
// Upstash's key-locking script mode for the conformance suite. Modules of
// their own, so their dependencies stay out of the library's: bench
// (side-by-side benchmarks), examples/otel,
// internal/redistest/dockertarget and
// cmd/a2redis-inspect/inspect/browsertest.
package a2redis

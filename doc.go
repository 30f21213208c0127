// Package a2redis turns Redis into a durable per-session event log with
// consumer cursors: idempotent batched appends, event, lane and typed-log
// cursors, leased claims fenced by attempt numbers, retries, dead letters,
// clear and reclaim, and wake-ups that carry the new events.
//
// This package holds the types every other package shares ([Event],
// [StoredEvent], [Consumer], [HeadEvent], [Cursor], …) and the errors they
// return (match them with errors.Is). The work happens elsewhere:
//
//   - [github.com/a2redis/a2redis/redisstore]: the store. Connect with
//     redisstore.Dial, open it with redisstore.New, then Append, ClaimAvailable,
//     CompleteAttempt, FailAttempt, Redrive, Clear and the reads.
//   - [github.com/a2redis/a2redis/notify]: wake-ups and a gap-free live feed
//     of a session's events.
//   - [github.com/a2redis/a2redis/presence]: who is present in a session.
//   - [github.com/a2redis/a2redis/keys]: the name of every key and channel,
//     for operators and tools.
//   - cmd/a2redis-inspect: the operator CLI.
//
// examples/quickstart in the repository walks through every main flow.
package a2redis

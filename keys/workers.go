package keys

// workersTag is the hash tag of the worker registry, "w": the registry's
// keys share one slot (a session's tag always starts with '"' and a ready
// shard's with 'r', so neither shares it).
const workersTag = "w"

// Worker is the string key a running worker process keeps while it lives:
// <prefix>:{w}:worker:<id>, holding the worker's JSON record
// (redisstore.WorkerInfo), written with an expiry (its heartbeat TTL) and
// rewritten every TTL/3, so a process that dies without deregistering
// disappears within its TTL. The id is the last segment, so no id can spell
// another registry key.
func Worker(prefix, id string) string { return prefix + ":{" + workersTag + "}:worker:" + id }

// Workers is the zset listing the registered workers of a prefix:
// <prefix>:{w}:workers, member the worker id, score the epoch-millisecond
// time its record expires. Listing reads it in pages (no SCAN); members past
// their expiry are pruned, a bounded number per write or read.
func Workers(prefix string) string { return prefix + ":{" + workersTag + "}:workers" }

// WorkersSentinel is the worker registry's never-written key, declared by
// every script on the registry for the reason given at [Session.Sentinel].
func WorkersSentinel(prefix string) string { return prefix + ":{" + workersTag + "}:sentinel" }

package keys

// consumersTag is the hash tag of the consumer registry, "c": its keys share
// one slot (a session's tag always starts with '"', a ready shard's with
// 'r', the worker registry's is "w" and the schedule listing's "s", so none
// shares it).
const consumersTag = "c"

// Consumers is the prefix's consumer registry: <prefix>:{c}:consumers, a
// string holding {"v": version, "consumers": [...]} — every consumer of the
// deployment with its kind (event or lane consumers by name; typed log
// consumers with their lane, types and start). Every store of the prefix
// reads it (at New, then at most every Config.ConsumerRefresh) and serves
// the consumers it lists; the consumers_put script replaces it by compare
// and set on the version.
func Consumers(prefix string) string { return prefix + ":{" + consumersTag + "}:consumers" }

// ConsumersSentinel is the consumer registry's never-written key, declared
// by its script for the reason given at [Session.Sentinel].
func ConsumersSentinel(prefix string) string { return prefix + ":{" + consumersTag + "}:sentinel" }

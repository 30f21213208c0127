package keys

// rateTag is the hash tag of the consumers' rate limiters, "q": one slot
// for the prefix (a session's tag always starts with '"', a ready shard's
// with 'r'; the other registries use "w", "s" and "c").
const rateTag = "q"

// Rate is a consumer's prefix-wide rate limiter: <prefix>:{q}:rate:<name>,
// a string '<window number> <starts taken>' that expires with its window
// (rate_take.lua). The consumer's name is the last segment, so no name can
// spell another key.
func Rate(prefix, consumer string) string { return prefix + ":{" + rateTag + "}:rate:" + consumer }

// RateSentinel is the rate limiters' never-written key, declared by their
// script for the reason given at [Session.Sentinel].
func RateSentinel(prefix string) string { return prefix + ":{" + rateTag + "}:sentinel" }

package keys

// schedulesTag is the hash tag of the schedule listing, "s": its keys share
// one slot (a session's tag always starts with '"', a ready shard's with
// 'r' and the worker registry's is "w", so none shares it).
const schedulesTag = "s"

// Schedules is the hash listing the prefix's periodic producers (package
// schedule): <prefix>:{s}:schedules, field the schedule's name, value its
// JSON record (redisstore.ScheduleInfo without Next and Last), rewritten by every
// process that starts the schedule or stores one of its ticks. It holds one
// field per schedule, whatever the number of ticks.
func Schedules(prefix string) string { return prefix + ":{" + schedulesTag + "}:schedules" }

// ScheduleTicks is the zset of the newest tick each schedule stored:
// <prefix>:{s}:schedule-ticks, member the schedule's name, score the tick as
// epoch milliseconds, written (ZADD GT: it never goes back when processes
// race) only by the process whose append stored it.
func ScheduleTicks(prefix string) string { return prefix + ":{" + schedulesTag + "}:schedule-ticks" }

// ScheduleNext is the zset of each schedule's next tick:
// <prefix>:{s}:schedule-next, member the schedule's name, score the tick as
// epoch milliseconds, written with ZADD GT by every process that starts the
// schedule or stores a tick.
func ScheduleNext(prefix string) string { return prefix + ":{" + schedulesTag + "}:schedule-next" }

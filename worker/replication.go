package worker

import (
	"context"
	"errors"

	"github.com/a2redis/a2redis"
)

// heldDespite reports whether err is only a replication shortfall
// (a2redis.ErrNotReplicated, with redisstore's Config.Durability) of a call
// that returned what it did: a claim (ClaimNext) or a completion that also
// claimed (CompleteAndClaim) not acknowledged by the replicas in time. The
// master applied it, so the claimed heads are held by this worker and the
// completed ones have moved on: the worker runs the heads (running them is
// the only way they progress before their lease lapses, which would count a
// failure against them) and reports the shortfall as a runtime error
// (ErrorHandler, and the log). A later write's wait covers this one too.
func (w *Worker) heldDespite(ctx context.Context, err error, applied bool) bool {
	if !applied || !errors.Is(err, a2redis.ErrNotReplicated) {
		return false
	}
	w.runtimeError(ctx, nil, err)
	return true
}

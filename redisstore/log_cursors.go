package redisstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// WakeLogResult is a log cursor after a WakeLog.
type WakeLogResult struct {
	// Cursor is the log cursor (Head 0: nothing to run).
	Cursor a2redis.Cursor
	// SessionHead is the session's head index.
	SessionHead int64
}

// WakeLog brings one log cursor up to date without an append: a missing
// cursor starts at the clear marker with Backfill (else at the session head
// with nothing to run); an idle one takes the next stored event of its
// types; one with a head keeps it.
func (s *Store) WakeLog(ctx context.Context, session string, consumer a2redis.Consumer) (WakeLogResult, error) {
	if err := checkSession(session); err != nil {
		return WakeLogResult{}, err
	}
	if consumer.Log == nil {
		return WakeLogResult{}, check.Invalid("consumer.Log", "is nil: WakeLog needs a log consumer")
	}
	if _, err := servedArg([]a2redis.Consumer{consumer}); err != nil {
		return WakeLogResult{}, err
	}
	types := "*"
	if consumer.Log.Types != nil {
		raw, _ := json.Marshal(consumer.Log.Types)
		types = string(raw)
	}
	backfill := "0"
	if consumer.Log.Backfill {
		backfill = "1"
	}
	reply, err := s.runIndexed(ctx, "wake_log", session, []string{consumer.Name, consumer.Log.Lane, types, backfill, itoa(s.now())})
	if err != nil {
		return WakeLogResult{}, err
	}
	if word(reply, 0) != "ok" || len(reply) != 5 {
		return WakeLogResult{}, fmt.Errorf("%w: wake_log replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	position, err := number(reply, 1)
	if err != nil {
		return WakeLogResult{}, err
	}
	var head int64
	if !reply[2].IsNil() {
		if head, err = number(reply, 2); err != nil {
			return WakeLogResult{}, err
		}
	}
	sessionHead, err := number(reply, 4)
	if err != nil {
		return WakeLogResult{}, err
	}
	return WakeLogResult{
		Cursor: a2redis.Cursor{
			Consumer: consumer.Name, Lane: consumer.Log.Lane, Kind: a2redis.LogCursor,
			Position: position, Head: head, HeadState: headState(reply[3]),
		},
		SessionHead: sessionHead,
	}, nil
}

package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/a2redis/a2redis"
)

// InFlight returns how many heads of the session each consumer has in
// flight: claimed and not yet completed, failed, released or cancelled (a
// lapsed claim counts until it is taken over). Consumers with none are
// absent; an empty map when nothing is in flight. The claim script keeps
// a consumer's a2redis.Consumer.PerSession limit against these counts.
// One read of the session's count (keys.Session.Flight), which every
// script that claims a head or ends a claim keeps.
func (s *Store) InFlight(ctx context.Context, session string) (map[string]int64, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	c := s.client
	raw, err := s.do(ctx, c.B().Hgetall().Key(s.keys(session).Flight()).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("a2redis: reading the heads in flight of session %q: %w", session, err)
	}
	out := make(map[string]int64, len(raw))
	for consumer, text := range raw {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: session %q counts %q in flight for %q", a2redis.ErrUnexpectedReply, session, text, consumer)
		}
		out[consumer] = n
	}
	return out, nil
}

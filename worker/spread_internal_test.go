package worker

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// The dispatcher's spread: doubled while every session of a claim gave
// less than its share, halved once a claim as wide as it could be had every
// session give its whole share, kept otherwise; within [1, claimSpread].
func TestAdaptSpread(t *testing.T) {
	gave := func(shares ...[2]int) redisstore.ClaimNextResult {
		var claims []redisstore.ClaimNextResult
		for i, s := range shares {
			c := redisstore.ClaimNextResult{Session: fmt.Sprint("s", i), Share: s[0]}
			c.Outcome = redisstore.Claimed
			c.Heads = make([]a2redis.HeadEvent, s[1])
			claims = append(claims, c)
		}
		res := claims[0]
		res.More = claims[1:]
		return res
	}
	for _, tc := range []struct {
		name                 string
		current, spread, out int
		res                  redisstore.ClaimNextResult
	}{
		{"small sessions: wider", 4, 4, 8, gave([2]int{16, 1}, [2]int{16, 1}, [2]int{16, 1}, [2]int{16, 1})},
		{"at most claimSpread", claimSpread, claimSpread, claimSpread, gave([2]int{2, 1})},
		{"every share taken: narrower", 4, 4, 2, gave([2]int{16, 16}, [2]int{16, 16}, [2]int{16, 16}, [2]int{16, 16})},
		{"at least 1", 1, 1, 1, gave([2]int{64, 64})},
		{"fewer sessions than the spread, all full: kept", 8, 8, 8, gave([2]int{8, 8}, [2]int{8, 8})},
		{"mixed: kept", 4, 4, 4, gave([2]int{16, 16}, [2]int{16, 3})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.out, adaptSpread(tc.current, tc.spread, tc.res))
		})
	}
}

package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/redisstore"
)

// A rate-limited consumer's starts are used only while a claim of the
// usual duration ends in their window, and however slow the claims were,
// a claim at a window's start fits (slow claims once kept every claim out
// of every window: the duration was a maximum that only claims decayed).
func TestRateClaimFits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	rs := &rateState{limit: redisstore.RateLimit{Starts: 10, Per: 100 * time.Millisecond}}
	rs.until = now.Add(95 * time.Millisecond) // a window just begun
	require.True(t, rs.claimFits(now), "no claim seen yet")
	rs.claimTook(10 * time.Millisecond)
	require.True(t, rs.claimFits(now.Add(70*time.Millisecond)), "two usual claims end before the starts lapse")
	require.False(t, rs.claimFits(now.Add(80*time.Millisecond)), "too near the window's end")
	for range 20 {
		rs.claimTook(10 * time.Second) // a stalled server
	}
	require.True(t, rs.claimFits(now), "a claim at the window's start fits whatever the claims took")
	require.True(t, rs.claimFits(now.Add(69*time.Millisecond)), "the first three quarters of the window, less the margin")
	require.False(t, rs.claimFits(now.Add(71*time.Millisecond)))
	for range 40 {
		rs.claimTook(5 * time.Millisecond)
	}
	require.InDelta(t, float64(5*time.Millisecond), float64(rs.lag), float64(time.Millisecond), "the average follows the claims back down")
}

package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// BenchmarkClaimNext claims one head a call from 100 sessions with work,
// by a store that did not write it (a worker in another process), over an
// index of 8, 64 and 256 shards: the server's CPU, the commands and the
// shard reads per claim must not grow with the shards.
//
//	go test ./redisstore -run '^$' -bench ClaimNext -benchtime 2000x -count 3
func BenchmarkClaimNext(b *testing.B) {
	e := newBench(b)
	for _, shards := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			const sessions, heads = 100, 500
			require.LessOrEqual(b, b.N, sessions*heads, "not enough heads for b.N claims")
			prefix := fmt.Sprintf("bench-next-%d-%d", shards, benchSeq.Add(1))
			w, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: prefix, ReadyShards: shards, PublishWait: -1})
			require.NoError(b, err)
			for i := range sessions {
				batch := make([]a2redis.Event, heads)
				for j := range batch {
					batch[j] = a2redis.Event{Type: "t", Payload: benchPayload, Targets: []a2redis.Target{{Consumer: "c"}}}
				}
				_, err := w.Append(e.ctx, fmt.Sprintf("s%d", i), batch, redisstore.AppendOptions{})
				require.NoError(b, err)
			}
			r, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: prefix, ReadyShards: shards, PublishWait: -1})
			require.NoError(b, err)
			for range shards/8 + 1 {
				_, err := r.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Hour, Limit: 1})
				require.NoError(b, err)
			}
			resetStats(e.ctx, b, e.client)
			b.ResetTimer()
			done := e.measure(b)
			for range b.N {
				res, err := r.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Hour, Limit: 1})
				if err != nil || res.Outcome != redisstore.Claimed {
					b.Fatalf("claim: %v %v", res.Outcome, err)
				}
			}
			b.StopTimer()
			done(b.N, "claim")
			stats := commandStats(e.ctx, b, e.client)
			var total int64
			for _, n := range stats {
				total += n
			}
			b.ReportMetric(float64(total)/float64(b.N), "cmds/claim")
			b.ReportMetric(float64(stats["zrange"])/float64(b.N), "shard-reads/claim")
		})
	}
}

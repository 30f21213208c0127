package redistest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// CountingClient wraps a client (a store's, in the cluster fault tests) and
// counts the replies by which Redis refused a command during a slot move or
// a failover — the store retries them, and rueidis follows ASK and MOVED
// itself, so those show only when it gave up — plus failed connections,
// and samples every other error reply. Its methods are safe for concurrent
// use.
type CountingClient struct {
	rueidis.Client
	// The refusals by reply.
	NonLocal, TryAgain, AskMoved, ClusterDown atomic.Int64
	ReadOnly, MasterDown, Loading             atomic.Int64
	// ConnErrs counts tries that failed without a reply (a connection that
	// failed, or a try cut by its context).
	ConnErrs atomic.Int64

	mu     sync.Mutex
	others map[string]int // other error texts (shortened) → count
}

// NewCountingClient wraps c.
func NewCountingClient(c rueidis.Client) *CountingClient {
	return &CountingClient{Client: c, others: map[string]int{}}
}

// Do sends cmd and counts a refusal.
func (c *CountingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	res := c.Client.Do(ctx, cmd)
	c.note(res)
	return res
}

// DoMulti sends cmds and counts their refusals.
func (c *CountingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	res := c.Client.DoMulti(ctx, cmds...)
	for _, r := range res {
		c.note(r)
	}
	return res
}

// Refusals is the count of the slot-move refusals: non local key,
// TRYAGAIN, ASK / MOVED and CLUSTERDOWN.
func (c *CountingClient) Refusals() int64 {
	return c.NonLocal.Load() + c.TryAgain.Load() + c.AskMoved.Load() + c.ClusterDown.Load()
}

// OtherReplies lists the sampled texts of other errors with their counts,
// most frequent first.
func (c *CountingClient) OtherReplies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for text, n := range c.others {
		out = append(out, fmt.Sprintf("%6dx %s", n, text))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

func (c *CountingClient) note(res rueidis.RedisResult) {
	if err := res.NonRedisError(); err != nil && !rueidis.IsRedisNil(err) {
		c.ConnErrs.Add(1)
		c.sample("connection: " + err.Error())
		return
	}
	var re *rueidis.RedisError
	if err := res.Error(); !errors.As(err, &re) || rueidis.IsRedisNil(err) {
		return
	}
	switch msg := re.Error(); {
	case strings.Contains(msg, "non local key"):
		c.NonLocal.Add(1)
	case strings.HasPrefix(msg, "TRYAGAIN"):
		c.TryAgain.Add(1)
	case strings.HasPrefix(msg, "ASK") || strings.HasPrefix(msg, "MOVED"):
		c.AskMoved.Add(1)
	case strings.HasPrefix(msg, "CLUSTERDOWN"):
		c.ClusterDown.Add(1)
	case strings.HasPrefix(msg, "READONLY"):
		c.ReadOnly.Add(1)
	case strings.HasPrefix(msg, "MASTERDOWN"):
		c.MasterDown.Add(1)
	case strings.HasPrefix(msg, "LOADING"):
		c.Loading.Add(1)
	default:
		c.sample(msg)
	}
}

// ErrorNoise matches the parts of error texts that differ between
// occurrences of one error (quoted names, counts, script hashes,
// addresses), so that samples group.
var ErrorNoise = regexp.MustCompile(`"[^"]*"|batch of [0-9]+ events|script: [0-9a-f]+|[0-9.]+:[0-9]+`)

func (c *CountingClient) sample(text string) {
	text = ErrorNoise.ReplaceAllString(text, "…")
	if len(text) > 160 {
		text = text[:160]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.others == nil {
		c.others = map[string]int{}
	}
	if len(c.others) < 40 || c.others[text] > 0 {
		c.others[text]++
	}
}

package worker

// shardHints collects the ready-index shards work wake-ups named without a
// session the dispatcher keeps (a Gap, or a session past maxWoken): the
// next ClaimNext reads them first (redisstore.ClaimNextRequest.Shards),
// so an index of many shards is not read whole to find them.
type shardHints struct {
	set  map[int]bool
	list []int
}

// add records shard once.
func (h *shardHints) add(shard int) {
	if h.set[shard] {
		return
	}
	if h.set == nil {
		h.set = map[int]bool{}
	}
	h.set[shard] = true
	h.list = append(h.list, shard)
}

// take returns the recorded shards and forgets them.
func (h *shardHints) take() []int {
	out := h.list
	h.list, h.set = nil, nil
	return out
}

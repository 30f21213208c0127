package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
)

// SessionRepair reports what RepairSession did.
type SessionRepair struct {
	// Head is the session's head index (the last index its counter, or its
	// clear marker, records): the log now ends there.
	Head int64
	// Removed are the indexes of the log entries above Head that were
	// removed (none when the session was not wedged).
	Removed []int64
	// Copied is how many log entries were copied into the rebuilt log
	// (zero when nothing was removed).
	Copied int
}

// repairCopyPage is how many log entries one step of RepairSession's copy
// reads and writes.
const repairCopyPage = 500

// repairTries bounds how often RepairSession starts over when the session
// changed under it.
const repairTries = 5

// errRepairRaced is a repair pass that found the session changed under it.
var errRepairRaced = errors.New("a2redis: the session changed during the repair")

// RepairSession mends a session an older release wedged: a script that
// failed after its XADD left a log entry above the session's counter (the
// counter, the heads and the rest of the batch unwritten), so every later
// append fails ("The ID specified in XADD is equal or smaller than the
// target stream top item") and reads stop at the counter. The entries above
// the counter were never confirmed to their writer, who got an error: they
// are removed, with their type-index entries and any free head above the
// counter, so that the batch can be sent again (with the same ids, see
// a2redis.BatchError) and every later append works. A stream cannot lower
// its last id once entries were deleted (Valkey and newer Redis refuse
// XSETID below the largest deleted id), so the log is rebuilt: its entries
// up to the counter are copied, page by page, into a new key of the
// session, which then replaces the log in one MULTI/EXEC guarded by WATCH
// (started over when the session changed meanwhile). A session that is not
// wedged is left as it is. It is a repair for operators
// (`a2redis-inspect repair-session`), not for the hot path: its cost grows
// with the log.
func (s *Store) RepairSession(ctx context.Context, session string) (SessionRepair, error) {
	if err := checkSession(session); err != nil {
		return SessionRepair{}, err
	}
	k := s.keys(session)
	var out SessionRepair
	for try := 1; ; try++ {
		err := s.client.Dedicated(func(c rueidis.DedicatedClient) error {
			var err error
			out, err = s.repairSessionOnce(ctx, c, k)
			return err
		})
		if !errors.Is(err, errRepairRaced) || try >= repairTries {
			if err != nil {
				return out, fmt.Errorf("a2redis: repairing session %q: %w", session, err)
			}
			return out, nil
		}
	}
}

func (s *Store) repairSessionOnce(ctx context.Context, c rueidis.DedicatedClient, k keys.Session) (SessionRepair, error) {
	var out SessionRepair
	if err := c.Do(ctx, c.B().Watch().Key(k.Count(), k.Clear(), k.Log()).Build()).Error(); err != nil {
		return out, err
	}
	unwatch := func() { _ = c.Do(ctx, c.B().Unwatch().Build()).Error() }
	head := int64(0)
	for _, key := range []string{k.Count(), k.Clear()} {
		text, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			unwatch()
			return out, err
		}
		if key == k.Clear() {
			// A collapsed session's clear key holds its marker too.
			c, ok := keys.ParseClear(text)
			if !ok {
				unwatch()
				return out, fmt.Errorf("%w: %s holds %q", a2redis.ErrUnexpectedReply, key, text)
			}
			head = c.Index
		} else if head, err = strconv.ParseInt(text, 10, 64); err != nil {
			unwatch()
			return out, fmt.Errorf("%w: %s holds %q", a2redis.ErrUnexpectedReply, key, text)
		}
		break
	}
	out.Head = head
	// The entries above the head, and their types.
	types := map[string][]int64{}
	for after := fmt.Sprintf("%d-0", head+1); ; {
		page, err := logPage(ctx, c, k.Log(), after, "+")
		if err != nil {
			unwatch()
			return out, err
		}
		for _, e := range page {
			out.Removed = append(out.Removed, e.index)
			types[e.typ] = append(types[e.typ], e.index)
		}
		if len(page) < repairCopyPage {
			break
		}
		after = fmt.Sprintf("(%s", page[len(page)-1].id)
	}
	if len(out.Removed) == 0 {
		unwatch()
		return out, nil
	}
	// Copy the entries up to the head into the new log.
	rebuilt := k.Base() + "log-rebuilt"
	if err := c.Do(ctx, c.B().Del().Key(rebuilt).Build()).Error(); err != nil {
		unwatch()
		return out, err
	}
	top := int64(0)
	for from := "-"; ; {
		page, err := logPage(ctx, c, k.Log(), from, fmt.Sprintf("%d-0", head))
		if err != nil {
			unwatch()
			return out, err
		}
		cmds := make(rueidis.Commands, 0, len(page))
		for _, e := range page {
			cmds = append(cmds, c.B().Xadd().Key(rebuilt).Id(e.id).FieldValue().FieldValueIter(pairs(e.fields)).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				unwatch()
				return out, err
			}
		}
		out.Copied += len(page)
		if len(page) > 0 {
			top = page[len(page)-1].index
		}
		if len(page) < repairCopyPage {
			break
		}
		from = fmt.Sprintf("(%s", page[len(page)-1].id)
	}
	// The old log is renamed aside and unlinked after the EXEC (freed in
	// the background: a long log's free would hold the server).
	old := k.Base() + "log-wedged"
	cmds := rueidis.Commands{c.B().Multi().Build(), c.B().Rename().Key(k.Log()).Newkey(old).Build()}
	switch {
	case out.Copied > 0 && top < head:
		// The new log must not take an index at or below the head again.
		cmds = append(cmds, c.B().Xsetid().Key(rebuilt).LastId(fmt.Sprintf("%d-0", head)).Build(),
			c.B().Rename().Key(rebuilt).Newkey(k.Log()).Build())
	case out.Copied > 0:
		cmds = append(cmds, c.B().Rename().Key(rebuilt).Newkey(k.Log()).Build())
	case head > 0:
		// Nothing at or below the head is left (reclaimed): an empty
		// stream that ends at the head.
		cmds = append(cmds, c.B().Xadd().Key(k.Log()).Maxlen().Threshold("0").Id(fmt.Sprintf("%d-0", head)).FieldValue().FieldValue("repair", "1").Build())
	}
	for typ, indexes := range types {
		// Sliced: at most 1000 members per ZREM.
		for len(indexes) > 0 {
			n := min(len(indexes), 1000)
			members := make([]string, n)
			for i, idx := range indexes[:n] {
				members[i] = strconv.FormatInt(idx, 10)
			}
			cmds = append(cmds, c.B().Zrem().Key(k.Type(typ)).Member(members...).Build())
			indexes = indexes[n:]
		}
	}
	// Free heads score their index, below keys.HeldOffset.
	cmds = append(cmds, c.B().Zremrangebyscore().Key(k.Runnable()).Min(fmt.Sprintf("(%d", head)).Max(fmt.Sprintf("(%d", keys.HeldOffset)).Build())
	cmds = append(cmds, c.B().Exec().Build())
	res := c.DoMulti(ctx, cmds...)
	exec := res[len(res)-1]
	if err := exec.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return out, errRepairRaced
		}
		return out, err
	}
	replies, err := exec.ToArray()
	if err != nil {
		return out, err
	}
	for _, r := range replies {
		if err := r.Error(); err != nil {
			return out, err
		}
	}
	if err := c.Do(ctx, c.B().Unlink().Key(old).Build()).Error(); err != nil {
		return out, fmt.Errorf("the log is repaired, but unlinking its old copy %s failed: %w", old, err)
	}
	return out, nil
}

// logEntry is one log entry as RepairSession copies it.
type logEntry struct {
	id     string
	index  int64
	typ    string
	fields []string
}

// logPage reads up to repairCopyPage entries of log from start to end
// (XRANGE bounds), fields in their stored order.
func logPage(ctx context.Context, c rueidis.DedicatedClient, log, start, end string) ([]logEntry, error) {
	arr, err := c.Do(ctx, c.B().Xrange().Key(log).Start(start).End(end).Count(repairCopyPage).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]logEntry, 0, len(arr))
	for _, m := range arr {
		parts, err := m.ToArray()
		if err != nil || len(parts) != 2 {
			return nil, fmt.Errorf("%w: XRANGE entry %v", a2redis.ErrUnexpectedReply, m)
		}
		id, err := parts[0].ToString()
		if err != nil {
			return nil, err
		}
		fields, err := parts[1].AsStrSlice()
		if err != nil {
			return nil, err
		}
		ms, _, _ := strings.Cut(id, "-")
		index, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: log entry id %q", a2redis.ErrUnexpectedReply, id)
		}
		e := logEntry{id: id, index: index, fields: fields}
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "type" {
				e.typ = fields[i+1]
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// pairs yields a flat field/value list as pairs.
func pairs(flat []string) func(yield func(string, string) bool) {
	return func(yield func(string, string) bool) {
		for i := 0; i+1 < len(flat); i += 2 {
			if !yield(flat[i], flat[i+1]) {
				return
			}
		}
	}
}

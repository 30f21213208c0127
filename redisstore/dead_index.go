package redisstore

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
)

// The dead index: every session that holds dead-lettered heads is listed
// in its ready shard's dead zset (keys.Ready.Dead: score the time since
// which it has held dead letters without a break) with its count and the
// consumers of its dead letters (keys.Ready.DeadCounts). The session's
// write scripts keep that state in its listed record and send it with the
// session's versioned ready update (see ready_mark in
// lua/include/util.lua), so the dead index is exactly as current as the
// ready index, and grows only with the sessions that hold dead letters now.
// Listing dead letters across sessions reads the shards (a fixed number of
// keys) and then pages each listed session's dead letters
// (DeadLettersPage); nothing scans the keyspace.

// DeadSession is what the dead index lists for one session.
type DeadSession struct {
	// Session is the session id.
	Session string
	// Shard is the index shard that lists it.
	Shard int
	// Count is how many dead-lettered heads the session holds.
	Count int64
	// Since is the time since which the session has held dead letters
	// without a break: not after the dead-lettering of any it holds.
	Since time.Time
	// Consumers are the consumers of the session's dead letters, sorted:
	// every one when Complete, else those of the first scripts.DeadScan of
	// them (a session with more dead letters than that may hold some of
	// other consumers).
	Consumers []string
	// Complete reports that Consumers names every dead letter's consumer.
	Complete bool
}

// has reports whether the session may hold dead letters of consumer ("":
// any).
func (d DeadSession) has(consumer string) bool {
	if consumer == "" || !d.Complete {
		return true
	}
	for _, c := range d.Consumers {
		if c == consumer {
			return true
		}
	}
	return false
}

// parseDeadCounts decodes a DeadCounts value "<count>,<complete>,<consumers>"
// into d.
func parseDeadCounts(value string, d *DeadSession) error {
	parts := strings.SplitN(value, ",", 3)
	if len(parts) != 3 {
		return fmt.Errorf("%w: dead index counts %q", a2redis.ErrUnexpectedReply, value)
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: dead index counts %q", a2redis.ErrUnexpectedReply, value)
	}
	d.Count, d.Complete, d.Consumers = n, parts[1] == "1", []string{}
	for rest := parts[2]; rest != ""; {
		length, tail, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(length)
		if !ok || err != nil || size < 0 || size > len(tail) {
			return fmt.Errorf("%w: dead index counts %q", a2redis.ErrUnexpectedReply, value)
		}
		d.Consumers = append(d.Consumers, tail[:size])
		rest = tail[size:]
	}
	return nil
}

// DeadAt returns what the dead index lists for session (ok false when it
// lists none: the session holds no dead letters): two commands on the
// session's shard.
func (s *Store) DeadAt(ctx context.Context, session string) (DeadSession, bool, error) {
	if err := checkSession(session); err != nil {
		return DeadSession{}, false, err
	}
	shard := keys.ReadyShard(session, s.cfg.ReadyShards)
	r := keys.ReadyFor(s.cfg.Prefix, shard)
	c := s.client
	replies := s.doMulti(ctx, c.B().Zscore().Key(r.Dead()).Member(session).Build(), c.B().Hget().Key(r.DeadCounts()).Field(session).Build())
	score, err := replies[0].AsFloat64()
	if rueidis.IsRedisNil(err) {
		return DeadSession{}, false, nil
	}
	if err != nil {
		return DeadSession{}, false, fmt.Errorf("a2redis: reading the dead index for session %q: %w", session, err)
	}
	value, err := replies[1].ToString()
	if err != nil {
		return DeadSession{}, false, fmt.Errorf("a2redis: reading the dead index for session %q: %w", session, err)
	}
	d := DeadSession{Session: session, Shard: shard, Since: time.UnixMilli(int64(score))}
	if err := parseDeadCounts(value, &d); err != nil {
		return DeadSession{}, false, err
	}
	return d, true, nil
}

// DeadSummary sums the dead index: how many sessions hold dead letters and
// how many dead letters they hold, and since when the longest-held has.
type DeadSummary struct {
	// Sessions is how many sessions hold dead letters.
	Sessions int64
	// DeadLetters is how many dead-lettered heads they hold together.
	DeadLetters int64
	// Oldest is the earliest DeadSession.Since (zero when none).
	Oldest time.Time
}

// deadSummaryPage is how many counts one step of DeadSummary reads from a
// shard.
const deadSummaryPage = 1000

// DeadSummaryOf returns the dead index's totals. It reads each shard's
// counts in pages of a thousand sessions (HSCAN), so its cost grows with
// the sessions that hold dead letters, never with the others.
func (s *Store) DeadSummaryOf(ctx context.Context) (DeadSummary, error) {
	var out DeadSummary
	c := s.client
	for shard := 0; shard < s.cfg.ReadyShards; shard++ {
		r := keys.ReadyFor(s.cfg.Prefix, shard)
		first, err := s.do(ctx, c.B().Zrange().Key(r.Dead()).Min("0").Max("0").Withscores().Build()).AsZScores()
		if err != nil {
			return DeadSummary{}, fmt.Errorf("a2redis: reading dead index shard %d: %w", shard, err)
		}
		if len(first) > 0 {
			if at := time.UnixMilli(int64(first[0].Score)); out.Oldest.IsZero() || at.Before(out.Oldest) {
				out.Oldest = at
			}
		}
		var cursor uint64
		for {
			entry, err := s.do(ctx, c.B().Hscan().Key(r.DeadCounts()).Cursor(cursor).Count(deadSummaryPage).Build()).AsScanEntry()
			if err != nil {
				return DeadSummary{}, fmt.Errorf("a2redis: reading dead index shard %d: %w", shard, err)
			}
			for i := 0; i+1 < len(entry.Elements); i += 2 {
				var d DeadSession
				if err := parseDeadCounts(entry.Elements[i+1], &d); err != nil {
					return DeadSummary{}, err
				}
				out.Sessions++
				out.DeadLetters += d.Count
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	return out, nil
}

// DeadLetterQuery asks for one page of dead letters across every session
// of the prefix (DeadLettersAcross).
type DeadLetterQuery struct {
	// Consumer keeps only the dead letters of this consumer ("": every
	// consumer's).
	Consumer string
	// Error keeps only the dead letters whose last error contains this
	// text ("": any).
	Error string
	// After continues the listing where a page ended: that page's Next.
	// Empty starts it.
	After string
	// Limit is the most dead letters the page holds. Default
	// DefaultPageLimit, at most MaxPageLimit.
	Limit int
}

// DeadLetterList is one page of dead letters across sessions.
type DeadLetterList struct {
	// DeadLetters are the page's heads (each names its session): sessions
	// in the order the dead index lists them — the longest-held dead
	// letters first (DeadSession.Since, then session id) — and each
	// session's heads by index then consumer. A page may hold fewer than
	// the limit, or none, and still not be the last: its work is bounded.
	DeadLetters []a2redis.HeadEvent
	// Next continues the listing (DeadLetterQuery.After); empty after the
	// last page.
	Next string
	// Sessions is how many sessions the page read dead letters of.
	Sessions int
}

// Bounds of one DeadLettersAcross page's work.
const (
	// deadShardPage is how many sessions a page reads from each shard of
	// the dead index at a time.
	deadShardPage = 64
	// deadPageSessions is the most sessions one page reads dead letters of.
	deadPageSessions = 64
)

// deadToken is a DeadLettersAcross continuation: the session at which the
// listing stopped (its Since in epoch ms and id) and where in its dead
// letters (a DeadLettersPage Next; empty: the session is done, go on after
// it). Encoded "x<since>:<hex of session>:<inner>".
type deadToken struct {
	since   int64
	session string
	inner   string
}

func (t deadToken) String() string {
	return "x" + itoa(t.since) + ":" + hex.EncodeToString([]byte(t.session)) + ":" + t.inner
}

var errDeadAfter = check.Invalid("After", "is not the Next of a page of this listing")

func parseDeadToken(s string) (deadToken, error) {
	if s == "" {
		return deadToken{since: -1}, nil
	}
	if s[0] != 'x' {
		return deadToken{}, errDeadAfter
	}
	parts := strings.SplitN(s[1:], ":", 3)
	if len(parts) != 3 {
		return deadToken{}, errDeadAfter
	}
	since, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return deadToken{}, errDeadAfter
	}
	session, err := hex.DecodeString(parts[1])
	if err != nil || len(session) == 0 {
		return deadToken{}, errDeadAfter
	}
	if parts[2] != "" && parts[2][0] != 'd' {
		return deadToken{}, errDeadAfter
	}
	return deadToken{since: since, session: string(session), inner: parts[2]}, nil
}

// after reports whether the listing position (since, session) comes after
// the token's session.
func (t deadToken) before(since int64, session string) bool {
	return since > t.since || (since == t.since && session > t.session)
}

// deadCandidates returns, in listing order, the sessions the dead index
// lists at or after the token's session (the token's own first when it is
// mid-session), merged over the shards, as far as every shard's read
// reaches: a shard whose page filled bounds the merge, so nothing of
// another shard is skipped. more reports that the index may list sessions
// past the last one returned.
func (s *Store) deadCandidates(ctx context.Context, t deadToken) (out []DeadSession, more bool, err error) {
	c := s.client
	type shardPage struct {
		entries []rueidis.ZScore
		full    bool
	}
	pages := make([]shardPage, s.cfg.ReadyShards)
	min := "-inf"
	if t.since >= 0 {
		min = itoa(t.since)
	}
	for shard := range pages {
		key := keys.ReadyFor(s.cfg.Prefix, shard).Dead()
		// Sessions sharing the token's time before it are skipped here:
		// page on past them.
		for offset := int64(0); ; offset += deadShardPage {
			entries, err := s.do(ctx, c.B().Zrange().Key(key).Min(min).Max("+inf").Byscore().Limit(offset, deadShardPage).Withscores().Build()).AsZScores()
			if err != nil {
				return nil, false, fmt.Errorf("a2redis: reading dead index shard %d: %w", shard, err)
			}
			kept := entries[:0]
			for _, e := range entries {
				at := int64(e.Score)
				if t.since < 0 || t.before(at, e.Member) || (t.inner != "" && at == t.since && e.Member == t.session) {
					kept = append(kept, e)
				}
			}
			if len(kept) > 0 || len(entries) < deadShardPage {
				pages[shard] = shardPage{entries: kept, full: len(entries) == deadShardPage}
				break
			}
		}
	}
	// The merge stops at the smallest last entry of a full shard.
	var bound *rueidis.ZScore
	less := func(a, b rueidis.ZScore) bool {
		if int64(a.Score) != int64(b.Score) {
			return a.Score < b.Score
		}
		return a.Member < b.Member
	}
	for _, p := range pages {
		more = more || p.full
		if p.full && len(p.entries) > 0 {
			last := p.entries[len(p.entries)-1]
			if bound == nil || less(last, *bound) {
				bound = &last
			}
		}
	}
	for shard, p := range pages {
		for _, e := range p.entries {
			if bound != nil && less(*bound, e) {
				break
			}
			out = append(out, DeadSession{Session: e.Member, Shard: shard, Since: time.UnixMilli(int64(e.Score))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		return a.Session < b.Session
	})
	if len(out) > deadPageSessions {
		out, more = out[:deadPageSessions], true
	}
	// Their counts: one HMGET per shard, pipelined.
	fields := map[int][]int{}
	for i, d := range out {
		fields[d.Shard] = append(fields[d.Shard], i)
	}
	shards := make([]int, 0, len(fields))
	cmds := make(rueidis.Commands, 0, len(fields))
	for shard, at := range fields {
		names := make([]string, len(at))
		for k, i := range at {
			names[k] = out[i].Session
		}
		shards = append(shards, shard)
		cmds = append(cmds, c.B().Hmget().Key(keys.ReadyFor(s.cfg.Prefix, shard).DeadCounts()).Field(names...).Build())
	}
	for k, reply := range s.doMulti(ctx, cmds...) {
		values, err := reply.ToArray()
		if err != nil {
			return nil, false, fmt.Errorf("a2redis: reading dead index shard %d: %w", shards[k], err)
		}
		for n, i := range fields[shards[k]] {
			if n >= len(values) || values[n].IsNil() {
				// Gone between the two reads: read its dead letters anyway.
				continue
			}
			value, _ := values[n].ToString()
			if err := parseDeadCounts(value, &out[i]); err != nil {
				return nil, false, err
			}
		}
	}
	return out, more, nil
}

// DeadLettersAcross returns one page of the dead letters of every session
// of the prefix, the longest-held first (see DeadLetterList), those of
// q.Consumer only and with q.Error in their last error when set. It reads
// the dead index's shards (a few commands each) and then pages the dead
// letters of the sessions it lists (DeadLettersPage), skipping a session
// whose listed consumers rule q.Consumer out without reading it. A page
// reads at most 64 sessions and about 4 × Limit dead letters, so no page
// holds Redis or the caller long however many there are; pass each page's
// Next as the next query's After until it is empty. Pages read while
// dead letters come and go show each session as it was when read: a
// session dead-lettered anew after the listing passed it is listed again
// further on.
func (s *Store) DeadLettersAcross(ctx context.Context, q DeadLetterQuery) (DeadLetterList, error) {
	limit, err := pageLimit(PageRequest{Limit: q.Limit})
	if err != nil {
		return DeadLetterList{}, err
	}
	if q.Consumer != "" {
		if err := checkName("Consumer", q.Consumer); err != nil {
			return DeadLetterList{}, err
		}
	}
	t, err := parseDeadToken(q.After)
	if err != nil {
		return DeadLetterList{}, err
	}
	candidates, more, err := s.deadCandidates(ctx, t)
	if err != nil {
		return DeadLetterList{}, err
	}
	out := DeadLetterList{DeadLetters: []a2redis.HeadEvent{}}
	budget := 4 * limit
	for _, d := range candidates {
		if err := ctx.Err(); err != nil {
			return DeadLetterList{}, err
		}
		at := deadToken{since: d.Since.UnixMilli(), session: d.Session}
		inner := ""
		if t.inner != "" && at.since == t.since && d.Session == t.session {
			inner = t.inner
		}
		if !d.has(q.Consumer) {
			out.Next = at.String()
			continue
		}
		out.Sessions++
		for {
			page, err := s.DeadLettersPage(ctx, d.Session, PageRequest{After: inner, Limit: min(MaxPageLimit, max(limit-len(out.DeadLetters), 16))})
			if err != nil {
				return DeadLetterList{}, err
			}
			budget -= len(page.DeadLetters)
			for _, h := range page.DeadLetters {
				if (q.Consumer == "" || h.Consumer == q.Consumer) && strings.Contains(h.LastError, q.Error) {
					out.DeadLetters = append(out.DeadLetters, h)
				}
			}
			inner = page.Next
			if inner == "" {
				break
			}
			if len(out.DeadLetters) >= limit || budget <= 0 {
				at.inner = inner
				out.Next = at.String()
				return out, nil
			}
		}
		out.Next = at.String()
		if len(out.DeadLetters) >= limit || budget <= 0 || out.Sessions >= deadPageSessions {
			return out, nil
		}
	}
	if !more {
		out.Next = ""
	}
	return out, nil
}

// Batch sizes of RedriveAcross.
const (
	// DefaultRedriveBatch is RedriveAcrossRequest.Batch's default.
	DefaultRedriveBatch = 100
)

// RedriveAcrossRequest asks RedriveAcross to retry or skip every dead
// letter of a filter across the prefix's sessions.
type RedriveAcrossRequest struct {
	// Consumer keeps only the dead letters of this consumer ("": every
	// consumer's).
	Consumer string
	// Error keeps only the dead letters whose last error contains this
	// text ("": any).
	Error string
	// Action is Retry or Skip, as Redrive's.
	Action RedriveAction
	// Before keeps only the heads dead-lettered at or before it (zero: the
	// call's start), so heads that fail again after a retry are not
	// chased round.
	Before time.Time
	// After resumes an interrupted run: the Next of the last progress it
	// reported (with the same filter and Before). Empty starts from the
	// longest-held dead letters.
	After string
	// Batch is how many dead letters are listed and redriven per batch.
	// Default DefaultRedriveBatch, at most MaxPageLimit.
	Batch int
	// Consumers are the served consumers (for each Redrive's HasPending;
	// see AppendOptions.Consumers).
	Consumers []a2redis.Consumer
	// Progress, when set, is called after each batch with the totals so
	// far; an error it returns stops the run (and is returned). Its Next
	// resumes the run from there.
	Progress func(RedriveProgress) error
}

// RedriveProgress reports how far a RedriveAcross run got.
type RedriveProgress struct {
	// Redriven is how many dead letters were retried or skipped.
	Redriven int
	// Missed is how many were listed but no longer dead-lettered when
	// redriven (someone else acted on them).
	Missed int
	// Sessions is how many sessions had a dead letter redriven.
	Sessions int
	// Next resumes the run after what is done (RedriveAcrossRequest.After);
	// empty once the run is done.
	Next string
	// Done reports that every dead letter of the filter was reached.
	Done bool
}

// RedriveAcross retries or skips every dead letter of the filter in every
// session of the prefix, in batches: each lists one page of
// DeadLettersAcross (Batch dead letters at most) and redrives each of its
// heads with its own Redrive call, then reports progress. No call holds
// Redis long, and an interrupted run resumes from the last progress's
// Next. A head dead-lettered after Before is left alone.
func (s *Store) RedriveAcross(ctx context.Context, req RedriveAcrossRequest) (RedriveProgress, error) {
	if req.Action != Retry && req.Action != Skip {
		return RedriveProgress{}, check.Invalid("Action", "must be %q or %q (got %q)", Retry, Skip, req.Action)
	}
	if req.Consumer != "" {
		if err := checkName("Consumer", req.Consumer); err != nil {
			return RedriveProgress{}, err
		}
		if err := s.checkDeclared(ctx, "Consumer", req.Consumer); err != nil {
			return RedriveProgress{}, err
		}
	}
	batch := req.Batch
	switch {
	case batch == 0:
		batch = DefaultRedriveBatch
	case batch < 0 || batch > MaxPageLimit:
		return RedriveProgress{}, check.Invalid("Batch", "must be between 1 and %d (got %d)", MaxPageLimit, batch)
	}
	if _, err := parseDeadToken(req.After); err != nil {
		return RedriveProgress{}, check.Invalid("After", "is not the Next of a RedriveAcross progress")
	}
	cutoff := req.Before
	if cutoff.IsZero() {
		cutoff = time.UnixMilli(s.now())
	}
	p := RedriveProgress{Next: req.After}
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		list, err := s.DeadLettersAcross(ctx, DeadLetterQuery{Consumer: req.Consumer, Error: req.Error, After: p.Next, Limit: batch})
		if err != nil {
			return p, err
		}
		for _, h := range list.DeadLetters {
			if h.DeadLetteredAt.After(cutoff) {
				continue
			}
			res, err := s.Redrive(ctx, RedriveRequest{Session: h.Session, Consumer: h.Consumer, Lane: h.Lane, Index: h.Index, Action: req.Action, Consumers: req.Consumers})
			if err != nil {
				return p, err
			}
			if !res.Redriven {
				p.Missed++
				continue
			}
			p.Redriven++
			if h.Session != last {
				p.Sessions++
				last = h.Session
			}
		}
		p.Next = list.Next
		if t, _ := parseDeadToken(p.Next); p.Next == "" || t.since > cutoff.UnixMilli() {
			// Sessions are listed by the time they have held dead letters
			// from: past the cutoff, none holds one dead-lettered before it.
			p.Next, p.Done = "", true
		}
		if req.Progress != nil {
			if err := req.Progress(p); err != nil {
				return p, err
			}
		}
		if p.Done {
			return p, nil
		}
	}
}

// repairDead mends the dead index after a lost update: a session it lists
// whose own record holds no dead letters (a write's removal lost, then a
// newer update of the session that said nothing of them applied) is listed
// again from its true state (ready_sync, under a new version); one without
// a record (dropped, its forgetting lost) is forgotten. It reads each
// shard's dead index in pages, so its cost grows with the sessions the
// index lists, not with the prefix. A shard it cannot read or mend (its
// node down) is recorded in failed, each call bounded by
// Retries.Unavailable, and the others are still mended. It returns how
// many sessions it mended.
func (s *Store) repairDead(ctx context.Context, failed *sendFailures) int {
	fixed := 0
	for shard := 0; shard < s.cfg.ReadyShards; shard++ {
		n, err := s.repairDeadShard(ctx, shard)
		fixed += n
		if err != nil {
			if ctx.Err() != nil {
				return fixed
			}
			failed.n++
			failed.err = cmp.Or(failed.err, err)
		}
	}
	return fixed
}

func (s *Store) repairDeadShard(ctx context.Context, shard int) (int, error) {
	c := s.client
	r := keys.ReadyFor(s.cfg.Prefix, shard)
	fixed := 0
	for offset := int64(0); ; offset += repairPage {
		nctx, cancel := context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
		members, err := s.do(nctx, c.B().Zrange().Key(r.Dead()).Min(itoa(offset)).Max(itoa(offset+repairPage-1)).Build()).AsStrSlice()
		cancel()
		if err != nil {
			return fixed, fmt.Errorf("a2redis: repair: reading dead index shard %d: %w", shard, err)
		}
		cmds := make(rueidis.Commands, 0, 2*len(members))
		for _, session := range members {
			cmds = append(cmds, c.B().Get().Key(s.keys(session).Listed()).Build(), c.B().Hget().Key(r.Versions()).Field(session).Build())
		}
		nctx, cancel = context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
		replies := s.doMulti(nctx, cmds...)
		cancel()
		for i, session := range members {
			text, err := replies[2*i].ToString()
			switch {
			case rueidis.IsRedisNil(err):
				version, _ := replies[2*i+1].ToString()
				if err := s.forgetReady(ctx, session, cmp.Or(version, "0")); err != nil {
					return fixed, err
				}
				fixed++
			case err != nil:
				return fixed, fmt.Errorf("a2redis: repair read: %w", err)
			case len(strings.SplitN(text, ":", 4)) < 4:
				if err := s.resyncDead(ctx, session); err != nil {
					return fixed, err
				}
				fixed++
			}
		}
		if len(members) < repairPage {
			return fixed, nil
		}
	}
}

// RecountDeadLetters is RepairReady that also counts the dead letters of
// every session whose record holds none (one more read per session, in
// the same pipeline), and lists again from its true state each that holds
// some: the upgrade step for dead letters made by a release without the
// dead index, whose sessions' records do not carry them. Its cost grows
// with the prefix's sessions, like RepairReady's; run it once after an
// upgrade, not periodically.
func (s *Store) RecountDeadLetters(ctx context.Context) (RepairStats, error) {
	return s.repairReady(ctx, true)
}

// resyncDead lists a session again from its true state with its dead
// letters recounted and their state stated even when there is none
// (ready_sync with its dead-letter argument), so that its shard drops a
// stale entry.
func (s *Store) resyncDead(ctx context.Context, session string) error {
	_, err := s.run(ctx, "ready_sync", session, []string{itoa(s.now()), "1"})
	return err
}

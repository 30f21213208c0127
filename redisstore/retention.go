package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
)

// RetentionPolicy says which sessions a retention pass ends or drops: the
// idle ones, whose newest event (or clear marker) is older than IdleFor and
// which have no live head (nothing to run, held or in flight) and no dead
// letter (those wait for an operator: redrive or skip them first); and,
// with Trim, how much of the other sessions' handled past it trims.
type RetentionPolicy struct {
	// IdleFor is how long a session has had no append before it is
	// idle. Required (positive) unless Trim is set; 0 with Trim: no
	// session is ended or dropped, the pass only trims.
	IdleFor time.Duration
	// Drop deletes an idle session (Store.Drop: no key left); without it
	// an idle session is ended (Clear, then Reclaim: what is left is its
	// clear marker, and a session already ended is left alone).
	Drop bool
	// MaxSessions bounds the sessions one pass ends or drops. Default
	// DefaultRetentionSessions.
	MaxSessions int
	// ScanPage is how many keys one pass reads per SCAN step; a pass reads
	// at most MaxScan keys. Defaults 500 and 20,000.
	ScanPage, MaxScan int
	// DryRun reports the sessions a pass would end or drop, and what it
	// would trim, writing nothing (the cursor does not move).
	DryRun bool
	// Trim, when set, trims the sessions the pass looks at and does not
	// end or drop (Store.Trim with this request; its DryRun is the
	// policy's): a long-lived session keeps only the events a consumer may
	// still need and those the request keeps (KeepLast, OlderThan,
	// Through). Only a session whose oldest retained event lies past the
	// request's bounds is trimmed, so a pass costs one call per session it
	// trims. Trimmed sessions count toward MaxSessions.
	Trim *TrimRequest
}

// DefaultRetentionSessions is RetentionPolicy.MaxSessions's default.
const DefaultRetentionSessions = 1000

// RetentionResult is what a retention pass did.
type RetentionResult struct {
	// Scanned is how many sessions the pass looked at.
	Scanned int `json:"scanned"`
	// Idle are the sessions it found idle, in the order it met them (with
	// DryRun: the ones it would end or drop).
	Idle []string `json:"idle"`
	// Ended and Dropped count what it did (zero with DryRun).
	Ended   int `json:"ended"`
	Dropped int `json:"dropped"`
	// Trimmed are the sessions it trimmed (with DryRun: would trim), with
	// their new floor and the events removed.
	Trimmed []SessionTrim `json:"trimmed,omitempty"`
	// Changed counts idle sessions that got an append between the look
	// and the act: left as they are.
	Changed int `json:"changed"`
	// Skipped counts sessions the pass could not read or act on (their
	// slot moving, their node down: ErrUnavailable), and Unreachable the
	// masters it could not scan; the next pass looks at them again.
	Skipped     int `json:"skipped"`
	Unreachable int `json:"unreachable"`
	// Cursor is where the next pass goes on ("" once the scan went
	// through every session of the prefix: the next pass starts over).
	Cursor string `json:"cursor"`
}

// SessionTrim is what a retention pass trimmed of one session.
type SessionTrim struct {
	Session string `json:"session"`
	// Floor is the session's trim floor after the trim (Bounds.Floor).
	Floor int64 `json:"floor"`
	// Removed counts the events removed.
	Removed int64 `json:"removed"`
}

// Check returns the policy with its defaults, or an ErrInvalidArgument.
func (p RetentionPolicy) Check() (RetentionPolicy, error) { return p.withDefaults() }

func (p RetentionPolicy) withDefaults() (RetentionPolicy, error) {
	if p.IdleFor < 0 || (p.IdleFor == 0 && p.Trim == nil) {
		return p, check.Invalid("IdleFor", "must be positive, or 0 with Trim set (got %v)", p.IdleFor)
	}
	if p.Trim != nil {
		if err := p.Trim.check(); err != nil {
			return p, err
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxSessions", &p.MaxSessions, DefaultRetentionSessions}, {"ScanPage", &p.ScanPage, 500}, {"MaxScan", &p.MaxScan, 20_000}} {
		if *f.v < 0 {
			return p, check.Invalid(f.name, "is negative (%d)", *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return p, nil
}

// Retention runs one retention pass over the prefix's sessions from cursor
// ("" to start at the beginning): it SCANs the sessions (every master, a
// page at a time, at most MaxScan keys), reads each one's head, clear
// marker, live and dead-lettered heads and its newest event's time (one
// pipelined read per page), and ends or drops the idle ones, at most
// MaxSessions. An idle session is ended or dropped only if its head is
// still the one the look saw (a conditional Clear first: an append in
// between keeps the session, counted in Changed). Each step is bounded, so
// a pass never holds the server; run passes periodically (the worker
// runtime does with Config.Retention, one store per prefix at a time) and
// every idle session goes within one scan of the prefix.
func (s *Store) Retention(ctx context.Context, policy RetentionPolicy, cursor string) (RetentionResult, error) {
	policy, err := policy.withDefaults()
	if err != nil {
		return RetentionResult{}, err
	}
	node, scan, err := parseRetentionCursor(cursor)
	if err != nil {
		return RetentionResult{}, err
	}
	nodes, unreachable, nodeErr := s.masters(ctx)
	if len(nodes) == 0 {
		return RetentionResult{}, fmt.Errorf("%w: a2redis: retention: no master answered: %w", a2redis.ErrUnavailable, cmp.Or(nodeErr, errors.New("no nodes")))
	}
	if node >= len(nodes) {
		node, scan = 0, 0 // the topology changed: start over
	}
	res := RetentionResult{Unreachable: unreachable}
	// Log and clear keys: an ended session keeps its clear key alone.
	pattern := keys.EscapeGlob(s.cfg.Prefix) + ":{*}:" + keys.SessionScanTail
	now := s.now()
	cutoff := now - policy.IdleFor.Milliseconds()
	if policy.IdleFor == 0 {
		cutoff = math.MinInt64 // nothing is idle: the pass only trims
	}
	read := 0
	// SCAN may return a key twice: a session is looked at once a pass.
	seen := map[string]bool{}
	acted := func() int { return len(res.Idle) + len(res.Trimmed) }
	for node < len(nodes) && read < policy.MaxScan && acted() < policy.MaxSessions {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n := nodes[node]
		nctx, cancel := context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
		entry, err := n.Do(nctx, n.B().Scan().Cursor(scan).Match(pattern).Count(int64(policy.ScanPage)).Build().Pin()).AsScanEntry()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			// A master that does not answer: the next one; its sessions
			// wait for the next scan.
			res.Unreachable++
			node, scan = node+1, 0
			continue
		}
		read += policy.ScanPage
		var sessions []string
		for _, key := range entry.Elements {
			session, ok := keys.SessionOfLogKey(s.cfg.Prefix, key)
			if !ok {
				session, ok = keys.SessionOfClearKey(s.cfg.Prefix, key)
			}
			if ok && !seen[session] {
				seen[session] = true
				sessions = append(sessions, session)
			}
		}
		idle, trims, skipped := s.idleSessions(ctx, sessions, cutoff, policy, now)
		res.Skipped += skipped
		if err := ctx.Err(); err != nil {
			return res, err
		}
		res.Scanned += len(sessions)
		full := false
		for _, st := range idle {
			if acted() == policy.MaxSessions {
				full = true // the rest of the page waits for the next pass
				break
			}
			res.Idle = append(res.Idle, st.session)
			if policy.DryRun {
				continue
			}
			acted, err := s.retire(ctx, st, policy.Drop)
			if errors.Is(err, a2redis.ErrUnavailable) && ctx.Err() == nil {
				res.Skipped++
				continue
			}
			if err != nil {
				return res, err
			}
			switch {
			case !acted:
				res.Changed++
			case policy.Drop:
				res.Dropped++
			default:
				res.Ended++
			}
		}
		for _, session := range trims {
			if full || acted() == policy.MaxSessions {
				full = true
				break
			}
			req := *policy.Trim
			req.DryRun = policy.DryRun
			tr, err := s.Trim(ctx, session, req)
			if errors.Is(err, a2redis.ErrUnavailable) && ctx.Err() == nil {
				res.Skipped++
				continue
			}
			if err != nil {
				return res, err
			}
			if tr.Removed > 0 {
				res.Trimmed = append(res.Trimmed, SessionTrim{Session: session, Floor: tr.Floor, Removed: tr.Removed})
			}
		}
		if full {
			break // the next pass reads this page again
		}
		scan = entry.Cursor
		if scan == 0 {
			node++
		}
	}
	if node < len(nodes) {
		res.Cursor = strconv.Itoa(node) + ":" + strconv.FormatUint(scan, 10)
	}
	if policy.DryRun {
		res.Cursor = cursor
	}
	return res, nil
}

// idleState is what a retention pass read of one session.
type idleState struct {
	session     string
	head, clear int64
}

// idleSessions reads the sessions' bounds, live and dead-lettered heads
// and newest and oldest events, and returns the idle ones: newest event at
// or before cutoff, no live head, no dead letter; without policy.Drop, not
// ended already (head above the clear marker). With policy.Trim it also
// returns the sessions not idle whose oldest event lies past the trim's
// bounds (trims). A session whose read fails is skipped (counted).
func (s *Store) idleSessions(ctx context.Context, sessions []string, cutoff int64, policy RetentionPolicy, now int64) (out []idleState, trims []string, skipped int) {
	if len(sessions) == 0 {
		return nil, nil, 0
	}
	c := s.client
	const per = 5
	cmds := make(rueidis.Commands, 0, per*len(sessions))
	for _, session := range sessions {
		k := s.keys(session)
		cmds = append(cmds,
			c.B().Mget().Key(k.Count(), k.Clear(), k.Live()).Build(),
			c.B().Zcount().Key(k.Runnable()).Min("-inf").Max("(0").Build(),
			c.B().Zcard().Key(k.Runnable()).Build(),
			c.B().Xrevrange().Key(k.Log()).End("+").Start("-").Count(1).Build(),
			c.B().Xrange().Key(k.Log()).Start("-").End("+").Count(1).Build())
	}
	replies := s.doMulti(ctx, cmds...)
	for i := range sessions {
		st, idle, ok := idleOf(sessions[i], replies[per*i:per*i+per], cutoff, policy.Drop)
		switch {
		case !ok:
			skipped++
		case idle:
			out = append(out, st)
		case policy.Trim != nil && trimDue(*policy.Trim, replies[per*i+4], st.head, now):
			trims = append(trims, sessions[i])
		}
	}
	return out, trims, skipped
}

// idleOf reads one session's replies of idleSessions: its state, whether
// it is idle (see idleSessions), and false when the read failed.
func idleOf(session string, r []rueidis.RedisResult, cutoff int64, ended bool) (idleState, bool, bool) {
	bounds, err := r[0].ToArray()
	if err != nil || len(bounds) != 3 {
		return idleState{}, false, false
	}
	num := func(m rueidis.RedisMessage) int64 {
		n, _ := optionalInt(m)
		return n
	}
	var marker keys.ClearMarker
	if text, err := bounds[1].ToString(); err == nil {
		var ok bool
		if marker, ok = keys.ParseClear(text); !ok {
			return idleState{}, false, false
		}
	}
	clear := marker.Index
	head := cmp.Or(num(bounds[0]), clear)
	st := idleState{session: session, head: head, clear: clear}
	live := num(bounds[2])
	dead, err1 := r[1].AsInt64()
	runnable, err2 := r[2].AsInt64()
	newest, err3 := r[3].AsXRange()
	if err1 != nil || err2 != nil || err3 != nil {
		return idleState{}, false, false
	}
	if live > 0 || dead > 0 || runnable > dead {
		return st, false, true
	}
	var at int64
	switch {
	case len(newest) > 0:
		if at, err = strconv.ParseInt(newest[0].FieldValues["created_at"], 10, 64); err != nil {
			return st, false, true
		}
	case marker.Collapsed && head == clear:
		at = marker.CreatedAt // ended: its marker is in the clear key
	default:
		return st, false, true
	}
	if at > cutoff {
		return st, false, true
	}
	if !ended && head == clear {
		return st, false, true // ended already: only a drop has more to do
	}
	return st, true, true
}

// trimDue tells whether a session whose oldest log entry is `oldest` (an
// XRANGE of one) has events past the trim request's bounds: older than
// OlderThan, below Through, beyond the newest KeepLast. A trim still
// removes only what every consumer is done with.
func trimDue(req TrimRequest, oldest rueidis.RedisResult, head, now int64) bool {
	entries, err := oldest.AsXRange()
	if err != nil || len(entries) == 0 {
		return false
	}
	idx, err := entryIndex(entries[0].ID)
	if err != nil {
		return false
	}
	if req.Through > 0 && idx > req.Through {
		return false
	}
	if req.KeepLast > 0 && head-idx+1 <= int64(req.KeepLast) {
		return false
	}
	if req.OlderThan > 0 {
		at, err := strconv.ParseInt(entries[0].FieldValues["created_at"], 10, 64)
		if err != nil || at > now-req.OlderThan.Milliseconds() {
			return false
		}
	}
	return true
}

// retire ends or drops an idle session, provided its head is still the
// one its look saw (a conditional Clear); false when an append came first.
func (s *Store) retire(ctx context.Context, st idleState, drop bool) (bool, error) {
	if st.head > st.clear {
		head := st.head
		r, err := s.Clear(ctx, st.session, ClearOptions{IfLastIndex: &head})
		if err != nil {
			return false, err
		}
		if !r.Cleared {
			return false, nil
		}
	}
	if drop {
		r, err := s.Drop(ctx, st.session)
		if err != nil {
			return false, err
		}
		return r.Dropped, nil
	}
	if _, err := s.Reclaim(ctx, st.session); err != nil {
		return false, err
	}
	return true, nil
}

// TryRetention runs a retention pass unless another store on the prefix
// ran one within `every` (a lock key with that expiry), going on from
// where the prefix's last pass stopped (keys.RetentionCursor). It reports
// whether this store ran the pass.
func (s *Store) TryRetention(ctx context.Context, policy RetentionPolicy, every time.Duration) (bool, RetentionResult, error) {
	if every <= 0 {
		return false, RetentionResult{}, check.Invalid("every", "must be positive (got %v)", every)
	}
	if _, err := policy.withDefaults(); err != nil {
		return false, RetentionResult{}, err
	}
	c := s.client
	err := s.do(ctx, c.B().Set().Key(keys.RetentionLock(s.cfg.Prefix)).Value(strconv.FormatInt(s.now(), 10)).Nx().Px(every).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, RetentionResult{}, nil
	}
	if err != nil {
		return false, RetentionResult{}, fmt.Errorf("a2redis: taking the retention lock: %w", err)
	}
	cursor, err := s.do(ctx, c.B().Get().Key(keys.RetentionCursor(s.cfg.Prefix)).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return true, RetentionResult{}, fmt.Errorf("a2redis: reading the retention cursor: %w", err)
	}
	if _, _, perr := parseRetentionCursor(cursor); perr != nil {
		cursor = ""
	}
	res, err := s.Retention(ctx, policy, cursor)
	if err != nil {
		return true, res, err
	}
	if !policy.DryRun {
		if err := s.do(ctx, c.B().Set().Key(keys.RetentionCursor(s.cfg.Prefix)).Value(res.Cursor).Build()).Error(); err != nil {
			return true, res, fmt.Errorf("a2redis: saving the retention cursor: %w", err)
		}
	}
	return true, res, nil
}

// parseRetentionCursor reads '<node>:<scan cursor>' ("" is the start).
func parseRetentionCursor(cursor string) (int, uint64, error) {
	if cursor == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(cursor, ":")
	node, err1 := strconv.Atoi(a)
	scan, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || node < 0 {
		return 0, 0, check.Invalid("cursor", "is not a retention cursor (%q)", cursor)
	}
	return node, scan, nil
}

package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// Page sizes of the cursor and dead-letter listings.
const (
	// DefaultPageLimit is PageRequest.Limit's default, and the page size
	// Cursors and DeadLetters read with.
	DefaultPageLimit = 256
	// MaxPageLimit is the largest PageRequest.Limit.
	MaxPageLimit = 1000
)

// PageRequest asks for one page of a listing (CursorsPage,
// DeadLettersPage). Each page is one script call whose work its limit
// bounds, so listing a session of any size never holds Redis long.
type PageRequest struct {
	// After continues the listing where a page ended: that page's Next.
	// Empty starts the listing.
	After string
	// Limit is the most items the page holds. Default DefaultPageLimit,
	// at most MaxPageLimit.
	Limit int
}

// CursorPage is one page of a session's cursors.
type CursorPage struct {
	// Cursors are the page's cursors, sorted as Cursors sorts them (the
	// pages are not in that order: lane and log cursors come first, then
	// event cursors). A page may hold fewer than the limit, or none, and
	// still not be the last.
	Cursors []a2redis.Cursor
	// Next continues the listing (PageRequest.After); empty after the last
	// page.
	Next string
}

// DeadLetterPage is one page of a session's dead-lettered heads.
type DeadLetterPage struct {
	// DeadLetters are the page's heads, sorted by index then consumer; the
	// pages follow each other in index order. A page may hold fewer than
	// the limit and still not be the last.
	DeadLetters []a2redis.HeadEvent
	// Next continues the listing (PageRequest.After); empty after the last
	// page.
	Next string
}

// pageLimit checks a page request's limit and applies its default.
func pageLimit(req PageRequest) (int, error) {
	switch {
	case req.Limit == 0:
		return DefaultPageLimit, nil
	case req.Limit < 0 || req.Limit > MaxPageLimit:
		return 0, check.Invalid("Limit", "must be between 1 and %d (got %d)", MaxPageLimit, req.Limit)
	}
	return req.Limit, nil
}

// Continuations are opaque to callers: 'h<scan cursor>:<records listed>'
// in the cursors hash, 'e<score>:<member>' in the runnable set ('e' alone:
// from its start) for cursors; 'd<score>:<member>' for dead letters. A member is a cursor id, which may
// hold anything, so it comes last.

var errAfter = check.Invalid("After", "is not the Next of a page of this listing")

// scoreAfter splits '<score>:<member>' and checks the score.
func scoreAfter(s string) ([]string, error) {
	score, member, ok := strings.Cut(s, ":")
	if _, err := strconv.ParseFloat(score, 64); err != nil || !ok || member == "" {
		return nil, errAfter
	}
	return []string{score, member}, nil
}

// cursorsStart is the cursors script's ARGV[2:] for a continuation.
func cursorsStart(after string) ([]string, error) {
	switch {
	case after == "":
		return []string{"h", "0", "0"}, nil
	case after[0] == 'h':
		scan, skip, ok := strings.Cut(after[1:], ":")
		_, err1 := strconv.ParseUint(scan, 10, 64)
		_, err2 := strconv.ParseUint(skip, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, errAfter
		}
		return []string{"h", scan, skip}, nil
	case after == "e":
		return []string{"e", "", ""}, nil
	case after[0] == 'e':
		rest, err := scoreAfter(after[1:])
		if err != nil {
			return nil, err
		}
		return append([]string{"e"}, rest...), nil
	}
	return nil, errAfter
}

// CursorsPage returns one page of the session's cursors (see Cursors for
// which): at most Limit of them, from one script call whose work that
// bounds. Pass each page's Next as the next request's After until it is
// empty. Pages read while the session changes show it as it was at each
// page: a cursor that moves in between may be listed twice or missed.
func (s *Store) CursorsPage(ctx context.Context, session string, req PageRequest) (CursorPage, error) {
	if err := checkSession(session); err != nil {
		return CursorPage{}, err
	}
	limit, err := pageLimit(req)
	if err != nil {
		return CursorPage{}, err
	}
	start, err := cursorsStart(req.After)
	if err != nil {
		return CursorPage{}, err
	}
	reply, err := s.run(ctx, "cursors", session, append([]string{itoa(int64(limit))}, start...))
	if err != nil {
		return CursorPage{}, err
	}
	if len(reply) == 0 {
		return CursorPage{}, fmt.Errorf("%w: cursors replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	page := CursorPage{Cursors: make([]a2redis.Cursor, 0, len(reply)-1)}
	switch next := array(reply[0]); len(next) {
	case 0:
	case 3:
		switch {
		case text(next[0]) == "h":
			page.Next = "h" + text(next[1]) + ":" + text(next[2])
		case text(next[2]) == "":
			page.Next = "e" // the runnable set, from its start
		default:
			page.Next = "e" + text(next[1]) + ":" + text(next[2])
		}
	default:
		return CursorPage{}, fmt.Errorf("%w: cursors replied next %v", a2redis.ErrUnexpectedReply, reply[0])
	}
	for _, m := range reply[1:] {
		parts := array(m)
		if len(parts) != 5 {
			return CursorPage{}, fmt.Errorf("%w: cursor tuple %v", a2redis.ErrUnexpectedReply, m)
		}
		kind, lane := cursorOf(text(parts[1]))
		c := a2redis.Cursor{Consumer: text(parts[0]), Lane: lane, Kind: kind, HeadState: headState(parts[4])}
		if c.Position, err = asInt(parts[2]); err != nil {
			return CursorPage{}, err
		}
		if !parts[3].IsNil() {
			if c.Head, err = asInt(parts[3]); err != nil {
				return CursorPage{}, err
			}
		}
		page.Cursors = append(page.Cursors, c)
	}
	sortCursors(page.Cursors)
	return page, nil
}

// Cursors returns every lane and log cursor of a session and every event
// cursor with a head, sorted by consumer, then lane (event cursors last),
// then head. It reads them page by page (CursorsPage, DefaultPageLimit at
// a time) and lists each cursor once, as its last page showed it.
func (s *Store) Cursors(ctx context.Context, session string) ([]a2redis.Cursor, error) {
	out := []a2redis.Cursor{}
	at := map[string]int{}
	req := PageRequest{}
	for {
		page, err := s.CursorsPage(ctx, session, req)
		if err != nil {
			return nil, err
		}
		for _, c := range page.Cursors {
			key := c.Consumer + "\x00" + string(c.Kind) + "\x00" + c.Lane
			if c.Kind == a2redis.EventCursor {
				key += "\x00" + itoa(c.Head)
			}
			if i, ok := at[key]; ok {
				out[i] = c
				continue
			}
			at[key] = len(out)
			out = append(out, c)
		}
		if page.Next == "" {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		req.After = page.Next
	}
	sortCursors(out)
	return out, nil
}

// sortCursors sorts by consumer, then lane (event cursors last), then head.
func sortCursors(cursors []a2redis.Cursor) {
	sort.SliceStable(cursors, func(i, j int) bool {
		a, b := cursors[i], cursors[j]
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		if (a.Kind == a2redis.EventCursor) != (b.Kind == a2redis.EventCursor) {
			return b.Kind == a2redis.EventCursor
		}
		if a.Lane != b.Lane {
			return a.Lane < b.Lane
		}
		return a.Head < b.Head
	})
}

// DeadLettersPage returns one page of the session's dead-lettered heads,
// lowest index first: at most Limit of them, from one script call whose
// work that bounds. Pass each page's Next as the next request's After
// until it is empty. A head dead-lettered or redriven while the pages are
// read may be listed or not.
func (s *Store) DeadLettersPage(ctx context.Context, session string, req PageRequest) (DeadLetterPage, error) {
	if err := checkSession(session); err != nil {
		return DeadLetterPage{}, err
	}
	limit, err := pageLimit(req)
	if err != nil {
		return DeadLetterPage{}, err
	}
	start := []string{"", ""}
	if req.After != "" {
		if req.After[0] != 'd' {
			return DeadLetterPage{}, errAfter
		}
		if start, err = scoreAfter(req.After[1:]); err != nil {
			return DeadLetterPage{}, err
		}
	}
	reply, err := s.run(ctx, "dead_letters", session, append([]string{itoa(int64(limit))}, start...))
	if err != nil {
		return DeadLetterPage{}, err
	}
	page, err := deadLetterPage(session, reply)
	if err != nil || len(page.DeadLetters) == 0 {
		return page, err
	}
	// The events, read after the page: stored events never change, and a
	// head whose event a clear and a reclaim deleted meanwhile belongs to a
	// past lifetime.
	indexes := make([]int64, len(page.DeadLetters))
	for i, h := range page.DeadLetters {
		indexes[i] = h.Index
	}
	events, err := s.events(ctx, session, indexes)
	if err != nil {
		return DeadLetterPage{}, err
	}
	heads := page.DeadLetters[:0]
	for _, h := range page.DeadLetters {
		if ev, ok := events[h.Index]; ok {
			h.StoredEvent = ev
			heads = append(heads, h)
		}
	}
	page.DeadLetters = heads
	return page, nil
}

// deadLetterPage decodes a dead_letters reply; the heads' events are left
// for DeadLettersPage.
func deadLetterPage(session string, reply []rueidis.RedisMessage) (DeadLetterPage, error) {
	if len(reply) == 0 {
		return DeadLetterPage{}, fmt.Errorf("%w: dead_letters replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	page := DeadLetterPage{DeadLetters: make([]a2redis.HeadEvent, 0, len(reply)-1)}
	switch next := array(reply[0]); len(next) {
	case 0:
	case 2:
		page.Next = "d" + text(next[0]) + ":" + text(next[1])
	default:
		return DeadLetterPage{}, fmt.Errorf("%w: dead_letters replied next %v", a2redis.ErrUnexpectedReply, reply[0])
	}
	for _, m := range reply[1:] {
		parts := array(m)
		if len(parts) != 4 {
			return DeadLetterPage{}, fmt.Errorf("%w: dead letter %v", a2redis.ErrUnexpectedReply, m)
		}
		index, err := asInt(parts[2])
		if err != nil {
			return DeadLetterPage{}, err
		}
		kind, lane := cursorOf(text(parts[1]))
		page.DeadLetters = append(page.DeadLetters, a2redis.HeadEvent{
			StoredEvent: a2redis.StoredEvent{Session: session, Index: index},
			Consumer:    text(parts[0]), Lane: lane, Kind: kind, HeadState: headState(parts[3]),
		})
	}
	sortHeads(page.DeadLetters)
	return page, nil
}

// DeadLetters returns the session's dead-lettered heads, sorted by index
// then consumer. It reads them page by page (DeadLettersPage,
// DefaultPageLimit at a time) and lists each head once.
func (s *Store) DeadLetters(ctx context.Context, session string) ([]a2redis.HeadEvent, error) {
	out := []a2redis.HeadEvent{}
	seen := map[string]bool{}
	req := PageRequest{}
	for {
		page, err := s.DeadLettersPage(ctx, session, req)
		if err != nil {
			return nil, err
		}
		for _, h := range page.DeadLetters {
			key := h.Consumer + "\x00" + string(h.Kind) + "\x00" + h.Lane + "\x00" + itoa(h.Index)
			if !seen[key] {
				seen[key] = true
				out = append(out, h)
			}
		}
		if page.Next == "" {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		req.After = page.Next
	}
	sortHeads(out)
	return out, nil
}

package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// SnapshotWrite is one snapshot of a reducer's state.
type SnapshotWrite struct {
	// Index is the log index the state reflects (every event at or below
	// it applied). At least 0.
	Index int64
	// State is the reducer's state as JSON, stored verbatim. Required.
	State json.RawMessage
	// Pins are heads that keep this snapshot while they are unfinished:
	// a snapshot below the head snapshot survives in the history only
	// while one of them pins it. A pin holds only on a live head of the
	// current lifetime (not completed, skipped or dead-lettered); others
	// are ignored.
	Pins []a2redis.HeadRef
}

// State is what ReadState found: a snapshot and the bounds to replay from.
type State struct {
	// Snapshot is the snapshot's state JSON, or nil when there is none at
	// or below the requested index in the current lifetime.
	Snapshot json.RawMessage `json:"snapshot"`
	// SnapshotIndex is the snapshot's index (0 when there is none).
	SnapshotIndex int64 `json:"snapshot_index"`
	// Head is the session's log frontier: replay SnapshotIndex < index <=
	// Head on top of Snapshot.
	Head int64 `json:"head"`
	// ClearIndex is the latest clear marker, or 0.
	ClearIndex int64 `json:"clear_index"`
}

// ReadStateOptions tune a ReadState.
type ReadStateOptions struct {
	// Through, when positive, asks for the newest snapshot at or below
	// that index; 0 asks for the newest.
	Through int64
}

// The stored form of a snapshot: the index first, so scripts read it with a
// pattern and never decode the state. See lua/include/snapshot.lua.
func snapshotText(index int64, state json.RawMessage) string {
	var b bytes.Buffer
	b.Grow(len(state) + 32)
	b.WriteString(`{"index":`)
	b.WriteString(strconv.FormatInt(index, 10))
	b.WriteString(`,"state":`)
	b.Write(state)
	b.WriteByte('}')
	return b.String()
}

type storedSnapshot struct {
	Index *int64          `json:"index"`
	State json.RawMessage `json:"state"`
}

func parseSnapshot(text string) (int64, json.RawMessage, error) {
	var s storedSnapshot
	if err := json.Unmarshal([]byte(text), &s); err != nil || s.Index == nil || *s.Index < 0 || len(s.State) == 0 {
		return 0, nil, fmt.Errorf("%w: stored snapshot %.60q is not one this layout writes", a2redis.ErrUnexpectedReply, text)
	}
	return *s.Index, s.State, nil
}

// PutSnapshots stores snapshots of a reducer's state in a session, in one
// atomic step. The newest write becomes the head snapshot if it is at or
// above the current one (the head never moves back); every other snapshot
// is kept in the reducer's history only while a head pins it, and leaves it
// when the last pinning head completes, is skipped or dead-letters. Writes
// below the latest clear marker are dropped, and pins only hold on live
// heads of the current lifetime. Writes at the same index are merged: the
// last state wins and their pins add up.
func (s *Store) PutSnapshots(ctx context.Context, session, reducer string, writes []SnapshotWrite) error {
	if err := checkSession(session); err != nil {
		return err
	}
	if err := checkName("reducer", reducer); err != nil {
		return err
	}
	sorted, err := check.Snapshots(len(writes), s.cfg.MaxBatch, func(i int) (int64, json.RawMessage, []a2redis.HeadRef) {
		return writes[i].Index, writes[i].State, writes[i].Pins
	})
	if err != nil {
		return err
	}
	if len(sorted) == 0 {
		return nil
	}
	args := make([]string, 0, 2+len(sorted)*3)
	args = append(args, reducer, itoa(int64(len(sorted))))
	for _, m := range sorted {
		text := snapshotText(m.Index, m.State)
		// The state goes with its index in one argument.
		if err := s.checkServerBulk(fmt.Sprintf("the state at index %d", m.Index), []byte(text)); err != nil {
			return err
		}
		args = append(args, itoa(m.Index), text, itoa(int64(len(m.Pins))))
		for _, pin := range m.Pins {
			args = append(args, pin.Consumer, tagOf(pin.Lane), itoa(pin.Index))
		}
	}
	reply, err := s.run(ctx, "put_snapshots", session, args)
	if err != nil {
		return err
	}
	return putSnapshotsResult(session, reducer, reply)
}

func putSnapshotsResult(session, reducer string, reply []rueidis.RedisMessage) error {
	switch word(reply, 0) {
	case "ok":
		return nil
	case "invalid":
		return errorf(a2redis.ErrUnexpectedReply, session, "the head snapshot of reducer %q is not one this layout writes; nothing was written", reducer)
	}
	return fmt.Errorf("%w: put_snapshots replied %v", a2redis.ErrUnexpectedReply, reply)
}

// ReadState reads, in one atomic step, a reducer's newest snapshot at or
// below opts.Through (the newest at all when 0) of the session's current
// lifetime, the log frontier and the latest clear marker. Snapshots from
// before the clear marker are ignored.
func (s *Store) ReadState(ctx context.Context, session, reducer string, opts ReadStateOptions) (State, error) {
	if err := checkSession(session); err != nil {
		return State{}, err
	}
	if err := checkName("reducer", reducer); err != nil {
		return State{}, err
	}
	if opts.Through < 0 {
		return State{}, check.Invalid("Through", "is negative (%d)", opts.Through)
	}
	through := ""
	if opts.Through > 0 {
		through = itoa(opts.Through)
	}
	reply, err := s.run(ctx, "read_state", session, []string{reducer, through})
	if err != nil {
		return State{}, err
	}
	return readStateResult(session, reducer, reply)
}

func readStateResult(session, reducer string, reply []rueidis.RedisMessage) (State, error) {
	switch word(reply, 0) {
	case "ok":
	case "invalid":
		return State{}, errorf(a2redis.ErrUnexpectedReply, session, "the head snapshot of reducer %q is not one this layout writes", reducer)
	default:
		return State{}, fmt.Errorf("%w: read_state replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	var st State
	var err error
	if text := word(reply, 1); text != "" {
		if st.SnapshotIndex, st.Snapshot, err = parseSnapshot(text); err != nil {
			return State{}, err
		}
	}
	if st.Head, err = number(reply, 2); err != nil {
		return State{}, err
	}
	if st.ClearIndex, err = number(reply, 3); err != nil {
		return State{}, err
	}
	return st, nil
}

package inspect

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/a2redis/a2redis/presence"
)

func presenceCommand() command {
	return command{
		name:    "presence",
		args:    []string{"SESSION"},
		summary: "show who is present in a session (live presence fields)",
		details: `Columns: PARTICIPANT, FIELD, SEEN (the sender's sequence number), AT (the
sender's clock at the write), EXPIRES (by the store's clock), VALUE
(compact JSON, cut at 120 characters). Expired fields are not shown; the
read prunes them, as every presence read does.
JSON: {"session","participant","field","value","seen","at","expires_at"},
one field per line (NDJSON).`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, args []string) error { return a.presence(ctx, args[0]) }}
		},
	}
}

// presenceJSON is one presence field in JSON output.
type presenceJSON struct {
	Session     string          `json:"session"`
	Participant string          `json:"participant"`
	Field       string          `json:"field"`
	Value       json.RawMessage `json:"value"`
	Seen        int64           `json:"seen"`
	At          jsonTime        `json:"at"`
	ExpiresAt   jsonTime        `json:"expires_at"`
}

func (a *app) presence(ctx context.Context, session string) error {
	cctx, cancel := a.call(ctx)
	rows, err := presence.New(a.store).Read(cctx, session)
	cancel()
	if err != nil {
		return err
	}
	if a.opts.json {
		for _, r := range rows {
			if err := writeLine(a.out, presenceJSON{
				Session: session, Participant: r.Participant, Field: r.Field, Value: rawJSON(r.Value),
				Seen: r.Seen, At: jsonTime(r.At), ExpiresAt: jsonTime(r.ExpiresAt),
			}); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.out, fmt.Sprintf("nobody is present in session %q", session), "PARTICIPANT", "FIELD", "SEEN", "AT", "EXPIRES", "VALUE")
	for _, r := range rows {
		t.row(r.Participant, r.Field, itoa(r.Seen), formatTime(r.At), formatTime(r.ExpiresAt), truncate(string(rawJSON(r.Value)), payloadWidth))
	}
	return t.close()
}

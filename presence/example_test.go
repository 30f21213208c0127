package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/a2redis/a2redis/presence"
	"github.com/a2redis/a2redis/redisstore"
)

// Each participant writes its own fields with its own clock; every field
// lives for the TTL unless written again, and a nil value deletes it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := redisstore.Dial(ctx, "redis://"+mr.Addr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "example", Clock: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	p := presence.New(store)

	// Ada's app sends a heartbeat every 10s with a 30s TTL, so a missed beat
	// or two does not drop her.
	ada := presence.Meta{Seen: 1, At: now, TTL: 30 * time.Second}
	if _, err := p.Set(ctx, "doc-7", "ada", map[string]json.RawMessage{"cursor": json.RawMessage(`{"line":3}`), "typing": json.RawMessage(`true`)}, ada); err != nil {
		panic(err)
	}
	bob := presence.Meta{Seen: 1, At: now, TTL: 30 * time.Second}
	if _, err := p.Set(ctx, "doc-7", "bob", map[string]json.RawMessage{"cursor": json.RawMessage(`{"line":9}`)}, bob); err != nil {
		panic(err)
	}
	// Ada stops typing: the delete wins over her older write.
	ada.Seen, ada.At = 2, now.Add(time.Second)
	patch, err := p.Set(ctx, "doc-7", "ada", map[string]json.RawMessage{"typing": nil}, ada)
	if err != nil {
		panic(err)
	}
	fmt.Printf("applied %s's patch: %d field(s)\n", patch.Participant, len(patch.Values))

	rows, err := p.Read(ctx, "doc-7")
	if err != nil {
		panic(err)
	}
	for _, r := range rows {
		fmt.Printf("%s %s = %s until %s\n", r.Participant, r.Field, r.Value, r.ExpiresAt.UTC().Format(time.TimeOnly))
	}
	// Output:
	// applied ada's patch: 1 field(s)
	// ada cursor = {"line":3} until 03:04:35
	// bob cursor = {"line":9} until 03:04:35
}

package presence_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/presence"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type env struct {
	ctx    context.Context
	client rueidis.Client
	clock  *redistest.Clock
	store  *redisstore.Store
	p      *presence.Presence
	prefix string
}

func each(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			client := tg.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			t.Cleanup(cancel)
			ck := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
			prefix := redistest.Prefix(t)
			store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Clock: ck.Now})
			require.NoError(t, err)
			fn(t, &env{ctx: ctx, client: client, clock: ck, store: store, p: presence.New(store), prefix: prefix})
		})
	}
}

// at is a sender stamp: base plus ms.
func at(ms int64) time.Time { return time.UnixMilli(1_700_000_000_000 + ms) }

func meta(ms int64) presence.Meta { return presence.Meta{Seen: ms, At: at(ms), TTL: 10 * time.Second} }

func vals(kv ...string) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			m[kv[i]] = nil
		} else {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
	}
	return m
}

func (e *env) set(t *testing.T, participant string, values map[string]json.RawMessage, m presence.Meta) *presence.Patch {
	t.Helper()
	p, err := e.p.Set(e.ctx, "s", participant, values, m)
	require.NoError(t, err)
	return p
}

// fields returns the live rows as participant/field → value.
func (e *env) fields(t *testing.T) map[string]string {
	t.Helper()
	rows, err := e.p.Read(e.ctx, "s")
	require.NoError(t, err)
	out := map[string]string{}
	for _, r := range rows {
		out[r.Participant+"/"+r.Field] = string(r.Value)
	}
	return out
}

func (e *env) stored(t *testing.T) int64 {
	t.Helper()
	n, err := e.client.Do(e.ctx, e.client.B().Hlen().Key(keys.For(e.prefix, "s").Presence()).Build()).AsInt64()
	require.NoError(t, err)
	return n
}

func TestSetAndRead(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		p := e.set(t, "ann", vals("cursor", `{"x":1, "y":2.50}`, "name", `"Ann"`), meta(10))
		require.NotNil(t, p)
		assert.Equal(t, presence.Patch{
			Participant: "ann",
			Values:      vals("cursor", `{"x":1, "y":2.50}`, "name", `"Ann"`),
			Seen:        10,
			At:          at(10),
		}, *p)
		e.set(t, `b"o{b}`, vals("name", `"Bob"`), meta(5))

		rows, err := e.p.Read(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, rows, 3)
		assert.Equal(t, presence.Row{
			Participant: "ann", Field: "cursor", Value: json.RawMessage(`{"x":1, "y":2.50}`),
			Seen: 10, At: at(10), ExpiresAt: e.clock.Now().Add(10 * time.Second),
		}, rows[0])
		assert.Equal(t, "ann", rows[1].Participant)
		assert.Equal(t, `b"o{b}`, rows[2].Participant)

		// Sessions are isolated.
		other, err := e.p.Read(e.ctx, "other")
		require.NoError(t, err)
		assert.Empty(t, other)

		// Nothing to set: no patch.
		p, err = e.p.Set(e.ctx, "s", "ann", nil, meta(20))
		require.NoError(t, err)
		assert.Nil(t, p)
	})
}

func TestLastWriterWinsFieldByField(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.NotNil(t, e.set(t, "ann", vals("a", `1`, "b", `1`), meta(100)))

		// Older loses, field by field.
		assert.Nil(t, e.set(t, "ann", vals("a", `2`), meta(50)))
		p := e.set(t, "ann", vals("a", `3`, "c", `3`), meta(99))
		require.NotNil(t, p)
		assert.Equal(t, vals("c", `3`), p.Values, "only the new field wins")

		// A tie goes to the incoming write.
		p = e.set(t, "ann", vals("a", `4`), meta(100))
		require.NotNil(t, p)
		assert.Equal(t, vals("a", `4`), p.Values)
		assert.Equal(t, map[string]string{"ann/a": `4`, "ann/b": `1`, "ann/c": `3`}, e.fields(t))

		// Participants do not compete.
		require.NotNil(t, e.set(t, "bob", vals("a", `5`), meta(1)))
		assert.Equal(t, `4`, e.fields(t)["ann/a"])
	})
}

func TestTombstones(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.set(t, "ann", vals("a", `1`, "b", `1`), meta(100))
		p := e.set(t, "ann", vals("a", ""), meta(200))
		require.NotNil(t, p)
		assert.Equal(t, map[string]json.RawMessage{"a": nil}, p.Values)
		assert.Equal(t, map[string]string{"ann/b": `1`}, e.fields(t))
		assert.Equal(t, int64(2), e.stored(t), "the delete is kept as a tombstone")

		// An older write arriving after the delete still loses; a tie or a
		// newer one wins. JSON null deletes like nil.
		assert.Nil(t, e.set(t, "ann", vals("a", `2`), meta(150)))
		assert.Equal(t, map[string]string{"ann/b": `1`}, e.fields(t))
		require.NotNil(t, e.set(t, "ann", vals("a", `3`), meta(200)))
		assert.Equal(t, `3`, e.fields(t)["ann/a"])
		require.NotNil(t, e.set(t, "ann", vals("a", `null`), meta(300)))
		assert.NotContains(t, e.fields(t), "ann/a")

		// Once the tombstone expires (by the store clock), an older write
		// applies again.
		e.clock.Advance(11 * time.Second)
		require.NotNil(t, e.set(t, "ann", vals("a", `4`), meta(250)))
		assert.Equal(t, map[string]string{"ann/a": `4`}, e.fields(t))
	})
}

func TestExpiryByTheStoreClock(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.set(t, "ann", vals("a", `1`), presence.Meta{At: at(1), TTL: 5 * time.Second})
		e.set(t, "ann", vals("b", `1`), presence.Meta{At: at(1), TTL: 20 * time.Second})
		e.set(t, "bob", vals("a", ""), presence.Meta{At: at(1), TTL: 5 * time.Second})
		e.clock.Advance(5*time.Second - time.Millisecond)
		assert.Equal(t, map[string]string{"ann/a": `1`, "ann/b": `1`}, e.fields(t))
		assert.Equal(t, int64(3), e.stored(t))

		e.clock.Advance(time.Millisecond)
		assert.Equal(t, map[string]string{"ann/b": `1`}, e.fields(t))
		assert.Equal(t, int64(1), e.stored(t), "the read pruned the expired field and tombstone")

		// The whole-key TTL is the coarse bound: it only grows.
		pttl, err := e.client.Do(e.ctx, e.client.B().Pttl().Key(keys.For(e.prefix, "s").Presence()).Build()).AsInt64()
		require.NoError(t, err)
		assert.Greater(t, pttl, int64(10_000))

		e.clock.Advance(time.Minute)
		assert.Empty(t, e.fields(t))
		assert.Equal(t, int64(0), e.stored(t))
	})
}

func TestPruneNeverDeletesARefreshedField(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.set(t, "ann", vals("a", `1`, "b", `1`), meta(1))
		e.clock.Advance(11 * time.Second)
		// A reader saw both expired; before it prunes, a write refreshes a.
		require.NotNil(t, e.set(t, "ann", vals("a", `2`), meta(2)))
		n, err := e.store.PresencePrune(e.ctx, "s", []redisstore.PresenceField{
			{Participant: "ann", Field: "a"}, {Participant: "ann", Field: "b"}, {Participant: "ann", Field: "gone"},
		})
		require.NoError(t, err)
		assert.Equal(t, 1, n, "only b was still expired")
		assert.Equal(t, map[string]string{"ann/a": `2`}, e.fields(t))
		assert.Equal(t, int64(1), e.stored(t))
	})
}

func TestSubscribeReceivesPatches(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		patches := make(chan presence.Patch, 100)
		done := make(chan error, 1)
		go func() {
			done <- e.p.Subscribe(ctx, "s", func(p presence.Patch) { patches <- p })
		}()

		// Ping until the subscription is up.
		deadline := time.After(10 * time.Second)
		for ping := int64(1); ; ping++ {
			e.set(t, "probe", vals("ping", `1`), meta(ping))
			select {
			case p := <-patches:
				require.Equal(t, "probe", p.Participant)
			case <-time.After(20 * time.Millisecond):
				continue
			case <-deadline:
				t.Fatal("no patch arrived")
			}
			break
		}
		for len(patches) > 0 {
			<-patches
		}

		e.set(t, "ann", vals("a", `{"x": 1}`, "b", `true`), meta(100))
		assert.Nil(t, e.set(t, "ann", vals("a", `2`), meta(50)), "a losing write publishes nothing")
		e.set(t, "ann", vals("a", ""), meta(101))
		want := []presence.Patch{
			{Participant: "ann", Values: vals("a", `{"x":1}`, "b", `true`), Seen: 100, At: at(100)},
			{Participant: "ann", Values: map[string]json.RawMessage{"a": nil}, Seen: 101, At: at(101)},
		}
		// On a cluster a plain PUBLISH may go to any node, which relays it
		// over the cluster bus: two writes' patches can arrive in either
		// order (so can two whose publishes outlast PublishWait). A
		// subscriber orders them by Seen.
		// For the same reason a late probe may still come.
		var got []presence.Patch
		for len(got) < len(want) {
			select {
			case p := <-patches:
				if p.Participant != "probe" {
					got = append(got, p)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("patch missing; got %v", got)
			}
		}
		sort.Slice(got, func(i, j int) bool { return got[i].Seen < got[j].Seen })
		assert.Equal(t, want, got)
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(5 * time.Second):
			t.Fatal("Subscribe did not return after cancel")
		}
	})
}

func TestSetRejectsBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		good := presence.Meta{At: at(1), TTL: time.Second}
		cases := map[string]func() error{
			"session": func() error { _, err := e.p.Set(e.ctx, "", "ann", vals("a", `1`), good); return err },
			"participant": func() error {
				_, err := e.p.Set(e.ctx, "s", "", vals("a", `1`), good)
				return err
			},
			"participant utf8": func() error {
				_, err := e.p.Set(e.ctx, "s", "a\xff", vals("a", `1`), good)
				return err
			},
			"field": func() error { _, err := e.p.Set(e.ctx, "s", "ann", vals("", `1`), good); return err },
			"field utf8": func() error {
				_, err := e.p.Set(e.ctx, "s", "ann", vals("\xfe", `1`), good)
				return err
			},
			"value": func() error {
				_, err := e.p.Set(e.ctx, "s", "ann", vals("a", `1`, "b", `{"x"`), good)
				return err
			},
			"at": func() error {
				_, err := e.p.Set(e.ctx, "s", "ann", vals("a", `1`), presence.Meta{TTL: time.Second})
				return err
			},
			"ttl": func() error {
				_, err := e.p.Set(e.ctx, "s", "ann", vals("a", `1`), presence.Meta{At: at(1)})
				return err
			},
			"read":      func() error { _, err := e.p.Read(e.ctx, ""); return err },
			"subscribe": func() error { return e.p.Subscribe(e.ctx, "", func(presence.Patch) {}) },
		}
		for name, call := range cases {
			assert.ErrorIs(t, call(), a2redis.ErrInvalidArgument, name)
		}
		assert.Equal(t, int64(0), e.stored(t), "nothing was written")
	})
}

func TestDecodePatch(t *testing.T) {
	p, err := presence.DecodePatch([]byte(`{"participant":"ann","seen":3,"at":1700000000005,"values":{"a":[1, 2],"b":null}}`))
	require.NoError(t, err)
	assert.Equal(t, presence.Patch{Participant: "ann", Seen: 3, At: at(5), Values: map[string]json.RawMessage{"a": json.RawMessage(`[1, 2]`), "b": nil}}, p)
	_, err = presence.DecodePatch([]byte(`{"f":3}`))
	assert.Error(t, err)
	_, err = presence.DecodePatch([]byte(`nope`))
	assert.Error(t, err)
}

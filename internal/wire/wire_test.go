package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/wire"
)

func TestCodecRoundTrip(t *testing.T) {
	entries := []wire.Entry{
		{Index: 7, ID: "a", Type: "order.created", Payload: json.RawMessage(`{"b": 1.50, "a":[1, 2e3, -0], "s":"\u00e9\"x"}`)},
		{Index: 8, ID: `q"uote\ and ünïcode 🚀`, Type: "t", Payload: json.RawMessage(`"str"`)},
		{Index: 9, ID: "n", Type: "t", Payload: json.RawMessage(`null`)},
		{Index: 10, ID: "big", Type: "t", Payload: json.RawMessage(`12345678901234567890123`)},
	}
	raw := wire.Encode(10, 1_800_000_000_123, entries)
	m, err := wire.Decode(raw)
	require.NoError(t, err)
	assert.Equal(t, wire.Message{Frontier: 10, CreatedAt: 1_800_000_000_123, Entries: entries}, m)
	for i, e := range m.Entries {
		assert.Equal(t, string(entries[i].Payload), string(e.Payload), "payload %d kept verbatim", i)
	}
}

func TestCodecNilPayloadIsNull(t *testing.T) {
	m, err := wire.Decode(wire.Encode(1, 5, []wire.Entry{{Index: 1, ID: "a", Type: "t"}}))
	require.NoError(t, err)
	require.Len(t, m.Entries, 1)
	assert.Equal(t, "null", string(m.Entries[0].Payload))
}

func TestCodecFallsBackToBare(t *testing.T) {
	bare := wire.Message{Frontier: 42, Bare: true}
	big := json.RawMessage(`"` + strings.Repeat("x", wire.MaxCarried) + `"`)
	half := json.RawMessage(`"` + strings.Repeat("y", wire.MaxCarried/2) + `"`)
	cases := map[string][]wire.Entry{
		"one big payload":      {{Index: 42, ID: "a", Type: "t", Payload: big}},
		"a batch over 32 KiB":  {{Index: 41, ID: "a", Type: "t", Payload: half}, {Index: 42, ID: "b", Type: "t", Payload: half}},
		"invalid UTF-8 id":     {{Index: 42, ID: "a\xff", Type: "t"}},
		"invalid UTF-8 type":   {{Index: 42, ID: "a", Type: "\xc3("}},
		"no entries announced": nil,
	}
	for name, entries := range cases {
		raw := wire.Encode(42, 9, entries)
		assert.LessOrEqual(t, len(raw), wire.MaxCarried, name)
		m, err := wire.Decode(raw)
		require.NoError(t, err, name)
		assert.Equal(t, bare, m, name)
	}
	m, err := wire.Decode(wire.EncodeBare(42))
	require.NoError(t, err)
	assert.Equal(t, bare, m)

	// Just under the limit still carries.
	fits := json.RawMessage(`"` + strings.Repeat("z", wire.MaxCarried-100) + `"`)
	raw := wire.Encode(1, 1, []wire.Entry{{Index: 1, ID: "a", Type: "t", Payload: fits}})
	require.LessOrEqual(t, len(raw), wire.MaxCarried)
	m, err = wire.Decode(raw)
	require.NoError(t, err)
	assert.False(t, m.Bare)
	assert.Equal(t, string(fits), string(m.Entries[0].Payload))
}

func TestDecodeRejectsMalformed(t *testing.T) {
	for _, raw := range []string{
		``, `nope`, `[]`, `{}`, `{"e":[]}`, `{"f":"1"}`,
		`{"f":1,"e":[[1,"a","t"]]}`, `{"f":1,"e":[["1","a","t",null]]}`,
		`{"f":1,"e":[[1,2,"t",null]]}`, `{"f":1,"e":[[1,"a",3,null]]}`, `{"f":1,"e":[1]}`,
	} {
		_, err := wire.Decode([]byte(raw))
		assert.ErrorIs(t, err, wire.ErrMalformed, raw)
	}
}

func TestEncodeQuotesIDsAndTypes(t *testing.T) {
	for _, s := range []string{"plain", `q"uote`, `back\slash`, "nul\x00", "tab\tnl\n", "\x1f", "é日本", "\u2028", "<&>", ""} {
		msg, err := wire.Decode(wire.Encode(1, 2, []wire.Entry{{Index: 1, ID: s, Type: s + "t", Payload: []byte(`1`)}}))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if len(msg.Entries) != 1 || msg.Entries[0].ID != s || msg.Entries[0].Type != s+"t" {
			t.Fatalf("%q round-tripped as %+v", s, msg)
		}
	}
}

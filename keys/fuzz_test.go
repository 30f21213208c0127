package keys

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// hashTag implements Redis Cluster's hash-tag rule: the substring between
// the first '{' and the first '}' after it, if that substring is non-empty;
// otherwise the whole key is hashed (returned with ok=false).
func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key, false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key, false
	}
	return key[open+1 : open+1+end], true
}

// trickyStrings seed every fuzz target.
var trickyStrings = []string{
	"", "s1", "s2", `"`, `\`, "{", "}", "{}", "}{", ":", "count", "id:", "id:x",
	`s1"}:count`, `"}:`, `a"}:{b`, "\x00", "\n", "\x1f", "\x7f", "\xff", "\xc3",
	"\xc3\xa9", "é", "日本", "\u2028", "\ufffd", "\xed\xa0\x80", `\u0000`,
	`\u007b`, `\"`, "\\\"", "schema", "type:6d7367", "heads:0", "snap:r",
	"snap-history:r", "presence-events", "1:c#7", "L", "G", "#", "s:x", "0123456789abcdef01234567",
}

// keyKinds is the number of key/channel kinds keyOf knows.
const keyKinds = 24

// keyOf builds key kind k of session s. It also returns the part of
// (arg, n) that the key actually depends on, so that callers can compare
// inputs exactly.
func keyOf(s Session, k uint8, arg string, n int64) (key string, input string) {
	switch k % keyKinds {
	case 0:
		return s.Count(), "count"
	case 1:
		return s.Clear(), "clear"
	case 2:
		return s.Log(), "log"
	case 3:
		return s.ID(arg), "id\x00" + arg
	case 4:
		return s.Heads(n), "heads\x00" + strconv.FormatInt(n, 10)
	case 5:
		return s.Cursors(), "cursors"
	case 6:
		return s.Runnable(), "runnable"
	case 7:
		return s.Typed(), "typed"
	case 8:
		return s.Type(arg), "type\x00" + arg
	case 9:
		return s.Pins(), "pins"
	case 10:
		return s.Snap(arg), "snap\x00" + arg
	case 11:
		return s.SnapHistory(arg), "snaphistory\x00" + arg
	case 12:
		return s.SnapReducers(), "snapreducers"
	case 13:
		return s.Presence(), "presence"
	case 14:
		return s.Live(), "live"
	case 15:
		return s.NotifyChannel(), "notifychannel"
	case 16:
		return s.IDBlock(arg), "idblock\x00" + arg
	case 17:
		return s.Sweep(), "sweep"
	case 18:
		return s.Followed(), "followed"
	case 19:
		return s.Listed(), "listed"
	case 20:
		return s.Flight(), "flight"
	case 21:
		return s.Skip(), "skip"
	case 22:
		return s.Floor(), "floor"

	default:
		return s.PresenceChannel(), "presencechannel"
	}
}

func validPrefixOr(p, fallback string) string {
	if ValidatePrefix(p) != nil {
		return fallback
	}
	return p
}

// FuzzTag checks that Tag is injective, brace-free and valid JSON.
func FuzzTag(f *testing.F) {
	for _, a := range trickyStrings {
		for _, b := range []string{"", "s1", `"`, "\xff", "\u00ff", `\u00ff`} {
			f.Add(a, b)
		}
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tb := Tag(a), Tag(b)
		if strings.ContainsAny(ta, "{}") {
			t.Fatalf("Tag(%q) = %q contains a brace", a, ta)
		}
		if (a == b) != (ta == tb) {
			t.Fatalf("Tag(%q) = %q, Tag(%q) = %q: injectivity broken", a, ta, b, tb)
		}
		if back, ok := ParseTag(ta); !ok || back != a {
			t.Fatalf("ParseTag(Tag(%q)) = %q, %v", a, back, ok)
		}
		if !json.Valid([]byte(ta)) {
			t.Fatalf("Tag(%q) = %q is not a JSON string", a, ta)
		}
		if utf8.ValidString(a) {
			var back string
			if err := json.Unmarshal([]byte(ta), &back); err != nil || back != a {
				t.Fatalf("json.Unmarshal(Tag(%q)) = %q, %v", a, back, err)
			}
		}
	})
}

// FuzzKeyInjective checks that two (prefix, session, key kind, argument)
// inputs give the same key exactly when they are the same input, across all
// key kinds, channels and the schema key.
func FuzzKeyInjective(f *testing.F) {
	for i, s := range trickyStrings {
		o := trickyStrings[(i*7+3)%len(trickyStrings)]
		for k := uint8(0); k < keyKinds; k++ {
			f.Add("a2", s, k, o, int64(i), "a2", o, uint8((int(k)*5+i)%keyKinds), s, int64(-i))
		}
	}
	// Cross-kind and cross-session pairs that look alike.
	f.Add("a2", "s1", uint8(3), "x", int64(0), "a2", "s2", uint8(0), "", int64(0))        // A.ID(x) vs B.Count()
	f.Add("a2", "s1", uint8(3), "count", int64(0), "a2", "s1", uint8(0), "", int64(0))    // ID("count") vs Count()
	f.Add("a2", `s1"}:id:x`, uint8(0), "", int64(0), "a2", "s1", uint8(3), "x", int64(0)) // session breaking out
	f.Add("a2", "s1", uint8(10), "r", int64(0), "a2", "s1", uint8(11), "r", int64(0))     // snap vs snap-history
	f.Add("a2", "s1", uint8(10), "", int64(0), "a2", "s1", uint8(12), "", int64(0))       // snap: vs snap-reducers
	f.Add("a2", "s1", uint8(8), "", int64(0), "a2", "s1", uint8(7), "", int64(0))         // type: vs typed
	f.Add("a2", "s1", uint8(13), "", int64(0), "a2", "s1", uint8(17), "", int64(0))       // presence vs presence-events
	f.Add("a2", "s1", uint8(4), "", int64(1), "a2", "s1", uint8(4), "", int64(-1))        // heads sign
	f.Add("a", "s1", uint8(0), "", int64(0), "a:{\"s1\"}", "s1", uint8(0), "", int64(0))  // invalid prefix falls back
	f.Add("a", "b:{x}", uint8(0), "", int64(0), "a:b", "x", uint8(0), "", int64(0))       // different prefixes
	f.Add("a2", "\xc3", uint8(1), "", int64(0), "a2", "\u00c3", uint8(1), "", int64(0))   // invalid byte vs U+00C3
	f.Add("a2", "\xc3\xa9", uint8(2), "", int64(0), "a2", "é", uint8(2), "", int64(0))    // same bytes
	f.Add("a2", "\n", uint8(2), "", int64(0), "a2", `\u000a`, uint8(2), "", int64(0))     // escape vs literal
	f.Add("a2", "s1", uint8(8), "A", int64(0), "a2", "s1", uint8(8), "a", int64(0))       // type case
	f.Fuzz(func(t *testing.T, p1, s1 string, k1 uint8, a1 string, n1 int64, p2, s2 string, k2 uint8, a2 string, n2 int64) {
		p1, p2 = validPrefixOr(p1, "a2"), validPrefixOr(p2, "a2")
		key1, in1 := keyOf(For(p1, s1), k1, a1, n1)
		key2, in2 := keyOf(For(p2, s2), k2, a2, n2)
		same := p1 == p2 && s1 == s2 && in1 == in2
		if same != (key1 == key2) {
			t.Fatalf("inputs equal=%v but keys equal=%v:\n  (%q,%q,%q) -> %q\n  (%q,%q,%q) -> %q",
				same, key1 == key2, p1, s1, in1, key1, p2, s2, in2, key2)
		}
		for _, p := range []string{p1, p2} {
			if key1 == Schema(p) || key2 == Schema(p) {
				t.Fatalf("a session key equals Schema(%q)", p)
			}
		}
	})
}

// FuzzHashTag checks that every key of a session hashes on exactly
// Tag(session), starts with prefix+":{", never carries another session's
// tag and never equals the schema key, whatever the ids, types and reducer
// names are.
func FuzzHashTag(f *testing.F) {
	for i, s := range trickyStrings {
		f.Add("a2", s, trickyStrings[(i+1)%len(trickyStrings)], trickyStrings[(i*3+2)%len(trickyStrings)], int64(i))
	}
	f.Add("a2", "s1", "s2", `x"}:{"s2"}`, int64(0))
	f.Add("app:v1", "", `""`, "}{", int64(-1))
	f.Add("p", "{s2}", "s2", "{s2}", int64(1000))
	f.Fuzz(func(t *testing.T, prefix, session, other, arg string, n int64) {
		prefix = validPrefixOr(prefix, "a2")
		s := For(prefix, session)
		tag := Tag(session)
		if strings.ContainsAny(tag, "{}") {
			t.Fatalf("Tag(%q) = %q contains a brace", session, tag)
		}
		if want := prefix + ":{" + tag + "}:"; s.Base() != want {
			t.Fatalf("Base() = %q, want %q", s.Base(), want)
		}
		otherTag := Tag(other)
		if (session == other) != (tag == otherTag) {
			t.Fatalf("Tag(%q)==Tag(%q) is %v", session, other, tag == otherTag)
		}
		for k := uint8(0); k < keyKinds; k++ {
			key, in := keyOf(s, k, arg, n)
			got, ok := hashTag(key)
			if !ok || got != tag {
				t.Fatalf("%s of session %q: key %q hashes on %q (tagged=%v), want %q", in, session, key, got, ok, tag)
			}
			if session != other && got == otherTag {
				t.Fatalf("%s of session %q: key %q carries the tag of %q", in, session, key, other)
			}
			if !strings.HasPrefix(key, prefix+":{") || !strings.HasPrefix(key, s.Base()) {
				t.Fatalf("key %q does not start with %q", key, s.Base())
			}
			if key == Schema(prefix) {
				t.Fatalf("key %q equals the schema key", key)
			}
		}
		if tg, ok := hashTag(Schema(prefix)); ok {
			t.Fatalf("Schema(%q) has hash tag %q", prefix, tg)
		}
	})
}

// registryKey builds key kind k of the worker registry of prefix p (0: a
// worker's record, 1: the listing zset) and the input it depends on.
func registryKey(p string, k uint8, id string) (key, input string) {
	if k%2 == 0 {
		return Worker(p, id), "worker\x00" + id
	}
	return Workers(p), "workers"
}

// FuzzWorkerKeys checks that the worker registry's keys are injective in
// (prefix, kind, id), all hash on exactly workersTag, and never equal a
// session key, a ready-index key or a global key, whatever the worker id.
func FuzzWorkerKeys(f *testing.F) {
	for i, s := range trickyStrings {
		o := trickyStrings[(i*7+3)%len(trickyStrings)]
		f.Add("a2", uint8(i), s, "a2", uint8(i+1), o, s, uint8(i), int64(i))
	}
	f.Add("a2", uint8(0), "x", "a2", uint8(0), "x}", "w", uint8(0), int64(0))
	f.Add("a2", uint8(0), "s", "a2", uint8(1), "", "w", uint8(19), int64(0))
	f.Add("a2", uint8(0), "", "a2", uint8(1), "", `"w"`, uint8(2), int64(0))
	f.Fuzz(func(t *testing.T, p1 string, k1 uint8, id1 string, p2 string, k2 uint8, id2 string, session string, sk uint8, n int64) {
		p1, p2 = validPrefixOr(p1, "a2"), validPrefixOr(p2, "a2")
		key1, in1 := registryKey(p1, k1, id1)
		key2, in2 := registryKey(p2, k2, id2)
		same := p1 == p2 && in1 == in2
		if same != (key1 == key2) {
			t.Fatalf("inputs equal=%v but keys equal=%v: (%q,%q) -> %q, (%q,%q) -> %q", same, key1 == key2, p1, in1, key1, p2, in2, key2)
		}
		for _, key := range []string{key1, key2} {
			if tag, ok := hashTag(key); !ok || tag != workersTag {
				t.Fatalf("%q hashes on %q (tagged %v), want %q", key, tag, ok, workersTag)
			}
		}
		sessKey, _ := keyOf(For(p1, session), sk, session, n)
		ready := ReadyFor(p1, int(n%64))
		for _, other := range []string{sessKey, Schema(p1), ReadyShards(p1), RepairLock(p1), ready.Index(), ready.Versions(), ready.WorkChannel()} {
			if key1 == other {
				t.Fatalf("registry key %q equals another key", key1)
			}
		}
	})
}

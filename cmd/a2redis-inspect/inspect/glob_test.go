package inspect

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/a2redis/a2redis/keys"
)

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything/at:all", true},
		{"a*", "abc", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"*a*b*", "xxaxxbxx", true},
		{"**b", "ab", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"[abc]x", "bx", true},
		{"[abc]x", "dx", false},
		{"[^abc]x", "dx", true},
		{"[^abc]x", "ax", false},
		{"[a-c]", "b", true},
		{"[c-a]", "b", true},
		{"[a-c]", "d", false},
		{`[\]]`, "]", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`a\?`, "a?", true},
		{"order-*", "order-42", true},
		{"order-*", "orders", false},
		{"é*", "été", true},
		{"?", "é", false}, // byte-wise, like SCAN MATCH
		{"??", "é", true},
	} {
		assert.Equal(t, tc.want, globMatch(tc.p, tc.s), "globMatch(%q, %q)", tc.p, tc.s)
	}
	assert.Error(t, checkGlob("[abc"))
	assert.Error(t, checkGlob(`a[\]`))
	assert.NoError(t, checkGlob(`a[\]]*\[`))
	assert.Equal(t, `a\*b\?c\[d\]e\\f`, keys.EscapeGlob(`a*b?c[d]e\f`))
}

func TestPushdownGlob(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "*", pushdownGlob(""))
	assert.Equal(t, "order-*", pushdownGlob("order-*"))
	assert.Equal(t, "été*", pushdownGlob("été*"))
	for _, p := range []string{"a?", "[ab]", `a\*`, `a"b`, "a{b", "a}", "a\nb", "\xff"} {
		assert.Equal(t, "*", pushdownGlob(p), "%q is matched by the client only", p)
	}
}

func TestSessionOfLogKey(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"a2", "app:v1", `we*ird?[x]\`, `q"uote`} {
		head, tail := logKeyShape(prefix)
		assert.Equal(t, prefix+`:{"`, head)
		assert.Equal(t, `"}:log`, tail)
		for _, s := range []string{"s", "", `a"b`, `a\b`, "{x}", "\x00\x1f\x7f", "é日本", "\xff\xc3", `"}:log`, `\u0000`} {
			got, ok := keys.SessionOfLogKey(prefix, keys.For(prefix, s).Log())
			assert.True(t, ok, "%q", s)
			assert.Equal(t, s, got)
			assert.True(t, globMatch(keys.EscapeGlob(head)+pushdownGlob("")+keys.EscapeGlob(tail), keys.For(prefix, s).Log()), "the SCAN pattern matches %q", s)
		}
		// Other keys the pattern may catch are not log keys.
		for _, key := range []string{
			keys.For(prefix, "s").ID(`x"}:log`),
			keys.For(prefix, "s").Count(),
			prefix + `:{"a"b"}:log`,
			prefix + `:{"\q"}:log`,
			prefix + `:{"\u007"}:log`,
			prefix + `:{"` + "\xff" + `"}:log`,
			prefix + "x" + strings.TrimPrefix(keys.For(prefix, "s").Log(), prefix),
		} {
			_, ok := keys.SessionOfLogKey(prefix, key)
			assert.False(t, ok, "%q", key)
		}
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "-", cell(""))
	assert.Equal(t, "plain é 日本", cell("plain é 日本"))
	assert.Equal(t, `a\nb`, cell("a\nb"))
	assert.Equal(t, `\x1b[2J`, cell("\x1b[2J"))
	assert.Equal(t, `\xff`, cell("\xff"))
	assert.Equal(t, `tab\there "q"`, cell("tab\there \"q\""))
	assert.Equal(t, "abcd…", truncate("abcdefgh", 5))
	assert.Equal(t, "abc", truncate("abc", 5))
	assert.Equal(t, "order-1", shellQuote("order-1"))
	assert.Equal(t, `'it'\''s'`, shellQuote("it's"))
	assert.Equal(t, "''", shellQuote(""))
	assert.Equal(t, `'a b "c"'`, shellQuote(`a b "c"`))
	assert.Equal(t, `$'it\'s\n\x1b'`, shellQuote("it's\n\x1b"))
}

package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// timeLayout is RFC 3339 with milliseconds (the store's resolution), always
// printed in UTC, so every time has the same width.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// formatTime prints t in UTC, or "-" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// jsonTime is a time in JSON: RFC 3339 UTC, null when zero.
type jsonTime time.Time

// MarshalJSON implements json.Marshaler.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	tt := time.Time(t)
	if tt.IsZero() {
		return []byte("null"), nil
	}
	return []byte(`"` + tt.UTC().Format(timeLayout) + `"`), nil
}

// rawJSON embeds stored JSON verbatim when it is valid, else as a string, so
// a foreign or damaged value never breaks the document.
func rawJSON(v []byte) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(v) {
		var b bytes.Buffer
		if json.Compact(&b, v) == nil {
			return b.Bytes()
		}
	}
	s, _ := json.Marshal(string(v))
	return s
}

// marshal encodes v without HTML escaping and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns under a header (none when header is
// empty). Rows are buffered until flush; the first
// flush fixes the column widths (from the header and the rows so far), so a
// table streamed in pages stays aligned as long as later cells fit. The
// last column is never padded.
type table struct {
	w       io.Writer
	header  []string
	widths  []int
	rows    [][]string
	started bool
	empty   string // printed instead of the header when no row ever came
}

func newTable(w io.Writer, empty string, header ...string) *table {
	return &table{w: w, header: header, empty: empty}
}

// row adds a row; cells are made safe for a terminal (see cell).
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c)
	}
	t.rows = append(t.rows, cells)
}

func (t *table) flush() error {
	if len(t.rows) == 0 {
		return nil
	}
	var b strings.Builder
	if !t.started {
		t.started = true
		for _, r := range append([][]string{t.header}, t.rows...) {
			for i, c := range r {
				if i >= len(t.widths) {
					t.widths = append(t.widths, 0)
				}
				t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
			}
		}
		if len(t.header) > 0 {
			t.line(&b, t.header)
		}
	}
	for _, r := range t.rows {
		t.line(&b, r)
	}
	t.rows = t.rows[:0]
	_, err := io.WriteString(t.w, b.String())
	return err
}

// close flushes what is left, or prints the empty message when no row came.
func (t *table) close() error {
	if err := t.flush(); err != nil {
		return err
	}
	if !t.started && t.empty != "" {
		_, err := io.WriteString(t.w, t.empty+"\n")
		return err
	}
	return nil
}

func (t *table) line(b *strings.Builder, cells []string) {
	for i, c := range cells {
		if i > 0 {
			b.WriteString("  ")
		}
		b.WriteString(c)
		if i < len(cells)-1 && i < len(t.widths) {
			if pad := t.widths[i] - utf8.RuneCountInString(c); pad > 0 {
				b.WriteString(strings.Repeat(" ", pad))
			}
		}
	}
	b.WriteByte('\n')
}

// cell makes s safe to print in a table cell: control characters, invalid
// UTF-8 and other non-printable runes are escaped Go-style (\n, \x1b …), so
// caller data can neither break a row nor send escape sequences to the
// terminal; an empty cell prints as "-".
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// printable escapes control characters, invalid UTF-8 and other
// non-printable runes Go-style; a string without any is returned as is.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	q = q[1 : len(q)-1]
	return strings.ReplaceAll(q, `\"`, `"`)
}

// truncate cuts s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// shellQuote quotes s for a shell when it needs quoting, for hints people
// copy and paste: plain words as they are, printable text in single quotes,
// anything else as bash's $'…' with escapes (so no control character
// reaches the terminal).
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == '@' || r == '+' || r == '=' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) < 0 {
		return s
	}
	if printable(s) == s {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	q := strconv.QuoteToGraphic(s)
	return "$'" + strings.ReplaceAll(q[1:len(q)-1], "'", `\'`) + "'"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// writeLine writes v as one compact JSON object on a line of its own (the
// NDJSON of list commands).
func writeLine(w io.Writer, v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// age prints how long ago t was at now, rounded to a readable unit ("-"
// for the zero time).
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

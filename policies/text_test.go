package policies

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscapeText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain text: \"quoted\" 'x' {}", "plain text: \"quoted\" 'x' {}"},
		{"\x1b[2J\x1b[Hlock acquired", `\x1b[2J\x1b[Hlock acquired`},
		{"line 1\nline 2\r\n\ttab", `line 1\nline 2\r\n\ttab`},
		{`back\slash`, `back\\slash`},
		{"bad utf-8 \xff\xfe", `bad utf-8 \xff\xfe`},
		{"ünïcödé ✓", "ünïcödé ✓"},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"nul \x00 del \x7f c1 \u009b", `nul \x00 del \x7f c1 \u009b`},
	} {
		if got := EscapeText(c.in); got != c.want {
			t.Errorf("EscapeText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEscapeTextLeavesNoControlCharacter(t *testing.T) {
	var all strings.Builder
	for c := 0; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	for r := rune(0x80); r < 0x3000; r++ {
		all.WriteRune(r)
	}
	got := EscapeText(all.String())
	for i, r := range got {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			t.Fatalf("EscapeText left %U at byte %d", r, i)
		}
	}
}

func TestTextLengthBound(t *testing.T) {
	long := strings.Repeat("é", MaxTextLen) // 2 bytes each
	e := EscapeText(long)
	if !strings.HasSuffix(e, truncatedMark) || len(e) > MaxTextLen+len(truncatedMark) || !utf8.ValidString(e) {
		t.Errorf("EscapeText of %d bytes: %d bytes, valid %v", len(long), len(e), utf8.ValidString(e))
	}
	q := QuoteText(strings.Repeat("\x1b", 5000))
	if !strings.HasSuffix(q, `"`+truncatedMark) || len(q) > 4*MaxTextLen+2+len(truncatedMark) || strings.Contains(q, "\x1b") {
		t.Errorf("QuoteText: %d bytes, suffix %q", len(q), q[len(q)-20:])
	}
	if got := QuoteText("a\nb"); got != `"a\nb"` {
		t.Errorf("QuoteText = %s", got)
	}
	exact := strings.Repeat("x", MaxTextLen)
	if EscapeText(exact) != exact || QuoteText(exact) != strconv.Quote(exact) {
		t.Error("text of exactly MaxTextLen bytes was cut")
	}
}

func TestEscapeError(t *testing.T) {
	base := fmt.Errorf("plugin said \x1b[31mred\x1b[0m\nnext line: %w", io.EOF)
	err := EscapeError(base)
	if got, want := err.Error(), `plugin said \x1b[31mred\x1b[0m\nnext line: EOF`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, io.EOF) || errors.Unwrap(err) != base {
		t.Error("the wrapped error is not visible")
	}
	if EscapeError(err) != err || EscapeError(nil) != nil {
		t.Error("EscapeError is not idempotent or nil-safe")
	}
	wrapped := fmt.Errorf("ctx: %w", err)
	if strings.ContainsAny(wrapped.Error(), "\x1b\n") {
		t.Errorf("wrapping re-exposes control characters: %q", wrapped)
	}
}

package policies

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxTextLen bounds, in bytes, the text a policy implementation (a WASM
// module, a plugin process) can put into one host error or log line:
// EscapeText and QuoteText cut longer text there.
const MaxTextLen = 1024

// truncatedMark ends text that EscapeText or QuoteText cut at MaxTextLen.
const truncatedMark = "…(truncated)"

// EscapeText makes s, text that came from a policy implementation (a
// refusal, a configure error, a log line, an error message), safe to print
// on a terminal or in a log: it keeps at most MaxTextLen bytes of s (cut at
// a character boundary and marked "…(truncated)"), doubles backslashes and
// replaces every byte of invalid UTF-8 and every character that
// strconv.IsPrint rejects by its Go escape: "\n", "\t", "\x1b", "\u202e"
// and so on. No control character (so no ANSI escape sequence) survives;
// printable text, quotes included, is unchanged. Use it where the text
// stands alone (a log message); inside an error, prefer QuoteText.
func EscapeText(s string) string {
	s, cut := truncateText(s)
	if !cut && isPlain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteByte(hexDigits[s[i]>>4])
			b.WriteByte(hexDigits[s[i]&0xf])
		case r == '\\':
			b.WriteString(`\\`)
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	if cut {
		b.WriteString(truncatedMark)
	}
	return b.String()
}

// QuoteText is s, text that came from a policy implementation, as a
// Go-quoted string (strconv.Quote) of at most MaxTextLen bytes of s,
// followed by "…(truncated)" when it was cut. Use it to embed such text in
// an error: the quotes show where it starts and ends.
func QuoteText(s string) string {
	s, cut := truncateText(s)
	q := strconv.Quote(s)
	if cut {
		q += truncatedMark
	}
	return q
}

// EscapeError returns err with its text escaped by EscapeText, for errors
// whose text may come from a policy implementation (a plugin's gRPC status
// message, a module's names in a trap's stack trace). errors.Is and
// errors.As see err. Nil stays nil.
func EscapeError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*escapedError); ok {
		return err
	}
	return &escapedError{err: err}
}

type escapedError struct{ err error }

func (e *escapedError) Error() string { return EscapeText(e.err.Error()) }
func (e *escapedError) Unwrap() error { return e.err }

const hexDigits = "0123456789abcdef"

// truncateText cuts s to at most MaxTextLen bytes at a character boundary.
func truncateText(s string) (string, bool) {
	if len(s) <= MaxTextLen {
		return s, false
	}
	n := MaxTextLen
	for n > MaxTextLen-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// isPlain reports whether s is printable ASCII without backslashes, which
// EscapeText returns as it is.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '\\' {
			return false
		}
	}
	return true
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// Text that reaches the terminal from outside the process (a policy
// module's or plugin's message inside an error, Redis error text, values
// from a configuration file, the command line) goes through safeText
// before it is printed, so that it cannot clear the screen, move the
// cursor or start a line of its own: every coordhost message is exactly
// one line.

// safeText returns s with every character that is not graphic escaped as
// in a Go string literal: C0 and C1 controls (ESC, newline, carriage
// return, tab, backspace, ...), DEL, Unicode format characters such as
// bidirectional overrides, line and paragraph separators, private-use and
// unassigned code points, and bytes that are not UTF-8. Letters, marks,
// numbers, punctuation, symbols and spaces of any script pass unchanged.
func safeText(s string) string {
	return escapeText(s, false)
}

// safeLines is safeText that keeps newlines (for multi-line text whose
// lines are printed as they are, such as a diagnostic's detail).
func safeLines(s string) string {
	return escapeText(s, true)
}

func escapeText(s string, keepNewlines bool) string {
	if isSafe(s, keepNewlines) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteByte('\n')
		case safeRune(r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// safeRune reports whether r may reach a terminal as it is.
func safeRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f
	}
	return unicode.IsGraphic(r) && r != utf8.RuneError
}

func isSafe(s string, keepNewlines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			// Not ASCII: decide rune by rune.
			for _, r := range s[i:] {
				if !safeRune(r) && !(keepNewlines && r == '\n') {
					return false
				}
			}
			// A range over a string yields RuneError for bad bytes.
			return utf8.ValidString(s[i:])
		}
		if (c < 0x20 || c == 0x7f) && !(keepNewlines && c == '\n') {
			return false
		}
	}
	return true
}

// printLine writes s as one line to w, escaped with safeText.
func printLine(w io.Writer, s string) {
	_, _ = io.WriteString(w, safeText(s)+"\n")
}

// safeDiags returns copies of diags and files that are safe to render
// with config.WriteDiagnostics: summaries are escaped with safeText,
// details with safeLines (their line breaks are part of the format), and
// in the files' source text every byte of a character that safeText would
// escape becomes '?', so that byte offsets, and with them the snippets'
// positions and highlights, stay as they were.
func safeDiags(files map[string]*hcl.File, diags hcl.Diagnostics, paths ...string) (map[string]*hcl.File, hcl.Diagnostics) {
	// File names come from the command line and may hold anything: escape
	// them wherever they are printed (ranges, the files' keys, and inside
	// details such as "There is no file at ..."), the same way everywhere
	// so that snippets are still found.
	var renames []string // raw, safe pairs for strings.NewReplacer
	rename := func(name string) string {
		safe := safeText(name)
		if safe != name {
			renames = append(renames, name, safe)
		}
		return safe
	}
	safeRange := func(r *hcl.Range) *hcl.Range {
		if r == nil {
			return nil
		}
		c := *r
		c.Filename = rename(c.Filename)
		return &c
	}
	for _, p := range paths { // named in details without a range
		rename(p)
	}
	outFiles := make(map[string]*hcl.File, len(files))
	for name, f := range files {
		if f == nil {
			outFiles[rename(name)] = nil
			continue
		}
		c := *f
		c.Bytes = safeSource(f.Bytes)
		outFiles[rename(name)] = &c
	}
	outDiags := make(hcl.Diagnostics, len(diags))
	for i, d := range diags {
		c := *d
		c.Subject, c.Context = safeRange(c.Subject), safeRange(c.Context)
		outDiags[i] = &c
	}
	names := strings.NewReplacer(renames...)
	for _, c := range outDiags {
		c.Summary = safeText(names.Replace(c.Summary))
		c.Detail = safeLines(names.Replace(c.Detail))
	}
	return outFiles, outDiags
}

// safeSource returns src with the bytes of every unsafe character replaced
// by '?' (the same length). Newlines, tabs and the carriage return of a
// CRLF line end are kept.
func safeSource(src []byte) []byte {
	var out []byte
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRune(src[i:])
		keep := safeRune(r) && !(r == utf8.RuneError && size == 1) ||
			r == '\n' || r == '\t' || (r == '\r' && i+1 < len(src) && src[i+1] == '\n')
		if !keep {
			if out == nil {
				out = bytes.Clone(src)
			}
			for j := i; j < i+size; j++ {
				out[j] = '?'
			}
		}
		i += size
	}
	if out == nil {
		return src
	}
	return out
}

// jsonSafeWriter passes JSON log records to w with every character that
// is not graphic, and that the JSON encoder leaves as it is (C1 controls,
// format characters such as bidirectional overrides, line separators),
// written as a \u escape instead: the same JSON value, but nothing in it
// can steer a terminal that shows the log. The encoder escapes C0 controls
// itself; such characters can only occur inside JSON strings, where a \u
// escape is valid. Each Write must be whole records (slog writes one
// record per call).
type jsonSafeWriter struct{ w io.Writer }

func (j jsonSafeWriter) Write(p []byte) (int, error) {
	if isSafe(string(p), true) {
		return j.w.Write(p)
	}
	var b bytes.Buffer
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r < utf8.RuneSelf || safeRune(r) || (r == utf8.RuneError && size == 1):
			// ASCII (the encoder has escaped controls in strings) and
			// graphic characters as they are; a bad byte cannot come
			// from the JSON encoder, which writes valid UTF-8.
			b.Write(p[i : i+size])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	if _, err := j.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

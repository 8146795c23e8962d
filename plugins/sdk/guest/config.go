package guest

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Config holds the members of a flat JSON object: the JSON of an HCL
// `config` object whose values are numbers, strings, booleans or null.
// Parse it with ParseConfig and read members with Int, String and Bool.
//
// encoding/json works in a policy too, but adds about 1.4 MB to the module
// and seconds to its compilation; this covers the usual flat config.
type Config struct {
	members map[string]member
}

type member struct {
	raw   string // the number or literal, or the decoded string
	isStr bool
}

// ParseConfig parses a flat JSON object. Empty input (no config) is an
// empty Config. Nested objects and arrays are refused.
func ParseConfig(b []byte) (Config, error) {
	c := Config{members: map[string]member{}}
	p := &jsonScanner{b: b}
	p.space()
	if p.eof() {
		return c, nil
	}
	if !p.take('{') {
		return c, p.fail("want an object")
	}
	p.space()
	if p.take('}') {
		return c, p.end()
	}
	for {
		p.space()
		key, err := p.str()
		if err != nil {
			return c, err
		}
		p.space()
		if !p.take(':') {
			return c, p.fail("want ':'")
		}
		p.space()
		var v member
		switch {
		case p.peek() == '"':
			v.isStr = true
			if v.raw, err = p.str(); err != nil {
				return c, err
			}
		case p.peek() == '{' || p.peek() == '[':
			return c, p.fail("member " + strconv.Quote(key) + ": nested values are not supported")
		default:
			v.raw = p.scalar()
			if v.raw == "" {
				return c, p.fail("want a value")
			}
		}
		c.members[key] = v
		p.space()
		if p.take('}') {
			return c, p.end()
		}
		if !p.take(',') {
			return c, p.fail("want ',' or '}'")
		}
	}
}

// Has reports whether the config has the member key (null counts).
func (c Config) Has(key string) bool {
	_, ok := c.members[key]
	return ok
}

// Int returns the integer member key, or def when it is missing or null.
func (c Config) Int(key string, def int64) (int64, error) {
	m, ok := c.members[key]
	if !ok || (!m.isStr && m.raw == "null") {
		return def, nil
	}
	if m.isStr {
		return def, errors.New("config: " + key + ": want an integer, got a string")
	}
	v, err := strconv.ParseInt(m.raw, 10, 64)
	if err != nil {
		// Accept integral floats such as 25.0 or 1e3.
		f, ferr := strconv.ParseFloat(m.raw, 64)
		if ferr != nil || f != float64(int64(f)) {
			return def, errors.New("config: " + key + ": want an integer, got " + m.raw)
		}
		v = int64(f)
	}
	return v, nil
}

// String returns the string member key, or def when it is missing or null.
func (c Config) String(key string, def string) (string, error) {
	m, ok := c.members[key]
	if !ok || (!m.isStr && m.raw == "null") {
		return def, nil
	}
	if !m.isStr {
		return def, errors.New("config: " + key + ": want a string, got " + m.raw)
	}
	return m.raw, nil
}

// Bool returns the boolean member key, or def when it is missing or null.
func (c Config) Bool(key string, def bool) (bool, error) {
	m, ok := c.members[key]
	if !ok || (!m.isStr && m.raw == "null") {
		return def, nil
	}
	if m.isStr || (m.raw != "true" && m.raw != "false") {
		return def, errors.New("config: " + key + ": want a boolean")
	}
	return m.raw == "true", nil
}

// Keys returns the member names, for rejecting unknown ones.
func (c Config) Keys() []string {
	out := make([]string, 0, len(c.members))
	for k := range c.members {
		out = append(out, k)
	}
	return out
}

// jsonScanner reads the subset of JSON ParseConfig accepts.
type jsonScanner struct {
	b   []byte
	off int
}

// ErrConfig is wrapped by ParseConfig's errors.
var ErrConfig = errors.New("config: malformed JSON")

type configError struct {
	off  int
	what string
}

func (e *configError) Error() string {
	return ErrConfig.Error() + " at offset " + strconv.Itoa(e.off) + ": " + e.what
}

func (e *configError) Unwrap() error { return ErrConfig }

func (p *jsonScanner) fail(what string) error { return &configError{p.off, what} }

func (p *jsonScanner) eof() bool { return p.off >= len(p.b) }

func (p *jsonScanner) peek() byte {
	if p.eof() {
		return 0
	}
	return p.b[p.off]
}

func (p *jsonScanner) take(c byte) bool {
	if !p.eof() && p.b[p.off] == c {
		p.off++
		return true
	}
	return false
}

func (p *jsonScanner) space() {
	for !p.eof() {
		switch p.b[p.off] {
		case ' ', '\t', '\n', '\r':
			p.off++
		default:
			return
		}
	}
}

func (p *jsonScanner) end() error {
	p.space()
	if !p.eof() {
		return p.fail("trailing data")
	}
	return nil
}

// scalar reads a number or literal and checks it; "" if it is neither.
func (p *jsonScanner) scalar() string {
	start := p.off
	for !p.eof() {
		c := p.b[p.off]
		if c == ',' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		p.off++
	}
	s := string(p.b[start:p.off])
	if s == "true" || s == "false" || s == "null" || isNumber(s) {
		return s
	}
	p.off = start
	return ""
}

// isNumber reports whether s is a JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isNumber(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// str reads a JSON string and decodes its escapes.
func (p *jsonScanner) str() (string, error) {
	if !p.take('"') {
		return "", p.fail("want a string")
	}
	var out []byte
	for {
		if p.eof() {
			return "", p.fail("unterminated string")
		}
		c := p.b[p.off]
		switch {
		case c == '"':
			p.off++
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c != '\\':
			out = append(out, c)
			p.off++
			continue
		}
		p.off++ // the backslash
		if p.eof() {
			return "", p.fail("unterminated escape")
		}
		e := p.b[p.off]
		p.off++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if p.take('\\') && p.take('u') {
					if r2, ok = p.hex4(); !ok {
						return "", p.fail("bad \\u escape")
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", p.fail("bad escape")
		}
	}
}

func (p *jsonScanner) hex4() (rune, bool) {
	if len(p.b)-p.off < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.b[p.off:p.off+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.off += 4
	return rune(v), true
}

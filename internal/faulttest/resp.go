package faulttest

import (
	"bytes"
	"errors"
	"strconv"
)

var errFraming = errors.New("faulttest: unparseable RESP")

// messageLen returns the length of the complete RESP2/RESP3 message at the
// start of b, or 0 when b holds only part of one. push reports a RESP3 push
// message ('>'), which is not the reply to a command. An attribute ('|')
// belongs to the value that follows it. Streamed types ($? / *?) are not
// supported: Redis does not send them.
func messageLen(b []byte) (n int, push bool, err error) {
	if len(b) == 0 {
		return 0, false, nil
	}
	end, err := valueEnd(b, 0, 0)
	if err != nil || end < 0 {
		return 0, false, err
	}
	return end, b[0] == '>', nil
}

// valueEnd returns the index just past the value starting at b[i], -1 when
// the value is incomplete.
func valueEnd(b []byte, i, depth int) (int, error) {
	if depth > 64 {
		return 0, errFraming
	}
	if i >= len(b) {
		return -1, nil
	}
	j := bytes.Index(b[i+1:], []byte("\r\n"))
	if j < 0 {
		return -1, nil
	}
	line, next := b[i+1:i+1+j], i+1+j+2
	switch b[i] {
	case '+', '-', ':', '_', ',', '#', '(':
		return next, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(string(line))
		if err != nil {
			return 0, errFraming
		}
		if n < 0 {
			return next, nil
		}
		end := next + n + 2
		if end > len(b) {
			return -1, nil
		}
		if b[end-2] != '\r' || b[end-1] != '\n' {
			return 0, errFraming
		}
		return end, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line))
		if err != nil {
			return 0, errFraming
		}
		if n < 0 {
			return next, nil
		}
		if b[i] == '%' || b[i] == '|' {
			n *= 2
		}
		at := next
		for range n {
			if at, err = valueEnd(b, at, depth+1); err != nil || at < 0 {
				return at, err
			}
		}
		if b[i] == '|' {
			return valueEnd(b, at, depth+1)
		}
		return at, nil
	}
	return 0, errFraming
}

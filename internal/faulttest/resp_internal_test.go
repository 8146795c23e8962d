package faulttest

import (
	"strings"
	"testing"
)

func TestFaultRESPFraming(t *testing.T) {
	msgs := []struct {
		in   string
		push bool
	}{
		{"+OK\r\n", false},
		{"-ERR bad\r\n", false},
		{":42\r\n", false},
		{"$5\r\nhello\r\n", false},
		{"$0\r\n\r\n", false},
		{"$-1\r\n", false},
		{"*-1\r\n", false},
		{"$4\r\na\r\nb\r\n", false}, // CRLF inside a bulk string
		{"*2\r\n$3\r\nfoo\r\n:1\r\n", false},
		{"*2\r\n*1\r\n+a\r\n%1\r\n+k\r\n$1\r\nv\r\n", false},
		{"%2\r\n+a\r\n:1\r\n+b\r\n_\r\n", false},
		{"~2\r\n,3.14\r\n#t\r\n", false},
		{"=8\r\ntxt:abcd\r\n", false},
		{"!3\r\nerr\r\n", false},
		{"(123456789012345678901234567890\r\n", false},
		{"|1\r\n+ttl\r\n:3\r\n$2\r\nok\r\n", false}, // attribute + value
		{">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", true},
		{"*0\r\n", false},
	}
	for _, m := range msgs {
		for i := 0; i < len(m.in); i++ {
			if n, _, err := messageLen([]byte(m.in[:i])); n != 0 || err != nil {
				t.Errorf("%q prefix %d: %d, %v; want incomplete", m.in, i, n, err)
			}
		}
		n, push, err := messageLen([]byte(m.in + "+NEXT\r\n"))
		if n != len(m.in) || push != m.push || err != nil {
			t.Errorf("%q: %d, push %v, %v; want %d, push %v", m.in, n, push, err, len(m.in), m.push)
		}
	}
	for _, bad := range []string{"?x\r\n", "$x\r\n", "$3\r\nabcde\r\n", "*z\r\n", "$?\r\n", strings.Repeat("*1\r\n", 100) + ":1\r\n"} {
		if _, _, err := messageLen([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

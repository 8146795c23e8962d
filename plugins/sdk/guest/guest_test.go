package guest

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestRetryEncoding(t *testing.T) {
	for _, c := range []struct {
		a     Action
		delay int64
		want  int64
	}{
		{ActionWaitForWake, 0, 0},
		{ActionWaitForWake, 25, 25},
		{ActionWaitForWake, -5, 0},
		{ActionWaitForWake, math.MaxInt64, MaxDelayMS},
		{ActionGiveUp, 99, -1},
		{ActionRetryAfter, 0, -2},
		{ActionRetryAfter, 25, -27},
		{ActionRetryAfter, math.MaxInt64, -2 - MaxDelayMS},
	} {
		got := EncodeRetry(c.a, c.delay)
		if got != c.want {
			t.Errorf("EncodeRetry(%v, %d) = %d, want %d", c.a, c.delay, got, c.want)
		}
		a, d, ok := DecodeRetry(got)
		wantDelay := min(max(c.delay, 0), MaxDelayMS)
		if c.a == ActionGiveUp {
			wantDelay = 0
		}
		if !ok || a != c.a || d != wantDelay {
			t.Errorf("DecodeRetry(%d) = %v %d %v", got, a, d, ok)
		}
	}
	for _, bad := range []int64{MaxDelayMS + 1, math.MaxInt64, -3 - MaxDelayMS, math.MinInt64} {
		if _, _, ok := DecodeRetry(bad); ok {
			t.Errorf("DecodeRetry(%d) accepted", bad)
		}
	}
	if WaitForWake(7) != 7 || RetryAfter(7) != -9 || GiveUp() != -1 || ErrorResult(0) != -1 || ErrorResult(5) != -6 {
		t.Error("helpers disagree with EncodeRetry / ErrorResult")
	}
}

func TestPartitionEncoding(t *testing.T) {
	attrs := map[string]string{"tenant": "acme", "route": "/pay", "": "x", "e": ""}
	b := AppendPartition(nil, "lock", "invoice", attrs)
	r, err := DecodePartition(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "lock" || r.Name != "invoice" || len(r.Attrs) != 4 {
		t.Fatalf("%+v", r)
	}
	if !slices.IsSortedFunc(r.Attrs, func(a, b Attr) int { return strings.Compare(a.Key, b.Key) }) {
		t.Errorf("not sorted: %+v", r.Attrs)
	}
	for k, v := range attrs {
		if got, ok := r.Attr(k); !ok || got != v {
			t.Errorf("Attr(%q) = %q, %v", k, got, ok)
		}
	}
	if _, ok := r.Attr("missing"); ok {
		t.Error("missing attribute found")
	}
	v, err := viewPartition(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Kind()) != "lock" || string(v.Name()) != "invoice" || v.NumAttrs() != 4 {
		t.Fatalf("view %q %q %d", v.Kind(), v.Name(), v.NumAttrs())
	}
	for k, want := range attrs {
		if got, ok := v.Attr(k); !ok || string(got) != want {
			t.Errorf("view Attr(%q) = %q, %v", k, got, ok)
		}
	}
	if _, ok := v.Attr("missing"); ok {
		t.Error("view: missing attribute found")
	}
	// Every truncation, and trailing bytes, are malformed.
	for i := range len(b) {
		if _, err := DecodePartition(b[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodePartition of %d of %d bytes: %v", i, len(b), err)
		}
		if _, err := viewPartition(b[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("viewPartition of %d of %d bytes: %v", i, len(b), err)
		}
	}
	if _, err := DecodePartition(append(b, 0)); !errors.Is(err, ErrMalformed) {
		t.Error("trailing byte accepted")
	}
	huge := AppendPartition(nil, "k", "n", nil)
	huge[len(huge)-4] = 0xff // count 255 with no pairs
	if _, err := DecodePartition(huge); !errors.Is(err, ErrMalformed) {
		t.Error("count beyond the input accepted")
	}
}

func TestIOArea(t *testing.T) {
	copy(area[:], "hello")
	if string(Input(5)) != "hello" || len(Input(-1)) != 0 || len(Input(IOCap+1)) != IOCap {
		t.Error("Input does not clamp")
	}
	c := ConfigBytes(5)
	area[0] = 'j'
	if string(c) != "hello" {
		t.Error("ConfigBytes is not a copy")
	}
	if n := Output("key"); n != 3 || string(area[:3]) != "key" {
		t.Errorf("Output: %d %q", n, area[:3])
	}
	if n := Output(strings.Repeat("k", IOCap+1)); n >= 0 {
		t.Errorf("an overlong key: %d", n)
	}
	if n := Error("boom"); n != -5 || string(area[:4]) != "boom" {
		t.Errorf("Error: %d", n)
	}
	if n := Error(strings.Repeat("e", IOCap+10)); n != ErrorResult(IOCap) {
		t.Errorf("an overlong message: %d", n)
	}
}

func TestKeyBuilder(t *testing.T) {
	req := AppendPartition(nil, "lock", "n", map[string]string{"tenant": "acme"})
	copy(area[:], req)
	v, err := ViewPartition(int32(len(req)))
	if err != nil {
		t.Fatal(err)
	}
	val, _ := v.Attr("tenant")
	var k KeyBuilder
	k.WriteString("a-long-prefix-that-overwrites-the-request:")
	k.Write(val)
	if n := k.Output(); string(area[:n]) != "a-long-prefix-that-overwrites-the-request:acme" {
		t.Errorf("key %q", area[:max(n, 0)])
	}
	var big KeyBuilder
	big.WriteString(strings.Repeat("x", IOCap))
	big.Write([]byte("y"))
	if n := big.Output(); n >= 0 {
		t.Errorf("overflow: %d", n)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(` { "base_ms" : 25, "max_ms": 1e3, "name": "a\"b\u00e9\ud83d\ude00\n", "on": true, "off": false, "none": null, "neg": -7, "f": 2.5 } `))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Int("base_ms", 1); v != 25 || err != nil {
		t.Errorf("base_ms %d %v", v, err)
	}
	if v, err := c.Int("max_ms", 1); v != 1000 || err != nil {
		t.Errorf("max_ms %d %v", v, err)
	}
	if v, err := c.Int("neg", 1); v != -7 || err != nil {
		t.Errorf("neg %d %v", v, err)
	}
	if v, err := c.Int("missing", 9); v != 9 || err != nil {
		t.Errorf("missing %d %v", v, err)
	}
	if v, err := c.Int("none", 9); v != 9 || err != nil {
		t.Errorf("null %d %v", v, err)
	}
	if _, err := c.Int("f", 0); err == nil {
		t.Error("2.5 as an integer")
	}
	if _, err := c.Int("name", 0); err == nil {
		t.Error("a string as an integer")
	}
	if v, err := c.String("name", ""); v != "a\"bé😀\n" || err != nil {
		t.Errorf("name %q %v", v, err)
	}
	if _, err := c.String("base_ms", ""); err == nil {
		t.Error("a number as a string")
	}
	if v, err := c.Bool("on", false); !v || err != nil {
		t.Errorf("on %v %v", v, err)
	}
	if v, err := c.Bool("off", true); v || err != nil {
		t.Errorf("off %v %v", v, err)
	}
	if _, err := c.Bool("neg", false); err == nil {
		t.Error("a number as a boolean")
	}
	if !c.Has("none") || c.Has("missing") || len(c.Keys()) != 8 {
		t.Errorf("keys %v", c.Keys())
	}
	for _, ok := range []string{"", "  ", "{}", " { } "} {
		if c, err := ParseConfig([]byte(ok)); err != nil || len(c.Keys()) != 0 {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"[]", "{", `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1} x`, `{"a":{"b":1}}`, `{"a":[1]}`,
		`{"a":01}`, `{"a":+1}`, `{"a":.5}`, `{"a":1.}`, `{"a":1e}`, `{"a":NaN}`, `{"a":Infinity}`, `{"a":tru}`,
		`{"a":"x}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\n\"}", `{a:1}`, `{"a" 1}`,
	} {
		if _, err := ParseConfig([]byte(bad)); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want ErrConfig", bad, err)
		}
	}
}

package lua_test

// Hostile tests of the rate-limit scripts: keys pre-set by someone else
// with crafted values. A test that found a bug is skipped with
// "FINDING n: ..."; the others are attacks the scripts survived.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/lua"
)

// serverMicros returns the server's TIME in microseconds.
func serverMicros(t *testing.T, ctx context.Context, s *redistest.Server) int64 {
	t.Helper()
	v, err := s.Do(ctx, "TIME").ToArray()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	sec, _ := v[0].ToString()
	us, _ := v[1].ToString()
	a, _ := strconv.ParseInt(sec, 10, 64)
	b, _ := strconv.ParseInt(us, 10, 64)
	return a*1_000_000 + b
}

// decision is a script's reply.
type decision struct{ granted, remaining, retry, reset, now int64 }

func decide(t *testing.T, ctx context.Context, s *redistest.Server, src, key string, args ...string) (decision, error) {
	t.Helper()
	v, err := s.Do(ctx, append([]string{"EVAL", src, "1", key}, args...)...).ToArray()
	if err != nil {
		return decision{}, err
	}
	if len(v) != 5 {
		t.Fatalf("%d values", len(v))
	}
	var n [5]int64
	for i := range v {
		if n[i], err = v[i].AsInt64(); err != nil {
			t.Fatalf("value %d: %v", i+1, err)
		}
	}
	return decision{n[0], n[1], n[2], n[3], n[4]}, nil
}

// A sliding window whose segments hold counts above 2^53 (a key written by
// someone else: each is a 16-digit whole number, which the script accepts)
// sums them in doubles; the refusal's search for the segment that frees
// enough permits then never finds one, and the script answers a refusal
// with retry_us 0, which the Go side reads as "can never succeed" (and a
// queued Acquire retries at once, forever).
func TestRateLimitHostileSlidingHugeCounts(t *testing.T) {

	s := redistest.Start(t, redistest.Version(8))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const window, segments = 60_000, 10 // ms
	seg := int64(window * 1000 / segments)
	now := serverMicros(t, ctx, s)
	current := (now/seg + 1) * seg
	// The older live segment holds 2^53, the newer 3: used = 2^53+3 rounds
	// to 2^53+4, and freeing both leaves 1, never 0.
	s.MustCmd(t, "HSET", "w", strconv.FormatInt(current-seg, 10), "9007199254740992")
	s.MustCmd(t, "HSET", "w", strconv.FormatInt(current, 10), "3")
	s.MustCmd(t, "PEXPIRE", "w", "600000")
	d, err := decide(t, ctx, s, lua.RateLimitSliding, "w", "1", "1", "1", strconv.Itoa(window), strconv.Itoa(segments))
	if err != nil {
		if strings.Contains(err.Error(), "COORDHOST_WRONGKIND") {
			return // refusing counts above MAX_COUNT is a fix
		}
		t.Fatal(err)
	}
	if d.granted != 0 || d.retry <= 0 {
		t.Fatalf("refused with retry_us %d (granted %d): a refusal of permits that come back must say when", d.retry, d.granted)
	}
}

// Crafted values in a key the scripts accept as theirs: huge, zero, far
// past and far future numbers. Each decision must stay within its
// contract: granted 0 or 1, remaining in [0, limit], a refusal says when
// (retry_us > 0, at most a window and a segment), and garbage that is not
// a whole number of at most 16 digits is refused as WRONGKIND.
func TestRateLimitHostileValues(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const limit, windowMS = 5, 10_000
	lim, win := strconv.Itoa(limit), strconv.Itoa(windowMS)
	now := serverMicros(t, ctx, s)
	seg := int64(windowMS * 1000 / 10)
	cur := (now/seg + 1) * seg
	us := func(v int64) string { return strconv.FormatInt(v, 10) }
	type state struct {
		name  string
		setup [][]string
		src   string
		extra []string // after consume, need, limit
		want  string   // an error to expect, "" for a decision
	}
	fixed := []string{win}
	sliding := []string{win, "10"}
	bucket := []string{"1", win}
	states := []state{
		{"fixed: counter far above the limit", [][]string{{"SET", "k", "999999999999999", "PX", "60000"}}, lua.RateLimitFixed, fixed, ""},
		{"fixed: counter above MAX_COUNT", [][]string{{"SET", "k", "9999999999999999", "PX", "60000"}}, lua.RateLimitFixed, fixed, "COORDHOST_WRONGKIND"},
		{"fixed: counter above the limit, no expiry", [][]string{{"SET", "k", "999999999999999"}}, lua.RateLimitFixed, fixed, ""},
		{"fixed: counter of 17 digits", [][]string{{"SET", "k", "99999999999999999", "PX", "60000"}}, lua.RateLimitFixed, fixed, "COORDHOST_WRONGKIND"},
		{"fixed: MaxInt64 counter", [][]string{{"SET", "k", "9223372036854775807", "PX", "60000"}}, lua.RateLimitFixed, fixed, "COORDHOST_WRONGKIND"},
		{"fixed: exponent counter", [][]string{{"SET", "k", "1e3", "PX", "60000"}}, lua.RateLimitFixed, fixed, "COORDHOST_WRONGKIND"},
		{"fixed: counter 0 without expiry", [][]string{{"SET", "k", "0"}}, lua.RateLimitFixed, fixed, ""},
		{"fixed: empty counter", [][]string{{"SET", "k", ""}}, lua.RateLimitFixed, fixed, "COORDHOST_WRONGKIND"},

		{"sliding: segment in the far future", [][]string{{"HSET", "k", "9999999999999999", "1"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: huge count in the far future", [][]string{{"HSET", "k", "9999999999999999", "9999999999999999"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: huge count at epoch 0", [][]string{{"HSET", "k", "0", "9999999999999999"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: huge count now", [][]string{{"HSET", "k", us(cur), "9999999999999999"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: 2^53+1 now", [][]string{{"HSET", "k", us(cur), "9007199254740993"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: unaligned segments", [][]string{{"HSET", "k", us(cur - 1), "2", us(cur - seg/2), "2", us(now - 1), "1"}}, lua.RateLimitSliding, sliding, ""},
		{"sliding: zero counts", [][]string{{"HSET", "k", us(cur), "0", us(cur - seg), "0"}}, lua.RateLimitSliding, sliding, ""},
		{"sliding: segment of 17 digits", [][]string{{"HSET", "k", "10000000000000000", "1"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: float count", [][]string{{"HSET", "k", us(cur), "1.5"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},
		{"sliding: 1e20 segment", [][]string{{"HSET", "k", "1e20", "1"}}, lua.RateLimitSliding, sliding, "COORDHOST_WRONGKIND"},

		{"bucket: at 0, empty", [][]string{{"HSET", "k", "tokens", "0", "at", "0"}}, lua.RateLimitBucket, bucket, ""},
		{"bucket: at 1, empty", [][]string{{"HSET", "k", "tokens", "0", "at", "1"}}, lua.RateLimitBucket, bucket, ""},
		{"bucket: at in the far future, empty", [][]string{{"HSET", "k", "tokens", "0", "at", "9999999999999999"}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: huge tokens", [][]string{{"HSET", "k", "tokens", "9999999999999999", "at", us(now)}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: 2^53+1 tokens", [][]string{{"HSET", "k", "tokens", "9007199254740993", "at", us(now)}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: empty, refilled a microsecond ago", [][]string{{"HSET", "k", "tokens", "0", "at", us(now - 1)}}, lua.RateLimitBucket, bucket, ""},
		{"bucket: at 1e20", [][]string{{"HSET", "k", "tokens", "0", "at", "1e20"}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: at of 20 digits", [][]string{{"HSET", "k", "tokens", "0", "at", "99999999999999999999"}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: negative tokens", [][]string{{"HSET", "k", "tokens", "-1", "at", us(now)}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: tokens only", [][]string{{"HSET", "k", "tokens", "1"}}, lua.RateLimitBucket, bucket, "COORDHOST_WRONGKIND"},
		{"bucket: extra fields", [][]string{{"HSET", "k", "tokens", "1", "at", us(now), "x", "y"}}, lua.RateLimitBucket, bucket, ""},
	}
	for _, st := range states {
		for _, call := range [][2]string{{"0", "1"}, {"1", "1"}, {lim, lim}, {"0", lim}} {
			t.Run(st.name+"/consume="+call[0]+",need="+call[1], func(t *testing.T) {
				s.Do(ctx, "FLUSHALL")
				for _, c := range st.setup {
					if err := s.Do(ctx, c...).Error(); err != nil {
						t.Fatalf("%v: %v", c, err)
					}
				}
				before := snapshot(t, s)
				d, err := decide(t, ctx, s, st.src, "k", append([]string{call[0], call[1], lim}, st.extra...)...)
				if st.want != "" {
					if err == nil || !strings.Contains(err.Error(), st.want) {
						t.Fatalf("got %+v, %v; want an error with %s", d, err, st.want)
					}
					if after := snapshot(t, s); after != before {
						t.Errorf("wrote:\nbefore %s\nafter  %s", before, after)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if call[0] == "0" {
					if after := snapshot(t, s); after != before {
						t.Errorf("a peek wrote:\nbefore %s\nafter  %s", before, after)
					}
				}
				// The longest wait any of these states can ask for: a foreign
				// counter's TTL of 60 s, or 5 bucket periods of 10 s.
				const most = 61_000_000
				switch {
				case d.granted != 0 && d.granted != 1:
					t.Errorf("granted %d", d.granted)
				case d.remaining < 0 || d.remaining > limit:
					t.Errorf("remaining %d outside [0, %d]", d.remaining, limit)
				case d.granted == 0 && (d.retry <= 0 || d.retry > most):
					t.Errorf("refused with retry_us %d", d.retry)
				case d.granted == 1 && d.retry != 0:
					t.Errorf("granted with retry_us %d", d.retry)
				case d.reset < 0 || d.reset > most:
					t.Errorf("reset_us %d", d.reset)
				}
				// A key written by a grant, or a fixed window's counter
				// refused while consuming, always expires.
				if call[0] != "0" && (d.granted == 1 || st.src == lua.RateLimitFixed) {
					if ms, _ := s.Do(ctx, "PTTL", "k").AsInt64(); ms == -1 {
						t.Errorf("left without expiry: %+v", d)
					}
				}
			})
		}
	}
}

// Counts with leading zeros ("007") pass whole() but not Redis's integer
// parsing: the fixed window's INCRBY and the sliding window's HINCRBY
// fail after the script decided. The sliding window has already deleted
// the segments it pruned by then (a write before the error, which
// args.lua says must never happen), and neither error is
// COORDHOST_WRONGKIND.
func TestRateLimitHostileLeadingZeros(t *testing.T) {

	s := redistest.Start(t, redistest.Version(8))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const window, segments = 10_000, 10
	seg := int64(window * 1000 / segments)
	for _, tc := range []struct {
		name  string
		setup func()
		src   string
		extra []string
	}{
		{"fixed", func() { s.MustCmd(t, "SET", "k", "007", "PX", "60000") }, lua.RateLimitFixed, []string{strconv.Itoa(window)}},
		{"sliding", func() {
			cur := (serverMicros(t, ctx, s)/seg + 1) * seg
			// A dead segment to prune, and "007" in this segment and the
			// next (in case the clock moves on meanwhile: a segment ahead
			// is moved into the current one by the same HINCRBY).
			s.MustCmd(t, "HSET", "k", "1", "1", strconv.FormatInt(cur, 10), "007", strconv.FormatInt(cur+seg, 10), "007")
		}, lua.RateLimitSliding, []string{strconv.Itoa(window), strconv.Itoa(segments)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Do(ctx, "FLUSHALL")
			tc.setup()
			before := snapshot(t, s)
			_, err := decide(t, ctx, s, tc.src, "k", append([]string{"1", "1", "100"}, tc.extra...)...)
			after := snapshot(t, s)
			if err == nil || !strings.Contains(err.Error(), "COORDHOST_WRONGKIND") || after != before {
				t.Fatalf("error %v (want COORDHOST_WRONGKIND)\nbefore %s\nafter  %s", err, before, after)
			}
		})
	}
}

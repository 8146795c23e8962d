package lua_test

// Recheck tests of the rate-limit scripts after the first hostile pass's
// fixes. A test that found a bug is skipped with "FINDING n: ..."; the
// others are attacks the scripts survived.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/lua"
)

// expireTime returns PEXPIRETIME of key (ms; -1 none, -2 no key).
func expireTime(t *testing.T, ctx context.Context, s *redistest.Server, key string) int64 {
	t.Helper()
	at, err := s.Do(ctx, "PEXPIRETIME", key).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// latestSegment returns the latest segment end held in a sliding window's
// hash (0 when none).
func latestSegment(t *testing.T, ctx context.Context, s *redistest.Server, key string) int64 {
	t.Helper()
	m, err := s.Do(ctx, "HGETALL", key).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	var latest int64
	for f := range m {
		e, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("field %q", f)
		}
		latest = max(latest, e)
	}
	return latest
}

// spin waits about d without sleeping through it (time.Sleep rounds up to
// the scheduler's tick): the calls must land in every phase of a
// millisecond.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// The sliding window's key must live until its latest segment stops
// counting (e + window), and a token bucket's until it is full again (at +
// periods to fill * period): a key gone earlier reads as "nothing
// counted", a full bucket, and grants early (an overshoot).
// ratelimit_fixed.lua holds that Redis 8 may delete a key anywhere in its
// expiry's last millisecond, so a window is over from PEXPIRETIME*1000 µs
// by TIME; a probe confirms it (Redis 8.0 and 8.6 with --hz 500 delete
// PXAT keys 346 µs into that millisecond by TIME; 7.0 only after it). By
// the same rule these keys need PEXPIRETIME*1000 >= the end. expire_in
// sets a relative PEXPIRE rounded up from TIME's microseconds: when the end
// is not on a whole millisecond of TIME (a sliding segment of 1500 µs; a
// bucket's `at` is a TIME in µs), the expiry lands up to 1 ms before it.
// The lenient rule ((PEXPIRETIME+1)*1000 >= end: a key deleted only once
// strictly past its expiry) holds.
func TestRateLimitRecheckExpiryLenient(t *testing.T) {
	expiryCovers(t, false)
}

func TestRateLimitRecheckExpiryStrict(t *testing.T) {

	expiryCovers(t, true)
}

func expiryCovers(t *testing.T, strict bool) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			ctx := xtest.Ctx(t, 60*time.Second)
			const window, segments = 150, 100 // a segment of 1500 µs
			span := int64(window * 1000)
			check := func(what string, i int, at, end int64) {
				t.Helper()
				if at == -2 && serverMicros(t, ctx, s)+1000 >= end {
					return // gone in its time: the read came late (a loaded machine)
				}
				if at < 0 {
					t.Fatalf("%s call %d: the key has no expiry (%d) before its end", what, i, at)
				}
				if strict && at*1000 < end {
					t.Errorf("%s call %d: PEXPIRETIME*1000 = %d, %d µs before the end %d", what, i, at*1000, end-at*1000, end)
				}
				if (at+1)*1000 < end {
					t.Errorf("%s call %d: (PEXPIRETIME+1)*1000 = %d, %d µs before the end %d", what, i, (at+1)*1000, end-(at+1)*1000, end)
				}
			}
			// Half the bucket first: full again only seconds later, so a
			// read delayed by a loaded machine still finds the key.
			if d, err := decide(t, ctx, s, lua.RateLimitBucket, "tb", "500", "500", "1000", "1", "10"); err != nil || d.granted != 1 || d.remaining != 500 {
				t.Fatalf("draining half the bucket: %+v %v", d, err)
			}
			for i := range 300 {
				d, err := decide(t, ctx, s, lua.RateLimitSliding, "sw", "1", "1", "1000000", strconv.Itoa(window), strconv.Itoa(segments))
				if err != nil || d.granted != 1 {
					t.Fatalf("sliding call %d: %+v %v", i, d, err)
				}
				check("sliding", i, expireTime(t, ctx, s, "sw"), latestSegment(t, ctx, s, "sw")+span)

				// A bucket of 1000 refilling 1 per 10 ms: 1 consumed per call
				// keeps it about 500 refills from full.
				d, err = decide(t, ctx, s, lua.RateLimitBucket, "tb", "1", "1", "1000", "1", "10")
				if err != nil || d.granted != 1 {
					t.Fatalf("bucket call %d: %+v %v", i, d, err)
				}
				h, err := s.Do(ctx, "HMGET", "tb", "tokens", "at").AsIntSlice()
				if err != nil {
					t.Fatal(err)
				}
				full := h[1] + (1000-h[0])*10_000
				check("bucket", i, expireTime(t, ctx, s, "tb"), full)
				spin(time.Duration(137*(i%11)) * time.Microsecond)
			}
		})
	}
}

// A fixed window opened at TIME now ends at PEXPIRETIME = floor(now/1000)
// + window + 1 ms: its length by TIME is in (window, window + 1 ms], every
// grant's reset_us is the time to that end, grants in one window see the
// same end, and a window opens only once the previous one ended by TIME
// (no overlap), on every kind.
func TestRateLimitRecheckFixedWindowBounds(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k), redistest.Args("--hz", "500"))
			ctx := xtest.Ctx(t, 60*time.Second)
			const window = 3
			var prevEnd int64 // µs, by TIME
			opened := 0
			for i := range 1500 {
				d, err := decide(t, ctx, s, lua.RateLimitFixed, "fw", "1", "1", "2", strconv.Itoa(window))
				if err != nil {
					t.Fatal(err)
				}
				end := d.now + d.reset
				if d.granted == 1 {
					if d.reset <= 0 || d.reset > window*1000+1000 {
						t.Fatalf("call %d: grant with reset_us %d, window %d ms", i, d.reset, window)
					}
					if end != prevEnd {
						if prevEnd != 0 && d.now < prevEnd {
							t.Fatalf("call %d: a window opened at %d before the previous one ended at %d", i, d.now, prevEnd)
						}
						if d.remaining != 1 {
							t.Fatalf("call %d: a new window's grant leaves %d", i, d.remaining)
						}
						if d.reset <= window*1000 {
							t.Fatalf("call %d: a new window lasts %d µs, less than %d ms", i, d.reset, window)
						}
						opened++
						prevEnd = end
					}
				} else {
					if d.retry <= 0 || end != prevEnd {
						t.Fatalf("call %d: refusal %+v, window ends at %d", i, d, prevEnd)
					}
				}
				spin(time.Duration(97*(i%13)) * time.Microsecond)
			}
			if opened < 10 {
				t.Fatalf("only %d windows opened", opened)
			}
		})
	}
}

// A counter without expiry (PERSIST from outside) is refused by a peek
// with a retry of a whole window (nothing written), and the next call that
// consumes gives it an expiry at most window + 1 ms away.
func TestRateLimitRecheckFixedPersisted(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	ctx := xtest.Ctx(t, 20*time.Second)
	s.Do(ctx, "SET", "fp", "2")
	d, err := decide(t, ctx, s, lua.RateLimitFixed, "fp", "0", "1", "2", "1000")
	if err != nil || d.granted != 0 || d.retry != 1_000_000 {
		t.Fatalf("peek: %+v %v", d, err)
	}
	if at := expireTime(t, ctx, s, "fp"); at != -1 {
		t.Fatalf("a peek wrote an expiry: %d", at)
	}
	d, err = decide(t, ctx, s, lua.RateLimitFixed, "fp", "1", "1", "2", "1000")
	if err != nil || d.granted != 0 {
		t.Fatalf("consume: %+v %v", d, err)
	}
	at := expireTime(t, ctx, s, "fp")
	if at*1000 != d.now+d.retry || d.retry <= 1_000_000 || d.retry > 1_001_000 {
		t.Fatalf("refusal that consumes: %+v, PEXPIRETIME %d", d, at)
	}
	// Numeric arguments in forms tonumber reads: the script must write
	// decimal counts (INCRBY and SET refuse others) or fail before writing.
	for _, args := range [][]string{{"1e0", "1", "5", "1e3"}, {"0x1", "0x1", "5", "0x3e8"}, {" 1", "1 ", "5", "1000"}, {"1.0", "1", "5.0", "1000.0"}} {
		s.Do(ctx, "DEL", "fq")
		for range 2 {
			_, err := decide(t, ctx, s, lua.RateLimitFixed, "fq", args...)
			v, gerr := s.Do(ctx, "GET", "fq").ToString()
			if err != nil {
				if gerr == nil {
					t.Errorf("args %q: the script failed (%v) after writing %q", args, err, v)
				}
				continue
			}
			if _, perr := strconv.ParseInt(v, 10, 64); perr != nil {
				t.Errorf("args %q: the counter holds %q", args, v)
			}
		}
		s.Do(ctx, "DEL", "fs")
		for range 2 {
			_, err := decide(t, ctx, s, lua.RateLimitSliding, "fs", args[0], args[1], args[2], args[3], "1e1")
			if err != nil {
				if n, _ := s.Do(ctx, "EXISTS", "fs").AsInt64(); n != 0 {
					t.Errorf("args %q: the sliding script failed (%v) after writing", args, err)
				}
			}
		}
	}
}

// Sliding window keys in odd states: segments dated ahead (the clock went
// back) are moved into the current one and the key expires a window after
// it; a key holding only dead segments is emptied by the HDEL and
// recreated by the HINCRBY, with an expiry; a refusal that consumes moves
// ahead segments and keeps an expiry. In no case is the key left without
// an expiry, or expiring (leniently) before its latest segment ends.
func TestRateLimitRecheckSlidingOddKeys(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	ctx := xtest.Ctx(t, 20*time.Second)
	const window, segments = 1000, 10
	span := int64(window * 1000)
	seg := span / segments
	run := func(name string, setup func(now int64), consume, limit string, wantGranted int64) {
		t.Helper()
		s.Do(ctx, "DEL", "so")
		setup(serverMicros(t, ctx, s))
		d, err := decide(t, ctx, s, lua.RateLimitSliding, "so", consume, consume, limit, strconv.Itoa(window), strconv.Itoa(segments))
		if err != nil || d.granted != wantGranted {
			t.Fatalf("%s: %+v %v", name, d, err)
		}
		at := expireTime(t, ctx, s, "so")
		latest := latestSegment(t, ctx, s, "so")
		if at == -2 {
			return // nothing stored
		}
		if at < 0 || (at+1)*1000 < latest+span {
			t.Errorf("%s: PEXPIRETIME %d, latest segment %d + window %d", name, at, latest, span)
		}
		if latest > (d.now/seg+1)*seg {
			t.Errorf("%s: a segment dated ahead stayed: %d, now %d", name, latest, d.now)
		}
	}
	ahead := func(now int64) {
		e := (now/seg + 5) * seg
		s.Do(ctx, "HSET", "so", strconv.FormatInt(e, 10), "2")
		s.Do(ctx, "PEXPIRE", "so", "600000")
	}
	run("ahead, granted", ahead, "1", "10", 1)
	run("ahead, refused consuming", ahead, "1", "2", 0)
	run("dead only", func(now int64) {
		s.Do(ctx, "HSET", "so", strconv.FormatInt((now/seg-20)*seg, 10), "5", strconv.FormatInt((now/seg-15)*seg, 10), "5")
	}, "3", "10", 1)
	run("dead and current, n > 1", func(now int64) {
		s.Do(ctx, "HSET", "so", strconv.FormatInt((now/seg-20)*seg, 10), "5", strconv.FormatInt((now/seg+1)*seg, 10), "1")
		s.Do(ctx, "PEXPIRE", "so", "600000")
	}, "2", "10", 1)

	// A current segment PERSISTed from outside keeps no expiry while it is
	// current (HINCRBY does not answer the amount added), and gets one as
	// soon as a grant lands in the next segment.
	s.Do(ctx, "DEL", "so")
	now := serverMicros(t, ctx, s)
	s.Do(ctx, "HSET", "so", strconv.FormatInt((now/seg+1)*seg, 10), "1")
	if d, err := decide(t, ctx, s, lua.RateLimitSliding, "so", "1", "1", "10", strconv.Itoa(window), strconv.Itoa(segments)); err != nil || d.granted != 1 {
		t.Fatalf("persisted: %+v %v", d, err)
	}
	if at := expireTime(t, ctx, s, "so"); at != -1 && serverMicros(t, ctx, s) < (now/seg+1)*seg {
		t.Logf("persisted: PEXPIRETIME %d within its segment", at)
	}
	xtest.Eventually(t, 5*time.Second, "a grant in a later segment sets an expiry", func() bool {
		if _, err := decide(t, ctx, s, lua.RateLimitSliding, "so", "1", "1", "1000", strconv.Itoa(window), strconv.Itoa(segments)); err != nil {
			t.Fatal(err)
		}
		at := expireTime(t, ctx, s, "so")
		return at >= 0 && (at+1)*1000 >= latestSegment(t, ctx, s, "so")+span
	})
}

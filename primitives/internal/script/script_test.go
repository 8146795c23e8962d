package script_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

func TestRunFallsBackAndClassifies(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	echo := script.New("echo", "return ARGV[1]")
	s.MustCmd(t, "SCRIPT", "FLUSH")
	if v, err := echo.Run(ctx, c, nil, []string{"hi"}).ToString(); err != nil || v != "hi" {
		t.Fatalf("after SCRIPT FLUSH: %q %v", v, err)
	}
	if v, err := echo.Run(ctx, c, nil, []string{"again"}).ToString(); err != nil || v != "again" {
		t.Fatalf("EVALSHA: %q %v", v, err)
	}

	bad := script.New("bad", "return redis.error_reply('COORDHOST_BADCOUNTER counter is odd')")
	err := bad.Classify(bad.Run(ctx, c, nil, nil).Error())
	var se *script.Error
	if !errors.As(err, &se) || se.Code != script.CodeBadCounter || se.Msg != "counter is odd" || script.IsUncertain(err) {
		t.Fatalf("bad counter: %#v", err)
	}

	s.MustCmd(t, "HSET", "h", "f", "v")
	wrong := script.New("wrong", "return redis.call('GET', KEYS[1])")
	err = wrong.Classify(wrong.Run(ctx, c, []string{"h"}, nil).Error())
	if !errors.As(err, &se) || se.Code != script.CodeWrongType {
		t.Fatalf("wrong type: %#v", err)
	}

	// A transport error is uncertain; nil and a nil reply are not errors.
	if !script.IsUncertain(context.DeadlineExceeded) || script.IsUncertain(nil) {
		t.Fatal("IsUncertain")
	}
	if err := echo.Classify(rueidis.Nil); !rueidis.IsRedisNil(err) {
		t.Fatalf("nil reply: %v", err)
	}
}

// Clean drops the script location Redis appends (Redis 7+, Valkey) or
// prepends (older servers): users never see a SHA or @user_script line.
func TestCleanDropsScriptLocation(t *testing.T) {
	sha := "4f7c0ad3b1e2c3d4e5f60718293a4b5c6d7e8f90"
	for in, want := range map[string]string{
		"WRONGTYPE Operation against a key holding the wrong kind of value script: " + sha + ", on @user_script:60.": "WRONGTYPE Operation against a key holding the wrong kind of value",
		"ERR Error running script (call to f_" + sha + "): @user_script:12: WRONGTYPE Operation against a key":       "WRONGTYPE Operation against a key",
		"COORDHOST_BADARG lease must be a whole number of milliseconds script: " + sha + ", on @user_script:3.":      "COORDHOST_BADARG lease must be a whole number of milliseconds",
		"ERR plain error": "ERR plain error",
	} {
		if got := script.Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
	// Against a real server: a foreign value's error names no SHA or line.
	s := redistest.Start(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.MustCmd(t, "HSET", "h", "f", "v")
	get := script.New("get", "return redis.call('GET', KEYS[1])")
	err := get.Classify(get.Run(ctx, c, []string{"h"}, nil).Error())
	var se *script.Error
	if !errors.As(err, &se) || se.Code != script.CodeWrongType {
		t.Fatalf("got %v", err)
	}
	if msg := err.Error(); strings.Contains(msg, "@user_script") || strings.Contains(msg, "script: ") && strings.Contains(msg, ", on ") {
		t.Fatalf("error leaks the script location: %q", msg)
	}
}

package script_test

import (
	"context"
	"errors"
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

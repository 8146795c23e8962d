package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// FINDING 4 (low): a Sentinel URL whose addr= carries credentials (a user
// trying to give the sentinels their own password, which the URL form
// cannot carry) is accepted, and the password then shows in the address
// description that every connection error and message prints.
// parseRedisAddr redacts user:pass@ of the URL's host, and refuses
// credentials in a bare host:port ("keep them off the terminal"), but
// rueidis.ParseURL reads addr=watcher:hunter2@s2:26379 as the host
// "watcher:hunter2@s2:26379" (SplitHostPort fails on its colons) on port
// 6379, and urlClientOption copies it into the description verbatim:
// `master set "m" through the sentinels s1:26379, [watcher:hunter2@s2:26379]:6379`.
// newRedisClient then fails with that text (and rueidis' dial error
// repeats the address).
func TestHostile12SentinelAddrCredentialsShow(t *testing.T) {
	for _, in := range []string{
		"redis://s1:26379?addr=watcher:hunter2@127.0.0.1:1&master_set=m",
		"redis://127.0.0.1:1?master_set=m&addr=:hunter2@127.0.0.1:2",
	} {
		opt, desc, err := parseRedisAddr(in)
		if err != nil {
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("parseRedisAddr(%q): the password shows in the error: %v", in, err)
			}
			continue // refused: good
		}
		if strings.Contains(desc, "hunter2") {
			t.Errorf("parseRedisAddr(%q) accepted it; the password shows in the description %q (sentinels %q)", in, desc, opt.InitAddress)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c, err := newRedisClient(ctx, opt, desc)
		cancel()
		if c != nil {
			c.Close()
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("connection error shows the password: %v", err)
		}
	}
}

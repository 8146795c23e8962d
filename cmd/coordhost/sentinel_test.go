package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

// TestParseRedisAddrSentinel: rueidis' own Sentinel URL form gives a
// Sentinel client's options; every other way of naming Sentinel is
// refused with a pointer to that form, and a password never shows.
func TestParseRedisAddrSentinel(t *testing.T) {
	t.Parallel()
	opt, desc, err := parseRedisAddr("redis://app:s3cret@s1:26379/2?addr=s2:26379&addr=[::1]:26380&master_set=orders")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opt.InitAddress, []string{"s1:26379", "s2:26379", "[::1]:26380"}) || opt.Sentinel.MasterSet != "orders" ||
		opt.Username != "app" || opt.Password != "s3cret" || opt.SelectDB != 2 ||
		opt.Sentinel.Username != "" || opt.Sentinel.Password != "" || opt.TLSConfig != nil || opt.Sentinel.TLSConfig != nil ||
		opt.Sentinel.TopologyRefreshInterval != host.SentinelRefreshInterval {
		t.Errorf("options: %+v", opt)
	}
	if want := `master set "orders" through the sentinels s1:26379, s2:26379, [::1]:26380`; desc != want {
		t.Errorf("desc = %q, want %q", desc, want)
	}

	// rediss://: TLS to the sentinels and to the servers, each checked
	// against its own host name (ParseURL would name the first sentinel).
	opt, _, err = parseRedisAddr("rediss://s1:26379?addr=s2:26379&master_set=m")
	if err != nil {
		t.Fatal(err)
	}
	if opt.TLSConfig == nil || opt.TLSConfig.ServerName != "" || opt.Sentinel.TLSConfig == nil || opt.Sentinel.TLSConfig.ServerName != "" ||
		opt.Sentinel.TLSConfig == opt.TLSConfig {
		t.Errorf("TLS: %+v, sentinel TLS %+v", opt.TLSConfig, opt.Sentinel.TLSConfig)
	}

	// A plain URL keeps its old meaning.
	opt, desc, err = parseRedisAddr("redis://db:6380")
	if err != nil || desc != "db:6380" || opt.Sentinel.MasterSet != "" || opt.Sentinel.TopologyRefreshInterval != 0 {
		t.Errorf("plain URL: %+v %q %v", opt, desc, err)
	}

	for _, tc := range []struct{ in, want string }{
		{"redis-sentinel://s1:26379,s2:26379/0#mymaster", "the redis-sentinel:// scheme is not supported; reach Redis through Sentinel with " + sentinelURLForm},
		{"redis+sentinel://:hunter2@s1:26379/mymaster", `"redis+sentinel://:xxxxx@s1:26379/mymaster": the redis+sentinel:// scheme is not supported`},
		{"sentinel://s1:26379", "the sentinel:// scheme is not supported"},
		{"valkey-sentinel://s1:26379", "the valkey-sentinel:// scheme is not supported"},
		{"redis://s1:26379,s2:26379?master_set=m", "one host per URL; name more sentinels with addr=, as in " + sentinelURLForm},
		{"redis://s1:26379#mymaster", "a #fragment is not read; to name a Sentinel master set use master_set=NAME"},
		{"redis://s1:26379?sentinelMasterId=mymaster", `parameter "sentinelMasterId" is not read; reach Redis through Sentinel with ` + sentinelURLForm},
		{"redis://s1:26379?master_name=mymaster", `parameter "master_name" is not read`},
		{"redis://s1:26379?service_name=mymaster", `parameter "service_name" is not read`},
		{"redis://:hunter2@s1:26379?sentinel=s2:26379", `"redis://:xxxxx@s1:26379?sentinel=s2:26379": parameter "sentinel" is not read`},
		{"redis://s1:26379?addr=s2:26379", "addr= names more sentinels and needs master_set=NAME, as in " + sentinelURLForm},
		{"redis://s1:26379?master_set=", "master_set is empty: name the master set the sentinels monitor"},
		{"redis://s1:26379?master_set=my%20master", `master_set "my master" has a space or control character`},
		{"unix:///run/s.sock?master_set=m", "query parameters are not supported on unix socket addresses"},
	} {
		_, _, err := parseRedisAddr(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRedisAddr(%q): %v, want %q", tc.in, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("parseRedisAddr(%q): the password shows: %v", tc.in, err)
		}
	}
}

// TestHoldThroughSentinel: lock hold takes its lock on the primary that the
// sentinels report, from a Sentinel URL in -redis or COORDHOST_REDIS_URL, or
// from a -config file with a sentinel block; validate checks such a file
// without dialing.
func TestHoldThroughSentinel(t *testing.T) {
	t.Parallel()
	redisServerBin(t)
	st := redistest.StartSentinel(t, 1)
	st.Primary().MustCmd(t, "ACL", "SETUSER", "coord", "on", ">s3cret", "~*", "&*", "+@all")
	st.Primary().MustCmd(t, "ACL", "SETUSER", "default", "resetkeys")
	// The sentinels watch the primary with the default user, which may
	// still run their commands (no keys).
	url := strings.Replace(st.URL(), "redis://", "redis://coord:s3cret@", 1)
	withSentinel := writeConfig(t, fmt.Sprintf(`redis {
  sentinel {
    master_set = %q
    addresses  = [%q, %q, %q]
  }
  username = "coord"
  password = "s3cret"
}
`, st.MasterSet(), st.SentinelAddrs()[0], st.SentinelAddrs()[1], st.SentinelAddrs()[2])+goodConfig)
	cases := []redisCase{
		{"-redis", "", []string{"-redis", url}, 0, `coordhost: acquired lock "job"; key "coordhost:lock:job"`},
		{"env", url, nil, 0, `coordhost: acquired lock "job"`},
		{"-config with a sentinel block", "", []string{"-config", withSentinel}, 0, `key "t:job"`},
		{"-config: -redis in place of its sentinel block, keeping its credentials", "", []string{"-config", withSentinel, "-redis", st.URL()}, 0, `key "t:job"`},
		{"without credentials", "", []string{"-redis", st.URL()}, exitFailure, "NOPERM"},
		{"unknown master set", "", []string{"-redis", strings.Replace(st.URL(), "master_set="+st.MasterSet(), "master_set=nope", 1)}, exitFailure,
			`connecting to Redis at master set "nope" through the sentinels ` + st.SentinelAddrs()[0]},
	}
	runRedisCases(t, cases)

	// validate: the file is fine; with the sentinels stopped it still is
	// (validate does not dial).
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", withSentinel}, te.env); code != exitOK || te.out.String() != withSentinel+": OK\n" {
		t.Fatalf("validate: exit %d, stdout %q, stderr:\n%s", code, te.out, te.errOut)
	}
}

// TestValidateSentinel: validate reports a sentinel block's mistakes at
// their lines, without dialing anything.
func TestValidateSentinel(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, `redis {
  sentinel {
    master_set = "mymaster"
    addresses  = ["127.0.0.1:1", "127.0.0.1:2"]
    username   = "watcher"
    password   = "pw"
  }
}
`+goodConfig)
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", good}, te.env); code != exitOK {
		t.Fatalf("validate good: exit %d; stderr:\n%s", code, te.errOut)
	}

	bad := writeConfig(t, `redis {
  addresses = ["127.0.0.1:6379"]
  sentinel {
    master_set = "my master"
    addresses  = ["/run/sentinel.sock", "s:26379", "s:26379"]
  }
}
`+goodConfig)
	te = newTestEnv(t, nil)
	code := run(context.Background(), []string{"validate", bad}, te.env)
	stderr := te.errOut.String()
	if code != exitFailure {
		t.Fatalf("validate bad: exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"Error: Conflicting Redis addresses", "line 2, in redis",
		"Error: Invalid master_set", "line 4, in redis",
		"Error: Invalid sentinel address", "is a unix socket",
		"Error: Duplicate sentinel address", "line 5, in redis",
		bad + ": 4 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

package host

import (
	"slices"
	"testing"

	"github.com/coordhost/coordhost/config"
)

// TestClientOptionSentinel: a sentinel block becomes rueidis' Sentinel
// options: the sentinels as InitAddress, the redis block's credentials for
// the primary and the sentinel block's for the sentinels, the tls block for
// both (separate tls.Configs, no server name unless set), and the topology
// refresh.
func TestClientOptionSentinel(t *testing.T) {
	r := &config.Redis{
		Sentinel: &config.Sentinel{
			MasterSet: "orders",
			Addresses: []string{"s1:26379", "s2:26379"},
			Username:  "watcher",
			Password:  "sentinel-pw",
		},
		Username:    "app",
		Password:    "redis-pw",
		ClientCache: true,
		TLS:         &config.TLS{Enabled: true},
	}
	o, err := clientOption(r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.InitAddress, r.Sentinel.Addresses) || o.Sentinel.MasterSet != "orders" ||
		o.Username != "app" || o.Password != "redis-pw" || o.Sentinel.Username != "watcher" || o.Sentinel.Password != "sentinel-pw" ||
		o.DisableCache || o.Sentinel.TopologyRefreshInterval != SentinelRefreshInterval {
		t.Errorf("options: %+v", o)
	}
	if o.TLSConfig == nil || o.Sentinel.TLSConfig == nil || o.TLSConfig == o.Sentinel.TLSConfig || o.Sentinel.TLSConfig.ServerName != "" {
		t.Errorf("TLS %+v, sentinel TLS %+v", o.TLSConfig, o.Sentinel.TLSConfig)
	}
	r.Sentinel.Addresses[0] = "changed:1"
	if o.InitAddress[0] != "s1:26379" {
		t.Errorf("InitAddress shares the config's slice: %v", o.InitAddress)
	}

	// Without tls, neither is TLS; without a sentinel block nothing of
	// Sentinel is set.
	r.TLS = nil
	if o, _ := clientOption(r); o.TLSConfig != nil || o.Sentinel.TLSConfig != nil {
		t.Errorf("TLS without a tls block: %+v %+v", o.TLSConfig, o.Sentinel.TLSConfig)
	}
	o, _ = clientOption(&config.Redis{Addresses: []string{"r:6379"}, ClientCache: true})
	if o.Sentinel.MasterSet != "" || o.Sentinel.TopologyRefreshInterval != 0 || !slices.Equal(o.InitAddress, []string{"r:6379"}) {
		t.Errorf("without Sentinel: %+v", o)
	}
}

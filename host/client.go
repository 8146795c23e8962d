package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host/devredis"
	"github.com/redis/rueidis"
)

// connect sets up the Redis client.
func (h *Host) connect(ctx context.Context, cfg *config.Config) error {
	if cfg.Redis != nil {
		h.keyPfx = cfg.Redis.KeyPrefix
	}
	if h.opts.Client != nil {
		h.client = h.opts.Client
		return nil
	}
	opt := rueidis.ClientOption{}
	if cfg.Redis == nil {
		d, err := devredis.Start(ctx, devredis.Options{})
		if err != nil {
			return err
		}
		h.dev = d
		h.log.Warn("dev mode: no redis block; started a private redis-server", "socket", d.Socket(), "pid", d.Pid())
		opt = UnixClientOption(d.Socket())
	} else {
		var err error
		if opt, err = clientOption(cfg.Redis); err != nil {
			return err
		}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		if h.dev != nil {
			h.dev.Stop()
		}
		if opt.Sentinel.MasterSet != "" {
			return fmt.Errorf("host: connecting to the primary of master set %q through the sentinels %v: %w", opt.Sentinel.MasterSet, opt.InitAddress, err)
		}
		return fmt.Errorf("host: connecting to Redis %v: %w", opt.InitAddress, err)
	}
	h.client, h.own = c, true
	return nil
}

// UnixClientOption returns rueidis options that dial the unix socket path
// (a single server: no cluster probe).
func UnixClientOption(path string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{path},
		ForceSingleClient: true,
		DialCtxFn: func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
	}
}

// SentinelRefreshInterval is how often a client that finds the primary
// through Sentinel asks the sentinels for it again
// (rueidis.SentinelOption.TopologyRefreshInterval), besides following their
// +switch-master announcements: a client that missed one would otherwise
// keep writing to a demoted primary, which answers READONLY, until it
// restarts.
const SentinelRefreshInterval = 2 * time.Second

// clientOption is the client of the redis block: a unix socket, servers by
// address (a single server or a cluster, as rueidis finds), or, with a
// sentinel block, the primary the sentinels report. With Sentinel the tls
// block applies to the sentinels and the servers alike, each verified by
// its own host name unless server_name is set.
func clientOption(r *config.Redis) (rueidis.ClientOption, error) {
	if len(r.Addresses) == 1 && strings.HasPrefix(r.Addresses[0], "/") {
		o := UnixClientOption(r.Addresses[0])
		o.Username, o.Password, o.DisableCache = r.Username, r.Password, !r.ClientCache
		return o, nil
	}
	o := rueidis.ClientOption{
		InitAddress: r.Addresses, Username: r.Username, Password: r.Password,
		DisableCache: !r.ClientCache,
	}
	if s := r.Sentinel; s != nil {
		o.InitAddress = slices.Clone(s.Addresses)
		o.Sentinel = rueidis.SentinelOption{
			MasterSet: s.MasterSet,
			Username:  s.Username,
			Password:  s.Password,

			TopologyRefreshInterval: SentinelRefreshInterval,
		}
	}
	if r.TLS != nil && r.TLS.Enabled {
		tc := &tls.Config{ServerName: r.TLS.ServerName, InsecureSkipVerify: r.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if r.TLS.CAFile != "" {
			pem, err := os.ReadFile(r.TLS.CAFile)
			if err != nil {
				return o, fmt.Errorf("host: redis tls ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return o, fmt.Errorf("host: redis tls ca_file %s holds no PEM certificate", r.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if r.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(r.TLS.CertFile, r.TLS.KeyFile)
			if err != nil {
				return o, fmt.Errorf("host: redis tls certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		o.TLSConfig = tc
		if r.Sentinel != nil {
			o.Sentinel.TLSConfig = tc.Clone()
		}
	}
	return o, nil
}

func (h *Host) closeClient() {
	if h.own && h.client != nil {
		h.client.Close()
	}
	if h.dev != nil {
		h.dev.Stop()
	}
}

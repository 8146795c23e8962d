package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/host/devredis"
	"github.com/redis/rueidis"
)

// clientName is sent with CLIENT SETNAME so `CLIENT LIST` shows who we are.
const clientName = "coordhost-cli"

// parseRedisAddr turns the -redis flag into client options. Accepted forms:
//
//	host:port                           TCP
//	/path/to.sock, unix:///path/to.sock unix socket (absolute path)
//	redis://[user:pass@]host[:port][/db], rediss://...  (rueidis.ParseURL)
//
// The returned string describes the address for messages, without any
// password.
func parseRedisAddr(s string) (rueidis.ClientOption, string, error) {
	var opt rueidis.ClientOption
	switch {
	case s == "":
		return opt, "", errors.New("empty address")
	case strings.HasPrefix(s, "/"):
		return unixClientOption(s)
	case strings.HasPrefix(s, "unix:"):
		rest := strings.TrimPrefix(s, "unix:")
		rest = strings.TrimPrefix(rest, "//")
		if !strings.HasPrefix(rest, "/") {
			return opt, "", fmt.Errorf("%q: a unix socket address needs an absolute path, as in unix:///path/to.sock", s)
		}
		if i := strings.IndexAny(rest, "?#"); i >= 0 {
			return opt, "", fmt.Errorf("%q: query parameters are not supported on unix socket addresses", s)
		}
		return unixClientOption(rest)
	case strings.Contains(s, "://"):
		opt, err := rueidis.ParseURL(s)
		if err != nil {
			// net/url's errors quote the whole URL, password and all.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return opt, "", fmt.Errorf("%q: %v", redactURL(s), err)
		}
		if len(opt.InitAddress) != 1 || opt.InitAddress[0] == "" {
			return opt, "", fmt.Errorf("%q: no server address in URL", redactURL(s))
		}
		return opt, opt.InitAddress[0], nil
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		// Credentials without a scheme: keep them off the terminal.
		return opt, "", fmt.Errorf("%q: credentials go in a URL, as in redis://user:pass@host:port", "xxxxx"+s[i:])
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return opt, "", fmt.Errorf("%q is not host:port, a unix socket path or a redis:// URL", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return opt, "", fmt.Errorf("%q: bad port %q", s, port)
	}
	if host == "" {
		return opt, "", fmt.Errorf("%q: missing host", s)
	}
	opt.InitAddress = []string{s}
	return opt, s, nil
}

// redactURL returns the URL s with the password of its user information,
// if any, replaced by "xxxxx", as url.URL.Redacted does, also for a URL
// that does not parse.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return s
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// unixClientOption returns options that dial the unix socket path.
func unixClientOption(path string) (rueidis.ClientOption, string, error) {
	path = filepath.Clean(path)
	if len(path) > devredis.MaxSocketPath {
		return rueidis.ClientOption{}, "", fmt.Errorf("unix socket path %q is too long (%d bytes, at most %d)", path, len(path), devredis.MaxSocketPath)
	}
	return host.UnixClientOption(path), "unix socket " + path, nil
}

// newRedisClient connects with opt (from parseRedisAddr) and checks that the
// server answers.
func newRedisClient(ctx context.Context, opt rueidis.ClientOption, desc string) (rueidis.Client, error) {
	opt.ClientName = clientName
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connecting to Redis at %s: %w", desc, err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("connecting to Redis at %s: %w", desc, err)
	}
	return c, nil
}

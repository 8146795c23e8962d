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
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its text repeats the whole URL
			}
			// An unescaped # ? or / in a password makes net/url quote
			// pieces of it in its error: blank them out.
			msg := redactPieces(err.Error(), s)
			if strings.ContainsAny(s, "#?") && strings.Contains(s, "@") {
				msg += " (percent-encode any @ # ? / : %% in the user name or password)"
			}
			return opt, "", fmt.Errorf("%q: %s", redactURL(s), msg)
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
// that does not parse. A password may hold unescaped / ? # (the URL then
// does not parse), so everything up to the last @ counts as user
// information: on doubt it redacts too much, never too little.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return s
	}
	if strings.ContainsAny(user, "/?#") {
		user = "xxxxx"
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// redactPieces replaces in msg every piece of the password of URL s (as
// redactURL finds it, split at the characters that end a URL part) with
// "xxxxx".
func redactPieces(msg, s string) string {
	_, rest, ok := strings.Cut(s, "://")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return msg
	}
	_, pass, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return msg
	}
	for _, piece := range strings.FieldsFunc(pass, func(r rune) bool { return strings.ContainsRune("/?#@:", r) }) {
		msg = strings.ReplaceAll(msg, piece, "xxxxx")
	}
	return msg
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

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

// sentinelURLForm is the one URL form that reaches Redis through Sentinel:
// rueidis.ParseURL's, where the host and every addr= are sentinels.
const sentinelURLForm = "redis://[user:pass@]SENTINEL:26379?addr=SENTINEL2:26379&addr=SENTINEL3:26379&master_set=NAME"

// parseRedisAddr turns the -redis flag into client options. Accepted forms:
//
//	host:port                           TCP
//	/path/to.sock, unix:///path/to.sock unix socket (absolute path)
//	redis://[user:pass@]host[:port][/db], rediss://...  (rueidis.ParseURL)
//	redis://[user:pass@]s1:26379?addr=s2:26379&master_set=NAME
//	                                    the primary of master set NAME, found
//	                                    through the sentinels s1, s2 (and
//	                                    those they know); user:pass and /db
//	                                    are the primary's, the sentinels get
//	                                    no AUTH; rediss:// is TLS to both
//
// Other ways of naming Sentinel (redis-sentinel:// and similar schemes,
// several comma-separated hosts, a #fragment or a master_name-like
// parameter) are refused with a pointer to the form above, rather than
// read as one server. The returned string describes the address for
// messages, without any password.
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
		if scheme, _, _ := strings.Cut(s, "://"); strings.Contains(strings.ToLower(scheme), "sentinel") {
			return opt, "", fmt.Errorf("%q: the %s:// scheme is not supported; reach Redis through Sentinel with %s", redactURL(s), scheme, sentinelURLForm)
		}
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
		return urlClientOption(s, opt)
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

// urlClientOption checks the options rueidis.ParseURL made of the URL s,
// which parsed, for what ParseURL lets through silently, and returns them
// with the address description; a Sentinel URL gets the sentinel
// settings the host's own sentinel client has.
func urlClientOption(s string, opt rueidis.ClientOption) (rueidis.ClientOption, string, error) {
	u, err := url.Parse(s)
	if err != nil { // ParseURL parsed it
		return opt, "", fmt.Errorf("%q: %s", redactURL(s), redactPieces(err.Error(), s))
	}
	bad := func(format string, args ...any) (rueidis.ClientOption, string, error) {
		return opt, "", fmt.Errorf("%q: %s", redactURL(s), fmt.Sprintf(format, args...))
	}
	if strings.Contains(u.Host, ",") {
		return bad("one host per URL; name more sentinels with addr=, as in %s", sentinelURLForm)
	}
	if u.Fragment != "" {
		return bad("a #fragment is not read; to name a Sentinel master set use master_set=NAME, as in %s", sentinelURLForm)
	}
	q := u.Query()
	for _, a := range q["addr"] {
		if strings.Contains(a, "@") {
			// rueidis would take "user:pass@host" for a host name, and
			// show the password in every address and dial error.
			return bad("addr= takes host:port only; credentials go before the first host (redis://user:pass@s1:26379?addr=s2:26379&master_set=NAME)")
		}
	}
	for k := range q {
		if k == "master_set" {
			continue
		}
		if l := strings.ToLower(k); strings.Contains(l, "sentinel") || strings.Contains(l, "master") || l == "service_name" || l == "role" {
			return bad("parameter %q is not read; reach Redis through Sentinel with %s", k, sentinelURLForm)
		}
	}
	if !q.Has("master_set") {
		if len(q["addr"]) > 0 {
			return bad("addr= names more sentinels and needs master_set=NAME, as in %s (a cluster needs the address of one node only)", sentinelURLForm)
		}
		if len(opt.InitAddress) != 1 || opt.InitAddress[0] == "" {
			return bad("no server address in URL")
		}
		return opt, opt.InitAddress[0], nil
	}
	name := opt.Sentinel.MasterSet
	switch {
	case u.Scheme == "unix":
		return bad("master_set needs sentinels at host:port, as in %s", sentinelURLForm)
	case name == "":
		return bad("master_set is empty: name the master set the sentinels monitor, as in %s", sentinelURLForm)
	case strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return bad("master_set %q has a space or control character; a sentinel master name is one word", name)
	}
	if opt.TLSConfig != nil {
		// ParseURL names the first sentinel as the TLS server name of
		// every connection; let each be verified by its own host name,
		// and use TLS to the sentinels too.
		opt.TLSConfig.ServerName = ""
		opt.Sentinel.TLSConfig = opt.TLSConfig.Clone()
	}
	opt.Sentinel.TopologyRefreshInterval = host.SentinelRefreshInterval
	return opt, fmt.Sprintf("master set %q through the sentinels %s", name, strings.Join(opt.InitAddress, ", ")), nil
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

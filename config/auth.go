package config

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Bounds and defaults of the server block's tls and token blocks.
const (
	// MinTokenSecretBytes is the shortest secret a token accepts, after
	// one trailing newline is trimmed.
	MinTokenSecretBytes = 16
	// MaxTokenSecretBytes is the longest; a secret file larger than this
	// (plus a newline) is refused unread.
	MaxTokenSecretBytes = 4096
	// DefaultTokenMaxStreams is a token's max_streams when not set.
	DefaultTokenMaxStreams = 1000
	// DefaultTokenMaxSessions is a token's max_sessions when not set.
	DefaultTokenMaxSessions = 1000
	// MaxTokenLimit bounds max_streams and max_sessions.
	MaxTokenLimit = 1_000_000
	// MaxTokenNameBytes bounds a token block's label.
	MaxTokenNameBytes = 64
)

// ServerTLS is server.tls: the daemon serves HTTPS (HTTP/2 by ALPN and
// HTTP/1.1) with CertFile and KeyFile, both re-read on SIGHUP. File paths
// are absolute; the files existed and were readable when the
// configuration was loaded.
type ServerTLS struct {
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, turns on mutual TLS: a client certificate
	// is verified against these CAs if given, and every request except
	// /livez, /readyz and grpc.health.v1 needs a verified one.
	ClientCAFile string
	Range        hcl.Range
}

// Token is a `token "NAME"` block of the server block: a bearer token of
// the network API and what it may do. The secret itself is not kept, only
// its SHA-256 digest.
type Token struct {
	// Name is the block's label: the token's name in logs and metrics.
	Name string
	// SecretSHA256 is the SHA-256 digest of the secret (with one trailing
	// newline trimmed). Zero in a sandboxed parse (LoadOptions.Sandbox),
	// which reads no secret.
	SecretSHA256 [sha256.Size]byte
	// SecretSource says where the secret came from, for messages:
	// "secret_file PATH" or "secret_env NAME".
	SecretSource string
	// Names are path.Match patterns over configured primitive names
	// (lock, redlock, rwlock, semaphore, latch and rate_limit blocks): the
	// names the token may use. Empty: none (the token may still use
	// sessions and, per the flags, the admin service and /metrics).
	Names []string
	// EnvoyDomains are path.Match patterns over the domains of Envoy
	// rate-limit requests the token may send.
	EnvoyDomains []string
	// Admin allows AdminService; Metrics allows GET /metrics.
	Admin   bool
	Metrics bool
	// MaxStreams bounds the token's concurrent streams on one daemon;
	// MaxSessions the sessions it may hold. 1 to MaxTokenLimit; defaults
	// DefaultTokenMaxStreams and DefaultTokenMaxSessions.
	MaxStreams  int
	MaxSessions int
	// Range is the block header's range.
	Range hcl.Range
}

// AllowsName reports whether name matches one of t's Names.
func (t *Token) AllowsName(name string) bool { return matchAny(t.Names, name) }

// AllowsEnvoyDomain reports whether domain matches one of t's
// EnvoyDomains.
func (t *Token) AllowsEnvoyDomain(domain string) bool { return matchAny(t.EnvoyDomains, domain) }

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok { // patterns were checked at load
			return true
		}
	}
	return false
}

// Auth reports whether the network API needs tokens: the server block
// has at least one token block.
func (s Server) Auth() bool { return len(s.Tokens) > 0 }

var (
	serverTLSSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "cert_file", Required: true},
			{Name: "key_file", Required: true},
			{Name: "client_ca_file"},
		},
	}
	tokenSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "secret_file"},
			{Name: "secret_env"},
			{Name: "names"},
			{Name: "envoy_domains"},
			{Name: "admin"},
			{Name: "metrics"},
			{Name: "max_streams"},
			{Name: "max_sessions"},
		},
	}
)

func (d *decoder) decodeServerTLS(b *hcl.Block) *ServerTLS {
	t := &ServerTLS{Range: b.DefRange}
	content, diags := b.Body.Content(serverTLSSchema)
	d.add(diags...)
	at := content.Attributes
	for _, f := range []struct {
		name string
		dst  *string
	}{{"cert_file", &t.CertFile}, {"key_file", &t.KeyFile}, {"client_ca_file", &t.ClientCAFile}} {
		if a := at[f.name]; a != nil {
			*f.dst, _ = d.readableFile(a)
		}
	}
	return t
}

// tokenSecrets remembers the tokens decoded so far, to refuse a second
// token with the same label or secret.
type tokenSecrets struct {
	byName   map[string]*Token
	byDigest map[[sha256.Size]byte]*Token
}

func (d *decoder) decodeToken(b *hcl.Block, seen *tokenSecrets) *Token {
	name := b.Labels[0]
	if !validTokenName(name) {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid token name",
			Detail: fmt.Sprintf("Token name %q must be 1 to %d letters, digits, '_', '-' or '.': it labels the token in logs and metrics.",
				name, MaxTokenNameBytes),
			Subject: b.LabelRanges[0].Ptr(),
		})
		return nil
	}
	if prev := seen.byName[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate token",
			fmt.Sprintf("Token %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return nil
	}
	t := &Token{Name: name, MaxStreams: DefaultTokenMaxStreams, MaxSessions: DefaultTokenMaxSessions, Range: b.DefRange}
	seen.byName[name] = t
	content, diags := b.Body.Content(tokenSchema)
	d.add(diags...)
	at := content.Attributes
	ok := true

	file, env := at["secret_file"], at["secret_env"]
	var secretAttr *hcl.Attribute
	switch {
	case file != nil && env != nil:
		second := env
		if env.Range.Start.Byte < file.Range.Start.Byte {
			second = file
		}
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Two secrets",
			Detail:   fmt.Sprintf("Token %q sets both secret_file and secret_env; give exactly one.", name),
			Subject:  second.NameRange.Ptr(),
		})
		ok = false
	case file == nil && env == nil:
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing secret",
			Detail: fmt.Sprintf("Token %q needs secret_file (a file holding the secret) or secret_env (an environment variable holding it); secrets are never written in the configuration itself.",
				name),
			Subject: b.DefRange.Ptr(),
		})
		ok = false
	case file != nil:
		secretAttr = file
		t.SecretSHA256, ok = d.secretFile(file, t)
	default:
		secretAttr = env
		t.SecretSHA256, ok = d.secretEnv(env, t)
	}
	if ok && !d.sandbox {
		if prev := seen.byDigest[t.SecretSHA256]; prev != nil {
			d.errorAt(secretAttr, "Token secret used twice",
				"Token %q has the same secret as token %q (%s); each token needs its own secret, or the daemon cannot tell them apart.",
				name, prev.Name, where(prev.Range))
		} else {
			seen.byDigest[t.SecretSHA256] = t
		}
	}

	if a := at["names"]; a != nil {
		t.Names, _ = d.patterns(a)
	}
	if a := at["envoy_domains"]; a != nil {
		t.EnvoyDomains, _ = d.patterns(a)
	}
	if a := at["admin"]; a != nil {
		t.Admin, _ = d.boolean(a)
	}
	if a := at["metrics"]; a != nil {
		t.Metrics, _ = d.boolean(a)
	}
	if a := at["max_streams"]; a != nil {
		if n, ok := d.integer(a, 1, MaxTokenLimit); ok {
			t.MaxStreams = int(n)
		}
	}
	if a := at["max_sessions"]; a != nil {
		if n, ok := d.integer(a, 1, MaxTokenLimit); ok {
			t.MaxSessions = int(n)
		}
	}
	return t
}

// validTokenName reports whether s is 1 to MaxTokenNameBytes letters,
// digits, '_', '-' or '.'.
func validTokenName(s string) bool {
	if s == "" || len(s) > MaxTokenNameBytes {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// patterns decodes a list of path.Match patterns.
func (d *decoder) patterns(a *hcl.Attribute) ([]string, bool) {
	ps, ok := d.strList(a)
	if !ok {
		return nil, false
	}
	for i, p := range ps {
		if p == "" {
			d.errorAt(a, "Invalid pattern", "Element %d of %q is empty; a pattern such as \"invoice\" or \"tenant-*\" names what the token may use.", i, a.Name)
			return nil, false
		}
		if _, err := path.Match(p, ""); err != nil {
			d.errorAt(a, "Invalid pattern", "Element %d of %q, %q, is not a valid pattern: %v. Patterns use path.Match syntax: * (any run of characters but '/'), ? (one character), [a-z] (a class), \\ to quote.", i, a.Name, p, err)
			return nil, false
		}
	}
	return ps, true
}

// sandboxed reports the use of a, which needs the host's files or
// environment, in a sandboxed parse. The diagnostic names the argument,
// never a value read.
func (d *decoder) sandboxed(a *hcl.Attribute, what string) {
	d.add(&hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Not available in a sandboxed check",
		Detail: fmt.Sprintf("Argument %q needs %s on the daemon's machine, which a configuration sent over the network (AdminService.Validate) may not read or probe. Check it there with `coordhost validate`, or install it as the daemon's file and call Validate without a source.",
			a.Name, what),
		Subject: a.NameRange.Ptr(),
	})
}

// secretFile reads a token's secret_file and returns the secret's digest.
// No diagnostic quotes the file's content.
func (d *decoder) secretFile(a *hcl.Attribute, t *Token) ([sha256.Size]byte, bool) {
	var zero [sha256.Size]byte
	s, ok := d.str(a)
	if !ok {
		return zero, false
	}
	p := resolvePath(d.cfg.Dir, s)
	t.SecretSource = "secret_file " + p
	f, ok := d.openRegular(a, p)
	if !ok {
		return zero, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenSecretBytes+3))
	if err != nil {
		d.errorAt(a, "Cannot read file", "Argument %q: reading %s: %v.", a.Name, p, err)
		return zero, false
	}
	return d.secret(a, t, b, p)
}

// secretEnv reads a token's secret_env and returns the secret's digest.
func (d *decoder) secretEnv(a *hcl.Attribute, t *Token) ([sha256.Size]byte, bool) {
	var zero [sha256.Size]byte
	s, ok := d.str(a)
	if !ok {
		return zero, false
	}
	if s == "" || strings.ContainsAny(s, "=\x00") {
		d.errorAt(a, "Invalid environment variable name", "Argument %q must name an environment variable (non-empty, without '=').", a.Name)
		return zero, false
	}
	t.SecretSource = "secret_env " + s
	if d.sandbox {
		d.sandboxed(a, "the environment")
		return zero, false
	}
	v, found := os.LookupEnv(s)
	if !found {
		d.errorAt(a, "Environment variable not set", "Token %q takes its secret from $%s, which is not set in the daemon's environment.", t.Name, s)
		return zero, false
	}
	return d.secret(a, t, []byte(v), "$"+s)
}

// secret checks a secret read from where and returns its digest. Its
// diagnostics give lengths, never content.
func (d *decoder) secret(a *hcl.Attribute, t *Token, b []byte, where string) ([sha256.Size]byte, bool) {
	var zero [sha256.Size]byte
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	switch {
	case len(b) > MaxTokenSecretBytes:
		d.errorAt(a, "Token secret too long", "The secret of token %q (%s) is longer than %d bytes.", t.Name, where, MaxTokenSecretBytes)
		return zero, false
	case len(b) < MinTokenSecretBytes:
		d.errorAt(a, "Token secret too short", "The secret of token %q (%s) has %d bytes (after one trailing newline is trimmed); it needs at least %d. Make one with `openssl rand -hex 32`.",
			t.Name, where, len(b), MinTokenSecretBytes)
		return zero, false
	}
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			d.errorAt(a, "Invalid token secret", "The secret of token %q (%s) has a byte outside visible ASCII at offset %d (a space, control character or non-ASCII byte); clients send it in an HTTP header as `Bearer SECRET`. Make one with `openssl rand -hex 32`.",
				t.Name, where, i)
			return zero, false
		}
	}
	return sha256.Sum256(b), true
}

// checkTokenUse warns about what a token's patterns probably got wrong:
// a pattern matching no configured name or domain, and tokens sent in
// clear text to a listener that is not on loopback. Run once every block
// is decoded.
func (d *decoder) checkTokenUse() {
	s := d.cfg.Server
	if len(s.Tokens) == 0 {
		return
	}
	if s.TLS == nil && !loopbackListen(s.Listen) {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "Tokens in clear text",
			Detail: fmt.Sprintf("The server block declares tokens but no tls block, and listens on %q, beyond loopback: clients send their tokens unencrypted. Add a tls block unless a proxy or service mesh encrypts the traffic.",
				s.Listen),
			Subject: s.Range.Ptr(),
		})
	}
	var names []string
	for _, l := range d.cfg.Locks {
		names = append(names, l.Name)
	}
	for _, l := range d.cfg.Redlocks {
		names = append(names, l.Name)
	}
	for _, l := range d.cfg.RWLocks {
		names = append(names, l.Name)
	}
	for _, l := range d.cfg.Semaphores {
		names = append(names, l.Name)
	}
	for _, l := range d.cfg.Latches {
		names = append(names, l.Name)
	}
	for _, l := range d.cfg.RateLimits {
		names = append(names, l.Name)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	var domains []string
	for _, e := range d.cfg.EnvoyRateLimits {
		domains = append(domains, e.Domain)
	}
	sort.Strings(domains)
	for _, t := range s.Tokens {
		for _, p := range t.Names {
			if !slices.ContainsFunc(names, func(n string) bool { ok, _ := path.Match(p, n); return ok }) {
				d.add(&hcl.Diagnostic{
					Severity: hcl.DiagWarning,
					Summary:  "Pattern matches no primitive",
					Detail:   fmt.Sprintf("Token %q's names pattern %q matches no configured lock, redlock, rwlock, semaphore, latch or rate_limit.%s", t.Name, p, didYouMean(p, names, "")),
					Subject:  t.Range.Ptr(),
				})
			}
		}
		for _, p := range t.EnvoyDomains {
			if !slices.ContainsFunc(domains, func(n string) bool { ok, _ := path.Match(p, n); return ok }) {
				d.add(&hcl.Diagnostic{
					Severity: hcl.DiagWarning,
					Summary:  "Pattern matches no Envoy domain",
					Detail:   fmt.Sprintf("Token %q's envoy_domains pattern %q matches no envoy_rate_limit domain.%s", t.Name, p, didYouMean(p, domains, "")),
					Subject:  t.Range.Ptr(),
				})
			}
		}
	}
}

// loopbackListen reports whether a listen address (checked by
// checkAddress) is on loopback only: localhost, 127.0.0.0/8 or [::1].
// (Package config does not import net: decoding cannot dial.)
func loopbackListen(listen string) bool {
	i := strings.LastIndex(listen, ":")
	if i < 0 {
		return false
	}
	host := strings.TrimSuffix(strings.TrimPrefix(listen[:i], "["), "]")
	if host == "localhost" || host == "::1" {
		return true
	}
	return strings.HasPrefix(host, "127.") && strings.Trim(host, "0123456789.") == ""
}

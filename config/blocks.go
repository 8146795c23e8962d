package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

var (
	redisSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "addresses"}, // required unless there is a sentinel block
			{Name: "username"},
			{Name: "password"},
			{Name: "key_prefix"},
			{Name: "client_cache"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "tls"}, {Type: "sentinel"}},
	}
	sentinelSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "master_set", Required: true},
			{Name: "addresses", Required: true},
			{Name: "username"},
			{Name: "password"},
		},
	}
	tlsSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "enabled"},
			{Name: "ca_file"},
			{Name: "cert_file"},
			{Name: "key_file"},
			{Name: "server_name"},
			{Name: "insecure_skip_verify"},
		},
	}
	serverSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "listen"},
			{Name: "log_format"},
			{Name: "log_level"},
			{Name: "metrics_open"},
		},
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "tls"},
			{Type: "token", LabelNames: []string{"name"}},
		},
	}
)

func (d *decoder) decodeRedis(b *hcl.Block) *Redis {
	r := &Redis{ClientCache: true, Range: b.DefRange}
	content, diags := b.Body.Content(redisSchema)
	d.add(diags...)
	at := content.Attributes
	hasSentinel := slices.ContainsFunc(content.Blocks, func(b *hcl.Block) bool { return b.Type == "sentinel" })
	// With a sentinel block, addresses is reported as a conflict below,
	// whatever it holds.
	if a := at["addresses"]; a != nil && !hasSentinel {
		if addrs, ok := d.strList(a); ok {
			if len(addrs) == 0 {
				d.errorAt(a, "No Redis addresses", "Argument \"addresses\" needs at least one \"host:port\" or unix socket path; remove the redis block to run a private dev server.")
			}
			for i, addr := range addrs {
				if err := checkAddress(addr, false); err != nil {
					d.errorAt(a, "Invalid Redis address", "Element %d of \"addresses\", %q, %v.", i, addr, err)
				} else if strings.HasPrefix(addr, "/") && len(addrs) > 1 {
					d.errorAt(a, "Invalid Redis address", "Element %d of \"addresses\", %q, is a unix socket: it must be the only address.", i, addr)
				}
			}
			r.Addresses = addrs
		}
	}
	if a := at["username"]; a != nil {
		r.Username, _ = d.str(a)
	}
	if a := at["password"]; a != nil {
		r.Password, _ = d.str(a)
	}
	if a := at["key_prefix"]; a != nil {
		r.KeyPrefix, _ = d.str(a)
	}
	if a := at["client_cache"]; a != nil {
		if v, ok := d.boolean(a); ok {
			r.ClientCache = v
		}
	}
	for _, tb := range content.Blocks {
		switch tb.Type {
		case "tls":
			if r.TLS != nil {
				d.duplicate(tb.DefRange, "Duplicate tls block", "A redis block has at most one tls block; the first is at "+where(r.TLS.Range)+".")
				continue
			}
			r.TLS = d.decodeTLS(tb)
			if r.TLS.Enabled && len(r.Addresses) == 1 && strings.HasPrefix(r.Addresses[0], "/") {
				d.add(&hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "TLS on a unix socket",
					Detail:   "A unix socket address is not dialled with TLS; remove the tls block or use a host:port address.",
					Subject:  tb.DefRange.Ptr(),
				})
			}
		case "sentinel":
			if r.Sentinel != nil {
				d.duplicate(tb.DefRange, "Duplicate sentinel block", "A redis block has at most one sentinel block; the first is at "+where(r.Sentinel.Range)+".")
				continue
			}
			r.Sentinel = d.decodeSentinel(tb)
		}
	}
	// The servers are named either directly (addresses) or through
	// Sentinel, never both: with both, which one wins would be a guess.
	switch a := at["addresses"]; {
	case a == nil && r.Sentinel == nil:
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing required argument",
			Detail:   "The argument \"addresses\" is required, or else a sentinel block naming the sentinels and the master_set they monitor.",
			Subject:  b.Body.MissingItemRange().Ptr(),
		})
	case a != nil && r.Sentinel != nil:
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Conflicting Redis addresses",
			Detail: "A redis block names its servers either with \"addresses\" or through a sentinel block (at " + where(r.Sentinel.Range) +
				"), not both: with Sentinel the primary is the one the sentinels report. Remove \"addresses\"; the sentinels' own addresses go in the sentinel block.",
			Subject: a.NameRange.Ptr(),
		})
	}
	return r
}

// decodeSentinel decodes redis.sentinel.
func (d *decoder) decodeSentinel(b *hcl.Block) *Sentinel {
	s := &Sentinel{Range: b.DefRange}
	content, diags := b.Body.Content(sentinelSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["master_set"]; a != nil {
		if v, ok := d.str(a); ok {
			switch {
			case v == "":
				d.errorAt(a, "Invalid master_set", "Argument \"master_set\" must name the master set the sentinels monitor (the NAME of `sentinel monitor NAME host port quorum`); it is empty.")
			case strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
				d.errorAt(a, "Invalid master_set", "Argument \"master_set\", %q, has a space or control character; a sentinel master name is one word.", v)
			default:
				s.MasterSet = v
			}
		}
	}
	if a := at["addresses"]; a != nil {
		if addrs, ok := d.strList(a); ok {
			if len(addrs) == 0 {
				d.errorAt(a, "No sentinel addresses", "Argument \"addresses\" needs at least one sentinel's \"host:port\" (26379 is Sentinel's usual port); list every sentinel, so that coordhost finds the primary while some are down.")
			}
			seen := map[string]int{}
			for i, addr := range addrs {
				switch err := checkAddress(addr, false); {
				case strings.HasPrefix(addr, "/"):
					d.errorAt(a, "Invalid sentinel address", "Element %d of \"addresses\", %q, is a unix socket: sentinels are reached over TCP, as \"host:port\".", i, addr)
				case err != nil:
					d.errorAt(a, "Invalid sentinel address", "Element %d of \"addresses\", %q, %v.", i, addr, err)
				default:
					k := normalAddress(addr) // host names are case-insensitive
					if j, dup := seen[k]; dup {
						d.errorAt(a, "Duplicate sentinel address", "Elements %d and %d of \"addresses\", %q and %q, are the same sentinel.", j, i, addrs[j], addr)
					}
					seen[k] = i
				}
			}
			s.Addresses = addrs
		}
	}
	if a := at["username"]; a != nil {
		s.Username, _ = d.str(a)
	}
	if a := at["password"]; a != nil {
		s.Password, _ = d.str(a)
	}
	return s
}

func (d *decoder) decodeTLS(b *hcl.Block) *TLS {
	t := &TLS{Enabled: true, Range: b.DefRange}
	content, diags := b.Body.Content(tlsSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["enabled"]; a != nil {
		if v, ok := d.boolean(a); ok {
			t.Enabled = v
		}
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"ca_file", &t.CAFile}, {"cert_file", &t.CertFile}, {"key_file", &t.KeyFile}} {
		if a := at[f.name]; a != nil {
			*f.dst, _ = d.readableFile(a)
		}
	}
	cert, key := at["cert_file"], at["key_file"]
	if (cert == nil) != (key == nil) {
		have, missing := "cert_file", "key_file"
		if cert == nil {
			have, missing = "key_file", "cert_file"
		}
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing " + missing,
			Detail:   fmt.Sprintf("A client certificate needs both cert_file and key_file; this tls block sets %s only.", have),
			Subject:  at[have].NameRange.Ptr(),
		})
	}
	if a := at["server_name"]; a != nil {
		t.ServerName, _ = d.str(a)
	}
	if a := at["insecure_skip_verify"]; a != nil {
		t.InsecureSkipVerify, _ = d.boolean(a)
	}
	return t
}

func (d *decoder) decodeServer(b *hcl.Block) Server {
	s := Server{Listen: DefaultListen, LogFormat: LogText, LogLevel: LogInfo, Range: b.DefRange}
	content, diags := b.Body.Content(serverSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["listen"]; a != nil {
		if v, ok := d.str(a); ok {
			if err := checkAddress(v, true); err != nil {
				d.errorAt(a, "Invalid listen address", "Argument \"listen\", %q, %v.", v, err)
			} else {
				s.Listen = v
			}
		}
	}
	if a := at["log_format"]; a != nil {
		if v, ok := d.enum(a, string(LogText), string(LogJSON)); ok {
			s.LogFormat = LogFormat(v)
		}
	}
	if a := at["log_level"]; a != nil {
		if v, ok := d.enum(a, string(LogDebug), string(LogInfo), string(LogWarn), string(LogError)); ok {
			s.LogLevel = LogLevel(v)
		}
	}
	if a := at["metrics_open"]; a != nil {
		s.MetricsOpen, _ = d.boolean(a)
	}
	seen := &tokenSecrets{byName: map[string]*Token{}, byDigest: map[[32]byte]*Token{}}
	for _, tb := range content.Blocks {
		switch tb.Type {
		case "tls":
			if s.TLS != nil {
				d.duplicate(tb.DefRange, "Duplicate tls block", "A server block has at most one tls block; the first is at "+where(s.TLS.Range)+".")
				continue
			}
			s.TLS = d.decodeServerTLS(tb)
		case "token":
			if t := d.decodeToken(tb, seen); t != nil {
				s.Tokens = append(s.Tokens, t)
			}
		}
	}
	return s
}

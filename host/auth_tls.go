package host

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/coordhost/coordhost/config"
)

// ServerTLS is the TLS of the daemon's listener, from the server block's
// tls: the certificate and key, and with client_ca_file the CAs that
// client certificates are verified against. Reload reads the files again
// (SIGHUP); the handshakes after it use the new ones, and connections
// already open keep theirs. Safe for concurrent use.
type ServerTLS struct {
	cfg config.ServerTLS
	log *slog.Logger
	mu  sync.Mutex // serializes Reload
	cur atomic.Pointer[tls.Config]
}

// NewServerTLS reads c's files; an error names the file at fault. A nil
// log means slog.Default().
func NewServerTLS(c *config.ServerTLS, log *slog.Logger) (*ServerTLS, error) {
	if c == nil {
		return nil, errors.New("host: no tls block")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &ServerTLS{cfg: *c, log: log}
	tc, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(tc)
	return s, nil
}

// MutualTLS reports whether client certificates are verified
// (client_ca_file); Host.Handler then requires one on every request but
// the probes.
func (s *ServerTLS) MutualTLS() bool { return s.cfg.ClientCAFile != "" }

// Config returns the tls.Config to serve with: TLS 1.2 or later, ALPN h2
// and http/1.1, and each handshake uses the files as last (re)loaded.
func (s *ServerTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
		// ServeTLS wants to see a certificate source; GetConfigForClient
		// answers first.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.cur.Load().Certificates[0], nil
		},
	}
}

// Reload reads the files again. On error the previous certificate (and
// CAs) stay in use, the error is logged and returned; on success the new
// certificate's subject and expiry are logged.
func (s *ServerTLS) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tc, err := s.load()
	if err != nil {
		s.log.Error("TLS reload failed; keeping the previous certificate", "err", err)
		return err
	}
	s.cur.Store(tc)
	leaf := tc.Certificates[0].Leaf
	s.log.Info("TLS certificate reloaded", "cert_file", s.cfg.CertFile, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter)
	return nil
}

// load reads the files into a complete tls.Config for one handshake.
func (s *ServerTLS) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server tls: cert_file %s, key_file %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	// LoadX509KeyPair fills Leaf since Go 1.23.
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("server tls: cert_file %s: %w", s.cfg.CertFile, err)
		}
	}
	tc := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{cert},
	}
	if s.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(s.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server tls: client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server tls: client_ca_file %s: no PEM certificate in it", s.cfg.ClientCAFile)
		}
		tc.ClientCAs = pool
		// Verified when given; Host.Handler refuses requests without
		// one, except the probes (which a TLS-level requirement could
		// not let through).
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

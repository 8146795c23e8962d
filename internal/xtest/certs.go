package xtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Cert is a test certificate with its key (ECDSA P-256), made in process
// by NewCA and Cert.Issue.
type Cert struct {
	CertPEM, KeyPEM []byte
	X509            *x509.Certificate
	TLS             tls.Certificate
	key             *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named cn, valid for a day.
func NewCA(t testing.TB, cn string) *Cert {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	return makeCert(t, tmpl, nil)
}

// Issue makes a certificate named cn signed by ca: a server certificate
// for localhost, 127.0.0.1 and ::1 when server is true, else a client
// certificate.
func (ca *Cert) Issue(t testing.TB, cn string, server bool) *Cert {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	return makeCert(t, tmpl, ca)
}

func makeCert(t testing.TB, tmpl *x509.Certificate, parent *Cert) *Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	signer, signerCert := key, tmpl
	if parent != nil {
		signer, signerCert = parent.key, parent.X509
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		key:     key,
	}
	if c.X509, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	if c.TLS, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return c
}

// Pool returns a pool holding c, to trust it.
func (c *Cert) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.X509)
	return p
}

// Write writes c to dir as name.pem and name.key and returns their paths.
func (c *Cert) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, c.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, c.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

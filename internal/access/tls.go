package access

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSConfig sets TLS on every listener of serve (ingest HTTP, gRPC, API).
type TLSConfig struct {
	// CertFile is the server certificate (PEM, with its chain). Setting it
	// and key_file turns TLS on for every listener. Both are read again on
	// SIGHUP. Default none: plain TCP.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the server certificate's private key (PEM).
	KeyFile string `yaml:"key_file"`
	// ClientCAFile holds the CA certificates (PEM) client certificates are
	// verified against. Default none: client certificates are not asked for.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is what is asked of clients when client_ca_file is set:
	// "optional" (a certificate, if sent, must verify; bearer tokens still
	// work) or "require" (every connection must present a verified
	// certificate). Default optional.
	ClientAuth string `yaml:"client_auth"`
	// MinVersion is the oldest TLS version accepted: "1.2" or "1.3".
	// Default 1.2.
	MinVersion string `yaml:"min_version"`
}

// NewDefaultTLSConfig returns the defaults: TLS off.
func NewDefaultTLSConfig() TLSConfig { return TLSConfig{ClientAuth: "optional", MinVersion: "1.2"} }

// On reports whether TLS is configured.
func (c *TLSConfig) On() bool { return c.CertFile != "" || c.KeyFile != "" }

// Validate checks that the files come in pairs and the options are known;
// it does not read the files (Certificates does).
func (c *TLSConfig) Validate() error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("cert_file and key_file: set both or neither"))
	}
	if c.ClientCAFile != "" && !c.On() {
		errs = append(errs, errors.New("client_ca_file: needs cert_file and key_file (client certificates are asked for over TLS)"))
	}
	switch c.ClientAuth {
	case "", "optional", "require":
	default:
		errs = append(errs, fmt.Errorf("client_auth: %q is not optional or require", c.ClientAuth))
	}
	switch c.MinVersion {
	case "", "1.2", "1.3":
	default:
		errs = append(errs, fmt.Errorf("min_version: %q is not 1.2 or 1.3", c.MinVersion))
	}
	return errors.Join(errs...)
}

// Certificates holds the server certificate of the listeners and reloads
// it on request (SIGHUP). It is safe for concurrent use.
type Certificates struct {
	cfg  TLSConfig
	cert atomic.Pointer[tls.Certificate]
	pool *x509.CertPool
}

// NewCertificates reads the certificate, key and client CAs of cfg.
func NewCertificates(cfg TLSConfig) (*Certificates, error) {
	c := &Certificates{cfg: cfg}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("cannot read client CA file: %w", err)
		}
		c.pool = x509.NewCertPool()
		if !c.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cannot read client CA file %s: no PEM certificate in it", cfg.ClientCAFile)
		}
	}
	return c, nil
}

// Reload reads the certificate and key again; on error the one in use
// stays.
func (c *Certificates) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("cannot load TLS certificate %s: %w", c.cfg.CertFile, err)
	}
	c.cert.Store(&cert)
	return nil
}

// Config returns the server TLS configuration; nextProtos are the
// application protocols offered (h2 for gRPC).
func (c *Certificates) Config(nextProtos ...string) *tls.Config {
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cert.Load(), nil
		},
		NextProtos: nextProtos,
	}
	if c.cfg.MinVersion == "1.3" {
		tc.MinVersion = tls.VersionTLS13
	}
	if c.pool != nil {
		tc.ClientCAs = c.pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
		if c.cfg.ClientAuth == "require" {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return tc
}

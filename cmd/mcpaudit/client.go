package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

// clientFlags say how a command reaches a collector over HTTPS: the CA
// that signs the collector's certificate and the certificate the command
// presents (mTLS). The proxy, wrap, loadgen, report --server and the query
// commands share them.
type clientFlags struct {
	caFile, certFile, keyFile string
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.caFile, "ca-file", "", "PEM file of the CA certificates that sign the collector's certificate, for https:// (default: the system's, or $SSL_CERT_FILE)")
	fs.StringVar(&c.certFile, "client-cert", "", "PEM file of the client certificate to present (mTLS: serve.tls.client_ca_file), with --client-key")
	fs.StringVar(&c.keyFile, "client-key", "", "PEM file of the client certificate's private key")
}

// tlsConfig returns the TLS settings the flags give; nil when none is set
// (Go's defaults: the system's CAs, no client certificate).
func (c *clientFlags) tlsConfig() (*tls.Config, error) {
	if c.caFile == "" && c.certFile == "" && c.keyFile == "" {
		return nil, nil
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, errors.New("--client-cert and --client-key go together")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", c.caFile)
		}
		tc.RootCAs = pool
	}
	if c.certFile != "" {
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--client-cert, --client-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// httpClient returns a client with the flags' TLS settings; timeout 0 is
// none.
func (c *clientFlags) httpClient(timeout time.Duration) (*http.Client, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc == nil {
		return &http.Client{Timeout: timeout}, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

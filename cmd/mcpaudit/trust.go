package main

// The front door of serve: credentials, TLS, connection limits and
// timeouts, /metrics access, the memory limit and redaction. serve.go calls
// these; they hold what the listeners share.

import (
	"cmp"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/internal/connlimit"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// ConnectionsConfig bounds the connections of each listener of serve and
// how long they may be held.
type ConnectionsConfig struct {
	// MaxPerListener caps the connections open at once on each listener
	// (ingest, gRPC, API). An HTTP connection past it is answered 503 with
	// Retry-After and closed; a gRPC one waits for a slot. Default 1024.
	MaxPerListener int `yaml:"max_per_listener"`
	// ReadHeaderTimeout is how long a request's headers may take to
	// arrive. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long. Default
	// 60s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout bounds the writing of an API response (of each page of
	// /api/v1/calls/export, which streams); the ingest listener's requests
	// are bounded by serve.receiver.body_timeout. Default 2m.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxExports caps the exports (GET /api/v1/calls/export) streamed at
	// once; each holds a page of the store (1000 calls) in memory while
	// its reader reads it. An export past it is answered 429 with
	// Retry-After. Default 4.
	MaxExports int `yaml:"max_exports"`
}

// MetricsConfig bounds the label values of the Prometheus metrics.
type MetricsConfig struct {
	// MaxServers caps the distinct server label values; later servers are
	// counted as "other". The servers of dialects.servers always have
	// their own. Default 100.
	MaxServers int `yaml:"max_servers"`
	// MaxToolsPerServer caps the distinct tool label values of a server;
	// later tools are counted as "other". Default 64.
	MaxToolsPerServer int `yaml:"max_tools_per_server"`
}

// NewDefaultConnectionsConfig returns the defaults.
func NewDefaultConnectionsConfig() ConnectionsConfig {
	return ConnectionsConfig{MaxPerListener: 1024, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, WriteTimeout: 2 * time.Minute,
		MaxExports: api.DefaultMaxExports}
}

// Validate checks the bounds.
func (c *ConnectionsConfig) Validate() error {
	var errs []error
	if c.MaxPerListener <= 0 {
		errs = append(errs, errors.New("max_per_listener: must be positive"))
	}
	if c.MaxExports <= 0 {
		errs = append(errs, errors.New("max_exports: must be positive"))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"read_header_timeout", c.ReadHeaderTimeout}, {"idle_timeout", c.IdleTimeout}, {"write_timeout", c.WriteTimeout}} {
		if d.v <= 0 {
			errs = append(errs, errors.New(d.key+": must be positive"))
		}
	}
	return errors.Join(errs...)
}

// validateTrust checks the sections of the front door and returns their
// errors with their key paths.
func (c *Config) validateTrust() []error {
	var errs []error
	sv := &c.Serve
	if err := sv.Auth.Validate(); err != nil {
		errs = append(errs, prefixed("serve.auth", err))
	}
	if err := sv.TLS.Validate(); err != nil {
		errs = append(errs, prefixed("serve.tls", err))
	}
	if err := sv.Connections.Validate(); err != nil {
		errs = append(errs, prefixed("serve.connections", err))
	}
	if err := c.Redact.Validate(); err != nil {
		errs = append(errs, prefixed("redact", err))
	}
	if sv.Metrics.MaxServers <= 0 {
		errs = append(errs, errors.New("serve.metrics.max_servers: must be positive"))
	}
	if sv.Metrics.MaxToolsPerServer <= 0 {
		errs = append(errs, errors.New("serve.metrics.max_tools_per_server: must be positive"))
	}
	if sv.MemoryLimit < 0 {
		errs = append(errs, errors.New("serve.memory_limit: must not be negative"))
	}
	if len(c.Serve.Auth.ClientCerts) > 0 && c.Serve.TLS.ClientCAFile == "" {
		errs = append(errs, errors.New("serve.auth.client_certs: needs serve.tls.client_ca_file, which the certificates are verified against"))
	}
	return errs
}

// newAuthenticator builds the one authenticator of serve's listeners from
// the inline credentials and the tokens file.
func newAuthenticator(cfg Config) (*access.Authenticator, error) {
	return access.New(cfg.Serve.Auth, api.Entries(cfg.Serve.Receiver.Tenants, cfg.Serve.Credentials))
}

// applyMemoryLimit sets the Go runtime's memory limit from
// serve.memory_limit, unless GOMEMLIMIT is set, which wins. The configured
// limit bounds the whole process: the runtime gets seven eighths of it, the
// rest is left to what lives outside the Go heap (the embedded store's page
// cache). It returns the runtime's limit in force (0: none).
func applyMemoryLimit(limit int64) int64 {
	if os.Getenv("GOMEMLIMIT") == "" && limit > 0 {
		debug.SetMemoryLimit(limit / 8 * 7)
	}
	if l := debug.SetMemoryLimit(-1); l > 0 && l < 1<<62 {
		return l
	}
	return 0
}

// redactSecret returns the key of the masks: the file named in the
// configuration, else <data_dir>/redact.key, created with 32 random bytes
// (mode 0600) the first time. The key stays with the data: the same value
// gets the same mask after a restart, so re-sent calls and retries still
// compare equal.
func redactSecret(file, dataDir string) ([]byte, error) {
	if file == "" {
		file = filepath.Join(dataDir, "redact.key")
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			key := make([]byte, 32)
			rand.Read(key)
			// Durably: a key lost to a power loss after calls were
			// stored masked with it would give the same values other
			// masks after the restart.
			if err := datadir.WriteFileSynced(file, key, datadir.FileMode); err != nil {
				return nil, fmt.Errorf("cannot create the redaction key: %w", err)
			}
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cannot read the redaction key: %w", err)
	}
	if len(b) < 16 {
		return nil, fmt.Errorf("cannot use the redaction key %s: %d bytes, want at least 16", file, len(b))
	}
	return b, nil
}

// newRedactor returns the redactor of cfg with its key, nil when redaction
// is off. The target and key arguments of the generic write tools are
// kept: the audit reads them.
func newRedactor(cfg Config, secret []byte) (*redact.Redactor, error) {
	var keep []string
	for _, tools := range cfg.Dialects.Writes {
		for _, w := range tools {
			keep = append(keep, w.TargetArg)
			if w.KeyArg != "" {
				keep = append(keep, w.KeyArg)
			}
		}
	}
	return redact.New(cfg.Redact, secret, keep...)
}

// overloadedConn answers a connection past the cap with 503 and closes it.
func overloadedConn(tc *tls.Config) func(net.Conn) {
	const answer = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Connection: close\r\nContent-Length: 62\r\n\r\ntoo many connections (serve.connections.max_per_listener)\r\n\r\n"
	return func(c net.Conn) {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if tc != nil {
			c = tls.Server(c, tc)
		}
		c.Write([]byte(answer))
	}
}

// listen opens a TCP listener with the connection cap and, when tc is set,
// TLS. HTTP listeners answer connections past the cap with 503; gRPC ones
// make them wait.
func listen(addr string, max int, tc *tls.Config, http bool) (net.Listener, *connlimit.Listener, error) {
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	var refuse func(net.Conn)
	if http {
		refuse = overloadedConn(tc)
	}
	// The cap is under TLS, so that the server sees *tls.Conn (and the
	// client certificate) and HTTP/2 is negotiated.
	lim := connlimit.New(tcp, max, refuse)
	var ln net.Listener = lim
	if tc != nil && http {
		ln = tls.NewListener(lim, tc)
	}
	return ln, lim, nil
}

// httpServer returns an HTTP server with the connection timeouts; read
// bounds a whole request (0: the handler bounds its body itself), write the
// time from the end of its headers to the end of the answer.
func httpServer(h http.Handler, cc ConnectionsConfig, read, write time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: cc.ReadHeaderTimeout, ReadTimeout: read, IdleTimeout: cc.IdleTimeout,
		WriteTimeout: write, MaxHeaderBytes: 64 << 10}
}

// grpcOptions are the transport options of the gRPC server: TLS, keepalive
// enforcement and the handshake timeout.
func grpcOptions(tc *tls.Config, cc ConnectionsConfig) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ConnectionTimeout(cc.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cc.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return opts
}

// metricsHandler guards /metrics with a credential of the metrics scope when
// serve.auth.metrics_token is set (401 without a known credential, 403
// without the scope). A refusal creates no series.
func metricsHandler(h http.Handler, a *access.Authenticator) http.Handler {
	if a.MetricsOpen() {
		return h
	}
	return requireScope(h, a, access.ScopeMetrics, "/metrics (serve.auth.metrics_token)")
}

// requireScope guards h with a credential of scope when authentication is
// on: 401 with WWW-Authenticate for a missing or unknown credential, 403
// for a known one without the scope. With authentication off it is h.
func requireScope(h http.Handler, a *access.Authenticator, scope access.Scope, what string) http.Handler {
	if !a.On() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := a.Request(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpaudit"`)
			http.Error(w, what+" needs a credential with the "+scope.String()+" scope: "+cmp.Or(access.Repeated(r.Header.Values("Authorization")), "missing or unknown bearer token"), http.StatusUnauthorized)
			return
		}
		if !p.Can(scope) {
			http.Error(w, "credential "+p.Name+" may not read "+what+" (no "+scope.String()+" scope)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// reload reads the tokens file and the TLS certificate again (SIGHUP). A
// file that cannot be read leaves what is in force.
func (s *server) reload() {
	if err := s.access.Reload(); err != nil {
		s.log.Error("cannot reload credentials; the previous ones stay in force", "err", err)
	} else {
		s.log.Info("credentials reloaded", "tokens_file_entries", s.access.FileEntries())
	}
	if s.certs != nil {
		if err := s.certs.Reload(); err != nil {
			s.log.Error("cannot reload the TLS certificate; the previous one stays in force", "err", err)
		} else {
			s.log.Info("TLS certificate reloaded", "cert_file", s.cfg.Serve.TLS.CertFile)
		}
	}
}

// formatBytes prints a byte count for the log.
func formatBytes(n int64) string {
	if n <= 0 {
		return "none"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

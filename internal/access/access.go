package access

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Scope is one thing a credential may do.
type Scope uint8

// Scopes.
const (
	// ScopeIngest lets a credential send calls (/v1/calls, /v1/traces,
	// OTLP/gRPC) for its one tenant.
	ScopeIngest Scope = 1 << iota
	// ScopeQuery lets a credential read the query API, the page and the
	// report, and change findings' states.
	ScopeQuery
	// ScopeMetrics lets a credential scrape /metrics when it requires a
	// token.
	ScopeMetrics
	// ScopeDebug lets a credential read Go's profiles under /debug/pprof/
	// (serve --pprof). A profile is the whole process's, every tenant's,
	// and a CPU profile costs CPU while it runs, so the scope is never
	// implied: it is granted by name, to a credential of tenant "*".
	ScopeDebug
)

var scopeNames = []struct {
	s    Scope
	name string
}{{ScopeIngest, "ingest"}, {ScopeQuery, "query"}, {ScopeMetrics, "metrics"}, {ScopeDebug, "debug"}}

// ParseScopes reads a comma-separated list of scope names.
func ParseScopes(s string) (Scope, error) {
	var out Scope
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		found := false
		for _, n := range scopeNames {
			if n.name == part {
				out |= n.s
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown scope %q (want ingest, query, metrics or debug)", part)
		}
	}
	return out, nil
}

// String lists the scopes, comma-separated.
func (s Scope) String() string {
	var names []string
	for _, n := range scopeNames {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// AllTenants is the tenant of a credential that may read every tenant.
const AllTenants = "*"

// Principal is who a request speaks for.
type Principal struct {
	// Tenant limits what the caller sees and is the tenant of the calls it
	// sends; empty means every tenant (a "*" credential, or authentication
	// off).
	Tenant string
	// Name is the credential's name, recorded with the state changes the
	// caller makes. It is never the token.
	Name string
	// Authenticated is false when authentication is off.
	Authenticated bool
	// Scopes are what the credential may do; every scope when
	// authentication is off.
	Scopes Scope
}

// Can reports whether the principal may use scope s.
func (p Principal) Can(s Scope) bool { return p.Scopes&s != 0 }

// Entry is one credential: a token's hash, its name, tenant and scopes.
type Entry struct {
	Name   string
	Tenant string
	Scopes Scope
	// Hash is the SHA-256 of the token.
	Hash [sha256.Size]byte
}

// HashToken returns the SHA-256 of a token, the form it is kept in.
func HashToken(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// FormatHash writes a token hash as the tokens file holds it.
func FormatHash(h [sha256.Size]byte) string { return "sha256:" + hex.EncodeToString(h[:]) }

// CertPrincipal is what a verified client certificate speaks for.
type CertPrincipal struct {
	// Tenant is the certificate's tenant, or "*" for every tenant (query
	// and metrics only).
	Tenant string `yaml:"tenant"`
	// Scopes lists what the certificate may do: ingest, query, metrics,
	// debug. Default ingest.
	Scopes []string `yaml:"scopes"`
}

// Config sets where credentials come from besides the inline tokens of
// serve.receiver.tenants and serve.credentials.
type Config struct {
	// TokensFile is a file of hashed credentials, one a line:
	// "name tenant scopes sha256:HEX" (mcpaudit token new writes one). It
	// is read at start and again on SIGHUP; a file that cannot be read
	// leaves the previous credentials in force. Default none.
	TokensFile string `yaml:"tokens_file"`
	// MetricsToken makes /metrics require a credential with the metrics
	// scope. Default false: /metrics is open, as Prometheus expects of an
	// exporter on a private network.
	MetricsToken bool `yaml:"metrics_token"`
	// ClientCerts maps the subject of a verified client certificate (its
	// common name or its whole distinguished name, such as
	// "CN=agents,O=Acme") to the tenant and scopes it speaks for.
	// Certificates are verified against serve.tls.client_ca_file. Default
	// none.
	ClientCerts map[string]CertPrincipal `yaml:"client_certs"`
}

// Validate checks the client certificate mappings.
func (c *Config) Validate() error {
	var errs []error
	for _, subj := range sortedKeys(c.ClientCerts) {
		if _, err := c.ClientCerts[subj].entry(subj); err != nil {
			errs = append(errs, fmt.Errorf("client_certs.%s: %w", subj, err))
		}
	}
	return errors.Join(errs...)
}

func (cp CertPrincipal) entry(subject string) (Entry, error) {
	scopes := ScopeIngest
	if len(cp.Scopes) > 0 {
		var err error
		if scopes, err = ParseScopes(strings.Join(cp.Scopes, ",")); err != nil {
			return Entry{}, err
		}
	}
	e := Entry{Name: "cert:" + subject, Tenant: cp.Tenant, Scopes: scopes}
	return e, checkEntry(e)
}

// checkEntry rejects a credential that cannot work: an empty or
// unprintable tenant, "*" with the ingest scope (calls belong to one
// tenant), or the debug scope for one tenant (a profile is every
// tenant's).
func checkEntry(e Entry) error {
	switch {
	case e.Tenant == "":
		return errors.New("tenant is required (a tenant name, or * to read every tenant)")
	case !printable(e.Tenant) || len(e.Tenant) > 128:
		return errors.New("tenant must be visible UTF-8 of at most 128 bytes: no space, control or invisible format character (such as a zero-width space)")
	case e.Tenant == AllTenants && e.Scopes&ScopeIngest != 0:
		return errors.New("tenant * cannot have the ingest scope: every call belongs to one tenant")
	case e.Tenant != AllTenants && e.Scopes&ScopeDebug != 0:
		return errors.New("the debug scope needs tenant *: a profile is the whole process's, every tenant's")
	case e.Scopes == 0:
		return errors.New("no scope")
	}
	return nil
}

// printable reports whether a tenant name is valid UTF-8 of visible
// characters: no control, no space, and no invisible format character
// (zero-width spaces and joiners, bidirectional controls), with which two
// tenants would look alike on the page and in the tables (adv23 D5).
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) })
}

// table is one immutable set of credentials.
type table struct {
	byHash map[[sha256.Size]byte]Entry
	// names of the file's entries, for the reload log.
	fileEntries int
}

// Authenticator resolves requests to principals. It is safe for
// concurrent use; Reload swaps the credentials atomically.
type Authenticator struct {
	cfg    Config
	static []Entry
	certs  map[string]Entry

	cur atomic.Pointer[table]
	mu  sync.Mutex // serializes Reload
}

// New returns an authenticator over the inline credentials static and the
// tokens file of cfg, which it reads now.
func New(cfg Config, static []Entry) (*Authenticator, error) {
	a := &Authenticator{cfg: cfg, static: static, certs: map[string]Entry{}}
	for subj, cp := range cfg.ClientCerts {
		e, err := cp.entry(subj)
		if err != nil {
			return nil, fmt.Errorf("cannot use client_certs.%s: %w", subj, err)
		}
		a.certs[subj] = e
	}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the tokens file again. On error the credentials in force
// stay as they were.
func (a *Authenticator) Reload() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := &table{byHash: map[[sha256.Size]byte]Entry{}}
	for _, e := range a.static {
		if _, dup := t.byHash[e.Hash]; dup {
			return fmt.Errorf("cannot use credential %s: its token is another credential's too", e.Name)
		}
		t.byHash[e.Hash] = e
	}
	if a.cfg.TokensFile != "" {
		entries, err := ReadTokensFile(a.cfg.TokensFile)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if prev, dup := t.byHash[e.Hash]; dup {
				return fmt.Errorf("cannot read tokens file %s: credential %s has the token of %s", a.cfg.TokensFile, e.Name, prev.Name)
			}
			t.byHash[e.Hash] = e
		}
		t.fileEntries = len(entries)
	}
	a.cur.Store(t)
	return nil
}

// FileEntries returns how many credentials the tokens file gave at the
// last successful read.
func (a *Authenticator) FileEntries() int { return a.cur.Load().fileEntries }

// On reports whether callers must present a credential.
func (a *Authenticator) On() bool {
	return a != nil && (a.cfg.TokensFile != "" || len(a.static) > 0 || len(a.certs) > 0)
}

// MetricsOpen reports whether /metrics answers without a credential.
func (a *Authenticator) MetricsOpen() bool { return a == nil || !a.cfg.MetricsToken }

// anonymous is the principal of every request when authentication is off.
var anonymous = Principal{Scopes: ScopeIngest | ScopeQuery | ScopeMetrics | ScopeDebug}

// Token returns the principal of a bearer token; ok is false for an
// unknown or empty token.
func (a *Authenticator) Token(tok string) (Principal, bool) {
	if tok == "" || a == nil {
		return Principal{}, false
	}
	e, ok := a.cur.Load().byHash[HashToken(tok)]
	if !ok {
		return Principal{}, false
	}
	return principalOf(e), true
}

func principalOf(e Entry) Principal {
	t := e.Tenant
	if t == AllTenants {
		t = ""
	}
	return Principal{Tenant: t, Name: e.Name, Authenticated: true, Scopes: e.Scopes}
}

// Cert returns the principal of a verified client certificate chain; ok is
// false when there is none or its subject is not mapped.
func (a *Authenticator) Cert(verified [][]*x509.Certificate) (Principal, bool) {
	if a == nil || len(a.certs) == 0 || len(verified) == 0 || len(verified[0]) == 0 {
		return Principal{}, false
	}
	leaf := verified[0][0]
	for _, subj := range []string{leaf.Subject.String(), leaf.Subject.CommonName} {
		if e, ok := a.certs[subj]; ok && subj != "" {
			return principalOf(e), true
		}
	}
	return Principal{}, false
}

// Bearer returns the token of an Authorization header value, or "".
func Bearer(authz string) string {
	if len(authz) < 7 || !strings.EqualFold(authz[:7], "bearer ") {
		return ""
	}
	return strings.TrimSpace(authz[7:])
}

// Authenticate returns the principal of a request: its bearer token, else
// its verified client certificate. ok is false when authentication is on
// and neither is known. With authentication off, every request is an
// anonymous principal of every tenant with every scope.
func (a *Authenticator) Authenticate(authz string, verified [][]*x509.Certificate) (Principal, bool) {
	if !a.On() {
		return anonymous, true
	}
	if tok := Bearer(authz); tok != "" {
		return a.Token(tok)
	}
	return a.Cert(verified)
}

// Request authenticates an HTTP request. A request with more than one
// Authorization header is not authenticated (Repeated says why): which of
// them counts is not the collector's to guess, and the first was used
// without a word before 2026-12-06 (adv22).
func (a *Authenticator) Request(r *http.Request) (Principal, bool) {
	if a.On() && Repeated(r.Header.Values("Authorization")) != "" {
		return Principal{}, false
	}
	var verified [][]*x509.Certificate
	if r.TLS != nil {
		verified = r.TLS.VerifiedChains
	}
	return a.Authenticate(r.Header.Get("Authorization"), verified)
}

// Repeated says why the Authorization values of one request (HTTP
// headers, or gRPC metadata) are refused when there are several of them,
// and "" when there is one or none. A refusal 401 says this instead of
// "missing or unknown".
func Repeated(authz []string) string {
	if len(authz) < 2 {
		return ""
	}
	return fmt.Sprintf("%d Authorization headers: send one credential", len(authz))
}

// TenantHeaders are the request headers other systems name a tenant in
// (Loki's and Mimir's X-Scope-OrgID among them). mcpaudit never takes a
// tenant from them; one that differs from the credential's is refused.
var TenantHeaders = []string{"X-Scope-OrgID", "Mcpaudit-Tenant", "X-Tenant", "X-Tenant-ID"}

// ConflictError says that a request names a tenant its credential does not
// speak for.
type ConflictError struct {
	Where, Tenant, Credential string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s names tenant %q but the credential is for tenant %q; the tenant comes from the credential", e.Where, e.Tenant, e.Credential)
}

// Conflict returns an error when the request names, in its tenant query
// parameter or a tenant header, a tenant other than its authenticated
// principal's. A principal of every tenant may narrow to one with the
// query parameter (Tenant returns it).
func Conflict(p Principal, r *http.Request) error {
	if !p.Authenticated || p.Tenant == "" {
		return nil
	}
	if t := r.URL.Query().Get("tenant"); t != "" && t != p.Tenant {
		return &ConflictError{Where: "parameter tenant", Tenant: t, Credential: p.Tenant}
	}
	for _, h := range TenantHeaders {
		if t := r.Header.Get(h); t != "" && t != p.Tenant {
			return &ConflictError{Where: "header " + h, Tenant: t, Credential: p.Tenant}
		}
	}
	return nil
}

// Tenant returns the tenant a query of principal p reads: its credential's,
// or for a principal of every tenant (and with authentication off) the
// tenant query parameter, empty for all.
func Tenant(p Principal, r *http.Request) string {
	if p.Tenant != "" {
		return p.Tenant
	}
	// tenant=* asks for every tenant, as no parameter does: no tenant is
	// named * (checkEntry), and reading it as a name answered nothing
	// (adv23 L1).
	if t := r.URL.Query().Get("tenant"); t != AllTenants {
		return t
	}
	return ""
}

// ReadTokensFile reads a tokens file: one credential a line, "name tenant
// scopes sha256:HEX", fields separated by spaces; blank lines and lines
// starting with # are skipped. Every bad line is reported with its number.
func ReadTokensFile(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read tokens file: %w", err)
	}
	entries, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("cannot read tokens file %s: %w", path, err)
	}
	return entries, nil
}

// ParseTokens parses the contents of a tokens file (see ReadTokensFile).
func ParseTokens(b []byte) ([]Entry, error) {
	var out []Entry
	var errs []error
	names := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		e, err := parseTokenLine(text)
		if err == nil {
			if prev, dup := names[e.Name]; dup {
				err = fmt.Errorf("name %s is line %d's too", e.Name, prev)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		names[e.Name] = line
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("line %d: %w", line+1, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func parseTokenLine(text string) (Entry, error) {
	f := strings.Fields(text)
	if len(f) != 4 {
		return Entry{}, fmt.Errorf("want 4 fields (name tenant scopes sha256:HEX), got %d", len(f))
	}
	if !printable(f[0]) {
		return Entry{}, errors.New("name must be printable UTF-8")
	}
	scopes, err := ParseScopes(f[2])
	if err != nil {
		return Entry{}, err
	}
	h, ok := strings.CutPrefix(f[3], "sha256:")
	raw, herr := hex.DecodeString(h)
	if !ok || herr != nil || len(raw) != sha256.Size {
		return Entry{}, errors.New("the hash must be sha256: and 64 hex digits (mcpaudit token hash prints it); the token itself is never written here")
	}
	e := Entry{Name: f[0], Tenant: f[1], Scopes: scopes}
	copy(e.Hash[:], raw)
	if err := checkEntry(e); err != nil {
		return Entry{}, err
	}
	return e, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

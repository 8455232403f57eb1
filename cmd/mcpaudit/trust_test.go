package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/access"
)

// pki is a test certificate authority with the files serve reads.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	pool   *x509.CertPool
	serial int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), pool: x509.NewCertPool()}
	p.caKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mcpaudit test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.pool.AddCert(p.ca)
	p.write(t, "ca.pem", "CERTIFICATE", der)
	p.serial = 1
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue makes a certificate for cn (a server one for 127.0.0.1 when
// server is set) and returns its certificate and key files.
func (p *pki) issue(t *testing.T, cn string, server bool) (string, string, tls.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"Acme"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	cf := p.write(t, cn+".pem", "CERTIFICATE", der)
	kf := p.write(t, cn+".key", "EC PRIVATE KEY", kder)
	pair, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return cf, kf, pair
}

// tokensLine is a line of the tokens file.
func tokensLine(name, tenant, scopes, token string) string {
	return fmt.Sprintf("%s %s %s %s\n", name, tenant, scopes, access.FormatHash(access.HashToken(token)))
}

// Tokens of the auth tests.
const (
	tokIngestAcme = "mcpa_ingest_acme_0123456789"
	tokQueryAcme  = "mcpa_query_acme_0123456789"
	tokGlobex     = "mcpa_globex_0123456789"
	tokOps        = "mcpa_ops_0123456789"
)

// secureServer starts serve with TLS on every listener, client
// certificates (agents-globex speaks for globex), a hashed tokens file and
// /metrics behind a token.
func secureServer(t *testing.T) (*server, *pki, string) {
	t.Helper()
	p := newPKI(t)
	cert, key, _ := p.issue(t, "127.0.0.1", true)
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("# name tenant scopes hash\n"+
		tokensLine("agents-acme", "acme", "ingest", tokIngestAcme)+
		tokensLine("oncall-acme", "acme", "query", tokQueryAcme)+
		tokensLine("globex", "globex", "ingest,query", tokGlobex)+
		tokensLine("ops", "*", "query,metrics", tokOps)), 0o600)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.TLS.CertFile, cfg.Serve.TLS.KeyFile, cfg.Serve.TLS.ClientCAFile = cert, key, filepath.Join(p.dir, "ca.pem")
	cfg.Serve.Auth.TokensFile = tokens
	cfg.Serve.Auth.MetricsToken = true
	cfg.Serve.Auth.ClientCerts = map[string]access.CertPrincipal{"agents-globex": {Tenant: "globex", Scopes: []string{"ingest"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startTest(t, cfg), p, tokens
}

// tlsClient trusts the test CA and presents cert, if any.
func tlsClient(p *pki, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: p.pool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

func doReq(t *testing.T, c *http.Client, method, url, token string, body []byte, headers ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mcpauditSeries lists the mcpaudit series of an exposition, values aside.
func mcpauditSeries(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "mcpaudit_") && !strings.HasPrefix(l, "mcpaudit_pipeline") && !strings.HasPrefix(l, "mcpaudit_store_commit") {
			out = append(out, l[:strings.LastIndexByte(l, ' ')])
		}
	}
	sort.Strings(out)
	return out
}

// TestServe_Auth: over TLS on every listener, a request without a
// credential, with a wrong one or one without the scope is refused, stores
// nothing and creates no series; a verified client certificate speaks for
// its tenant; a tenant can neither read nor write another's by query
// parameter, header or payload field; /metrics needs a metrics token.
func TestServe_Auth(t *testing.T) {
	s, p, _ := secureServer(t)
	plain := tlsClient(p, nil)
	ingest := "https://" + s.ingestAddr + "/v1/calls"
	apiURL := "https://" + s.apiAddr
	now := time.Now().UTC()
	rec := func(i int, extra string) []byte {
		return []byte(fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s%d",%s"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"team/a.gram"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{}}}`+"\n",
			now.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i, extra, i, i))
	}
	metricsText := func() string {
		_, body := doReq(t, plain, "GET", apiURL+"/metrics", tokOps, nil)
		return body
	}
	before := mcpauditSeries(metricsText())

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name, token string
			client      *http.Client
			headers     []string
			status      int
		}{
			{"no_token", "", plain, nil, 401},
			{"wrong_token", "mcpa_wrong", plain, nil, 401},
			{"token_as_hash", strings.TrimPrefix(access.FormatHash(access.HashToken(tokIngestAcme)), "sha256:"), plain, nil, 401},
			{"query_token_ingesting", tokQueryAcme, plain, nil, 403},
			{"metrics_token_ingesting", tokOps, plain, nil, 403},
			{"tenant_header_of_another", tokIngestAcme, plain, []string{"X-Scope-OrgID", "globex"}, 403},
		} {
			if status, body := doReq(t, tc.client, "POST", ingest, tc.token, rec(1, ""), tc.headers...); status != tc.status {
				t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
			}
		}
		// Plain HTTP to a TLS listener gets no service.
		if status, _ := doReq(t, http.DefaultClient, "POST", "http://"+s.ingestAddr+"/v1/calls", tokIngestAcme, rec(1, "")); status == 200 {
			t.Error("plain HTTP was served on the TLS listener")
		}
		calls := 0
		s.store.ScanCalls(context.Background(), time.Time{}, func(*audit.Record) error { calls++; return nil })
		if calls != 0 {
			t.Errorf("%d calls stored by refused requests", calls)
		}
		if after := mcpauditSeries(metricsText()); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Errorf("refused requests changed the series:\nbefore %v\nafter  %v", before, after)
		}
	})

	t.Run("metrics_token", func(t *testing.T) {
		for _, tc := range []struct {
			token  string
			status int
		}{{"", 401}, {"mcpa_wrong", 401}, {tokIngestAcme, 403}, {tokQueryAcme, 403}, {tokOps, 200}} {
			if status, _ := doReq(t, plain, "GET", apiURL+"/metrics", tc.token, nil); status != tc.status {
				t.Errorf("/metrics with %q: %d, want %d", tc.token, status, tc.status)
			}
		}
	})

	t.Run("tenants", func(t *testing.T) {
		// acme writes, with a payload claiming globex.
		if status, body := doReq(t, plain, "POST", ingest, tokIngestAcme, rec(2, `"tenant":"globex",`)); status != 200 {
			t.Fatalf("acme ingest: %d %s", status, body)
		}
		// globex writes through its client certificate alone.
		_, _, pair := p.issue(t, "agents-globex", false)
		if status, body := doReq(t, tlsClient(p, &pair), "POST", ingest, "", rec(3, "")); status != 200 {
			t.Fatalf("globex by certificate: %d %s", status, body)
		}
		// An unmapped certificate is no credential.
		_, _, other := p.issue(t, "agents-unknown", false)
		if status, _ := doReq(t, tlsClient(p, &other), "POST", ingest, "", rec(4, "")); status != 401 {
			t.Errorf("an unmapped client certificate: %d, want 401", status)
		}
		// A certificate of another CA fails the handshake.
		stranger := newPKI(t)
		_, _, alien := stranger.issue(t, "agents-globex", false)
		if status, _ := doReq(t, tlsClient(p, &alien), "POST", ingest, "", rec(5, "")); status != 0 {
			t.Errorf("a certificate of another CA: %d, want no answer (handshake refused)", status)
		}
		byTenant := map[string]int{}
		s.store.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error { byTenant[r.Call.Tenant]++; return nil })
		if byTenant["acme"] != 1 || byTenant["globex"] != 1 || len(byTenant) != 2 {
			t.Fatalf("calls by tenant %v, want acme 1 (its payload's tenant ignored) and globex 1", byTenant)
		}
		// Reading: acme's query token sees acme, and cannot name globex.
		timeline := apiURL + "/api/v1/documents/team%2Fa.gram/timeline"
		for _, tc := range []struct {
			name, url, token string
			headers          []string
			status           int
			sessions         string
		}{
			{"own", timeline, tokQueryAcme, nil, 200, "s2"},
			{"other_by_parameter", timeline + "?tenant=globex", tokQueryAcme, nil, 403, ""},
			{"other_by_header", timeline, tokQueryAcme, []string{"X-Scope-OrgID", "globex"}, 403, ""},
			{"other_by_tenant_header", timeline, tokQueryAcme, []string{"Mcpaudit-Tenant", "globex"}, 403, ""},
			{"globex_own", timeline, tokGlobex, nil, 200, "s3"},
			{"ingest_token_reading", timeline, tokIngestAcme, nil, 403, ""},
			{"all_tenants_narrowed", timeline + "?tenant=globex", tokOps, nil, 200, "s3"},
			{"all_tenants", timeline, tokOps, nil, 200, "s2,s3"},
		} {
			status, body := doReq(t, plain, "GET", tc.url, tc.token, nil, tc.headers...)
			if status != tc.status {
				t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
				continue
			}
			sessions := regexp.MustCompile(`"session":"(s\d)"`).FindAllStringSubmatch(body, -1)
			var got []string
			seen := map[string]bool{}
			for _, m := range sessions {
				if !seen[m[1]] {
					seen[m[1]] = true
					got = append(got, m[1])
				}
			}
			sort.Strings(got)
			if strings.Join(got, ",") != tc.sessions {
				t.Errorf("%s: sessions %v in the answer, want %q", tc.name, got, tc.sessions)
			}
		}
	})

	t.Run("grpc_tls", func(t *testing.T) {
		cc, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: p.pool})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := ptraceotlp.NewGRPCClient(cc)
		req := ptraceotlp.NewExportRequest()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.Export(ctx, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC without a token: %v, want Unauthenticated", err)
		}
		if _, err := client.Export(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokIngestAcme), req); err != nil {
			t.Errorf("gRPC with a token: %v", err)
		}
	})
}

// TestServe_ReloadOnSIGHUP: serve reads the tokens file again on SIGHUP;
// a bad file leaves the credentials in force.
func TestServe_ReloadOnSIGHUP(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte(tokensLine("old", "acme", "ingest,query", "mcpa_old_0123456789")), 0o600)
	config := writeConfig(t, fmt.Sprintf("serve:\n  auth:\n    tokens_file: %s\n", tokens))
	ingest, api := freePort(t), freePort(t)
	c := startChild(t, t.TempDir(), config, ingest, api)
	defer c.kill()
	status := func(token string) int {
		s, _ := doReq(t, http.DefaultClient, "GET", "http://"+api+"/api/v1/findings", token, nil)
		return s
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	if status("mcpa_old_0123456789") != 200 || status("mcpa_new_0123456789") != 401 {
		t.Fatal("the first tokens file is not in force")
	}
	os.WriteFile(tokens, []byte(tokensLine("new", "acme", "ingest,query", "mcpa_new_0123456789")), 0o600)
	c.cmd.Process.Signal(syscall.SIGHUP)
	waitFor("the new token", func() bool { return status("mcpa_new_0123456789") == 200 })
	if status("mcpa_old_0123456789") != 401 {
		t.Error("the removed token still works after SIGHUP")
	}
	os.WriteFile(tokens, []byte("broken line\n"), 0o600)
	c.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	if status("mcpa_new_0123456789") != 200 {
		t.Error("a bad tokens file replaced the credentials in force")
	}
}

// TestTokenCommand: token new prints a line the tokens file takes and whose
// hash is the token's; token hash prints the hash of standard input.
func TestTokenCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"token", "new", "--name", "agents", "--tenant", "acme", "--scopes", "ingest,query"}, nil, &out, &errb); code != 0 {
		t.Fatalf("token new: %d %s", code, errb.String())
	}
	tok := strings.TrimSpace(errb.String()[strings.LastIndex(errb.String(), ": ")+2:])
	es, err := access.ParseTokens(out.Bytes())
	if err != nil || len(es) != 1 || es[0].Hash != access.HashToken(tok) || es[0].Tenant != "acme" || strings.Contains(out.String(), tok) {
		t.Fatalf("token new printed %q (token %q): %v", out.String(), tok, err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"token", "hash"}, strings.NewReader(tok+"\n"), &out, &errb); code != 0 || strings.TrimSpace(out.String()) != access.FormatHash(access.HashToken(tok)) {
		t.Fatalf("token hash: %d %q", code, out.String())
	}
	if code := run(context.Background(), []string{"token", "new", "--name", "x", "--tenant", "*", "--scopes", "ingest"}, nil, &out, &errb); code != 2 {
		t.Errorf("token new for every tenant with ingest: exit %d, want 2", code)
	}
}

// TestTokenNewHelp: token new --help tells what the command prints and
// where, with its own flags (it printed token's general usage, without
// them); a missing flag, a flag of two words or an argument is refused by
// name, not as "line 1: want 4 fields" of the tokens file.
func TestTokenNewHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"token", "new", "--help"}, nil, &out, &errb); code != 0 {
		t.Fatalf("token new --help: exit %d", code)
	}
	help := out.String() + errb.String()
	for _, want := range []string{"usage: mcpaudit token new --name NAME --tenant TENANT", "-name", "-tenant", "-scopes", `(default "ingest")`,
		"on standard\nerror", "On standard output", "serve.auth.tokens_file", "SIGHUP", "never with ingest"} {
		if !strings.Contains(help, want) {
			t.Errorf("token new --help lacks %q:\n%s", want, help)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "acme"}, "--name is required"},
		{[]string{"--name", "agents"}, "--tenant is required"},
		{[]string{"--name", "agents acme", "--tenant", "acme"}, `--name "agents acme": must be one word`},
		{[]string{"--name", "agents", "--tenant", "acme", "--scopes", "ingest, query"}, `--scopes "ingest, query": must be one word`},
		{[]string{"--name", "agents", "--tenant", "acme", "extra"}, `unexpected argument "extra"`},
	} {
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), append([]string{"token", "new"}, tc.args...), nil, &out, &errb); code != 2 ||
			!strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
			t.Errorf("token new %q: exit %d, stdout %q, stderr %q; want 2 naming %q and no line", tc.args, code, out.String(), errb.String(), tc.want)
		}
	}
}

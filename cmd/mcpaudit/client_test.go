package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/access"
)

// TestClientTLS: against a serve with TLS on every listener that requires
// client certificates (mTLS), the commands that talk to a collector reach
// it with --ca-file, --client-cert and --client-key: loadgen and the relay
// (proxy, wrap) send, the query commands, status and report --server read.
// Without the CA, or without a client certificate, they are refused.
func TestClientTLS(t *testing.T) {
	p := newPKI(t)
	cert, key, _ := p.issue(t, "127.0.0.1", true)
	agentCert, agentKey, _ := p.issue(t, "agents-globex", false)
	oncallCert, oncallKey, _ := p.issue(t, "oncall-globex", false)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.TLS.CertFile, cfg.Serve.TLS.KeyFile, cfg.Serve.TLS.ClientCAFile = cert, key, filepath.Join(p.dir, "ca.pem")
	cfg.Serve.TLS.ClientAuth = "require"
	cfg.Serve.Auth.ClientCerts = map[string]access.CertPrincipal{
		"agents-globex": {Tenant: "globex", Scopes: []string{"ingest"}},
		"oncall-globex": {Tenant: "globex", Scopes: []string{"query"}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	ca := filepath.Join(p.dir, "ca.pem")
	ingest, api := "https://"+s.ingestAddr, "https://"+s.apiAddr
	agent := []string{"--ca-file", ca, "--client-cert", agentCert, "--client-key", agentKey}
	oncall := []string{"--ca-file", ca, "--client-cert", oncallCert, "--client-key", oncallKey}
	cmd := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errb)
		return code, out.String() + errb.String()
	}

	// loadgen over mTLS, with call records and OTLP/gRPC.
	load := []string{"loadgen", "--live=false", "--calls", "400", "--clients", "2", "--batch", "100", "--duration", "5s", "--api", "", "--format", "json"}
	if code, out := cmd(append(append(load, "--target", ingest), agent...)...); code != 0 || !strings.Contains(out, `"sent":400`) || !strings.Contains(out, `"failed_requests":0`) {
		t.Fatalf("loadgen over mTLS: exit %d:\n%s", code, out)
	}
	if code, out := cmd(append(append(load, "--protocol", "otlp-grpc", "--target", s.grpcAddr, "--seed", "2"), agent...)...); code != 0 || !strings.Contains(out, `"sent":400`) || !strings.Contains(out, `"failed_requests":0`) {
		t.Fatalf("loadgen over gRPC with mTLS: exit %d:\n%s", code, out)
	}
	for name, args := range map[string][]string{
		"no CA":                 {"--target", ingest},
		"no client certificate": {"--target", ingest, "--ca-file", ca},
	} {
		if _, out := cmd(append(load, args...)...); strings.Contains(out, `"failed_requests":0`) || !strings.Contains(out, `"accepted":0`) {
			t.Errorf("loadgen with %s was not refused:\n%s", name, out)
		}
	}

	// The relay delivers its buffer over mTLS.
	rf := relayFlags{collector: ingest, bufferDir: filepath.Join(t.TempDir(), "buf"), maxBuffer: 1 << 30, redact: true,
		tls: clientFlags{caFile: ca, certFile: agentCert, keyFile: agentKey}}
	sink, err := openRelaySink(context.Background(), &rf, "wrap", "thegram", "wrap/thegram/test", nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range tapRecords(t, liveCaptureOf(t, 3, 5)) {
		sink.Record(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sink.Close(ctx); err != nil {
		t.Fatalf("the relay did not deliver over mTLS: %v", err)
	}

	// The readers, as the query credential.
	for _, args := range [][]string{
		{"findings", "--api-url", api, "--format", "json"},
		{"status", "--api-url", api, "--format", "json"},
		{"report", "--server", api, "--window", "30d", "--format", "json"},
	} {
		if code, out := cmd(append(args, oncall...)...); code != 0 {
			t.Errorf("%s over mTLS: exit %d:\n%s", args[0], code, out)
		}
		if code, out := cmd(append(args, "--ca-file", ca)...); code == 0 {
			t.Errorf("%s without a client certificate: exit 0:\n%s", args[0], out)
		}
		if code, out := cmd(args...); code == 0 || !strings.Contains(out, "certificate") {
			t.Errorf("%s without the CA: exit %d, want a certificate error:\n%s", args[0], code, out)
		}
	}
	if code, out := cmd("findings", "--api-url", api, "--client-cert", oncallCert); code != 2 || !strings.Contains(out, "--client-key") {
		t.Errorf("--client-cert without --client-key: exit %d:\n%s", code, out)
	}
}

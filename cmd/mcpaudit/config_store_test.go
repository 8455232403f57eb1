package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/access"
)

// TestConfigValidate_OtherStoreWarned: settings of the store not in use
// are warned about (still valid): a ClickHouse DSN with serve.store left at
// sqlite ran on the embedded store with nothing said (the operator pass of
// 2026-12-05); the same for serve.sqlite under store clickhouse. A config
// whose other store keeps its defaults (config print's) is not warned.
func TestConfigValidate_OtherStoreWarned(t *testing.T) {
	for _, c := range []struct {
		name, body, warn string
	}{
		{"clickhouse_unused", "serve:\n  clickhouse:\n    dsn: clickhouse://ch:9000/audit\n", "serve.clickhouse is set but serve.store is sqlite"},
		{"sqlite_unused", "serve:\n  store: clickhouse\n  clickhouse:\n    dsn: clickhouse://ch:9000/audit\n  sqlite:\n    ack: log\n", "serve.sqlite is set but serve.store is clickhouse"},
		{"clickhouse_used", "serve:\n  store: clickhouse\n  clickhouse:\n    dsn: clickhouse://ch:9000/audit\n", ""},
		{"sqlite_only", "serve:\n  sqlite:\n    ack: log\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, c.body)
			code, stdout, stderr := cliRun("config", "validate", path)
			if code != 0 || stdout != path+": valid\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want valid", code, stdout, stderr)
			}
			if c.warn == "" && strings.Contains(stderr, "warning") {
				t.Errorf("warned: %q", stderr)
			}
			if c.warn != "" && !strings.Contains(stderr, path+": warning: "+c.warn) {
				t.Errorf("stderr %q, want the warning %q", stderr, c.warn)
			}
		})
	}
	_, printed, _ := cliRun("config", "print")
	if code, _, stderr := cliRun("config", "validate", writeConfig(t, printed)); code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("the printed defaults: exit %d, stderr %q; want valid with no warning", code, stderr)
	}
}

// TestConfigValidate_UnknownTenantRetentionWarned: a tenant of
// serve.tenant_retention that no credential of the file names is warned
// about (still valid): op21 wrote {lgeal: 90d} for the legal team, config
// validate said "valid", and legal kept serve.retention (7d). A tenant named
// by a receiver token, a credential or a client certificate is not warned,
// nor any tenant when serve.auth.tokens_file may name it.
func TestConfigValidate_UnknownTenantRetentionWarned(t *testing.T) {
	const tenants = "  receiver:\n    tenants: {\"tok-legal-0123456789abcdef\": legal}\n"
	for _, c := range []struct {
		name, body, warn string
	}{
		{"typo", "serve:\n  retention: 7d\n  tenant_retention: {lgeal: 90d}\n" + tenants,
			`serve.tenant_retention names tenant "lgeal", which no credential of this file names`},
		{"no_credentials", "serve:\n  tenant_retention: {legal: 90d}\n",
			`serve.tenant_retention names tenant "legal", which no credential of this file names`},
		{"receiver_tenant", "serve:\n  tenant_retention: {legal: 90d}\n" + tenants, ""},
		{"credential_tenant", "serve:\n  tenant_retention: {legal: 90d}\n  credentials:\n    ops: {token: \"tok-ops-0123456789abcdef\", tenant: legal}\n", ""},
		{"tokens_file", "serve:\n  tenant_retention: {lgeal: 90d}\n  auth:\n    tokens_file: /nonexistent/tokens\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, c.body)
			code, stdout, stderr := cliRun("config", "validate", path)
			if code != 0 || stdout != path+": valid\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want valid", code, stdout, stderr)
			}
			if c.warn == "" && strings.Contains(stderr, "tenant_retention") {
				t.Errorf("warned: %q", stderr)
			}
			if c.warn != "" && !strings.Contains(stderr, path+": warning: "+c.warn) {
				t.Errorf("stderr %q, want the warning %q", stderr, c.warn)
			}
		})
	}
	// A client certificate's tenant counts too (checked on Warnings: a
	// valid file with client_certs needs real TLS files).
	cfg := NewDefaultConfig()
	cfg.Serve.TenantRetention = map[string]Duration{"legal": Duration(90 * 24 * time.Hour)}
	cfg.Serve.Auth.ClientCerts = map[string]access.CertPrincipal{"CN=legal": {Tenant: "legal"}}
	if ws := cfg.Warnings(); len(ws) != 0 {
		t.Errorf("client certificate's tenant warned: %q", ws)
	}
}

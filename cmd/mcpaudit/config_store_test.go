package main

import (
	"strings"
	"testing"
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

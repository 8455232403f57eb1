package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/conf"
)

var update = flag.Bool("update", false, "rewrite docs/config.md")

const configDoc = "../../docs/config.md"

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// cliRun runs the command line and returns the exit code, stdout and stderr.
func cliRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, nil, &out, &errb)
	return code, out.String(), errb.String()
}

// readmeConfig is the configuration example of README.md.
func readmeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(dialects:.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no yaml example starting with dialects:")
	}
	return string(m[1])
}

func TestConfig_ReadmeExample(t *testing.T) {
	p := writeConfig(t, readmeConfig(t))
	t.Run("variable_unset", func(t *testing.T) {
		os.Unsetenv("MCPAUDIT_TOKEN_ACME")
		code, _, errs := cliRun("config", "validate", p)
		if code != 2 || !strings.Contains(errs, "environment variable MCPAUDIT_TOKEN_ACME is not set") ||
			!regexp.MustCompile(`line \d+: serve.receiver.tenants`).MatchString(errs) {
			t.Errorf("exit %d: %s; want 2 naming the variable, its line and key", code, errs)
		}
		if strings.Contains(errs, "must not be empty") {
			t.Errorf("the unset variable is reported twice: %s", errs)
		}
	})
	t.Run("variable_set", func(t *testing.T) {
		t.Setenv("MCPAUDIT_TOKEN_ACME", "tok-acme")
		if code, out, errs := cliRun("config", "validate", p); code != 0 || !strings.Contains(out, "valid") {
			t.Errorf("exit %d: %s %s", code, out, errs)
		}
		cfg, err := LoadConfig(p)
		if err != nil || cfg.Serve.Receiver.Tenants["tok-acme"] != "acme" {
			t.Errorf("tenants %v, %v", cfg.Serve.Receiver.Tenants, err)
		}
	})
}

// TestConfig_Errors: every problem of a file is reported at once, each with
// its line and key path, in words rather than Go types.
func TestConfig_Errors(t *testing.T) {
	p := writeConfig(t, `detect:
  latenes: 30s
  verify_window: 2h
  correlation_window: 1h
  max_clock_skew: 5m
serve:
  api_listen: "localhost"
  ingest_listen: ":99999"
  retention: 30 days
  store: clickhouse
  clickhouse: {dsn: "http://x"}
  slo_target: 1.5
  pipeline: {restart_grace_max: -1m}
  recevier: {}
rules: {runbook_url: "docs/runbooks.md"}
`)
	_, err := LoadConfig(p)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a ConfigError", err)
	}
	want := []string{
		"line 2: detect.latenes: unknown key (did you mean detect.lateness?)",
		"line 3: detect.verify_window: 2h is longer than detect.correlation_window (1h)",
		"line 5: detect.max_clock_skew: 5m is not shorter than detect.allowed_lateness (2m)",
		`line 7: serve.api_listen: want host:port or :port`,
		`line 8: serve.ingest_listen: want host:port or :port`,
		`line 9: serve.retention: want a duration such as 30d, 1d12h, 5m, 30s or 500ms, not "30 days"`,
		`line 11: serve.clickhouse.dsn: must use the native protocol (clickhouse:// or tcp://), not "http"`,
		"line 12: serve.slo_target: 1.5 is not a fraction between 0 and 1",
		"line 13: serve.pipeline.restart_grace_max: must not be negative",
		"line 14: serve.recevier: unknown key (did you mean serve.receiver?)",
		"line 15: rules.runbook_url: want an absolute URL",
	}
	got := strings.Split(ce.Errors.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d errors, want %d:\n%s", len(got), len(want), ce.Errors)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n  %s\nwant it to start with\n  %s", i, got[i], want[i])
		}
	}
	if regexp.MustCompile(`time\.Duration|detect\.Config|!!str|unmarshal`).MatchString(err.Error()) {
		t.Errorf("errors name Go or YAML types:\n%s", err)
	}
}

// TestConfig_NestedSectionErrors: every error of a subsection that its
// section joins with its own (serve.web.notify under serve.web) keeps its key
// path and line. Found by op19: a bad serve.web.notify.min_severity beside a
// bad format was reported as "notify.min_severity: ..." with no line.
func TestConfig_NestedSectionErrors(t *testing.T) {
	p := writeConfig(t, `serve:
  web:
    page_size: 5000
    notify:
      format: slack
      min_severity: high
      queue_size: 0
`)
	_, err := LoadConfig(p)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a ConfigError", err)
	}
	want := []string{
		"line 3: serve.web.page_size: ",
		`line 5: serve.web.notify.format: want alertmanager or webhook, not "slack"`,
		`line 6: serve.web.notify.min_severity: want info, warning or critical, not "high"`,
		"line 7: serve.web.notify.queue_size: must be positive",
	}
	got := strings.Split(ce.Errors.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d errors, want %d:\n%s", len(got), len(want), ce.Errors)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n  %s\nwant it to start with\n  %s", i, got[i], want[i])
		}
	}
}

// TestServeUsage_NamesTheConfigReference: serve -h says where the settings
// without a flag are. Found by op19: serve -h listed ten flags and named
// neither docs/config.md nor config validate, so the signing key, TLS and
// retention could not be found from it.
func TestServeUsage_NamesTheConfigReference(t *testing.T) {
	_, _, help := cliRun("serve", "-h")
	for _, want := range []string{"docs/config.md", "mcpaudit config validate FILE", "serve.signing_key_file", "\nflags:\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve -h lacks %q:\n%s", want, help)
		}
	}
}

// TestConfig_Durations: every duration key takes the same syntax.
func TestConfig_Durations(t *testing.T) {
	p := writeConfig(t, `detect: {verify_window: 5m, correlation_window: 1d, lateness: 30s}
serve:
  retention: 30d
  retention_every: 1h
  pipeline: {commit_every: 200ms}
  sqlite: {max_delay: 0}
  clickhouse: {batch_age: 1s, insert_timeout: 10s, retry_for: 1m, retention: {default: 2w, tenants: {acme: 1d12h}, check_interval: 1h}}
`)
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Detect.CorrelationWindow != 24*time.Hour || cfg.Serve.Retention.D() != 30*24*time.Hour ||
		cfg.Serve.ClickHouse.Retention.Tenants["acme"] != 36*time.Hour || cfg.Serve.ClickHouse.Retention.Default != 14*24*time.Hour {
		t.Errorf("durations not read: %+v %+v", cfg.Detect, cfg.Serve.ClickHouse.Retention)
	}
	// The analyze flags take the same syntax.
	if code, _, errs := cliRun("analyze", "--correlation-window", "1d", "--verify-window", "1h", "--progress", "never", "../../testdata/sample/mixed.ndjson"); code == 2 {
		t.Errorf("analyze --correlation-window 1d: %s", errs)
	}
}

// TestConfig_Sizes: serve.memory_limit takes a size with a unit, and a
// bad one is reported with its line and key.
func TestConfig_Sizes(t *testing.T) {
	f := func(in string, want int64) {
		t.Helper()
		cfg, err := LoadConfig(writeConfig(t, "serve:\n  memory_limit: "+in+"\n"))
		if err != nil || int64(cfg.Serve.MemoryLimit) != want {
			t.Errorf("memory_limit: %s = %d, %v; want %d", in, int64(cfg.Serve.MemoryLimit), err, want)
		}
	}
	f("402653184", 402653184)
	f("384MiB", 384<<20)
	f("1GiB", 1<<30)
	f("400MB", 400_000_000)
	_, err := LoadConfig(writeConfig(t, "serve:\n  memory_limit: 384M\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: serve.memory_limit") {
		t.Errorf("memory_limit: 384M: %v; want an error at line 2 naming serve.memory_limit", err)
	}
}

// TestConfig_Print: the effective configuration is every key with its
// value, secrets redacted, and reads back to the same configuration.
func TestConfig_Print(t *testing.T) {
	t.Setenv("MCPAUDIT_TOKEN_ACME", "tok-secret-acme")
	p := writeConfig(t, `detect: {lateness: 1m}
serve:
  receiver: {tenants: {"${MCPAUDIT_TOKEN_ACME}": acme}}
  credentials: {ops: {token: tok-secret-ops, tenant: "*"}}
  clickhouse: {dsn: "clickhouse://app:hunter2@ch.example.com:9000/default?password=hunter2"}
`)
	code, out, errs := cliRun("config", "print", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, secret := range []string{"tok-secret-acme", "tok-secret-ops", "hunter2"} {
		if strings.Contains(out, secret) {
			t.Errorf("config print shows the secret %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"lateness: 1m", "correlation_window: 1h", "retention: 30d", "acme", "api_listen: :9464", "runbook_url: https://"} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	back, err := LoadConfig(writeConfig(t, out))
	if err != nil {
		t.Fatalf("the printed config does not load: %v\n%s", err, out)
	}
	want, _ := LoadConfig(p)
	want = redacted(want)
	if !reflect.DeepEqual(back, want) {
		t.Errorf("printed config reads back as\n%+v\nwant\n%+v", back, want)
	}
	// Without a file: the defaults.
	code, out, _ = cliRun("config", "print")
	def, err := LoadConfig(writeConfig(t, out))
	if code != 0 || err != nil || !reflect.DeepEqual(def, NewDefaultConfig()) {
		t.Errorf("config print of the defaults: exit %d, %v", code, err)
	}
}

func TestConfig_Usage(t *testing.T) {
	for _, args := range [][]string{{"config", "--help"}, {"config", "-h"}, {"config", "help"}, {"config", "validate", "-h"}} {
		if code, _, errs := cliRun(args...); code != 0 {
			t.Errorf("%v: exit %d, want 0: %s", args, code, errs)
		}
	}
	for _, args := range [][]string{{"config"}, {"config", "frobnicate"}, {"config", "validate"}} {
		if code, _, _ := cliRun(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestConfigReference keeps docs/config.md equal to what the code says:
// every key, its type, its default and its field comment. Run with -update
// to rewrite it (make generate does).
func TestConfigReference(t *testing.T) {
	docs := &conf.SourceDocs{Root: "../..", Module: "github.com/mcpaudit/mcpaudit",
		Aliases: map[string]string{reflect.TypeFor[Config]().PkgPath(): "cmd/mcpaudit"}}
	def := NewDefaultConfig()
	keys := conf.Keys(&def, docs.Doc)
	if docs.Err != nil {
		t.Fatal(docs.Err)
	}
	for _, k := range keys {
		if k.Doc == "" {
			t.Errorf("%s has no doc comment on its field", k.Path)
		}
	}
	got := configReference(keys)
	checkReference(t, got)
	if *update {
		if err := os.WriteFile(configDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatalf("%v: run go test ./cmd/mcpaudit -run TestConfigReference -update", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the code: run go test ./cmd/mcpaudit -run TestConfigReference -update (or make generate)", configDoc)
	}
}

// checkReference checks that the reference reads as an operator needs:
// each section once, config keys rather than Go names (a CamelCase word
// that is not a product's or protocol's name), every command that reads
// the file, and the defaults serve applies.
func checkReference(t *testing.T, doc []byte) {
	t.Helper()
	heads := map[string]int{}
	for _, l := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			if heads[h]++; heads[h] == 2 {
				t.Errorf("section %q comes twice", h)
			}
		}
	}
	names := map[string]bool{"ClickHouse": true, "OpenTelemetry": true, "InvalidArgument": true, "TestConfigReference": true}
	for _, w := range regexp.MustCompile(`\b(?:[a-z]+\.)?[A-Z][A-Za-z0-9]*[a-z][A-Z][A-Za-z0-9]*\b`).FindAllString(string(doc), -1) {
		if !names[w] && !regexp.MustCompile(`^[KMGT]iB$`).MatchString(w) {
			t.Errorf("the reference names %s: write the config key (or the behaviour) instead", w)
		}
	}
	for _, want := range []string{"`mcpaudit report --config FILE`", "| `serve.clickhouse.spool.dir` | string | `<serve.data_dir>/clickhouse-spool` |",
		"| `serve.clickhouse.retention.default` | duration | `serve.retention` |"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("the reference lacks %s", want)
		}
	}
}

// configReference renders docs/config.md.
func configReference(keys []conf.Key) []byte {
	var b bytes.Buffer
	b.WriteString(`# Configuration reference

<!-- Generated from the code by ` + "`go test ./cmd/mcpaudit -run TestConfigReference -update`" + ` (make generate). DO NOT EDIT. -->

` + "`mcpaudit serve --config FILE`, `mcpaudit analyze --config FILE`, `mcpaudit report --config FILE` and `mcpaudit rules --config FILE`" + `
read one YAML file. Every key is optional: a key left out keeps its default, and ` + "`mcpaudit serve`" + ` runs
with no file at all. Flags given on the command line win over the file.

- **Strict.** An unknown key is an error, with the nearest known key suggested. Every problem of
  a file is reported at once, each with its line and key path:
  ` + "`line 3: detect.latenes: unknown key (did you mean detect.lateness?)`" + `.
- **Environment.** ` + "`${VAR}`" + ` (or ` + "`${env:VAR}`" + `) in a key or value is replaced by the variable's value after
  the YAML is parsed, so a value never changes the file's structure. An unset variable is an
  error naming it; ` + "`${VAR:-default}`" + ` gives a default. ` + "`$$`" + ` is a literal ` + "`$`" + `.
- **Durations.** Every duration key takes Prometheus' syntax: ` + "`30d`, `1d12h`, `5m`, `30s`, `500ms`, `2w`" + `
  (Go's ` + "`1.5h`" + ` is read too). The ` + "`analyze`" + ` duration flags take the same.
- **Sizes.** A size key (type ` + "`size`" + `) takes bytes, plain or with a unit: ` + "`402653184`, `384MiB`, `1GiB`, `400MB`" + `
  (` + "`kB`, `MB`, `GB`, `TB`" + ` are powers of 1000, ` + "`KiB`, `MiB`, `GiB`, `TiB`" + ` of 1024).
- **Shares.** A share key (type ` + "`share`" + `) takes a fraction such as ` + "`0.05`" + ` or a percentage such as
  ` + "`5%`" + `, as the ` + "`rules`" + ` flags do; a number key takes no percentage.
- **Checks.** ` + "`mcpaudit config validate FILE...`" + ` checks files (exit 0 valid, 2 invalid);
  ` + "`mcpaudit config print [FILE]`" + ` prints the effective configuration, the file over the defaults,
  with its secrets redacted: the tenant and credential tokens, the values of
  ` + "`serve.web.notify.headers`" + `, all of the webhook URL ` + "`serve.web.notify.url`" + ` but its scheme and host
  (` + "`https://hooks.slack.com/REDACTED`" + `: a webhook's secret is in its path or query, short or long), and in
  the other URLs (` + "`serve.web.base_url`, `serve.clickhouse.dsn`, `rules.runbook_url`" + `) a password, query
  parameters named as secrets (` + "`token`, `password`, `api_key`, `sig`" + `...), token-like path segments and the
  fragment.

A name you choose (a server, a tool, a tenant) is written ` + "`<name>`" + ` below.
`)
	// One section per key prefix, in the order the prefixes first come:
	// a section's keys stay together even when a subsection's keys come
	// between them in the code (serve's leaf keys after serve.receiver).
	var sections []string
	bySection := map[string][]conf.Key{}
	for _, k := range keys {
		parts := strings.Split(k.Path, ".")
		s := parts[0]
		if len(parts) > 2 {
			s = parts[0] + "." + parts[1]
		}
		if _, ok := bySection[s]; !ok {
			sections = append(sections, s)
		}
		bySection[s] = append(bySection[s], k)
	}
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n| key | type | default | description |\n| --- | --- | --- | --- |\n", s)
		for _, k := range bySection[s] {
			def := k.Default
			if def != "" {
				def = "`" + def + "`"
			}
			if d, ok := servedDefaults[k.Path]; ok {
				def = d
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Path, k.Type, def, strings.ReplaceAll(k.Doc, "|", `\|`))
		}
	}
	return b.Bytes()
}

// servedDefaults are the defaults serve applies where they differ from the
// option's own (openStore replaces them), as the reference shows them.
var servedDefaults = map[string]string{
	"serve.clickhouse.spool.dir":         "`<serve.data_dir>/clickhouse-spool`",
	"serve.clickhouse.retention.default": "`serve.retention`",
}

// TestConfig_FindingMaxAgeWarning: a rules.finding_max_age shorter than
// detect.correlation_window plus detect.allowed_lateness is accepted (a
// correlation window of a day with the default 2h was refused once, which
// broke such configs) but warned about, naming both values and what it
// costs: the finding alerts held back for findings completed that late.
// Equal or longer, nothing is said.
func TestConfig_FindingMaxAgeWarning(t *testing.T) {
	f := func(window, lateness, maxAge time.Duration, want bool) {
		t.Helper()
		cfg := NewDefaultConfig()
		cfg.Detect.CorrelationWindow, cfg.Detect.AllowedLateness, cfg.Rules.FindingMaxAge = window, lateness, maxAge
		if err := cfg.Validate(); err != nil {
			t.Fatalf("window %s, lateness %s, max age %s refused: %v", window, lateness, maxAge, err)
		}
		ws := cfg.Warnings()
		if !want {
			if len(ws) != 0 {
				t.Errorf("window %s, lateness %s, max age %s: warnings %q, want none", window, lateness, maxAge, ws)
			}
			return
		}
		if len(ws) != 1 {
			t.Fatalf("window %s, lateness %s, max age %s: warnings %q, want one", window, lateness, maxAge, ws)
		}
		for _, s := range []string{
			"rules.finding_max_age (" + conf.FormatDuration(maxAge) + ")",
			"detect.correlation_window (" + conf.FormatDuration(window) + ")",
			"detect.allowed_lateness (" + conf.FormatDuration(lateness) + ")",
			"McpAuditDoubleAppliedWrite", "do not fire",
			"raise rules.finding_max_age to " + conf.FormatDuration(window+lateness),
		} {
			if !strings.Contains(ws[0], s) {
				t.Errorf("warning %q does not say %q", ws[0], s)
			}
		}
	}
	f(time.Hour, 2*time.Minute, 2*time.Hour, false) // the defaults
	f(time.Hour, 2*time.Minute, time.Hour+2*time.Minute, false)
	f(time.Hour, 2*time.Minute, time.Hour+time.Minute, true)
	f(24*time.Hour, 2*time.Minute, 2*time.Hour, true)
	f(24*time.Hour, 0, 3*24*time.Hour, false)
}

// TestConfig_FindingMaxAgeWarnedByCommands: config validate, rules and
// serve each say the warning of a config whose finding_max_age is shorter
// than the correlation window, and still take the file.
func TestConfig_FindingMaxAgeWarnedByCommands(t *testing.T) {
	const want = "rules.finding_max_age (2h) is shorter than detect.correlation_window (1d) plus detect.allowed_lateness (2m)"
	path := writeConfig(t, "detect:\n  correlation_window: 1d\n")

	code, stdout, stderr := cliRun("config", "validate", path)
	if code != 0 || stdout != path+": valid\n" || !strings.Contains(stderr, path+": warning: "+want) {
		t.Errorf("config validate: exit %d, stdout %q, stderr %q; want 0, valid and the warning", code, stdout, stderr)
	}

	code, stdout, stderr = cliRun("rules", "--config", path)
	if code != 0 || !strings.Contains(stdout, "McpAuditDoubleAppliedWrite") || !strings.Contains(stderr, "warning: "+want) {
		t.Errorf("rules --config: exit %d, stderr %q; want the rules and the warning", code, stderr)
	}
	if code, _, stderr = cliRun("rules", "--config", path, "--finding-max-age", "2d"); code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("rules --finding-max-age 2d over a 1d window: exit %d, stderr %q; want no warning", code, stderr)
	}

	// serve logs it first thing; a stopped context makes it stop while
	// starting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var log strings.Builder
	err := serveCommand(ctx, []string{"--config", path, "--data-dir", t.TempDir(), "--api-listen", "127.0.0.1:0",
		"--ingest-listen", "127.0.0.1:0", "--grpc-listen", ""}, &log)
	if err != nil {
		t.Fatalf("serve with the config: %v; log:\n%s", err, log.String())
	}
	var found bool
	for _, l := range strings.Split(log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "configuration warning" && m["level"] == "WARN" {
			found = strings.Contains(fmt.Sprint(m["warning"]), want)
		}
	}
	if !found {
		t.Errorf("serve did not log the warning; log:\n%s", log.String())
	}
}

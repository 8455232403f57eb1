package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// TestRulesThresholds: mcpaudit rules sets the three alert thresholds the
// runbooks give "by default"; the file it writes passes promtool, the
// defaults still print the committed rules file, and bad values are
// refused with the flag and the reason.
func TestRulesThresholds(t *testing.T) {
	code, out, errs := cliRun("rules", "--unverified-writes-per-hour", "12", "--wasted-retry-ratio", "10%", "--uncertain-ratio", "0.02")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"  ) >= 12\n",
		"> 0.1\n",
		"> 0.02\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules lack %q", want)
		}
	}
	for _, def := range []string{">= 5\n", "> 0.05\n"} {
		if strings.Contains(out, def) {
			t.Errorf("rules still hold the default %q", def)
		}
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool := promtest.Binary(t, "promtool")
	if b, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, b)
	}

	// The defaults, given as flags, print the committed file.
	committed, err := os.ReadFile("../../deploy/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, out, _ := cliRun("rules", "--unverified-writes-per-hour", "5", "--wasted-retry-ratio", "5%", "--uncertain-ratio", "0.01"); out != string(committed) {
		t.Error("the default thresholds given as flags do not print deploy/prometheus/rules.yaml")
	}

	for _, tc := range []struct{ flag, value, want string }{
		{"--unverified-writes-per-hour", "0", "--unverified-writes-per-hour: want a positive number of writes"},
		{"--unverified-writes-per-hour", "five", "--unverified-writes-per-hour: want a positive number of writes"},
		{"--wasted-retry-ratio", "1", `--wasted-retry-ratio: "1" is not between 0 and 1`},
		{"--wasted-retry-ratio", "150%", `--wasted-retry-ratio: "150%" is not between 0 and 1`},
		{"--uncertain-ratio", "-0.01", `--uncertain-ratio: "-0.01" is not between 0 and 1`},
		{"--uncertain-ratio", "lots", "--uncertain-ratio: want a fraction such as 0.05 or a percentage such as 5%"},
	} {
		code, out, errs := cliRun("rules", tc.flag, tc.value)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("rules %s %s: exit %d, stdout %d bytes, stderr %q; want 2 and %q", tc.flag, tc.value, code, len(out), errs, tc.want)
		}
	}
}

// TestRulesConfigThresholds: the rules section of a config file sets the
// alert thresholds and the finding age as the flags do, the flags win over
// it, the rules written pass a real promtool, a file without the keys
// prints the committed rules, and config validate refuses a value out of
// range with its line, its key and the range.
func TestRulesConfigThresholds(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mcpaudit.yaml")
	if err := os.WriteFile(file, []byte("rules:\n  unverified_writes_per_hour: 12\n  wasted_retry_ratio: 0.1\n"+
		"  uncertain_ratio: 0.02\n  finding_max_age: 3h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("rules", "--config", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"  ) >= 12\n",
		"> 0.1\n",
		"> 0.02\n",
		" < 10800)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules from the config lack %q", want)
		}
	}
	// (> 0.01 stays: the ingest rejection ratio has no key.)
	for _, def := range []string{">= 5\n", "> 0.05\n", " < 7200)"} {
		if strings.Contains(out, def) {
			t.Errorf("rules from the config still hold the default %q", def)
		}
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool := promtest.Binary(t, "promtool")
	if b, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, b)
	}

	// A flag wins over the file; the file's other keys stay.
	_, out, _ = cliRun("rules", "--config", file, "--wasted-retry-ratio", "3%")
	if !strings.Contains(out, "> 0.03\n") || strings.Contains(out, "> 0.1\n") || !strings.Contains(out, ">= 12\n") {
		t.Error("--wasted-retry-ratio 3% with the config: want > 0.03 and the config's >= 12, not its > 0.1")
	}

	// A rules section without the keys prints the committed rules.
	plain := filepath.Join(dir, "plain.yaml")
	if err := os.WriteFile(plain, []byte("rules:\n  job: mcpaudit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../../deploy/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, out, errs := cliRun("rules", "--config", plain); out != string(committed) {
		t.Errorf("rules --config without thresholds do not print deploy/prometheus/rules.yaml: %s", errs)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  unverified_writes_per_hour: 0\n  wasted_retry_ratio: 1.5\n"+
		"  uncertain_ratio: -0.01\n  finding_max_age: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = cliRun("config", "validate", bad)
	for _, want := range []string{
		"line 2: rules.unverified_writes_per_hour: 0 is not a positive number of writes",
		"line 3: rules.wasted_retry_ratio: 1.5 is not between 0 and 1 (both excluded)",
		"line 4: rules.uncertain_ratio: -0.01 is not between 0 and 1 (both excluded)",
		"line 5: rules.finding_max_age: 0s is not a positive duration",
	} {
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("config validate: exit %d, stderr:\n%s\nwant 2 and %q", code, errs, want)
		}
	}
	if code, out, errs := cliRun("rules", "--config", bad); code != 2 || out != "" || !strings.Contains(errs, "rules.wasted_retry_ratio") {
		t.Errorf("rules --config with bad thresholds: exit %d, stdout %d bytes, stderr %q; want 2 naming the key", code, len(out), errs)
	}
}

// TestRulesWebURLNotEchoed: a --web-url that rules refuses is named with
// what is wrong with it, never repeated: a URL typed with a credential in
// it would otherwise be shown to whoever reads the output or the CI log.
func TestRulesWebURLNotEchoed(t *testing.T) {
	const secret = "hunter2pass"
	for _, tc := range []struct{ url, fault string }{
		{"ftp://viewer:" + secret + "@mcpaudit.example.com", "its scheme is another"},
		{"mcpaudit.example.com/?token=" + secret, "it has no scheme"},
		{"https:///" + secret, "it has no host"},
		{"https://mcpaudit.example.com/%zz" + secret, "it does not parse as a URL"},
	} {
		code, out, errs := cliRun("rules", "--web-url", tc.url)
		if code != 2 || out != "" || !strings.Contains(errs, "web_url: want an http or https URL") || !strings.Contains(errs, tc.fault) {
			t.Errorf("rules --web-url %q: exit %d, stdout %d bytes, stderr %q; want 2 saying %q", tc.url, code, len(out), errs, tc.fault)
		}
		if strings.Contains(errs, secret) {
			t.Errorf("rules --web-url %q repeats the secret: %s", tc.url, errs)
		}
	}
}

// TestRulesHelp_UsageNamesEveryFlag: the usage line of rules lists every flag
// its help describes, so that one read of it shows what can be set.
func TestRulesHelp_UsageNamesEveryFlag(t *testing.T) {
	code, _, help := cliRun("rules", "--help")
	if code != 0 {
		t.Fatalf("rules --help: exit %d", code)
	}
	usage, rest, _ := strings.Cut(help, "\n\n")
	if !strings.Contains(rest, "flags:") {
		t.Errorf("rules --help has no flags: header before its flags:\n%s", help)
	}
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(rest, -1) {
		if !strings.Contains(usage, "[--"+m[1]+" ") {
			t.Errorf("the usage line of rules does not name --%s:\n%s", m[1], usage)
		}
	}
}

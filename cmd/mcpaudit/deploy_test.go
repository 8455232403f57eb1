package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployConfigs: the collector configuration of every deployment under
// deploy/ passes mcpaudit config validate, with its secrets set as the
// deployment sets them.
func TestDeployConfigs(t *testing.T) {
	t.Setenv("MCPAUDIT_TOKEN_DEMO", "tok-demo")
	t.Setenv("MCPAUDIT_TOKEN_ACME", "tok-acme")
	t.Setenv("CLICKHOUSE_PASSWORD", "pw0")
	// The ConfigMap holds its config as a string.
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	b, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	k8s := filepath.Join(t.TempDir(), "configmap-mcpaudit.yaml")
	if err := os.WriteFile(k8s, []byte(cm.Data["mcpaudit.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../../deploy/compose/mcpaudit.yaml", "../../deploy/systemd/mcpaudit.yaml", k8s} {
		code, out, errs := cliRun("config", "validate", p)
		if code != 0 || !strings.Contains(out, "valid") {
			t.Errorf("%s: exit %d %s", p, code, errs)
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			continue
		}
		if cfg.Serve.DataDir != "/var/lib/mcpaudit" || len(cfg.Serve.Receiver.Tenants) == 0 {
			t.Errorf("%s: data_dir %q and %d tenants; want /var/lib/mcpaudit and authentication on", p, cfg.Serve.DataDir, len(cfg.Serve.Receiver.Tenants))
		}
	}
	// The Kubernetes Secret ships without a token: the collector must refuse
	// to start rather than accept an empty one.
	t.Setenv("MCPAUDIT_TOKEN_ACME", "")
	if code, _, errs := cliRun("config", "validate", k8s); code != 2 || !strings.Contains(errs, "tenants") {
		t.Errorf("an empty token: exit %d %s, want 2 naming the tenants", code, errs)
	}
}

// TestDeployCommands: the command lines the deployments run are ones
// mcpaudit takes: every flag exists.
func TestDeployCommands(t *testing.T) {
	_, _, serveHelp := cliRun("serve", "-h")
	flags := func(where string, args []string) {
		t.Helper()
		for _, a := range args {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				if !strings.Contains(serveHelp, "  -"+name+" ") && !strings.Contains(serveHelp, "  -"+name+"\n") {
					t.Errorf("%s: serve has no flag --%s", where, name)
				}
			}
		}
	}
	unit, err := os.ReadFile("../../deploy/systemd/mcpaudit.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=\S+ serve (.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the systemd unit has no ExecStart of mcpaudit serve")
	}
	flags("systemd ExecStart", strings.Fields(string(m[1])))
	pre := regexp.MustCompile(`(?m)^ExecStartPre=\S+ (config validate \S+)$`).FindSubmatch(unit)
	if pre == nil {
		t.Error("the systemd unit does not validate its config before starting")
	}
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	cmd := regexp.MustCompile(`(?m)^CMD \["serve", (.*)\]$`).FindSubmatch(df)
	if cmd == nil {
		t.Fatal("the Dockerfile's CMD is not serve")
	}
	flags("Dockerfile CMD", strings.Split(strings.ReplaceAll(string(cmd[1]), `"`, ""), ", "))
	sts, err := os.ReadFile("../../deploy/kubernetes/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	args := regexp.MustCompile(`args: \["serve", (.*)\]`).FindSubmatch(sts)
	if args == nil {
		t.Fatal("the StatefulSet does not run serve")
	}
	flags("StatefulSet args", strings.Split(strings.ReplaceAll(string(args[1]), `"`, ""), ", "))
}

// TestHealthcheck: the command the image's HEALTHCHECK runs answers 0 for
// a running collector and 1 when nothing answers.
func TestHealthcheck(t *testing.T) {
	s := startTest(t, testConfig(t, t.TempDir()))
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, out, errs := cliRun("healthcheck", "--url", "http://"+s.apiAddr+path); code != 0 || !strings.Contains(out, "200") {
			t.Errorf("%s: exit %d %s %s", path, code, out, errs)
		}
	}
	if code, _, errs := cliRun("healthcheck", "--url", "http://"+s.apiAddr+"/nothing"); code != 1 || !strings.Contains(errs, "404") {
		t.Errorf("a 404: exit %d %s", code, errs)
	}
	if code, _, errs := cliRun("healthcheck", "--url", "http://127.0.0.1:1/healthz", "--timeout", "1s"); code != 1 || !strings.Contains(errs, "cannot reach") {
		t.Errorf("nothing listening: exit %d %s", code, errs)
	}
	// --api-url, as every other client command takes it (op21's D7): the
	// API's /healthz, or the path given.
	for _, u := range []string{"http://" + s.apiAddr, "http://" + s.apiAddr + "/", "http://" + s.apiAddr + "/readyz"} {
		if code, out, errs := cliRun("healthcheck", "--api-url", u); code != 0 || !strings.Contains(out, "200") {
			t.Errorf("--api-url %s: exit %d %s %s", u, code, out, errs)
		}
	}
	if code, out, _ := cliRun("healthcheck", "--api-url", "http://"+s.apiAddr); !strings.Contains(out, "/healthz") {
		t.Errorf("--api-url of the API: exit %d, %q; want /healthz asked", code, out)
	}
	if code, _, errs := cliRun("healthcheck", "--api-url", "http://"+s.apiAddr+"/nothing"); code != 1 || !strings.Contains(errs, "404") {
		t.Errorf("--api-url to a 404: exit %d %s", code, errs)
	}
	if code, _, errs := cliRun("healthcheck", "--api-url", "http://"+s.apiAddr, "--url", "http://"+s.apiAddr+"/healthz"); code != 2 || !strings.Contains(errs, "not both") {
		t.Errorf("--api-url and --url: exit %d %s; want 2", code, errs)
	}
}

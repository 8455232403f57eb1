// Package peer holds the test of the peer benchmark script, run.sh, which
// is not run by the test suite (it downloads and builds the OpenTelemetry
// Collector).
package peer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestRunScript_Syntax: bash parses the script.
func TestRunScript_Syntax(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "run.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n run.sh: %v\n%s", err, out)
	}
}

// collectorConfig is the part of a Collector configuration checked here.
type collectorConfig struct {
	Extensions map[string]map[string]any `yaml:"extensions"`
	Receivers  map[string]map[string]any `yaml:"receivers"`
	Processors map[string]map[string]any `yaml:"processors"`
	Exporters  map[string]map[string]any `yaml:"exporters"`
	Service    struct {
		Extensions []string       `yaml:"extensions"`
		Telemetry  map[string]any `yaml:"telemetry"`
		Pipelines  map[string]struct {
			Receivers  []string `yaml:"receivers"`
			Processors []string `yaml:"processors"`
			Exporters  []string `yaml:"exporters"`
		} `yaml:"pipelines"`
	} `yaml:"service"`
}

// TestRunScript_Configs: the files the script writes are valid YAML of
// the expected shape: every pipeline uses components that are defined,
// every component it defines was built, the default configuration batches
// into the file exporter, and the durable one acknowledges from a
// persistent, fsynced queue that blocks when full and is not followed by
// a batch processor.
func TestRunScript_Configs(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("bash", "run.sh", "--configs-only", dir).CombinedOutput(); err != nil {
		t.Fatalf("run.sh --configs-only: %v\n%s", err, out)
	}
	var manifest struct {
		Dist       map[string]string   `yaml:"dist"`
		Receivers  []map[string]string `yaml:"receivers"`
		Processors []map[string]string `yaml:"processors"`
		Exporters  []map[string]string `yaml:"exporters"`
		Extensions []map[string]string `yaml:"extensions"`
	}
	decode(t, filepath.Join(dir, "builder.yaml"), &manifest)
	built := map[string]bool{}
	version := ""
	for _, list := range [][]map[string]string{manifest.Receivers, manifest.Processors, manifest.Exporters, manifest.Extensions} {
		for _, m := range list {
			mod, v, ok := strings.Cut(m["gomod"], " ")
			if !ok {
				t.Fatalf("gomod %q has no version", m["gomod"])
			}
			if version == "" {
				version = v
			} else if v != version {
				t.Errorf("%s at %s beside %s: one release for every module", mod, v, version)
			}
			built[filepath.Base(mod)] = true
		}
	}
	// The component types each module provides.
	provides := map[string]string{"otlp": "otlpreceiver", "batch": "batchprocessor", "file": "fileexporter",
		"otlp_grpc": "otlpexporter", "file_storage": "filestorage"}

	for _, name := range []string{"default", "durable"} {
		var cfg collectorConfig
		decode(t, filepath.Join(dir, "otelcol-"+name+".yaml"), &cfg)
		defined := func(kind string, m map[string]map[string]any, id string) {
			if _, ok := m[id]; !ok {
				t.Errorf("%s: %s %q is used but not defined", name, kind, id)
			}
			typ, _, _ := strings.Cut(id, "/")
			if !built[provides[typ]] {
				t.Errorf("%s: %s %q is of a type the build does not have", name, kind, id)
			}
		}
		if len(cfg.Service.Pipelines) == 0 {
			t.Fatalf("%s: no pipeline", name)
		}
		for _, p := range cfg.Service.Pipelines {
			for _, id := range p.Receivers {
				defined("receiver", cfg.Receivers, id)
			}
			for _, id := range p.Processors {
				defined("processor", cfg.Processors, id)
			}
			for _, id := range p.Exporters {
				defined("exporter", cfg.Exporters, id)
			}
		}
		for _, id := range cfg.Service.Extensions {
			defined("extension", cfg.Extensions, id)
		}
		switch name {
		case "default":
			p := cfg.Service.Pipelines["traces"]
			if strings.Join(p.Processors, ",") != "batch" || strings.Join(p.Exporters, ",") != "file" {
				t.Errorf("default: pipeline %+v, want otlp -> batch -> file", p)
			}
		case "durable":
			if fs := cfg.Extensions["file_storage"]; fs["fsync"] != true {
				t.Errorf("durable: file_storage %v does not fsync", fs)
			}
			q, _ := cfg.Exporters["otlp_grpc/queue"]["sending_queue"].(map[string]any)
			if q["storage"] != "file_storage" || q["block_on_overflow"] != true || q["enabled"] != true {
				t.Errorf("durable: sending_queue %v is not persistent and blocking", q)
			}
			for pname, p := range cfg.Service.Pipelines {
				if len(p.Processors) > 0 {
					t.Errorf("durable: pipeline %s has processors %v: spans would leave the queue before they are written", pname, p.Processors)
				}
			}
		}
	}
}

// decode reads a YAML file strictly into v.
func decode(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestRunScript_StoreCalls: SQLITE_CALLS chooses where mcpaudit's store
// keeps calls (serve.sqlite.calls), sqlite when unset, and a value serve
// does not know stops the script before it builds anything.
func TestRunScript_StoreCalls(t *testing.T) {
	f := func(env, want string) {
		t.Helper()
		dir := t.TempDir()
		cmd := exec.Command("bash", "run.sh", "--configs-only", dir)
		cmd.Env = append(os.Environ(), "SQLITE_CALLS="+env)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("SQLITE_CALLS=%s run.sh --configs-only: %v\n%s", env, err, out)
		}
		var cfg struct {
			Serve struct {
				SQLite struct {
					Calls string `yaml:"calls"`
				} `yaml:"sqlite"`
			} `yaml:"serve"`
		}
		decode(t, filepath.Join(dir, "mcpaudit.yaml"), &cfg)
		if cfg.Serve.SQLite.Calls != want {
			t.Errorf("SQLITE_CALLS=%q: serve.sqlite.calls %q, want %q", env, cfg.Serve.SQLite.Calls, want)
		}
	}
	f("", "sqlite")
	f("sqlite", "sqlite")
	f("log", "log")

	cmd := exec.Command("bash", "run.sh", "--configs-only", t.TempDir())
	cmd.Env = append(os.Environ(), "SQLITE_CALLS=logs")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), "SQLITE_CALLS") {
		t.Errorf("SQLITE_CALLS=logs: exit %d, %s; want exit 2 naming SQLITE_CALLS", code, out)
	}
}

package main

import (
	"bytes"
	"time"

	"errors"
	"fmt"
	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"io"
	"os"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"go.yaml.in/yaml/v3"
)

// Config is the mcpaudit configuration file. Every section is optional;
// NewDefaultConfig gives the documented defaults.
type Config struct {
	// Dialects chooses the dialect of each server name and names the write
	// tools of generic servers.
	Dialects dialect.Config `yaml:"dialects"`
	// Detect sets the event-time windows of the detector.
	Detect detect.Config `yaml:"detect"`
	// Serve configures mcpaudit serve.
	Serve ServeConfig `yaml:"serve"`
}

// ServeConfig configures the collector service.
type ServeConfig struct {
	// IngestListen serves OTLP/HTTP (/v1/traces) and call records
	// (/v1/calls). Default :4318.
	IngestListen string `yaml:"ingest_listen"`
	// GRPCListen serves OTLP/gRPC; empty disables it. Default :4317.
	GRPCListen string `yaml:"grpc_listen"`
	// APIListen serves the query API, /metrics, /healthz and /readyz.
	// Default :9464 (the port Prometheus exporters of this kind use).
	APIListen string `yaml:"api_listen"`
	// DataDir is where the embedded store lives. Default ./mcpaudit-data.
	DataDir string `yaml:"data_dir"`
	// Store is the backend: sqlite (embedded, default) or clickhouse.
	Store string `yaml:"store"`
	// Retention is how long calls, writes and findings are kept. Default 30d.
	Retention Duration `yaml:"retention"`
	// RetentionEvery is how often the retention job runs. Default 1h.
	RetentionEvery Duration `yaml:"retention_every"`
	// SLOTarget is the write-durability objective. Default 0.999.
	SLOTarget float64 `yaml:"slo_target"`
	// Receiver sets body limits, back-pressure and tenant credentials.
	Receiver receiver.Config `yaml:"receiver"`
	// Credentials are named tokens of the query API and the page, each for
	// one tenant or "*" for all; the name is recorded when a finding is
	// acknowledged or resolved. The receiver's tenant tokens work there
	// too, named after their tenant.
	Credentials map[string]api.Credential `yaml:"credentials"`
	// Web configures the investigation page and finding notifications.
	Web WebConfig `yaml:"web"`
	// Pipeline sets the ingest queue and commit cadence.
	Pipeline pipeline.Config `yaml:"pipeline"`
	// SQLite tunes the embedded store.
	SQLite sqlite.Options `yaml:"sqlite"`
	// ClickHouse configures the ClickHouse store (store: clickhouse).
	ClickHouse clickhouse.Options `yaml:"clickhouse"`

	pprof bool // --pprof: serve /debug/pprof/
}

// Duration is a time.Duration that YAML spells like Go ("90m", "720h")
// or in days and weeks ("30d", "2w").
type Duration time.Duration

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalText parses a duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := api.ParseWindow(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText prints a duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// NewDefaultConfig returns the configuration used when no file is given.
func NewDefaultConfig() Config {
	return Config{
		Detect: detect.NewDefaultConfig(),
		Serve: ServeConfig{
			IngestListen: ":4318", GRPCListen: ":4317", APIListen: ":9464",
			DataDir: "./mcpaudit-data", Store: "sqlite",
			Retention: Duration(30 * 24 * time.Hour), RetentionEvery: Duration(time.Hour),
			SLOTarget:  0.999,
			Web:        NewDefaultWebConfig(),
			Receiver:   receiver.NewDefaultConfig(),
			Pipeline:   pipeline.NewDefaultConfig(),
			SQLite:     sqlite.NewDefaultOptions(),
			ClickHouse: clickhouse.NewDefaultOptions(),
		},
	}
}

// Validate checks every section and joins the errors, each with its key
// path.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Dialects.Validate(); err != nil {
		errs = append(errs, prefixed("dialects", err))
	}
	if err := c.Detect.Validate(); err != nil {
		errs = append(errs, prefixed("detect", err))
	}
	sv := &c.Serve
	switch sv.Store {
	case "sqlite":
	case "clickhouse":
		if err := sv.ClickHouse.Validate(); err != nil {
			errs = append(errs, prefixed("serve.clickhouse", err))
		}
	default:
		errs = append(errs, fmt.Errorf("serve.store: unknown store %q (want sqlite or clickhouse)", sv.Store))
	}
	if sv.IngestListen == "" {
		errs = append(errs, errors.New("serve.ingest_listen: required"))
	}
	if sv.APIListen == "" {
		errs = append(errs, errors.New("serve.api_listen: required"))
	}
	if sv.DataDir == "" {
		errs = append(errs, errors.New("serve.data_dir: required"))
	}
	if sv.Retention <= 0 {
		errs = append(errs, errors.New("serve.retention: must be positive"))
	}
	if sv.RetentionEvery <= 0 {
		errs = append(errs, errors.New("serve.retention_every: must be positive"))
	}
	if sv.SLOTarget <= 0 || sv.SLOTarget >= 1 {
		errs = append(errs, fmt.Errorf("serve.slo_target: must be in (0, 1), not %v", sv.SLOTarget))
	}
	for name, c := range sv.Credentials {
		if name == "" || c.Token == "" || c.Tenant == "" {
			errs = append(errs, fmt.Errorf("serve.credentials.%s: name, token and tenant (or \"*\") are required", name))
		}
	}
	if err := sv.Web.Validate(); err != nil {
		errs = append(errs, prefixed("serve.web", err))
	}
	if err := sv.Receiver.Validate(); err != nil {
		errs = append(errs, prefixed("serve.receiver", err))
	}
	if err := sv.Pipeline.Validate(); err != nil {
		errs = append(errs, prefixed("serve.pipeline", err))
	}
	if err := sv.SQLite.Validate(); err != nil {
		errs = append(errs, prefixed("serve.sqlite", err))
	}
	return errors.Join(errs...)
}

// LoadConfig reads a YAML configuration file strictly (unknown keys are
// errors), expanding ${VAR} environment references first, over the
// defaults.
func LoadConfig(path string) (Config, error) {
	cfg := NewDefaultConfig()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("cannot read config: %w", err)
	}
	expanded := os.Expand(string(raw), func(k string) string {
		if k == "$" {
			return "$"
		}
		return os.Getenv(k)
	})
	dec := yaml.NewDecoder(bytes.NewReader([]byte(expanded)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("cannot decode config %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("invalid config %s: %w", path, err)
	}
	return cfg, nil
}

// prefixed puts a key path before each of the joined errors in err.
func prefixed(path string, err error) error {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	out := make([]error, len(list))
	for i, e := range list {
		out[i] = fmt.Errorf("%s.%w", path, e)
	}
	return errors.Join(out...)
}

// configCommand implements `mcpaudit config validate FILE`.
func configCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 || args[0] != "validate" {
		return &exitError{code: 2, err: errors.New("usage: mcpaudit config validate FILE")}
	}
	if _, err := LoadConfig(args[1]); err != nil {
		return &exitError{code: 2, err: err}
	}
	fmt.Fprintf(stdout, "%s: valid\n", args[1])
	return nil
}

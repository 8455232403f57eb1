package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/internal/conf"
	"github.com/mcpaudit/mcpaudit/rules"
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
	// Rules sets what mcpaudit rules writes into the Prometheus rules besides
	// the SLO target, which is serve.slo_target.
	Rules RulesConfig `yaml:"rules"`
	// Redact masks secrets in tool arguments and results before they are
	// stored or logged (serve, proxy and wrap with --data-dir; analyze
	// with --redact).
	Redact redact.Config `yaml:"redact"`
}

// RulesConfig configures the Prometheus rules that `mcpaudit rules --config`
// prints.
type RulesConfig struct {
	// RunbookURL is the runbook document the alerts' runbook_url annotations
	// point into; each alert appends "#" and its name in lowercase. The
	// notifications of serve.web.notify and the finding pages link into it
	// too.
	// Default the runbooks of the mcpaudit repository.
	RunbookURL string `yaml:"runbook_url"`
	// Job is the Prometheus job name of the mcpaudit scrape target. Default
	// mcpaudit.
	Job string `yaml:"job"`
	// UnverifiedWritesPerHour is how many writes of one server (or more)
	// may be reported unverified in an hour (unverified_write findings,
	// less those withdrawn) before the alert on unverified writes fires: a
	// positive number. Default 5.
	UnverifiedWritesPerHour float64 `yaml:"unverified_writes_per_hour"`
	// WastedRetryRatio is the share of a server's calls over 30m that may
	// be wasted or premature retries before the alert on wasted retries
	// fires: a fraction between 0 and 1, both excluded. Default 0.05.
	WastedRetryRatio conf.Share `yaml:"wasted_retry_ratio"`
	// UncertainRatio is the share of a server's calls over 10m that may end
	// with an uncertain outcome of one retry action (replay_same_request or
	// verify_then_decide: COMMIT_UNKNOWN, a write that timed out, E_STORAGE,
	// in_flight_unknown, ...) before the alert on uncertain outcomes fires:
	// a fraction between 0 and 1, both excluded. Default 0.01.
	UncertainRatio conf.Share `yaml:"uncertain_ratio"`
	// FindingMaxAge is the event-time age past which a finding no longer
	// fires its immediate alert (keep it above detect.correlation_window
	// plus detect.allowed_lateness: serve and config validate warn when it
	// is shorter). Default 2h.
	FindingMaxAge time.Duration `yaml:"finding_max_age"`
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
	// Settings of the other one's section (serve.clickhouse under sqlite,
	// serve.sqlite under clickhouse) are not used: serve and config
	// validate warn about them.
	Store string `yaml:"store"`
	// Retention is how long calls, writes and findings are kept; ingest
	// refuses a call older than the next retention round keeps, which it
	// would delete once acknowledged. Default 30d.
	Retention Duration `yaml:"retention"`
	// RetentionFrom is what the embedded store's retention counts back
	// from: newest_call, the time of the newest stored call (or now, when
	// that is later), so that a collector that receives nothing, or is
	// given old calls to look into, does not delete them on the wall
	// clock, as Prometheus counts its retention back from its newest
	// block; or now, the wall clock, for a hard age limit. With live
	// traffic the two are the same. Default newest_call.
	RetentionFrom string `yaml:"retention_from"`
	// TenantRetention overrides serve.retention for the tenants it lists
	// (tenant name: duration), longer or shorter. A tenant that no
	// credential of the file names (and no serve.auth.tokens_file may) is
	// warned about by serve and config validate: a misspelt name keeps
	// serve.retention. Default none: every tenant keeps serve.retention.
	TenantRetention map[string]Duration `yaml:"tenant_retention"`
	// SigningKeyFile is a PEM file of the Ed25519 private key (PKCS #8,
	// mcpaudit keygen) that signs the tamper-evidence checkpoints of the
	// embedded store. Default empty: the chains are kept but no checkpoint
	// is signed, so mcpaudit verify can only check them against
	// themselves.
	SigningKeyFile string `yaml:"signing_key_file"`
	// RetentionEvery is how often the retention job runs. Default 1h.
	RetentionEvery Duration `yaml:"retention_every"`
	// SLOTarget is the write-durability objective: the API's error budget
	// is measured against it, and `mcpaudit rules --config` writes it into
	// the rules, whose recorded target the SLO dashboard reads. Default 0.999.
	SLOTarget float64 `yaml:"slo_target"`
	// MemoryLimit bounds the memory of the process, in bytes with an
	// optional unit (384MiB, 1GiB, 400MB): the Go
	// runtime is given seven eighths of it as its memory limit (GOMEMLIMIT,
	// when set, wins and is taken as the runtime's limit), the rest is left
	// to what the embedded store holds outside the Go heap: its page
	// caches, held to it (serve.sqlite.cache_mib for the writer, and at most
	// a quarter for the readers' serve.sqlite.read_cache_mib), and, in a
	// build with cgo, the id index's 8 MiB of buffers.
	// It is not a hard cap: with 8 OTLP/gRPC clients at 15k calls/s a limit
	// of 256MiB gave a peak RSS of 311 MiB (docs/benchmarks.md, "Memory
	// limit"). The collector refuses new requests with
	// 503 above serve.receiver.memory_soft_limit of the runtime's limit,
	// new calls near it, and lets requests in flight hold half of it at
	// most. The ClickHouse store's drain is held to a sixteenth of it
	// (serve.clickhouse.drain_bytes). Default 0: none.
	MemoryLimit conf.Size `yaml:"memory_limit"`
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
	// Auth sets where credentials come from besides the inline tokens, and
	// whether /metrics needs one.
	Auth access.Config `yaml:"auth"`
	// TLS turns on TLS, and optionally client certificates, on every
	// listener.
	TLS access.TLSConfig `yaml:"tls"`
	// Connections bounds the connections of each listener.
	Connections ConnectionsConfig `yaml:"connections"`
	// Metrics bounds the label values of the Prometheus metrics.
	Metrics MetricsConfig `yaml:"metrics"`

	pprof bool // --pprof: serve /debug/pprof/
}

// Duration is a time.Duration written as every duration of the
// configuration is: "30d", "1d12h", "5m", "30s" (conf.ParseDuration).
type Duration time.Duration

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalText parses a duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := conf.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText prints a duration.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(conf.FormatDuration(time.Duration(d))), nil
}

// NewDefaultConfig returns the configuration used when no file is given.
func NewDefaultConfig() Config {
	return Config{
		Detect: detect.NewDefaultConfig(),
		Serve: ServeConfig{
			IngestListen: ":4318", GRPCListen: ":4317", APIListen: ":9464",
			DataDir: "./mcpaudit-data", Store: "sqlite",
			Retention: Duration(30 * 24 * time.Hour), RetentionEvery: Duration(time.Hour), RetentionFrom: RetentionFromNewestCall,
			SLOTarget:   0.999,
			Web:         NewDefaultWebConfig(),
			Receiver:    receiver.NewDefaultConfig(),
			Pipeline:    pipeline.NewDefaultConfig(),
			SQLite:      sqlite.NewDefaultOptions(),
			ClickHouse:  clickhouse.NewDefaultOptions(),
			TLS:         access.NewDefaultTLSConfig(),
			Connections: NewDefaultConnectionsConfig(),
			Metrics:     MetricsConfig{MaxServers: 100, MaxToolsPerServer: 64},
		},
		Redact: redact.NewDefaultConfig(),
		Rules:  NewDefaultRulesConfig(),
	}
}

// NewDefaultRulesConfig returns the rules section of the committed rules
// file (rules.DefaultOptions).
func NewDefaultRulesConfig() RulesConfig {
	d := rules.DefaultOptions()
	return RulesConfig{RunbookURL: d.RunbookURL, Job: d.Job, UnverifiedWritesPerHour: d.UnverifiedWritesPerHour,
		WastedRetryRatio: conf.Share(d.WastedRetryRatio), UncertainRatio: conf.Share(d.UncertainRatio), FindingMaxAge: d.FindingMaxAge}
}

// validateThresholds checks the alert thresholds of the rules section;
// each error names its key and the range the value must be in.
func (c RulesConfig) validateThresholds() []error {
	var errs []error
	if v := c.UnverifiedWritesPerHour; !(v > 0) || math.IsInf(v, 0) {
		errs = append(errs, fmt.Errorf("rules.unverified_writes_per_hour: %s is not a positive number of writes (such as 5)", number(v)))
	}
	for _, r := range []struct {
		key string
		v   float64
	}{{"wasted_retry_ratio", float64(c.WastedRetryRatio)}, {"uncertain_ratio", float64(c.UncertainRatio)}} {
		if !(r.v > 0 && r.v < 1) {
			errs = append(errs, fmt.Errorf("rules.%s: %s is not between 0 and 1 (both excluded): the share of calls above which the alert fires, such as 0.05", r.key, number(r.v)))
		}
	}
	if c.FindingMaxAge <= 0 {
		errs = append(errs, fmt.Errorf("rules.finding_max_age: %s is not a positive duration (such as 2h)", conf.FormatDuration(c.FindingMaxAge)))
	}
	return errs
}

// Validate checks every section and joins the errors, each starting with
// its key path.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Dialects.Validate(); err != nil {
		errs = append(errs, prefixed("dialects", err))
	}
	if err := c.Detect.Validate(); err != nil {
		errs = append(errs, prefixed("detect", err))
	}
	if d := c.Detect; d.VerifyWindow > d.CorrelationWindow && d.CorrelationWindow > 0 {
		errs = append(errs, fmt.Errorf("detect.verify_window: %s is longer than detect.correlation_window (%s): "+
			"a write would be judged on calls the detector no longer compares with it; raise correlation_window or lower verify_window",
			conf.FormatDuration(d.VerifyWindow), conf.FormatDuration(d.CorrelationWindow)))
	}
	if d := c.Detect; d.AllowedLateness > 0 && d.MaxClockSkew >= d.AllowedLateness {
		errs = append(errs, fmt.Errorf("detect.max_clock_skew: %s is not shorter than detect.allowed_lateness (%s): "+
			"a source whose clock runs ahead by the skew takes its partition's watermark that far ahead, and the calls of its "+
			"other sources would come later than the allowance and never be judged; lower max_clock_skew or raise allowed_lateness",
			conf.FormatDuration(d.MaxClockSkew), conf.FormatDuration(d.AllowedLateness)))
	}
	sv := &c.Serve
	switch sv.Store {
	case "sqlite", "clickhouse":
	default:
		errs = append(errs, fmt.Errorf("serve.store: unknown store %q (want sqlite or clickhouse)", sv.Store))
	}
	// The ClickHouse section is checked even with the embedded store, so
	// that a mistake shows before the day the store is switched.
	if err := sv.ClickHouse.Validate(); err != nil {
		errs = append(errs, prefixed("serve.clickhouse", err))
	}
	for _, l := range []struct {
		key, addr string
		optional  bool
	}{{"serve.ingest_listen", sv.IngestListen, false}, {"serve.grpc_listen", sv.GRPCListen, true}, {"serve.api_listen", sv.APIListen, false}} {
		if err := checkListen(l.addr, l.optional); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.key, err))
		}
	}
	if _, port, _ := net.SplitHostPort(sv.APIListen); port != "0" && sv.IngestListen != "" && sv.IngestListen == sv.APIListen {
		errs = append(errs, fmt.Errorf("serve.api_listen: %s is serve.ingest_listen too; give each its own port", sv.APIListen))
	}
	if sv.DataDir == "" {
		errs = append(errs, errors.New("serve.data_dir: required"))
	}
	if sv.Retention <= 0 {
		errs = append(errs, errors.New("serve.retention: must be positive"))
	}
	for _, tenant := range sortedTenants(sv.TenantRetention) {
		if sv.TenantRetention[tenant] <= 0 {
			errs = append(errs, fmt.Errorf("serve.tenant_retention.%s: must be positive (leave the tenant out to keep serve.retention)", tenant))
		}
	}
	if sv.RetentionEvery <= 0 {
		errs = append(errs, errors.New("serve.retention_every: must be positive"))
	}
	if sv.RetentionFrom != RetentionFromNewestCall && sv.RetentionFrom != RetentionFromNow {
		errs = append(errs, fmt.Errorf("serve.retention_from: want %s or %s, not %q", RetentionFromNewestCall, RetentionFromNow, sv.RetentionFrom))
	}
	if err := rules.ValidateSLOTarget(sv.SLOTarget); err != nil {
		errs = append(errs, fmt.Errorf("serve.slo_target: %w", err))
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
	errs = append(errs, c.validateTrust()...)
	if fault := conf.URLFault(c.Rules.RunbookURL, false); fault != "" {
		errs = append(errs, fmt.Errorf("rules.runbook_url: want an absolute URL without a #fragment, such as https://wiki.example.com/mcpaudit/runbooks: %s (the value is not repeated: it may hold a secret)", fault))
	}
	if c.Rules.Job == "" || strings.ContainsAny(c.Rules.Job, "\"\\\n") {
		errs = append(errs, fmt.Errorf("rules.job: %q is empty or holds a quote, backslash or newline", c.Rules.Job))
	}
	errs = append(errs, c.Rules.validateThresholds()...)
	return errors.Join(errs...)
}

// Warnings returns what the configuration allows but an operator should
// know: settings valid each alone that work against each other, one
// sentence each naming the keys, their values and what follows. serve
// logs them at start and config validate prints them; neither refuses
// the file for them.
func (c *Config) Warnings() []string {
	var out []string
	if w := findingMaxAgeWarning(c.Rules.FindingMaxAge, c.Detect); w != "" {
		out = append(out, w)
	}
	if w := otherStoreWarning(c.Serve); w != "" {
		out = append(out, w)
	}
	out = append(out, unknownTenantRetentionWarnings(c.Serve)...)
	return out
}

// unknownTenantRetentionWarnings says which tenants of
// serve.tenant_retention no credential of the file names: a typo there
// (lgeal for legal) was valid and silent, and the tenant kept
// serve.retention instead, its data deleted sooner than the operator set
// (op21). With serve.auth.tokens_file set, tenants may come from that
// file, which is not read here, so nothing is said.
func unknownTenantRetentionWarnings(s ServeConfig) []string {
	if len(s.TenantRetention) == 0 || s.Auth.TokensFile != "" {
		return nil
	}
	known := map[string]bool{}
	for _, t := range s.Receiver.Tenants {
		known[t] = true
	}
	for _, c := range s.Credentials {
		known[c.Tenant] = true
	}
	for _, c := range s.Auth.ClientCerts {
		known[c.Tenant] = true
	}
	var out []string
	for _, tenant := range sortedTenants(s.TenantRetention) {
		if known[tenant] {
			continue
		}
		out = append(out, fmt.Sprintf("serve.tenant_retention names tenant %q, which no credential of this file names "+
			"(serve.receiver.tenants, serve.credentials, serve.auth.client_certs): its retention is not used, and calls of a "+
			"tenant meant by it keep serve.retention (%s)", tenant, conf.FormatDuration(time.Duration(s.Retention))))
	}
	return out
}

// otherStoreWarning says that the settings of the store not in use differ
// from their defaults, or "": serve.clickhouse.dsn with serve.store left
// at sqlite is a ClickHouse deployment that silently runs on the embedded
// store (found by the operator pass of 2026-12-05: config validate said
// "valid" and nothing more).
func otherStoreWarning(s ServeConfig) string {
	def := NewDefaultConfig().Serve
	unused, section := "", ""
	switch s.Store {
	case "clickhouse":
		if !reflect.DeepEqual(s.SQLite, def.SQLite) {
			unused, section = "sqlite", "serve.sqlite"
		}
	case "sqlite", "":
		if !reflect.DeepEqual(s.ClickHouse, def.ClickHouse) {
			unused, section = "clickhouse", "serve.clickhouse"
		}
	}
	if unused == "" {
		return ""
	}
	return fmt.Sprintf("%s is set but serve.store is %s: its settings are not used (set serve.store: %s, or pass --store %s, to use them)",
		section, cmp.Or(s.Store, "sqlite"), unused, unused)
}

// findingMaxAgeWarning says what a finding_max_age shorter than the
// detector's horizon costs, or "" when it is not. A double-applied write,
// a duplicate create and an unsafe retry carry the event time of their
// first call, and are found when the later call comes: up to
// correlation_window after it, allowed_lateness more for a late call.
// Once that is past finding_max_age, the finding's alert is held back by
// the rules' age check (rules.recent) on
// mcpaudit_finding_last_event_timestamp_seconds. Refusing it broke configs
// with a correlation window of a day, so it is a warning.
func findingMaxAgeWarning(maxAge time.Duration, d detect.Config) string {
	horizon := d.CorrelationWindow + d.AllowedLateness
	if maxAge <= 0 || maxAge >= horizon {
		return ""
	}
	return fmt.Sprintf("rules.finding_max_age (%s) is shorter than detect.correlation_window (%s) plus detect.allowed_lateness (%s): "+
		"a double-applied write, duplicate create or unsafe retry finding carries the event time of its first call and can be found "+
		"up to %s later (more when its sources lag); one found more than %s after its first call is stored, counted in %s and "+
		"sent to serve.web.notify when set, but McpAuditDoubleAppliedWrite, McpAuditDuplicateCreate and McpAuditUnsafeRetries do not fire for it "+
		"unless the same server has a finding of that kind dated within the last %s; raise rules.finding_max_age to %s or more "+
		"and regenerate the rules (mcpaudit rules --config)",
		conf.FormatDuration(maxAge), conf.FormatDuration(d.CorrelationWindow), conf.FormatDuration(d.AllowedLateness),
		conf.FormatDuration(horizon), conf.FormatDuration(maxAge), metrics.FindingsTotal, conf.FormatDuration(maxAge),
		conf.FormatDuration(horizon))
}

// checkListen checks a listen address: host:port or :port, the port a
// number.
func checkListen(addr string, optional bool) error {
	if addr == "" {
		if optional {
			return nil
		}
		return errors.New("required")
	}
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || (n == 0 && port != "0") {
			err = errors.New("bad port")
		}
	}
	if err == nil && strings.ContainsAny(host, " /") {
		err = errors.New("bad host")
	}
	if err != nil {
		return fmt.Errorf("want host:port or :port with a port from 0 to 65535, such as :9464 or 127.0.0.1:9464, not %q", addr)
	}
	return nil
}

// LoadConfig reads a YAML configuration file over the defaults, strictly:
// unknown keys are errors, ${VAR} references are expanded (an unset one is
// an error naming it), and every problem of the file, from its syntax to its
// validation, is reported at once with its line and key path.
func LoadConfig(path string) (Config, error) {
	cfg := NewDefaultConfig()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("cannot read config: %w", err)
	}
	pos, err := conf.Decode(raw, &cfg, nil)
	var es conf.Errors
	if err != nil && !errors.As(err, &es) {
		return cfg, fmt.Errorf("cannot decode config %s: %w", path, err)
	}
	// Validation runs over what could be read, so that one pass shows every
	// problem; a key that could not be read is not judged again.
	bad := map[string]bool{}
	for _, e := range es {
		bad[e.Path] = true
	}
	for _, e := range pos.Locate(cfg.Validate()) {
		if !bad[e.Path] {
			es = append(es, e)
		}
	}
	if len(es) > 0 {
		return cfg, &ConfigError{Path: path, Errors: sortErrors(es)}
	}
	return cfg, nil
}

// ConfigError lists every problem of a configuration file.
type ConfigError struct {
	Path   string
	Errors conf.Errors
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid config %s:\n  %s", e.Path, strings.ReplaceAll(e.Errors.Error(), "\n", "\n  "))
}

// Unwrap returns the problems.
func (e *ConfigError) Unwrap() error { return e.Errors }

func sortErrors(es conf.Errors) conf.Errors {
	out := append(conf.Errors(nil), es...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// prefixed puts a key path before each of the joined errors in err,
// however deeply they are joined: a section that joins the errors of its
// own subsections (serve.web over serve.web.notify) would otherwise have
// only the first line of a nested join prefixed, and the others lose their
// key path and, with it, their line.
func prefixed(path string, err error) error {
	list := leaves(err)
	out := make([]error, len(list))
	for i, e := range list {
		out[i] = fmt.Errorf("%s.%w", path, e)
	}
	return errors.Join(out...)
}

// leaves returns the errors joined in err, nested joins flattened, or err
// alone when it joins none.
func leaves(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}

const configUsage = `usage: mcpaudit config <command> [flags]

commands:
  validate FILE...   check configuration files; every problem of each is listed with
                     its line and key path (exit 0 valid, 2 invalid); settings that
                     work against each other are warned about on stderr (still valid)
  print [FILE]       print the effective configuration: FILE (or nothing) over the
                     defaults, secrets redacted (tokens, notify header values, and the
                     passwords, secret query parameters and token-like path segments
                     of every URL)

Every key, its type, default and meaning: docs/config.md.
`

// configCommand implements mcpaudit config validate and print.
func configCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, configUsage)
		return &exitError{code: 2}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, configUsage)
		return nil
	case "validate":
		fs := flag.NewFlagSet("config validate", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() { fmt.Fprint(stderr, configUsage) }
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return &exitError{code: 2}
		}
		if fs.NArg() == 0 {
			return &exitError{code: 2, err: errors.New("config validate: name one or more files")}
		}
		var failed bool
		for _, f := range fs.Args() {
			cfg, err := LoadConfig(f)
			if err != nil {
				fmt.Fprintln(stderr, "mcpaudit:", err)
				failed = true
				continue
			}
			for _, w := range cfg.Warnings() {
				fmt.Fprintf(stderr, "mcpaudit: %s: warning: %s\n", f, w)
			}
			fmt.Fprintf(stdout, "%s: valid\n", f)
		}
		if failed {
			return &exitError{code: 2}
		}
		return nil
	case "print":
		fs := flag.NewFlagSet("config print", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() { fmt.Fprint(stderr, configUsage) }
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return &exitError{code: 2}
		}
		cfg := NewDefaultConfig()
		switch fs.NArg() {
		case 0:
		case 1:
			var err error
			if cfg, err = LoadConfig(fs.Arg(0)); err != nil {
				return &exitError{code: 2, err: err}
			}
		default:
			return &exitError{code: 2, err: errors.New("config print: name at most one file")}
		}
		b, err := conf.Encode(redacted(cfg))
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		_, err = stdout.Write(b)
		return err
	}
	fmt.Fprintf(stderr, "mcpaudit config: unknown command %q\n\n%s", args[0], configUsage)
	return &exitError{code: 2}
}

// secretKind says how config print hides a field that holds a secret.
type secretKind int

const (
	// secretWhole replaces the value.
	secretWhole secretKind = iota + 1
	// secretMapKeys replaces the keys of a map of strings, which are
	// tokens, by [REDACTED n] in the order of their values.
	secretMapKeys
	// secretMapValues replaces every value of a map of strings.
	secretMapValues
	// secretURL hides what a URL may carry: the password of its userinfo
	// (and a user name that looks like a token), the values of query
	// parameters named as secrets, token-like path segments (webhook URLs
	// such as Slack's and Discord's hold their secret in the path) and
	// the fragment.
	secretURL
	// secretWebhookURL keeps only the scheme and the host (with its port)
	// of a URL whose path or query is the credential, as a webhook's is
	// (Slack's https://hooks.slack.com/services/T000/B000/XXXX, a
	// short or letters-only secret too): the user, the path, the query and
	// the fragment are each replaced by REDACTED when present.
	secretWebhookURL
)

// configSecrets are the keys of Config that may hold a secret, by their
// path ("*" for a map's key), and how config print hides each.
// TestConfigSecrets fails when a key named like a secret (token, password,
// secret, key, url, dsn, header, credential) is in neither this nor
// configNotSecrets.
var configSecrets = map[string]secretKind{
	"serve.receiver.tenants":    secretMapKeys,
	"serve.credentials.*.token": secretWhole,
	"serve.web.notify.headers":  secretMapValues,
	"serve.web.notify.url":      secretWebhookURL,
	"serve.web.base_url":        secretURL,
	"serve.clickhouse.dsn":      secretURL,
	"rules.runbook_url":         secretURL,
}

// redacted returns cfg with the secrets of configSecrets hidden, as the
// OpenTelemetry Collector's print-config does. The maps it changes are
// copies: cfg's own are left as they are.
func redacted(cfg Config) Config {
	v := reflect.ValueOf(&cfg).Elem()
	redactValue(v, "")
	return cfg
}

// underSecret reports whether path is a secret's or leads to one.
func underSecret(path string) bool {
	for p := range configSecrets {
		if p == path || strings.HasPrefix(p, path+".") {
			return true
		}
	}
	return false
}

// redactValue hides the secrets of the settable value v at path.
func redactValue(v reflect.Value, path string) {
	kind := configSecrets[path]
	switch v.Kind() {
	case reflect.Struct:
		conf.EachKey(v.Type(), func(name string, index []int) {
			if child := strings.TrimPrefix(path+"."+name, "."); underSecret(child) {
				redactValue(v.FieldByIndex(index), child)
			}
		})
	case reflect.Pointer:
		if !v.IsNil() {
			cp := reflect.New(v.Type().Elem())
			cp.Elem().Set(v.Elem())
			redactValue(cp.Elem(), path)
			v.Set(cp)
		}
	case reflect.Map:
		if v.Len() == 0 {
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		switch kind {
		case secretMapKeys:
			// The values name the tenants: keep them, in order.
			var vals []string
			for _, k := range v.MapKeys() {
				vals = append(vals, v.MapIndex(k).String())
			}
			sort.Strings(vals)
			for i, val := range vals {
				out.SetMapIndex(reflect.ValueOf(fmt.Sprintf("[REDACTED %d]", i+1)).Convert(v.Type().Key()), reflect.ValueOf(val).Convert(v.Type().Elem()))
			}
		default:
			for _, k := range v.MapKeys() {
				e := reflect.New(v.Type().Elem()).Elem()
				e.Set(v.MapIndex(k))
				if kind == secretMapValues {
					redactString(e, secretWhole)
				} else {
					redactValue(e, path+".*")
				}
				out.SetMapIndex(k, e)
			}
		}
		v.Set(out)
	case reflect.String:
		redactString(v, kind)
	}
}

func redactString(v reflect.Value, kind secretKind) {
	if v.Kind() != reflect.String || v.String() == "" {
		return
	}
	switch kind {
	case secretWhole:
		v.SetString("[REDACTED]")
	case secretURL:
		v.SetString(redactURL(v.String()))
	case secretWebhookURL:
		v.SetString(redactWebhookURL(v.String()))
	}
}

// redactWebhookURL hides everything of a webhook's URL but its scheme and
// host (see secretWebhookURL). Which part of such a URL is the secret
// cannot be told from its look, so none is shown. A URL that does not
// parse, or has no host, is hidden whole.
func redactWebhookURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "REDACTED"
	}
	out := &url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.User != nil {
		out.User = url.User("REDACTED")
	}
	if u.EscapedPath() != "" && u.EscapedPath() != "/" {
		out.Path = "/REDACTED"
	} else {
		out.Path = u.Path
	}
	if u.RawQuery != "" || u.ForceQuery {
		out.RawQuery = "REDACTED"
	}
	if u.Fragment != "" || u.RawFragment != "" {
		out.Fragment = "REDACTED"
	}
	return out.String()
}

// redactURL hides the secrets a URL may carry (see secretURL). A URL that
// does not parse is hidden whole.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "REDACTED"
	}
	if u.User != nil {
		name := u.User.Username()
		if tokenLike(name) {
			name = "REDACTED"
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(name, "REDACTED")
		} else {
			u.User = url.User(name)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		changed := false
		for k := range q {
			if secretName(k) || slices.ContainsFunc(q[k], tokenLike) {
				q[k] = []string{"REDACTED"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if u.Path != "" {
		segs := strings.Split(u.Path, "/")
		changed := false
		for i, seg := range segs {
			if tokenLike(seg) {
				segs[i], changed = "REDACTED", true
			}
		}
		if changed {
			u.Path, u.RawPath = strings.Join(segs, "/"), ""
		}
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "REDACTED", ""
	}
	return u.String()
}

// secretWords are the parts of a name that say it holds a secret.
var secretWords = []string{"token", "password", "passwd", "pwd", "secret", "key", "sig", "auth", "credential", "session"}

// secretName reports whether a query parameter's name says it holds a
// secret (password, api_key, access_token, sig, ...).
func secretName(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// tokenLike reports whether s looks like a drawn token rather than a name:
// 16 or more characters of letters, digits, - and _, with both letters and
// digits. Hiding a name that happens to look so is the safe mistake.
func tokenLike(s string) bool {
	if len(s) < 16 {
		return false
	}
	letter, digit := false, false
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			letter = true
		case r == '-', r == '_':
		default:
			return false
		}
	}
	return letter && digit
}

func sortedValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// sortedTenants returns the tenants of a per-tenant setting in order.
func sortedTenants[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

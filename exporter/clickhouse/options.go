package clickhouse

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// Options configures the ClickHouse store. Decode it strictly from YAML over
// NewDefaultOptions and call Validate.
type Options struct {
	// DSN addresses the server over the native protocol, e.g.
	// clickhouse://user:password@host:9000/default?dial_timeout=5s.
	// Default clickhouse://127.0.0.1:9000/default.
	DSN string `yaml:"dsn"`
	// Database holds the tables; created when create_schema is set.
	// Default mcpaudit.
	Database string `yaml:"database"`
	// CreateSchema creates the database and tables and migrates them forward
	// at start. Default true.
	CreateSchema bool `yaml:"create_schema"`
	// Cluster runs every DDL ON CLUSTER this name and uses Replicated tables
	// behind Distributed ones (docs/clickhouse.md). Default empty: one server.
	Cluster string `yaml:"cluster"`
	// Replica names this collector replica; the watermark is kept per
	// replica. Default empty (one replica).
	Replica string `yaml:"replica"`
	// Ack says when an append of calls (and a commit of the detector's
	// results) is acknowledged: "insert", once ClickHouse acknowledged the
	// batch (which waits up to batch_age for the batch to fill); or "log",
	// once the batch is synced to the local spool, which is then inserted
	// behind the acknowledgements in large batches, every batch_age or when
	// a query needs it. Default log.
	Ack string `yaml:"ack"`
	// BatchSize is how many rows a batch collects before it is inserted.
	// Default 10000.
	BatchSize int `yaml:"batch_size"`
	// DrainBytes bounds, in bytes of row texts (arguments, results and the
	// other texts of the calls), what the drain merges into one insert and
	// what it keeps in memory of the batches acknowledged with ack "log",
	// besides the four batch_size of rows each is held to: the drain holds
	// both, the merged rows and the block being sent, so its memory
	// follows this bound, not the rows' sizes. 0: rows only. serve sets it
	// to a sixteenth of serve.memory_limit when that is smaller. Default 0.
	DrainBytes int64 `yaml:"drain_bytes"`
	// BatchAge is how long the first row of a batch may wait for more rows.
	// With ack "insert", an append of calls is acknowledged after at most
	// about this long plus the insert. Default 1s.
	BatchAge time.Duration `yaml:"batch_age"`
	// Inserters is how many batches may be in flight at once: one is
	// encoded while another is written by the server. Default 2.
	Inserters int `yaml:"inserters"`
	// InsertTimeout bounds one insert attempt, and each query of a
	// retry's lookup of the rows already stored (servers without
	// deduplication tokens). Default 10s.
	InsertTimeout time.Duration `yaml:"insert_timeout"`
	// RetryFor is how long a batch is retried, with backoff, before it is
	// spooled to disk. Default 5s.
	RetryFor time.Duration `yaml:"retry_for"`
	// Retention says how long rows are kept, per tenant.
	Retention Retention `yaml:"retention"`
	// Spool keeps acknowledged batches on local disk while ClickHouse is
	// unreachable.
	Spool Spool `yaml:"spool"`
	// CheckpointEvery is how often the chains' heads are signed, when they
	// moved (with serve.signing_key_file). Default 1m.
	CheckpointEvery time.Duration `yaml:"checkpoint_every"`
	// SigningKey signs the checkpoints of the tamper-evidence chains; nil
	// keeps the chains unsigned. Set by serve from serve.signing_key_file.
	SigningKey ed25519.PrivateKey `yaml:"-"`
	// Logger receives the store's log lines. Default slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// Retention says how long calls, write attempts and findings are kept, by
// their event time.
type Retention struct {
	// Default applies to every tenant not listed in tenants; 0 keeps rows
	// forever. Default 0, which serve replaces with serve.retention (always
	// positive, default 30d): under serve, rows are never kept forever.
	Default time.Duration `yaml:"default"`
	// Tenants overrides default per tenant. Default none; serve fills it
	// from serve.tenant_retention when it is empty.
	Tenants map[string]time.Duration `yaml:"tenants"`
	// CheckInterval is how often old rows are removed on servers without
	// TTL (they drop partitions and delete instead). Default 1h.
	CheckInterval time.Duration `yaml:"check_interval"`
}

// Spool configures the local spool used while ClickHouse is unreachable.
type Spool struct {
	// Dir holds one file per spooled batch. Default clickhouse-spool in
	// serve.data_dir: serve puts the spool there when dir is empty or the
	// store's own default, data/clickhouse-spool (relative to the working
	// directory, for a program using the store without serve).
	Dir string `yaml:"dir"`
	// MaxBytes bounds the spool; past it an append of calls is refused
	// with 503 (retryable). It also bounds one batch's decoded size, which
	// the reader of spool files checks: lower it only with an empty spool.
	// With ack "log" one request larger than it never fits and is refused
	// for good with 413. Default 1 GiB.
	MaxBytes int64 `yaml:"max_bytes"`
}

// NewDefaultOptions returns the documented defaults.
func NewDefaultOptions() Options {
	return Options{
		DSN:             "clickhouse://127.0.0.1:9000/default",
		Database:        "mcpaudit",
		CreateSchema:    true,
		Ack:             AckLog,
		BatchSize:       10000,
		BatchAge:        time.Second,
		Inserters:       2,
		InsertTimeout:   10 * time.Second,
		RetryFor:        5 * time.Second,
		Retention:       Retention{CheckInterval: time.Hour},
		CheckpointEvery: time.Minute,
		Spool:           Spool{Dir: "data/clickhouse-spool", MaxBytes: 1 << 30},
	}
}

// identifier matches the names that are put into SQL unquoted.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks every option and joins the errors, each with its key path.
func (o *Options) Validate() error {
	var errs []error
	bad := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, a...)...))
	}
	if o.DSN == "" {
		bad("dsn", "required")
	} else if opts, err := ch.ParseDSN(o.DSN); err != nil {
		bad("dsn", "%v", err)
	} else if scheme, _, _ := strings.Cut(o.DSN, "://"); (scheme != "clickhouse" && scheme != "tcp") || opts.Protocol != ch.Native {
		bad("dsn", "must use the native protocol (clickhouse:// or tcp://), not %q", scheme)
	}
	if !identifier.MatchString(o.Database) {
		bad("database", "must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*), not %q", o.Database)
	}
	if o.Cluster != "" && !identifier.MatchString(o.Cluster) {
		bad("cluster", "must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*), not %q", o.Cluster)
	}
	switch o.Ack {
	case AckInsert, AckLog:
	default:
		bad("ack", "must be %s or %s, not %q", AckInsert, AckLog, o.Ack)
	}
	if o.BatchSize <= 0 {
		bad("batch_size", "must be positive")
	}
	if o.DrainBytes < 0 {
		bad("drain_bytes", "must not be negative")
	}
	if o.BatchAge <= 0 {
		bad("batch_age", "must be positive")
	}
	if o.Inserters <= 0 {
		bad("inserters", "must be positive")
	}
	if o.InsertTimeout <= 0 {
		bad("insert_timeout", "must be positive")
	}
	if o.CheckpointEvery <= 0 {
		bad("checkpoint_every", "must be positive")
	}
	if o.RetryFor < 0 {
		bad("retry_for", "must not be negative")
	}
	if o.Retention.Default < 0 {
		bad("retention.default", "must not be negative")
	}
	for _, t := range sortedKeys(o.Retention.Tenants) {
		if d := o.Retention.Tenants[t]; d <= 0 {
			bad("retention.tenants."+t, "must be positive (omit the tenant to use retention.default)")
		}
	}
	if o.Retention.CheckInterval <= 0 {
		bad("retention.check_interval", "must be positive")
	}
	if o.Spool.Dir == "" {
		bad("spool.dir", "required")
	}
	if o.Spool.MaxBytes <= 0 {
		bad("spool.max_bytes", "must be positive")
	}
	return errors.Join(errs...)
}

// retentionOf returns how long rows of tenant are kept; 0 is forever.
func (r *Retention) retentionOf(tenant string) time.Duration {
	if d, ok := r.Tenants[tenant]; ok {
		return d
	}
	return r.Default
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Values of Options.Ack.
const (
	AckInsert = "insert"
	AckLog    = "log"
)

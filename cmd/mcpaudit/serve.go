package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/notify"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/internal/conf"
	"github.com/mcpaudit/mcpaudit/internal/connlimit"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
	"github.com/mcpaudit/mcpaudit/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// serveUsage heads serve's -h. Most of serve's settings have no flag, so it
// says where they are: an operator who starts from -h would otherwise not
// learn that retention, TLS, credentials or the signing key exist.
const serveUsage = `usage: mcpaudit serve [flags]

Runs the collector: OTLP and call-record ingest, the detector, the store and the query API.
With no flag and no file it runs on the defaults. The flags below win over the --config file;
every other setting (retention, the detector's windows, TLS, credentials and tokens, limits,
redaction, notifications, the signing key serve.signing_key_file) is a key of that file only,
listed with its type and default in docs/config.md. mcpaudit config validate FILE checks a
file; mcpaudit config print [FILE] shows the effective configuration.

flags:`

func serveCommand(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, serveUsage)
		fs.PrintDefaults()
	}
	configFile := fs.String("config", "", "YAML config file (optional; flags win over it)")
	def := NewDefaultConfig()
	ingest := fs.String("ingest-listen", def.Serve.IngestListen, "OTLP/HTTP (/v1/traces) and call records (/v1/calls)")
	grpcL := fs.String("grpc-listen", def.Serve.GRPCListen, "OTLP/gRPC; empty to disable")
	apiL := fs.String("api-listen", def.Serve.APIListen, "query API, /metrics, /healthz, /readyz")
	dataDir := fs.String("data-dir", def.Serve.DataDir, "where the embedded store lives")
	store := fs.String("store", def.Serve.Store, "store backend: sqlite or clickhouse")
	chDSN := fs.String("clickhouse-dsn", def.Serve.ClickHouse.DSN, "ClickHouse native-protocol DSN, with --store clickhouse")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pprofOn := fs.Bool("pprof", false, "serve Go's /debug/pprof/ on the API listener")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	cfg := def
	if *configFile != "" {
		var err error
		if cfg, err = LoadConfig(*configFile); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "ingest-listen":
			cfg.Serve.IngestListen = *ingest
		case "grpc-listen":
			cfg.Serve.GRPCListen = *grpcL
		case "api-listen":
			cfg.Serve.APIListen = *apiL
		case "data-dir":
			cfg.Serve.DataDir = *dataDir
		case "store":
			cfg.Serve.Store = *store
		case "clickhouse-dsn":
			cfg.Serve.ClickHouse.DSN = *chDSN
		}
	})
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("invalid configuration: %w", err)}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--log-level: %w", err)}
	}
	log := newJSONLogger(stderr, level)
	for _, w := range cfg.Warnings() {
		log.Warn("configuration warning", "warning", w, "config", *configFile)
	}
	cfg.Serve.pprof = *pprofOn
	// SIGHUP reads the tokens file and the TLS certificate again. It is
	// taken from here on: one that comes while the store opens (the API
	// listener answers by then) waits for the reload after the start;
	// without a handler its default action would end the process in the
	// middle of a migration or of a build of the id index.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	srv, err := startServer(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// A stop while the store opened: the step under way (a
			// migration, a build of the id index) was broken off and
			// undone, or the stop broke off what came after the open.
			// That is the stop asked for, not a store that cannot be
			// read.
			log.Info("stopped while starting", "err", err)
			return nil
		}
		return err
	}
	go func() {
		for {
			select {
			case <-hup:
				srv.reload()
			case <-ctx.Done():
				return
			}
		}
	}()
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.shutdown(sctx)
}

// server is a running collector.
type server struct {
	cfg     Config
	log     *slog.Logger
	store   audit.Store
	dataDir *datadir.Dir // held while serving: one collector per data dir
	// otherStore is the history the embedded store of the data dir holds
	// while serve runs on another store (embeddedHistory).
	otherStore *api.OtherStore
	pipe       *pipeline.Pipeline
	metrics    *metrics.Metrics
	registry   *prometheus.Registry
	http       []*http.Server
	grpc       *grpc.Server
	// api answers the query API; shutdown breaks off its exports.
	api *api.Server
	// Addresses actually listened on (ports chosen by the system for :0).
	ingestAddr, grpcAddr, apiAddr string
	stopRetention                 context.CancelFunc
	stopWeb                       context.CancelFunc
	notifier                      *notify.Notifier
	findingLog                    *pipeline.FindingLog
	wg                            sync.WaitGroup
	shutdownTelemetry             func(context.Context) error
	// The front door (trust.go).
	access   *access.Authenticator
	certs    *access.Certificates
	redactor *redact.Redactor
	limits   map[string]*connlimit.Listener
	// newest is the newest call known stored (Unix nanoseconds): read at
	// start and by each retention round, raised by each request taken. The
	// retention cutoff counts back from it (serve.retention_from), so that
	// ingest refuses what the next round would delete (retained).
	newest atomic.Int64
}

// seedRows bounds the (server, kind) pairs read to seed the last finding
// gauge: newest first, so a store of more servers than the metrics' cap
// gives up only pairs that would have gone to "other" anyway.
const seedRows = 100000

// seedLastFindings sets mcpaudit_finding_last_event_timestamp_seconds from
// the findings the store holds, once it is ready and before the pipeline
// takes any call (pipeline.Config.StoreReady): after a
// restart the gauge had no series until each server's next finding of a
// kind, so the dashboards' "Age of the newest finding" and any rule
// reading the gauge saw nothing where the store held findings (op21's
// D6). A store that cannot tell leaves the gauge to fill as findings come
// (logged).
func (s *server) seedLastFindings(ctx context.Context, st audit.Store, log *slog.Logger) {
	nf, ok := st.(audit.NewestFinder)
	if !ok {
		return
	}
	fts, err := nf.NewestFindings(ctx, seedRows)
	if err != nil {
		log.Warn("cannot seed the last finding gauge from the store: it fills as findings come", "metric", metrics.FindingLastEventTimestampSeconds, "err", err)
		return
	}
	s.metrics.SeedLastFindings(fts)
	log.Info("last finding gauge seeded from the store", "metric", metrics.FindingLastEventTimestampSeconds, "pairs", len(fts))
}

// spoolDir returns the ClickHouse store's spool directory. The spool holds
// acknowledged calls while ClickHouse is down: unless configured, it lives
// with the rest of the collector's data.
func spoolDir(cfg Config) string {
	if d := cfg.Serve.ClickHouse.Spool.Dir; d != "" && d != clickhouse.NewDefaultOptions().Spool.Dir {
		return d
	}
	return filepath.Join(cfg.Serve.DataDir, "clickhouse-spool")
}

// openStore opens the configured store. The caller holds the data dir
// (datadir.Open), which is private to its owner.
func openStore(ctx context.Context, cfg Config, log *slog.Logger, progress func(sqlite.Progress)) (audit.Store, error) {
	switch cfg.Serve.Store {
	case "sqlite", "":
		o := cfg.Serve.SQLite
		if cfg.Serve.SigningKeyFile != "" {
			key, err := chain.ReadPrivateKey(cfg.Serve.SigningKeyFile)
			if err != nil {
				return nil, fmt.Errorf("serve.signing_key_file: %w", err)
			}
			o.SigningKey = key
		}
		d := sqlite.NewDefaultOptions()
		o.CacheMiB, o.ReadConns, o.ReadCacheMiB = cmp.Or(o.CacheMiB, d.CacheMiB), cmp.Or(o.ReadConns, d.ReadConns), cmp.Or(o.ReadCacheMiB, d.ReadCacheMiB)
		// An empty calls (`calls:` with no value) takes the default, auto,
		// as the zero keys above do: until adv52 it opened no call log and
		// kept a new data dir's calls in the table, saying nothing.
		o.Calls = cmp.Or(o.Calls, d.Calls)
		if w, r := cachesWithin(o.CacheMiB, o.ReadCacheMiB, o.ReadConns, int64(cfg.Serve.MemoryLimit)); w != o.CacheMiB || r != o.ReadCacheMiB {
			log.Info("the store's page caches are held to an eighth of serve.memory_limit, less the id index's buffers",
				"cache_mib", w, "read_cache_mib", r, "read_conns", o.ReadConns,
				"configured_cache_mib", o.CacheMiB, "configured_read_cache_mib", o.ReadCacheMiB,
				"id_index_mib", sqlite.IDIndexOffHeapMiB, "memory_limit", formatBytes(int64(cfg.Serve.MemoryLimit)))
			o.CacheMiB, o.ReadCacheMiB = w, r
		}
		// A migration or a rebuild of the id index logs its progress,
		// and /readyz says it (openingHandler) until the store opens. A
		// stop (ctx) breaks it off between two batches.
		o.Logger, o.OnProgress = log, progress
		// A command reading the data dir (findings --data-dir...) holds
		// the id index for its few seconds: wait for it rather than run
		// without it until the next restart.
		o.IDIndexWait = 30 * time.Second
		path := filepath.Join(cfg.Serve.DataDir, storeFile)
		if o.Calls != sqlite.CallsLog && o.Calls != sqlite.CallsAuto {
			// A switch back from calls: log would hide every call in the
			// logs (adv51): refused, as calls: log refuses a calls table
			// that holds calls.
			if err := calllogs.Check(cfg.Serve.DataDir); err != nil {
				return nil, fmt.Errorf("cannot open the embedded store: %w", err)
			}
			return sqlite.OpenContext(ctx, path, o)
		}
		// With calls: auto the store chooses by what the data dir holds,
		// and closes the logs when it chooses the calls table; the calls/
		// that opening them made is then removed again.
		dir := calllogs.Dir(cfg.Serve.DataDir)
		_, statErr := os.Stat(dir)
		// Defer: the logs change no file until the store's check of them
		// has passed (a refused open, sqlite.ErrCallsLost, leaves the data
		// dir as it found it); the store starts them.
		logs, err := calllogs.Open(dir, calllog.Options{Defer: true, OpenFiles: o.CallLogOpenFiles, OnTornTail: func(path string, at, n int64) {
			// Normal after a crash mid-write; synced blocks missing
			// besides refuse the store's open (sqlite.ErrCallsLost).
			log.Warn("cut the torn tail of a call log segment: a block written whose sync never returned (a crash mid-write), never acknowledged",
				"file", path, "at", at, "bytes", n)
		}, OnSeal: func(err error) {
			// Appends go on meanwhile; the live segment grows past its
			// size and retention cannot remove it (adv51: it was silent).
			if err != nil {
				log.Warn("cannot seal a call log segment: appends go on into it, and it is tried again at each commit", "err", err)
			} else {
				log.Info("call log segment sealed again")
			}
		}})
		if err != nil {
			return nil, err
		}
		o.CallLog = logs
		made := errors.Is(statErr, os.ErrNotExist)
		st, err := sqlite.OpenContext(ctx, path, o)
		if err != nil {
			logs.Close()
			if made {
				os.Remove(dir)
			}
			return nil, err
		}
		where, why := st.CallsKept()
		if where == sqlite.CallsSQLite && made {
			os.Remove(dir) // empty: a tenant's log is made at its first call
		}
		if o.Calls != sqlite.CallsAuto {
			why = "serve.sqlite.calls: " + o.Calls
		}
		if where == sqlite.CallsLog {
			checkOpenFiles(log, callLogFilesNeed(cfg, logs.Tenants()))
		}
		log.Info("the embedded store keeps calls in "+map[string]string{sqlite.CallsLog: "call logs, each block chained as it is synced", sqlite.CallsSQLite: "its calls table"}[where]+" (serve.sqlite.calls: "+o.Calls+")",
			"calls", where, "reason", why, "dir", map[string]string{sqlite.CallsLog: dir, sqlite.CallsSQLite: path}[where])
		return st, nil
	case "clickhouse":
		o := cfg.Serve.ClickHouse
		o.Spool.Dir = spoolDir(cfg)
		if o.Retention.Default == 0 {
			o.Retention.Default = cfg.Serve.Retention.D()
		}
		if len(o.Retention.Tenants) == 0 && len(cfg.Serve.TenantRetention) > 0 {
			o.Retention.Tenants = map[string]time.Duration{}
			for tenant, d := range cfg.Serve.TenantRetention {
				o.Retention.Tenants[tenant] = d.D()
			}
		}
		if cfg.Serve.SigningKeyFile != "" {
			key, err := chain.ReadPrivateKey(cfg.Serve.SigningKeyFile)
			if err != nil {
				return nil, fmt.Errorf("serve.signing_key_file: %w", err)
			}
			o.SigningKey = key
		}
		o.DrainBytes = drainWithin(o.DrainBytes, int64(cfg.Serve.MemoryLimit))
		o.Logger = log
		return clickhouse.Open(ctx, o)
	}
	return nil, fmt.Errorf("unknown store %q", cfg.Serve.Store)
}

// drainWithin returns the ClickHouse store's drain bound
// (clickhouse.drain_bytes) under serve.memory_limit: a sixteenth of it at
// most. The drain holds what it merges for an insert and the acknowledged
// batches kept for it, each up to the bound in texts, with the rows'
// structures and the block being sent beside them, so that the store's
// share of the limit does not follow the size of the calls. No limit
// leaves it as configured.
func drainWithin(drainBytes, memoryLimit int64) int64 {
	if memoryLimit <= 0 {
		return drainBytes
	}
	if b := memoryLimit / 16; drainBytes == 0 || drainBytes > b {
		return b
	}
	return drainBytes
}

// cachesWithin returns the embedded store's page caches, in MiB: the
// writing connection's and each of the readConns reading connections',
// held together to the eighth of serve.memory_limit that applyMemoryLimit
// leaves outside the Go heap, less what the store's id index holds there
// (sqlite.IDIndexOffHeapMiB): SQLite's caches live outside the Go heap,
// where the runtime's limit does not see them, and so do the index's
// buffers in a cgo build. The readers take at most a quarter of it (the
// OS page cache holds their pages too), the writer what the readers leave.
// Neither goes below 1 MiB. No limit leaves them as configured.
func cachesWithin(cacheMiB, readCacheMiB, readConns int, memoryLimit int64) (writer, reader int) {
	if memoryLimit <= 0 {
		return cacheMiB, readCacheMiB
	}
	budget := int(memoryLimit/8>>20) - sqlite.IDIndexOffHeapMiB
	reader = max(1, min(readCacheMiB, budget/4/max(1, readConns)))
	writer = max(1, min(cacheMiB, budget-readConns*reader))
	return writer, reader
}

// startServer opens the store, rebuilds the detector's state and starts
// every listener. It returns once they accept connections.
func startServer(ctx context.Context, cfg Config, log *slog.Logger) (*server, error) {
	s := &server{cfg: cfg, log: log}
	memLimit := applyMemoryLimit(int64(cfg.Serve.MemoryLimit))
	var err error
	if s.access, err = newAuthenticator(cfg); err != nil {
		return nil, err
	}
	var tc *tls.Config
	if cfg.Serve.TLS.On() {
		if s.certs, err = access.NewCertificates(cfg.Serve.TLS); err != nil {
			return nil, err
		}
		tc = s.certs.Config("h2", "http/1.1")
	}
	shutdownTelemetry, tracerErr := setupTelemetry(ctx, log)
	if tracerErr != nil {
		log.Warn("self-telemetry disabled", "err", tracerErr)
	}
	s.shutdownTelemetry = shutdownTelemetry
	// A second collector on the same data would write beside the first:
	// it is refused here, naming the one that holds the directory.
	dd, err := datadir.Open(cfg.Serve.DataDir)
	if err != nil {
		return nil, err
	}
	s.dataDir = dd
	// The API listener answers from here on: /healthz 200 and /readyz 503
	// saying what serve does while the store opens (a migration or a
	// rebuild of the id index takes minutes on a large store) and the
	// detector's state is rebuilt; the rest of the API 503 with
	// Retry-After. Ingest listens only once all is ready.
	cc := cfg.Serve.Connections
	apiLn, apiLim, err := listen(cfg.Serve.APIListen, cc.MaxPerListener, tc, true)
	if err != nil {
		dd.Close()
		return nil, fmt.Errorf("%w (serve.api_listen, --api-listen)", err)
	}
	s.apiAddr = apiLn.Addr().String()
	opening := newOpeningState()
	apiHandler := &swapHandler{}
	apiHandler.store(openingHandler(opening))
	s.serveHTTP(apiLn, httpServer(apiHandler, cc, cc.ReadHeaderTimeout+cfg.Serve.Receiver.BodyTimeout, cc.WriteTimeout))
	started := false
	defer func() {
		if !started {
			// closeAll closes them too once the store is open; before, the
			// error paths close the store and the data dir themselves.
			for _, hs := range s.http {
				hs.Close()
			}
		}
	}()
	st, err := openStore(ctx, cfg, log, func(p sqlite.Progress) {
		opening.progress(p)
		if testHookOpenProgress != nil {
			testHookOpenProgress(s.apiAddr, p)
		}
	})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// SIGTERM or Ctrl-C (serve's ctx is signal.NotifyContext's)
			// in the middle of a migration or a build of the id index: the
			// store undid the step, whole at the next start, which runs it
			// again.
			log.Info("store open interrupted by signal: the next start runs the interrupted step again", "step", opening.String())
		}
		dd.Close()
		return nil, err
	}
	opening.set("rebuilding the detector's state from the store")
	s.store = st
	if !cfg.Redact.Off {
		secret, err := redactSecret(cfg.Redact.SecretFile, cfg.Serve.DataDir)
		if err == nil {
			s.redactor, err = newRedactor(cfg, secret)
		}
		if err != nil {
			st.Close()
			dd.Close()
			return nil, err
		}
	}
	s.registry = metrics.NewRegistry()
	// Servers named in the configuration get their series at zero from the
	// start, so that their first finding already shows as an increase.
	var servers []string
	for name := range cfg.Dialects.Servers {
		servers = append(servers, name)
	}
	sort.Strings(servers)
	// The listeners' sources too, so that their first records already show
	// as an increase.
	sources := []metrics.Source{metrics.SourceCallsHTTP, metrics.SourceOTLPHTTP}
	if cfg.Serve.GRPCListen != "" {
		sources = append(sources, metrics.SourceOTLPGRPC)
	}
	// Prometheus scrapes the metrics: a new series' first counts wait for
	// a scrape to show it at zero (docs/metrics.md).
	s.metrics, err = metrics.New(s.registry, metrics.Options{KnownCode: classify.KnownCode, Servers: servers,
		Sources: sources, MaxServers: cfg.Serve.Metrics.MaxServers, MaxToolsPerServer: cfg.Serve.Metrics.MaxToolsPerServer,
		FirstScrapeWait: metrics.DefaultFirstScrapeWait})
	if err != nil {
		st.Close()
		dd.Close()
		return nil, err
	}
	pcfg := cfg.Serve.Pipeline
	pcfg.FindingLatency = s.metrics.ObserveFindingLatency
	// The findings counters go on across restarts, a crash included: saved
	// with the marks, shown once saved (docs/metrics.md).
	pcfg.Counters = s.metrics
	// Read once the store is ready: the pipeline waits for a ClickHouse
	// down at start, or for the batches an earlier run left in its spool,
	// and calls this before it takes any call. Read at Open, both failed
	// in those cases and were never tried again (live23's D1).
	var tooLateBefore tooLateCounts
	pcfg.StoreReady = func(ctx context.Context) {
		// The calls the runs before this one stored too late, counted
		// before this one counts any: the status tells them beside its
		// own, which count since the start (live22's S2). Not worth
		// failing the start for: without them the status counts since
		// the start only.
		var err error
		if tooLateBefore, err = countTooLate(ctx, st); err != nil {
			log.Warn("cannot count the calls stored too late before this start: the status counts those since the start only", "err", err)
		}
		s.seedLastFindings(ctx, st, log)
	}
	pcfg.StateFile = filepath.Join(cfg.Serve.DataDir, stateFile)
	pcfg.Store = storeID(cfg)
	s.otherStore = embeddedHistory(ctx, cfg, log)
	var embeddedCalls int64
	if s.otherStore != nil {
		embeddedCalls = s.otherStore.Calls
	}
	if err := switchStateFile(cfg.Serve.DataDir, pcfg.Store, embeddedCalls, log); err != nil {
		st.Close()
		dd.Close()
		return nil, err
	}
	s.findingLog = pipeline.NewFindingLog(log)
	sinks := []audit.Sink{s.metrics, s.findingLog}
	if err := s.startNotifier(); err != nil {
		st.Close()
		dd.Close()
		return nil, err
	}
	if s.notifier != nil {
		sinks = append(sinks, s.notifier)
	}
	s.pipe, err = pipeline.New(ctx, pcfg, cfg.Detect, traced(st, s.metrics), log, sinks...)
	if err != nil {
		if s.notifier != nil {
			s.notifier.Close()
		}
		st.Close()
		dd.Close()
		return nil, err
	}
	rcfg := cfg.Serve.Receiver
	if memLimit > 0 && rcfg.MaxInFlightBytes > memLimit/2 {
		// Requests in flight may hold half the memory limit at most: the
		// rest is the engine's, the store's and the runtime's.
		rcfg.MaxInFlightBytes = max(memLimit/2, 4*rcfg.MaxBodyBytes)
		log.Info("bytes in flight lowered to half the memory limit", "max_in_flight_bytes", rcfg.MaxInFlightBytes)
	}
	rc := receiver.New(rcfg, cfg.Dialects, tracedIngester{s.pipe}, s.metrics, log)
	rc.Access, rc.Redactor, rc.Admit = s.access, s.redactor, s.pipe.Admit
	rc.Now = cfg.Serve.Pipeline.Now // nil: time.Now, as the pipeline's
	if nc, ok := st.(interface {
		NewestCall(context.Context) (time.Time, error)
	}); ok {
		if newest, err := nc.NewestCall(ctx); err == nil && !newest.IsZero() {
			s.newest.Store(newest.UnixNano())
		}
	}
	rc.Retained = s.retained
	if err := s.metrics.WatchPipeline(s.registry, s.pipelineViews); err != nil {
		s.closeAll()
		return nil, err
	}
	// The store counts its faults from Open on; they are read at each
	// scrape, so those of its first drain (before these metrics existed)
	// are there too.
	if err := metrics.WatchStore(s.registry, st); err != nil {
		s.closeAll()
		return nil, err
	}
	// Read at each scrape through the check /readyz answers from: an
	// outage of the store shows to Prometheus while calls still flow
	// into the spool, long before the spool fills.
	if err := metrics.WatchReady(s.registry, s.store); err != nil {
		s.closeAll()
		return nil, err
	}
	// Withdrawals the store refused, retried at every commit: without it a
	// store that never takes one is seen nowhere (wd21).
	if err := metrics.WatchWithdrawals(s.registry, func() int { return s.pipe.WithdrawalsWaiting("") }); err != nil {
		s.closeAll()
		return nil, err
	}
	// The downtimes the state file keeps, this start's last when known:
	// a crash shows to Prometheus after the restart, however short.
	_, downTo := s.pipe.LastDowntime()
	if err := metrics.WatchDowntimes(s.registry, s.pipe.Downtimes(), !downTo.IsZero()); err != nil {
		s.closeAll()
		return nil, err
	}

	ingestLn, lim, err := listen(cfg.Serve.IngestListen, cc.MaxPerListener, tc, true)
	if err != nil {
		s.closeAll()
		return nil, fmt.Errorf("%w (serve.ingest_listen, --ingest-listen)", err)
	}
	s.limits = map[string]*connlimit.Listener{metrics.ListenerIngest: lim, metrics.ListenerAPI: apiLim}
	s.ingestAddr = ingestLn.Addr().String()
	// Ingest requests are bounded by the receiver's body timeout and their
	// processing; the write timeout only stops a client that never reads
	// its answer.
	s.serveHTTP(ingestLn, httpServer(ingestHandler(rc.Handler()), cc, 0, cfg.Serve.Receiver.BodyTimeout+cc.WriteTimeout))

	if cfg.Serve.GRPCListen != "" {
		ln, lim, err := listen(cfg.Serve.GRPCListen, cc.MaxPerListener, tc, false)
		if err != nil {
			s.closeAll()
			return nil, fmt.Errorf("%w (serve.grpc_listen, --grpc-listen; empty to disable)", err)
		}
		s.limits[metrics.ListenerGRPC] = lim
		s.grpcAddr = ln.Addr().String()
		s.grpc = grpc.NewServer(append(grpcOptions(tc, cc), rc.ServerOptions()...)...)
		rc.Register(s.grpc)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// ErrServerStopped: stopped before it served, as when a later
			// listener of the start fails.
			if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				log.Error("gRPC server stopped", "err", err)
			}
		}()
	}

	if err := metrics.WatchFrontDoor(s.registry, s.listenerViews, rc.InFlightBytes); err != nil {
		s.closeAll()
		return nil, err
	}
	q := api.New(st, cfg.Serve.SLOTarget)
	q.Tenants = cfg.Serve.Receiver.Tenants
	q.Log = ratelog.New(log, ratelog.NewDefaultConfig())
	q.Status = s.pipe.Report
	q.Freed = s.pipe.Freed
	q.Downtime = s.pipe.LastDowntime
	q.Downtimes = s.pipe.Downtimes
	q.WithdrawalsWaiting = s.pipe.WithdrawalsWaiting
	q.TooLateBeforeStart = tooLateBefore.of
	q.OtherStore = s.otherStore
	if tr := s.pipe.StateFileTrouble(); tr != nil {
		q.StateFile = &api.StateFileStatus{SetAside: tr.SetAside, Reason: tr.Reason, Kept: tr.Kept,
			SourcesInFile: tr.SourcesInFile, SourcesToOverflow: tr.SourcesToOverflow, SourcesDropped: tr.SourcesDropped}
	}
	q.Credentials = cfg.Serve.Credentials
	q.Access = s.access
	q.PageTimeout = cc.WriteTimeout
	q.MaxExports = cc.MaxExports
	s.api = q
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", q.Handler())
	// Ingest's paths, on the wrong listener: said so, rather than the
	// page's bare 404.
	mux.HandleFunc("/v1/", notIngest)
	mux.Handle("GET /metrics", metricsHandler(s.metrics.Handler(s.registry, promhttp.HandlerOpts{}), s.access))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", s.ready)
	if cfg.Serve.pprof {
		// Profiles are the whole process's: with authentication on they
		// need the debug scope; with it off they are as open as the rest.
		mux.Handle("/debug/pprof/", requireScope(http.HandlerFunc(pprof.Index), s.access, access.ScopeDebug, "/debug/pprof/"))
		mux.Handle("/debug/pprof/profile", requireScope(http.HandlerFunc(pprof.Profile), s.access, access.ScopeDebug, "/debug/pprof/"))
		// The execution trace shows where a request waits and on which
		// goroutine its work runs, which a profile does not.
		mux.Handle("/debug/pprof/trace", requireScope(http.HandlerFunc(pprof.Trace), s.access, access.ScopeDebug, "/debug/pprof/"))
		if !s.access.On() {
			log.Warn("--pprof with authentication off: anyone who reaches the API listener reads Go's profiles under /debug/pprof/", "api", apiLn.Addr().String())
		}
	}
	if err := s.mountWeb(mux, q); err != nil {
		s.closeAll()
		return nil, err
	}
	apiHandler.store(mux)
	started = true
	// shutdown stops the servers in this order: ingest first, as before
	// the API listener opened ahead of the store, so that the API answers
	// while ingest drains. The API's is the first served.
	s.http = append(s.http[1:], s.http[0])

	rctx, cancel := context.WithCancel(context.Background())
	s.stopRetention = cancel
	if cfg.Serve.Store != "clickhouse" {
		// ClickHouse enforces retention itself, per tenant (TTL, or
		// dropping partitions where TTL is missing).
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.retention(rctx)
		}()
	}
	log.Info("mcpaudit serving", "version", version.Get().Version, "revision", version.Get().Revision, "ingest", s.ingestAddr, "grpc", s.grpcAddr, "api", s.apiAddr,
		"store", cfg.Serve.Store, "data_dir", cfg.Serve.DataDir, "tls", tc != nil, "auth", s.access.On(), "metrics_token", !s.access.MetricsOpen(),
		"redaction", s.redactor != nil, "memory_limit", formatBytes(memLimit))
	return s, nil
}

// listenerViews gives the metrics the connections of the listeners.
func (s *server) listenerViews() []metrics.ListenerView {
	var out []metrics.ListenerView
	for _, name := range []string{metrics.ListenerIngest, metrics.ListenerGRPC, metrics.ListenerAPI} {
		if l := s.limits[name]; l != nil {
			out = append(out, metrics.ListenerView{Name: name, Open: l.Open(), Refused: l.Refused.Load()})
		}
	}
	return out
}

// pipelineViews gives the metrics what they export of the pipeline.
func (s *server) pipelineViews() []metrics.PartitionView {
	// A scrape must not wait out a long step of the engine: Prometheus
	// gives up after its scrape timeout (10 s by default), and the target
	// would look down.
	parts, _ := s.pipe.StatusWithin(2 * time.Second)
	views := make([]metrics.PartitionView, 0, len(parts))
	for _, p := range parts {
		views = append(views, pipelineView(p))
	}
	return views
}

// pipelineView is what the metrics export of partition p.
func pipelineView(p detect.PartitionStatus) metrics.PartitionView {
	srcs := make([]metrics.SourceView, 0, len(p.Sources))
	for _, src := range p.Sources {
		// A quiet source still holding at a slow clock's lag is exported
		// as a holder, at that lag (live22's S1).
		srcs = append(srcs, metrics.SourceView{Name: src.Name, LagSeconds: src.Lag.Seconds(), Idle: src.Idle, HoldLagSeconds: src.HoldLag.Seconds()})
	}
	v := metrics.NewPartitionView(p.Server, p.Lag.Seconds(), !p.Watermark.IsZero(), p.Buffered, p.Late, p.TooLate, p.Ahead, srcs)
	v.Tenant, v.Gen, v.IDCollisions, v.Behind = p.Tenant, p.Gen, p.IDCollisions, p.Behind
	v.OverflowCalls, v.SourcesDisplaced = p.OverflowCalls, p.SourcesDisplaced
	return v
}

func (s *server) serveHTTP(ln net.Listener, hs *http.Server) {
	s.http = append(s.http, hs)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// ready answers 200 when the store answers: the check that
// mcpaudit_store_ready exports (metrics.WatchReady).
func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), metrics.ReadyTimeout)
	defer cancel()
	if err := metrics.CheckReady(ctx, s.store); err != nil {
		http.Error(w, "store not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// retention deletes what is older than the retention period, at start and
// then every RetentionEvery: each tenant of serve.tenant_retention before
// its own cutoff, every other tenant before serve.retention's.
func (s *server) retention(ctx context.Context) {
	every := s.cfg.Serve.RetentionEvery.D()
	for {
		s.expire(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// Values of serve.retention_from.
const (
	RetentionFromNewestCall = "newest_call"
	RetentionFromNow        = "now"
)

// testHookOpenProgress, when set by a test, runs at each progress report
// of the store's open (sqlite.Options.OnProgress), on the goroutine that
// opens it, with the API listener's address.
var testHookOpenProgress func(apiAddr string, p sqlite.Progress)

// testHookAfterNewest, when set by a test, runs in expire once the newest
// stored call is read, before anything is deleted.
var testHookAfterNewest func()

// expire runs one round of retention at now. Its cutoffs count back from
// now, or, by default (serve.retention_from), from the newest stored call
// when that is older: a collector left with old calls only (a capture
// posted to look into, a restored backup, a fleet gone quiet) keeps them
// until newer calls come.
func (s *server) expire(ctx context.Context, now time.Time) {
	report := func(tenant string, cutoff time.Time, n int64, err error) {
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("retention failed", "tenant", tenant, "err", err)
		case n > 0:
			s.log.Info("retention deleted old rows", "tenant", tenant, "rows", n, "before", cutoff)
		}
	}
	from := now
	if nc, ok := s.store.(interface {
		NewestCall(context.Context) (time.Time, error)
	}); ok && s.cfg.Serve.RetentionFrom != RetentionFromNow {
		newest, err := nc.NewestCall(ctx)
		if err != nil {
			// Deleting on the wall clock could take what the default
			// keeps; the next round tries again.
			report("*", time.Time{}, 0, err)
			return
		}
		if testHookAfterNewest != nil {
			testHookAfterNewest()
		}
		if newest.IsZero() {
			// No call stored: nothing to delete. Counting back from now
			// instead would delete an old capture posted while this
			// round runs, acknowledged and expected kept.
			return
		}
		s.raiseNewest(newest)
		if newest.Before(now) {
			from = newest
		}
		if now.Sub(from) > s.cfg.Serve.RetentionEvery.D() {
			s.log.Info("retention counts back from the newest stored call (serve.retention_from: newest_call)",
				"newest_call", from, "behind_now", now.Sub(from).Round(time.Second))
		}
	}
	own := sortedTenants(s.cfg.Serve.TenantRetention)
	for _, tenant := range own {
		cutoff := from.Add(-s.cfg.Serve.TenantRetention[tenant].D())
		n, err := s.store.DeleteTenantBefore(ctx, tenant, cutoff)
		report(tenant, cutoff, n, err)
	}
	cutoff := from.Add(-s.cfg.Serve.Retention.D())
	n, err := s.store.DeleteBefore(ctx, cutoff, own...)
	report("*", cutoff, n, err)
}

// raiseNewest makes t the newest call known stored, if it is newer.
func (s *server) raiseNewest(t time.Time) {
	n := t.UnixNano()
	for {
		old := s.newest.Load()
		if n <= old || s.newest.CompareAndSwap(old, n) {
			return
		}
	}
}

// retained returns the earliest time a call of tenant must be dated for
// retention to keep it once a request whose newest call is dated newest
// is stored, and the setting that says so (receiver.Receiver.Retained):
// the cutoff of the next retention round (expire), counted back from now,
// or, by default (serve.retention_from: newest_call) from the newest call
// stored or in the request, when that is older. An older call would be
// acknowledged and then deleted: it is refused instead. ClickHouse keeps
// its calls by TTL, counted back from now.
func (s *server) retained(tenant string, newest time.Time) (time.Time, string) {
	keep, setting := s.cfg.Serve.Retention.D(), "serve.retention"
	ch := s.cfg.Serve.ClickHouse.Retention
	onCH := s.cfg.Serve.Store == "clickhouse"
	if onCH && ch.Default > 0 {
		// ClickHouse's own settings win where set, as openStore gives them.
		keep, setting = ch.Default, "serve.clickhouse.retention.default"
	}
	if d, ok := ch.Tenants[tenant]; onCH && ok {
		keep, setting = d, "serve.clickhouse.retention.tenants."+tenant
	} else if d, ok := s.cfg.Serve.TenantRetention[tenant]; ok && (!onCH || len(ch.Tenants) == 0) {
		keep, setting = d.D(), "serve.tenant_retention."+tenant
	}
	if keep <= 0 {
		return time.Time{}, ""
	}
	now := time.Now()
	if s.cfg.Serve.Pipeline.Now != nil {
		now = s.cfg.Serve.Pipeline.Now()
	}
	from, since := now, "now"
	if s.cfg.Serve.Store != "clickhouse" && s.cfg.Serve.RetentionFrom != RetentionFromNow {
		s.raiseNewest(newest)
		if n := time.Unix(0, s.newest.Load()); n.Before(now) {
			from, since = n, "the newest call "+n.UTC().Format(time.RFC3339)
		}
	}
	return from.Add(-keep), fmt.Sprintf("%s %s, counted back from %s", setting, conf.FormatDuration(keep), since)
}

// shutdown stops accepting traffic, lets in-flight requests finish (but
// exports, which it breaks off), commits the detector's output and closes
// the store.
func (s *server) shutdown(ctx context.Context) error {
	var errs []error
	if s.api != nil {
		// An export lasts as long as its range is large and its reader
		// slow: waited for, it would spend the stop's budget, and the
		// detector's output would not be committed (adv50). It is broken
		// off; its client says so and keeps no file.
		s.api.StopStreams()
	}
	for _, hs := range s.http {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.grpc != nil {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
		}
	}
	if s.stopRetention != nil {
		s.stopRetention()
	}
	// The calls acknowledged and not yet taken by the engine: the stop
	// takes and commits them. The listeners are closed, so no more come.
	_, queued := s.pipe.StatusWithin(time.Second)
	if err := s.pipe.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	s.findingLog.Flush()
	if s.stopWeb != nil {
		s.stopWeb()
	}
	if s.notifier != nil {
		if err := s.notifier.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.wg.Wait()
	if err := s.store.Close(); err != nil {
		errs = append(errs, err)
	}
	s.dataDir.Close()
	if s.shutdownTelemetry != nil {
		s.shutdownTelemetry(ctx)
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Error("stopped with errors", "err", err)
		return err
	}
	s.logStopped(queued)
	return nil
}

// logStopped says, as the last line of a clean stop, what the stop
// flushed: the calls it took from the queue and committed, the calls
// stored and still waiting for their watermark (judged at the next start),
// and the state file the next start reads the partitions' marks from. A
// stop that left acknowledged batches in the ClickHouse spool says so, at
// WARN, instead of "stopped cleanly".
func (s *server) logStopped(queued int64) {
	parts, _ := s.pipe.Status() // the last status: the engine has stopped
	waiting := 0
	for _, p := range parts {
		waiting += p.Buffered
	}
	attrs := []any{"calls_taken_at_stop", queued, "calls_waiting", waiting, "partitions", len(parts),
		"store", cmp.Or(s.cfg.Serve.Store, "sqlite")}
	// A stop whose commit failed leaves the file as last saved before it
	// (the pipeline logged the error): state_saved says when.
	attrs = append(attrs, "state_file", filepath.Join(s.cfg.Serve.DataDir, stateFile), "state_saved", s.pipe.StateSaved())
	// The store drains its spool at Close while ClickHouse answers; what
	// it could not (ClickHouse down or slow at the stop) is acknowledged
	// and only on this disk. "Cleanly" would tell an operator the
	// directory can go (live23's S1).
	if sl, ok := s.store.(interface{ SpoolLeft() (int, int64) }); ok {
		if n, bytes := sl.SpoolLeft(); n > 0 {
			dir := spoolDir(s.cfg)
			s.log.Warn(fmt.Sprintf("stopped; %d acknowledged batches (%d bytes) left in the spool, inserted at the next start", n, bytes),
				append(attrs, "spooled_batches", n, "spooled_bytes", bytes, "spool_dir", dir)...)
			return
		}
	}
	s.log.Info("stopped cleanly", attrs...)
}

func (s *server) closeAll() {
	for _, hs := range s.http {
		hs.Close()
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	if s.pipe != nil {
		s.pipe.Close(context.Background())
	}
	if s.stopWeb != nil {
		s.stopWeb()
	}
	if s.notifier != nil {
		s.notifier.Close()
	}
	s.store.Close()
	s.dataDir.Close()
}

// ingestHandler serves the receiver's paths (/v1/traces, /v1/calls) on the ingest
// listener; any other path, the API's or the page's asked of the wrong
// listener, is answered 404 with where it is served.
func ingestHandler(receiver http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/traces", receiver)
	mux.Handle("/v1/calls", receiver)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("no endpoint %s %s on serve's ingest listener (serve.ingest_listen), which takes POST /v1/calls and POST /v1/traces; "+
			"the API (/api/v1/...), /metrics, /healthz and the page are served on the API listener (serve.api_listen)", r.Method, r.URL.Path), http.StatusNotFound)
	})
	return mux
}

// notIngest answers an ingest path asked of the API listener: 404, with
// where calls and traces are sent.
func notIngest(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(api.Error{Error: fmt.Sprintf("no endpoint %s %s on serve's API listener (serve.api_listen): calls and traces are posted to the ingest listener (serve.ingest_listen)", r.Method, r.URL.Path)})
}

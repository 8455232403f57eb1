package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/forward"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// relayFlags are the flags proxy and wrap share: where the records go.
type relayFlags struct {
	collector     string
	token         string
	bufferDir     string
	maxBuffer     int64
	source        string
	dataDir       string
	apiListen     string
	metricsListen string
	// redact masks secrets before a record reaches the buffer (with
	// --collector); redactKey is the file of the masks' key.
	redact    bool
	redactKey string
	tls       clientFlags
}

// relaySource is the default name a relay gives itself in the
// Mcpaudit-Source header: proxy/SERVER/HOST:PORT (the port it listens on:
// two proxies of one server on one host are two sources), and for wrap,
// which runs once per client process, wrap/SERVER/HOST-PID (pid empty: no
// suffix). The help text renders it with placeholders, so that it says
// what the code does.
func relaySource(cmd, server, host, pid string) string {
	s := cmd + "/" + server + "/" + host
	if pid != "" {
		s += "-" + pid
	}
	return s
}

// register adds the relay flags of cmd ("proxy" or "wrap") to fs.
func (rf *relayFlags) register(fs *flag.FlagSet, cmd string) {
	host, pid := "<host>", ""
	switch cmd {
	case "wrap":
		pid = "<pid>"
	case "proxy":
		host = "<host>:<port>"
	}
	fs.StringVar(&rf.collector, "collector", "", "ingest URL of a collector (mcpaudit serve), e.g. http://127.0.0.1:4318")
	fs.StringVar(&rf.token, "token", os.Getenv("MCPAUDIT_TOKEN"), "bearer token for the collector (default $MCPAUDIT_TOKEN)")
	fs.StringVar(&rf.bufferDir, "buffer-dir", "", "where records wait while the collector is unreachable (default in the user cache dir)")
	fs.Int64Var(&rf.maxBuffer, "max-buffer-bytes", forward.NewDefaultConfig().MaxBufferBytes, "bound of the buffer on disk")
	fs.StringVar(&rf.source, "source", "", "name of this sender in the Mcpaudit-Source header (default "+relaySource(cmd, "<server>", host, pid)+")")
	fs.StringVar(&rf.dataDir, "data-dir", "", "instead of --collector: run the engine and the embedded store here, in-process")
	fs.StringVar(&rf.apiListen, "api-listen", "127.0.0.1:0", "with --data-dir: the query API and the collector's /metrics")
	fs.StringVar(&rf.metricsListen, "metrics-listen", "", "serve this relay's /metrics here; empty: off")
	fs.BoolVar(&rf.redact, "redact", true, "with --collector: mask secrets in arguments and results (the default rules, docs/security.md) before a record is written to the buffer")
	rf.tls.register(fs)
	fs.StringVar(&rf.redactKey, "redact-key-file", "", "with --collector: the key of the masks, created once with 32 random bytes (default redact.key beside the buffer directory)")
}

func (rf *relayFlags) validate(server string) error {
	var errs []error
	if server == "" {
		errs = append(errs, errors.New("--server: required"))
	}
	switch {
	case rf.collector == "" && rf.dataDir == "":
		errs = append(errs, errors.New("one of --collector or --data-dir is required"))
	case rf.collector != "" && rf.dataDir != "":
		errs = append(errs, errors.New("--collector and --data-dir exclude each other"))
	}
	return errors.Join(errs...)
}

// recordSink takes the records of a relay.
type recordSink interface {
	Record(r *tap.Record)
	// Journal is where the recorder notes the requests in flight, so that
	// a crash does not lose them; nil when the sink keeps none.
	Journal() tap.Journal
	// Close delivers what it can until ctx ends.
	Close(ctx context.Context) error
}

// defaultBufferDir is a per-server directory in the user's cache.
func defaultBufferDir(kind, server string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	clean := strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == 0 {
			return '_'
		}
		return r
	}, server)
	return filepath.Join(base, "mcpaudit", "forward", kind+"-"+clean)
}

// openRelaySink opens the sink the flags name: a forwarder to a collector,
// or a collector running in-process on a data dir.
func openRelaySink(ctx context.Context, rf *relayFlags, kind, server, source string, m *metrics.Relay, log *slog.Logger) (recordSink, error) {
	if rf.dataDir != "" {
		return openLocalSink(ctx, rf.dataDir, rf.apiListen, source, log)
	}
	cfg := forward.NewDefaultConfig()
	cfg.URL, cfg.Source, cfg.Token, cfg.MaxBufferBytes = rf.collector, source, rf.token, rf.maxBuffer
	tc, err := rf.tls.tlsConfig()
	if err != nil {
		return nil, err
	}
	cfg.TLS = tc
	cfg.BufferDir = rf.bufferDir
	if cfg.BufferDir == "" {
		cfg.BufferDir = defaultBufferDir(kind, server)
	}
	var red *redact.Redactor
	if rf.redact {
		// The masks are made here, before the record is written to the
		// buffer: a collector out of reach must not leave secrets on this
		// disk. The collector keeps them (redaction is idempotent) and takes
		// call ids over constant masks, so ids do not depend on this key.
		if rf.redactKey == "" {
			if err := os.MkdirAll(filepath.Dir(cfg.BufferDir), 0o700); err != nil {
				return nil, fmt.Errorf("cannot create the buffer's parent directory: %w", err)
			}
		}
		// Without a file named, redact.key beside the buffer directory,
		// created once.
		secret, err := redactSecret(rf.redactKey, filepath.Dir(cfg.BufferDir))
		if err != nil {
			return nil, err
		}
		if red, err = newRedactor(NewDefaultConfig(), secret); err != nil {
			return nil, err
		}
	}
	f, err := forward.New(cfg, m, log)
	if err != nil {
		return nil, err
	}
	return forwardSink{f, red, log}, nil
}

type forwardSink struct {
	f   *forward.Forwarder
	red *redact.Redactor
	log *slog.Logger
}

func (s forwardSink) Record(r *tap.Record) {
	entry := r.Entry
	if s.red != nil {
		masked := maskRecord(s.red, *r)
		r = &masked
	}
	if err := s.f.Record(r); err != nil {
		s.log.Error("call record lost", "err", err)
	}
	// After the record is in a segment: a crash between the two buffers
	// the call again from the journal, without its response, which the
	// collector takes as a duplicate of this record.
	if j := s.f.Journal(); j != nil && entry != 0 {
		j.End(entry)
	}
}

func (s forwardSink) Journal() tap.Journal {
	if s.f.Journal() == nil {
		return nil
	}
	return sinkJournal{s.f.Journal(), s.red}
}

// sinkJournal writes a request in flight to the forwarder's journal as its
// record without a response, masked as the record will be: secrets never
// reach the buffer directory.
type sinkJournal struct {
	j   *forward.Journal
	red *redact.Redactor
}

func (s sinkJournal) Begin(entry uint64, r *tap.Record) {
	rec := *r
	if s.red != nil {
		rec = maskRecord(s.red, rec)
	}
	// Recovered, it was in flight for an unknown time: no duration_ms,
	// rather than a 0 that reads as an instant answer (prox17).
	rec.DurationUnknown = true
	s.j.Begin(entry, rec.AppendJSON(nil))
}

func (s sinkJournal) End(entry uint64) { s.j.End(entry) }

// maskRecord returns r with the secrets of its tool arguments, result,
// error and transport error masked, as the collector masks a call: the
// request's params.arguments, the response's result and error. The rest
// of the JSON-RPC envelope (method, id, tool name) is what the audit reads
// and is left as it is. A part that is not the JSON it should be is left
// for the collector to reject.
func maskRecord(red *redact.Redactor, r tap.Record) tap.Record {
	r.Request, _ = editObject(r.Request, func(env map[string]json.RawMessage) int {
		params, n := editObject(env["params"], func(p map[string]json.RawMessage) int {
			return maskRaw(red, p, "arguments")
		})
		if n > 0 {
			env["params"] = params
		}
		return n
	})
	r.Response, _ = editObject(r.Response, func(env map[string]json.RawMessage) int {
		n := maskRaw(red, env, "result")
		e, k := editObject(env["error"], func(e map[string]json.RawMessage) int {
			k := maskRaw(red, e, "data")
			var text string
			if msg, ok := e["message"]; ok && json.Unmarshal(msg, &text) == nil {
				if masked, m := red.Text(text); m > 0 {
					e["message"], _ = json.Marshal(masked)
					k += m
				}
			}
			return k
		})
		if k > 0 {
			env["error"] = e
		}
		return n + k
	})
	r.TransportError, _ = red.Text(r.TransportError)
	return r
}

// editObject decodes doc as a JSON object, lets edit change its members,
// and encodes it again when edit masked anything (n > 0); otherwise doc
// comes back as it was, as it does when it is not a JSON object.
func editObject(doc []byte, edit func(map[string]json.RawMessage) int) ([]byte, int) {
	if len(doc) == 0 {
		return doc, 0
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(doc, &m) != nil || m == nil {
		return doc, 0
	}
	n := edit(m)
	if n == 0 {
		return doc, 0
	}
	out, err := json.Marshal(m)
	if err != nil {
		return doc, 0
	}
	return out, n
}

// maskRaw masks the JSON value m[key] in place and returns how many
// values it masked.
func maskRaw(red *redact.Redactor, m map[string]json.RawMessage, key string) int {
	v, ok := m[key]
	if !ok {
		return 0
	}
	masked, n := red.JSON(v)
	if n > 0 {
		m[key] = masked
	}
	return n
}

func (s forwardSink) Close(ctx context.Context) error { return s.f.Close(ctx) }

// ingester takes batches of read calls and returns once they are durable.
type ingester interface {
	Ingest(ctx context.Context, batches ...audit.Batch) (int, error)
}

// localCollector runs the collector in-process on dataDir, as serve does,
// and returns what takes its calls, how to read them, and how to stop it.
// It is the one place where proxy and wrap reach the engine without HTTP:
// keep it small.
func localCollector(ctx context.Context, dataDir, apiListen string, log *slog.Logger) (ingester, *callReader, func(context.Context) error, string, error) {
	cfg := NewDefaultConfig()
	cfg.Serve.DataDir = dataDir
	cfg.Serve.IngestListen = "127.0.0.1:0"
	cfg.Serve.GRPCListen = ""
	cfg.Serve.APIListen = apiListen
	if err := cfg.Validate(); err != nil {
		return nil, nil, nil, "", err
	}
	srv, err := startServer(ctx, cfg, log)
	if err != nil {
		return nil, nil, nil, "", err
	}
	return srv.pipe, &callReader{dialect.NewReader(cfg.Dialects), srv.redactor}, srv.shutdown, srv.apiAddr, nil
}

// callReader masks a call's secrets as the collector's receiver does, then
// reads it.
type callReader struct {
	r   *dialect.Reader
	red *redact.Redactor
}

func (c *callReader) Read(call *audit.Call) *audit.Record {
	c.red.Call(call)
	return c.r.Read(call)
}

// localSink parses records as the collector's receiver does and hands them
// to an in-process collector in batches.
type localSink struct {
	in       ingester
	reader   *callReader
	stop     func(context.Context) error
	source   string
	log      *slog.Logger
	mu       sync.Mutex
	batch    [][]byte
	wake     chan struct{}
	done     chan struct{}
	quit     chan struct{}
	parser   capture.RecordParser
	line     int
	maxBatch int
}

func openLocalSink(ctx context.Context, dataDir, apiListen, source string, log *slog.Logger) (*localSink, error) {
	in, reader, stop, api, err := localCollector(ctx, dataDir, apiListen, log)
	if err != nil {
		return nil, err
	}
	log.Info("engine running in-process", "data_dir", dataDir, "api", api)
	// Named as serve's receiver names a poster of call records
	// (calls:NAME), so that the status, the stored calls and their checks
	// read the same in-process as through a collector: a --source of
	// otlp:x is not taken for an OTLP sender.
	s := &localSink{in: in, reader: reader, stop: stop, source: "calls:" + source, log: log, wake: make(chan struct{}, 1),
		done: make(chan struct{}), quit: make(chan struct{}), maxBatch: 100_000}
	go s.run()
	return s, nil
}

func (s *localSink) Record(r *tap.Record) {
	s.mu.Lock()
	if len(s.batch) >= s.maxBatch {
		s.mu.Unlock()
		s.log.Error("call record lost: the engine is behind")
		return
	}
	s.batch = append(s.batch, r.AppendJSON(nil))
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *localSink) run() {
	defer close(s.done)
	for {
		select {
		case <-s.wake:
		case <-s.quit:
			s.flush(context.Background())
			return
		}
		time.Sleep(50 * time.Millisecond) // gather a batch
		s.flush(context.Background())
	}
}

// flush ingests what is gathered, retrying while the engine is full.
func (s *localSink) flush(ctx context.Context) {
	s.mu.Lock()
	lines := s.batch
	s.batch = nil
	s.mu.Unlock()
	if len(lines) == 0 {
		return
	}
	batch := audit.Batch{Source: s.source, Records: make([]*audit.Record, 0, len(lines))}
	for _, l := range lines {
		s.line++
		c, err := s.parser.Parse(l, s.source, s.line)
		if err != nil {
			// The reason may quote the record (a JSON parser's error shows
			// the unparsed tail): only where it failed is logged.
			var re *capture.RecordError
			field := ""
			if errors.As(err, &re) {
				field = re.Field
			}
			s.log.Error("call record rejected", "line", s.line, "field", field)
			continue
		}
		// Stored under its sender's name, as serve's receiver stores a
		// call; the line number served the log above.
		c.Source = s.source
		batch.Records = append(batch.Records, s.reader.Read(c))
	}
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		_, err := s.in.Ingest(ctx, batch)
		if err == nil {
			return
		}
		s.log.Warn("cannot ingest call records; retrying", "err", err, "calls", len(batch.Records))
		time.Sleep(backoff)
	}
}

// Journal is nil: records not yet handed to the engine are lost in a
// crash all the same.
func (s *localSink) Journal() tap.Journal { return nil }

// stopSink closes sink and logs the relay's last line: what the stop did
// (calls ended by the stop, recorded; records sent or left in the buffer
// directory; the journal removed or left), at INFO when it stopped cleanly,
// WARN when records wait in the buffer for the next start, ERROR when the
// journal could not be removed or the sink not closed. canceled is the
// number of calls in flight the stop ended, or -1 when the relay does not
// count them.
func stopSink(ctx context.Context, sink recordSink, canceled int, log *slog.Logger) error {
	attrs := []any{}
	if canceled >= 0 {
		attrs = append(attrs, "calls_recorded_at_stop", canceled)
	}
	fs, ok := sink.(forwardSink)
	if !ok {
		if err := sink.Close(ctx); err != nil {
			log.Error("stopped; cannot close the record sink", append(attrs, "err", err)...)
			return err
		}
		log.Info("stopped cleanly", attrs...)
		return nil
	}
	st := fs.f.Stop(ctx)
	attrs = append(attrs, "records_sent", st.Sent, "records_dropped", st.Dropped, "buffer_dir", fs.f.BufferDir(), "bytes_left_in_buffer", st.LeftBytes)
	switch {
	case st.Err != nil:
		log.Error("stopped; the journal of calls in flight could not be removed", append(attrs, "journal", st.Journal, "err", st.Err)...)
		return nil
	case st.Journal != "":
		log.Error("stopped; calls left in flight in the journal for the next start", append(attrs, "journal", st.Journal, "calls_in_flight", st.InFlight)...)
		return nil
	}
	attrs = append(attrs, "journal", "removed")
	if st.Dropped > 0 {
		// Not clean: answered calls whose records never reached the
		// buffer (a full disk: rev18p saw 26 of 40 lost and the stop say
		// only "records left").
		log.Error("stopped; call records were dropped, not buffered (buffer full or unwritable)", attrs...)
		return nil
	}
	if st.LeftBytes > 0 {
		log.Warn("stopped; call records left in the buffer for the next start", attrs...)
		return nil
	}
	log.Info("stopped cleanly", attrs...)
	return nil
}

func (s *localSink) Close(ctx context.Context) error {
	close(s.quit)
	<-s.done
	return s.stop(ctx)
}

// serveMetrics serves a registry's /metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	return ln.Addr().String(), nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// Package receiver accepts MCP traffic over the network: OTLP/HTTP
// (POST /v1/traces, protobuf or JSON, gzip), call records over HTTP
// (POST /v1/calls, NDJSON or a JSON array, gzip) and OTLP/gRPC. Each call
// is checked against the limits, its secrets are masked and it is read by
// its dialect here, once, and travels with that reading. A request is
// acknowledged only after its calls are committed by the pipeline; bad
// records and spans are reported back while the good ones beside them are
// kept.
//
// The receiver is the front door, and everything arriving is hostile until
// checked. The tenant comes from the credential only. Before a body is
// read, the request must be authenticated, fit under the size limit and
// the bytes in flight, and the process must be under its soft memory limit;
// a slow body is cut at the body timeout. Names and ids must be printable
// UTF-8 under their length cap, payloads under theirs, values nested no
// deeper than the limit, times storable, and a tenant may open only so many
// partitions (servers). Overload is answered 429 or 503 with Retry-After
// (gRPC Unavailable), never 500, a reset or a silent drop.
//
// Every call comes on a source: the stream whose event time holds back its
// partition's. For OTLP it is the exporting resource (otlp.SourceOf); for
// call records the poster names it in the Mcpaudit-Source header (or the
// source query parameter), else it is the poster's address.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

// Ingester takes the records of one request and returns once they are
// durable, with how many were stored for the first time. Errors wrapping
// audit.ErrOverloaded or audit.ErrUnavailable are retryable.
type Ingester interface {
	Ingest(ctx context.Context, batches ...audit.Batch) (int, error)
}

// Config sets the receivers' limits and credentials.
type Config struct {
	// MaxBodyBytes is the largest request accepted, measured after
	// decompression (and the largest gRPC message). Default 20 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RetryAfterSeconds is what a client is told to wait when the pipeline
	// is full. Default 5.
	RetryAfterSeconds int `yaml:"retry_after_seconds"`
	// Tenants maps bearer tokens to tenants. When empty (and no other
	// credential is configured), authentication is off and every call
	// belongs to the empty tenant; a tenant in the payload is never trusted.
	Tenants map[string]string `yaml:"tenants"`
	// MaxNameBytes caps the server, tool, session, client, method and
	// JSON-RPC id of a call; a longer one rejects the record. Default 256.
	MaxNameBytes int `yaml:"max_name_bytes"`
	// MaxPayloadBytes caps the arguments, the result and the error of a
	// call each; a larger one rejects the record. Default 8 MiB.
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	// MaxAttributes caps the attributes of one span, and of one resource;
	// more reject the span (the resource's spans). Default 1024.
	MaxAttributes int `yaml:"max_attributes"`
	// MaxDepth caps how deeply the arguments and results of a call, and
	// the attribute values of OTLP, may nest. Deeper values reject the
	// record, or the OTLP span that holds them (every span of a resource
	// or scope that holds them). Default 32.
	MaxDepth int `yaml:"max_depth"`
	// MaxInFlightBytes caps the memory held by all ingest requests being
	// read and processed at once, each counted at four times its bytes
	// after decompression (what decoding it costs); a request that would
	// pass it is answered 429 (OTLP/gRPC: Unavailable, once gRPC has read
	// its message). Default 256 MiB (about 64 MiB of bodies), or half the
	// memory limit when that is smaller.
	MaxInFlightBytes int64 `yaml:"max_in_flight_bytes"`
	// MaxConcurrentStreams caps the OTLP/gRPC requests processed at once,
	// over all connections; more are answered Unavailable. Default 16.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// BodyTimeout is how long the collector may wait for a request's body
	// to arrive, in all (the time it spends reading and decompressing what
	// arrived is not counted); a slower body is answered 408 and its
	// connection closed. An OTLP/gRPC message is counted from its stream's
	// headers: the stream ends, its deadline exceeded, and its slot of
	// max_concurrent_streams is freed. Default 30s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MemorySoftLimit is the share of the memory limit (GOMEMLIMIT or
	// serve.memory_limit) above which the heap makes new requests be
	// refused with 503 before they are read. The heap counts garbage not
	// collected yet: a refusal starts a collection (at most one a second),
	// so that garbage alone keeps requests refused for a second or so,
	// not until the runtime's forced collection. Default 0.8.
	MemorySoftLimit float64 `yaml:"memory_soft_limit"`
	// MaxFuture is how far ahead of the collector's clock a call or span
	// may be dated; a later one is rejected as a bad time, the others of
	// its request taken: retention deletes by event time and would keep
	// it for ever. Default 24h (a clock a day wrong, far past any skew
	// the detector takes: detect.max_clock_skew).
	MaxFuture time.Duration `yaml:"max_future"`
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	return Config{MaxBodyBytes: 20 << 20, RetryAfterSeconds: 5, MaxNameBytes: 256, MaxPayloadBytes: 8 << 20,
		MaxAttributes: 1024, MaxDepth: 32, MaxInFlightBytes: 256 << 20, MaxConcurrentStreams: 16,
		BodyTimeout: 30 * time.Second, MemorySoftLimit: 0.8, MaxFuture: 24 * time.Hour}
}

// Validate checks the limits.
func (c *Config) Validate() error {
	var errs []error
	positive := func(key string, v int64) {
		if v <= 0 {
			errs = append(errs, errors.New(key+": must be positive"))
		}
	}
	positive("max_body_bytes", c.MaxBodyBytes)
	positive("retry_after_seconds", int64(c.RetryAfterSeconds))
	positive("max_name_bytes", int64(c.MaxNameBytes))
	positive("max_payload_bytes", int64(c.MaxPayloadBytes))
	positive("max_attributes", int64(c.MaxAttributes))
	positive("max_depth", int64(c.MaxDepth))
	positive("max_in_flight_bytes", c.MaxInFlightBytes)
	positive("max_concurrent_streams", int64(c.MaxConcurrentStreams))
	positive("body_timeout", int64(c.BodyTimeout))
	positive("max_future", int64(c.MaxFuture))
	if c.MaxInFlightBytes > 0 && c.MaxInFlightBytes < decodeCost*c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("max_in_flight_bytes: must be at least %d times max_body_bytes, or the largest request could never be read", decodeCost))
	}
	if !(c.MemorySoftLimit > 0 && c.MemorySoftLimit <= 1) {
		errs = append(errs, errors.New("memory_soft_limit: want a share of the memory limit in (0, 1]"))
	}
	for tok, ten := range c.Tenants {
		if tok == "" || ten == "" {
			errs = append(errs, errors.New("tenants: tokens and tenants must not be empty"))
			break
		}
	}
	return errors.Join(errs...)
}

// Receiver serves the ingest endpoints.
type Receiver struct {
	cfg     Config
	in      Ingester
	metrics *metrics.Metrics
	log     *slog.Logger
	rlog    *ratelog.Logger
	readers sync.Pool // *dialect.Reader: one per request at a time
	convs   sync.Pool // *otlp.Converter: one per OTLP protobuf request at a time
	bodies  sync.Pool // *[]byte: request body buffers

	// Access authenticates requests. Nil: built from Config.Tenants.
	Access *access.Authenticator
	// Redactor masks the secrets of every call before it is read or
	// stored. Nil stores calls as they come.
	Redactor *redact.Redactor
	// Admit, if set, says whether calls of a server may be taken for a
	// tenant (the pipeline's cap of partitions per tenant); its error
	// rejects the record.
	Admit func(tenant, server string) error
	// Now is the collector's clock, which MaxFuture counts from (serve
	// gives the pipeline's). Nil: time.Now.
	Now func() time.Time
	// Retained, if set, returns the earliest time a call of tenant may be
	// dated to be kept by retention once the calls of a request, the
	// newest dated newest, are stored, and the setting that says so (for
	// the error): an older call would be acknowledged, then deleted by
	// the next retention round. Such a call is rejected alone as a bad
	// time. serve gives its retention's cutoff; nil keeps every call
	// after the Unix epoch.
	Retained func(tenant string, newest time.Time) (oldest time.Time, setting string)

	inflight *budget
	streams  chan struct{}
	authOnce sync.Once
}

// New returns a receiver feeding in, reading calls with the dialects of
// dial. m may be nil.
func New(cfg Config, dial dialect.Config, in Ingester, m *metrics.Metrics, log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.Default()
	}
	def := NewDefaultConfig()
	for _, f := range []struct{ v, d *int }{{&cfg.MaxNameBytes, &def.MaxNameBytes}, {&cfg.MaxPayloadBytes, &def.MaxPayloadBytes},
		{&cfg.MaxAttributes, &def.MaxAttributes}, {&cfg.MaxDepth, &def.MaxDepth}, {&cfg.MaxConcurrentStreams, &def.MaxConcurrentStreams},
		{&cfg.RetryAfterSeconds, &def.RetryAfterSeconds}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = def.MaxBodyBytes
	}
	if cfg.MaxInFlightBytes < decodeCost*cfg.MaxBodyBytes {
		cfg.MaxInFlightBytes = max(def.MaxInFlightBytes, decodeCost*cfg.MaxBodyBytes)
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = def.BodyTimeout
	}
	if cfg.MaxFuture <= 0 {
		cfg.MaxFuture = def.MaxFuture
	}
	if !(cfg.MemorySoftLimit > 0 && cfg.MemorySoftLimit <= 1) {
		cfg.MemorySoftLimit = def.MemorySoftLimit
	}
	rc := &Receiver{cfg: cfg, in: in, metrics: m, log: log, rlog: ratelog.New(log, ratelog.NewDefaultConfig()),
		inflight: newBudget(cfg.MaxInFlightBytes), streams: make(chan struct{}, cfg.MaxConcurrentStreams)}
	rc.readers.New = func() any { return dialect.NewReader(dial) }
	rc.convs.New = func() any { return otlp.NewConverter() }
	return rc
}

// InFlightBytes returns the memory held by the requests being read and
// processed now, as counted against MaxInFlightBytes.
func (rc *Receiver) InFlightBytes() int64 { return rc.inflight.Used() }

// auth returns the authenticator: Access, or one of Config.Tenants.
func (rc *Receiver) auth() *access.Authenticator {
	rc.authOnce.Do(func() {
		if rc.Access != nil {
			return
		}
		var es []access.Entry
		for tok, tenant := range rc.cfg.Tenants {
			es = append(es, access.Entry{Name: tenant, Tenant: tenant, Scopes: access.ScopeIngest | access.ScopeQuery, Hash: access.HashToken(tok)})
		}
		a, err := access.New(access.Config{}, es)
		if err != nil {
			// Two tenants with one token: nobody is let in rather than a
			// guess made.
			a, _ = access.New(access.Config{}, []access.Entry{{Name: "invalid", Tenant: "invalid", Scopes: access.ScopeQuery}})
		}
		rc.Access = a
	})
	return rc.Access
}

// SourceHeader is the header a poster of call records names its source in.
const SourceHeader = "Mcpaudit-Source"

// maxSourceName bounds a source name.
const maxSourceName = 256

// maxRejectsReported bounds the rejected records listed in one response.
const maxRejectsReported = 100

// refusal is a request refused as a whole, with its status.
type refusal struct {
	status int
	msg    string
	reason metrics.RejectReason
	// counted is set when the request's records are counted as rejected
	// already (by ingest): fail does not count the request again.
	counted bool
}

// newRefusal returns a refusal with counted unset, as all are but one.
func newRefusal(status int, msg string, reason metrics.RejectReason) *refusal {
	return &refusal{status: status, msg: msg, reason: reason}
}

func (e *refusal) Error() string { return e.msg }

// retryable reports whether the sender should send the request again later.
func (e *refusal) retryable() bool {
	return e.status == 429 || e.status == 503
}

// logKind is the kind of the log line about the refusal.
func (e *refusal) logKind() string {
	if e.retryable() {
		return "refused_retry_later"
	}
	return "rejected_request"
}

// ingest hands the checked calls of one request, grouped by source, to the
// pipeline; it returns how many were stored for the first time. Each call
// was already masked and read (records).
func (rc *Receiver) ingest(ctx context.Context, src metrics.Source, recs []*audit.Record, sources []string) (int, *refusal) {
	var batches []audit.Batch
	at := map[string]int{}
	for i, r := range recs {
		i0, ok := at[sources[i]]
		if !ok {
			i0 = len(batches)
			at[sources[i]] = i0
			batches = append(batches, audit.Batch{Source: sources[i]})
		}
		batches[i0].Records = append(batches[i0].Records, r)
	}
	for i := range batches {
		// A request groups calls by resource or poster; each source's
		// calls reach the engine in time order, as if streamed.
		slices.SortStableFunc(batches[i].Records, func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	}
	stored, err := rc.in.Ingest(ctx, batches...)
	switch {
	case err == nil:
		if rc.metrics != nil {
			rc.metrics.IngestAccepted(src, stored)
			rc.metrics.IngestDuplicate(src, len(recs)-stored)
		}
		return stored, nil
	case errors.Is(err, audit.ErrOverloaded):
		reason := metrics.RejectQueueFull
		var share interface{ TenantShare() string }
		if errors.As(err, &share) {
			reason = metrics.RejectTenantShare
		}
		rc.rejected(src, reason, len(recs))
		return 0, newRefusal(429, err.Error()+"; retry later", reason)
	case errors.Is(err, audit.ErrTooLarge):
		// Never fits the store however long the sender waits: refused
		// for good (413; InvalidArgument over gRPC), the setting and the
		// sizes in the message.
		rc.rejected(src, metrics.RejectTooLarge, len(recs))
		return 0, &refusal{status: 413, msg: err.Error() + "; send fewer calls per request", reason: metrics.RejectTooLarge, counted: true}
	case ctx.Err() != nil:
		// The sender gave up on its request (its own timeout) before
		// the calls were stored: not the store being unavailable (whose
		// alerts page), and whatever it sends again is taken (the
		// outside pass live21's D3).
		rc.rejected(src, metrics.RejectCanceled, len(recs))
		return 0, newRefusal(503, "the request was canceled before its calls were stored; send it again", metrics.RejectCanceled)
	default:
		rc.rejected(src, metrics.RejectStoreDown, len(recs))
		rc.rlog.Warn("store_unavailable", "cannot store calls", "err", err, "calls", len(recs))
		return 0, newRefusal(503, storeRefused(err), metrics.RejectStoreDown)
	}
}

// storeRefused is what a sender is told when the store cannot take its
// calls now (a 503 to retry later): short, and safe to tell anyone who can
// post (a file's base name, never a path or the store's own text), with
// the cause an operator would look for when it is one the sender can
// report: a full disk (found by adv46: the answer said "cannot store calls
// now" alone, the reason in serve's log only).
func storeRefused(err error) string {
	if errors.Is(err, syscall.ENOSPC) {
		return "store: disk full (ENOSPC) writing " + writing(err) + "; retry later"
	}
	return "cannot store calls now; retry later"
}

// writing names the file a write that failed with err was to: the store's
// name for it (an error with a Writing method), or the base name of the
// path of the *fs.PathError it wraps.
func writing(err error) string {
	var w interface{ Writing() string }
	if errors.As(err, &w) {
		return w.Writing()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return filepath.Base(pe.Path)
	}
	return "its files"
}

func (rc *Receiver) rejected(src metrics.Source, reason metrics.RejectReason, n int) {
	if rc.metrics != nil && n > 0 {
		rc.metrics.IngestRejected(src, reason, n)
	}
}

// maxLoggedDetail bounds the error text of one rejection in the log.
const maxLoggedDetail = 300

// logRejected writes a rate-limited line about a rejected record, span or
// request: where it came from, the reason class and the error, which names
// the line, field or span and why, never the payload itself. The error is
// cut to maxLoggedDetail bytes of valid UTF-8, as a hostile sender chooses
// its text.
func (rc *Receiver) logRejected(kind string, src metrics.Source, tenant string, reason metrics.RejectReason, detail string, extra ...any) {
	rc.logIngest(kind, "ingest rejected", src, tenant, string(reason), detail, extra...)
}

// logWarned writes a rate-limited line about a record kept with a warning
// (capture.Warning: a name given twice, a member of the wrong type), as
// logRejected writes one about a rejected record.
func (rc *Receiver) logWarned(src metrics.Source, tenant string, w *capture.Warning, extra ...any) {
	rc.logIngest("record_warning", "ingest warning: record kept", src, tenant, w.Kind, w.Error(), extra...)
}

// logIngest is logRejected and logWarned, with the message msg.
func (rc *Receiver) logIngest(kind, msg string, src metrics.Source, tenant string, reason string, detail string, extra ...any) {
	// The detail is cleaned only for the lines written: a body of millions
	// of bad lines spent a third of its time cleaning details for lines the
	// rate limit dropped.
	rc.rlog.WarnFunc(kind, msg, func() []any {
		detail = unquoted(withoutQuotedInput(detail))
		if rc.Redactor != nil {
			detail, _ = rc.Redactor.Text(detail)
		}
		if len(detail) > maxLoggedDetail {
			detail = detail[:maxLoggedDetail] + "..."
		}
		detail = strings.ToValidUTF8(detail, "\ufffd")
		args := []any{"transport", string(src), "reason", reason, "error", detail}
		if tenant != "" {
			args = append(args, "tenant", tenant)
		}
		for i, a := range extra {
			if v, ok := a.(loggedValue); ok {
				extra[i] = rc.cleanValue(string(v))
			}
		}
		return append(args, extra...)
	})
}

// loggedValue is the start of a rejected value (capture.RecordError's
// Value) as an argument of logRejected: logged redacted and quoted, where
// the error's own quote of it is hidden.
type loggedValue string

// cleanValue quotes a bounded value for the log, redacted, with "…" when
// the value was cut. A bad time was logged as `not an RFC 3339 time: "…"`,
// which hid what the sender sent (op23 D14).
func (rc *Receiver) cleanValue(v string) string {
	cut := len(v) >= capture.MaxLoggedValue
	if rc.Redactor != nil {
		v, _ = rc.Redactor.Text(v)
	}
	v = strconv.Quote(strings.ToValidUTF8(v, "\ufffd"))
	if cut {
		v += "…"
	}
	return v
}

// unquoted replaces every double-quoted part of an error message with
// "…": the JSON parser quotes the input it stopped at (`unparsed tail:
// "sk-live-…"`), which is the sender's payload and may hold a secret. The
// answer to the sender keeps it; the log does not. An unterminated quote
// (a message cut short) drops the rest.
func unquoted(s string) string {
	i := strings.IndexByte(s, '"')
	if i < 0 {
		return s
	}
	var b strings.Builder
	for i >= 0 {
		b.WriteString(s[:i])
		b.WriteString(`"…"`)
		end := -1
		for j := i + 1; j < len(s); j++ {
			if s[j] == '\\' {
				j++
				continue
			}
			if s[j] == '"' {
				end = j
				break
			}
		}
		if end < 0 {
			return b.String()
		}
		s = s[end+1:]
		i = strings.IndexByte(s, '"')
	}
	b.WriteString(s)
	return b.String()
}

// quotedInput marks where a JSON decoder's error starts quoting the input
// it failed on: fastjson's unparsed tail, jsoniter's context (", error
// found in #10 byte of ...|text|..., bigger context ...|text|..."). The
// context is not quoted as a whole (it holds the body's own quotes), so
// unquoted alone would keep the bytes before its first quote.
var quotedInput = []string{"; unparsed tail: ", ", error found in #", " of ...|"}

// withoutQuotedInput cuts a decoder's error before the input it quotes: a
// payload, not yet redacted, must not reach the log. What is left says
// where and why it failed.
func withoutQuotedInput(detail string) string {
	for _, m := range quotedInput {
		if i := strings.Index(detail, m); i >= 0 {
			detail = detail[:i]
		}
	}
	return detail
}

// logIgnored writes, at debug level and rate-limited, how many spans or
// records of a request were not MCP tool calls and were skipped.
func (rc *Receiver) logIgnored(src metrics.Source, tenant string, n int) {
	if n > 0 {
		rc.rlog.Debug("ignored", "ingest ignored items that are not MCP tool calls", "transport", string(src), "tenant", tenant, "ignored", n)
	}
}

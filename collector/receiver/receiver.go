// Package receiver accepts MCP traffic over the network: OTLP/HTTP
// (POST /v1/traces, protobuf or JSON, gzip), call records over HTTP
// (POST /v1/calls, NDJSON or a JSON array, gzip) and OTLP/gRPC. Each call
// is read by its dialect here, once, and travels with that reading. A
// request is acknowledged only after its calls are committed by the
// pipeline; bad records and spans are reported back while the good ones
// beside them are kept.
//
// Every call comes on a source: the stream whose event time holds back its
// partition's. For OTLP it is the exporting resource (otlp.SourceOf); for
// call records the poster names it in the Mcpaudit-Source header (or the
// source query parameter), else it is the poster's address.
package receiver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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
	// decompression. Default 20 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RetryAfterSeconds is what a client is told to wait when the pipeline
	// is full. Default 5.
	RetryAfterSeconds int `yaml:"retry_after_seconds"`
	// Tenants maps bearer tokens to tenants. When empty, authentication is
	// off and every call belongs to the empty tenant; a tenant in the
	// payload is never trusted.
	Tenants map[string]string `yaml:"tenants"`
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	return Config{MaxBodyBytes: 20 << 20, RetryAfterSeconds: 5}
}

// Validate checks the limits.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("max_body_bytes: must be positive"))
	}
	if c.RetryAfterSeconds <= 0 {
		errs = append(errs, errors.New("retry_after_seconds: must be positive"))
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
	readers sync.Pool // *dialect.Reader: one per request at a time
}

// New returns a receiver feeding in, reading calls with the dialects of
// dial. m may be nil.
func New(cfg Config, dial dialect.Config, in Ingester, m *metrics.Metrics, log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.Default()
	}
	rc := &Receiver{cfg: cfg, in: in, metrics: m, log: log}
	rc.readers.New = func() any { return dialect.NewReader(dial) }
	return rc
}

// SourceHeader is the header a poster of call records names its source in.
const SourceHeader = "Mcpaudit-Source"

// maxSourceName bounds a source name.
const maxSourceName = 256

// Handler returns the HTTP handler of /v1/traces and /v1/calls.
func (rc *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", rc.traces)
	mux.HandleFunc("POST /v1/calls", rc.calls)
	return mux
}

// maxRejectsReported bounds the rejected records listed in one response.
const maxRejectsReported = 100

// httpError is a refusal with its status.
type httpError struct {
	status int
	msg    string
	reason metrics.RejectReason
}

func (e *httpError) Error() string { return e.msg }

// body reads a request body, decompressing gzip, up to the size limit.
func (rc *Receiver) body(r *http.Request) ([]byte, *httpError) {
	var src io.Reader = r.Body
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, &httpError{http.StatusBadRequest, "cannot read gzip body: " + err.Error(), metrics.RejectDecodeError}
		}
		defer zr.Close()
		src = zr
	default:
		return nil, &httpError{http.StatusUnsupportedMediaType, "unsupported Content-Encoding " + strconv.Quote(enc), metrics.RejectDecodeError}
	}
	b, err := io.ReadAll(io.LimitReader(src, rc.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, "cannot read body: " + err.Error(), metrics.RejectDecodeError}
	}
	if int64(len(b)) > rc.cfg.MaxBodyBytes {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes after decompression", rc.cfg.MaxBodyBytes), metrics.RejectTooLarge}
	}
	return b, nil
}

// tenant returns the tenant of the request's credential.
func (rc *Receiver) tenant(authz string) (string, bool) {
	if len(rc.cfg.Tenants) == 0 {
		return "", true
	}
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok {
		return "", false
	}
	t, ok := rc.cfg.Tenants[strings.TrimSpace(tok)]
	return t, ok
}

// ingest hands the calls of one request, read by their dialect and
// grouped by source, to the pipeline; it returns how many were stored for
// the first time.
func (rc *Receiver) ingest(ctx context.Context, src metrics.Source, tenant string, recs []*audit.Record, sources []string) (int, *httpError) {
	var batches []audit.Batch
	at := map[string]int{}
	for i, r := range recs {
		r.Call.Tenant = tenant
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
		rc.rejected(src, metrics.RejectQueueFull, len(recs))
		return 0, &httpError{http.StatusTooManyRequests, err.Error() + "; retry later", metrics.RejectQueueFull}
	default:
		rc.rejected(src, metrics.RejectQueueFull, len(recs))
		rc.log.Warn("cannot store calls", "err", err, "calls", len(recs))
		return 0, &httpError{http.StatusServiceUnavailable, "cannot store calls now; retry later", metrics.RejectQueueFull}
	}
}

func (rc *Receiver) rejected(src metrics.Source, reason metrics.RejectReason, n int) {
	if rc.metrics != nil && n > 0 {
		rc.metrics.IngestRejected(src, reason, n)
	}
}

func (rc *Receiver) fail(w http.ResponseWriter, src metrics.Source, e *httpError, asProto bool) {
	if e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(rc.cfg.RetryAfterSeconds))
	} else {
		rc.rejected(src, e.reason, 1)
	}
	if asProto {
		// OTLP/HTTP carries errors as a google.rpc.Status; its message is
		// what matters to a person reading a client's log.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	http.Error(w, e.msg, e.status)
}

// CallsResponse is the answer to POST /v1/calls.
type CallsResponse struct {
	// Accepted counts the records acknowledged: stored now or before.
	Accepted int `json:"accepted"`
	// New counts those stored for the first time; the others were stored
	// by an earlier request (a re-sent batch).
	New      int      `json:"new"`
	Rejected int      `json:"rejected"`
	Errors   []string `json:"errors,omitempty"`
	// Source is the stream the records were taken on.
	Source string `json:"source"`
}

// callTypes are the content types /v1/calls takes. curl --data-binary
// sends application/x-www-form-urlencoded unless told otherwise: its body
// is taken as NDJSON too.
var callTypes = []string{"", "application/json", "application/x-ndjson", "application/ndjson", "application/jsonl",
	"application/x-jsonlines", "application/json-seq", "application/x-www-form-urlencoded"}

// callsSource names the source of a request of call records: what the
// poster says, else its address.
func callsSource(r *http.Request) (string, error) {
	name := r.Header.Get(SourceHeader)
	if name == "" {
		name = r.URL.Query().Get("source")
	}
	if name == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return "calls:" + host, nil
	}
	if len(name) > maxSourceName || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return "", fmt.Errorf("%s must be printable UTF-8 of at most %d bytes", SourceHeader, maxSourceName)
	}
	return "calls:" + name, nil
}

// checkTime rejects a time the store cannot hold (nanoseconds since 1970
// in 64 bits): a permanent error of the record, not of the request.
func checkTime(c *audit.Call) error {
	if y := c.Time.Year(); y < 1678 || y > 2261 {
		return fmt.Errorf("%s: field time: %s is outside 1678-2261, which cannot be stored", c.Source, c.Time.Format(time.RFC3339))
	}
	return nil
}

func (rc *Receiver) calls(w http.ResponseWriter, r *http.Request) {
	src := metrics.SourceCallsHTTP
	tenant, ok := rc.tenant(r.Header.Get("Authorization"))
	if !ok {
		http.Error(w, "missing or unknown bearer token", http.StatusUnauthorized)
		return
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); !slices.Contains(callTypes, ct) {
		rc.fail(w, src, &httpError{http.StatusUnsupportedMediaType, "Content-Type " + strconv.Quote(ct) +
			" is not call records: send application/x-ndjson or application/json", metrics.RejectDecodeError}, false)
		return
	}
	source, err := callsSource(r)
	if err != nil {
		rc.fail(w, src, &httpError{http.StatusBadRequest, err.Error(), metrics.RejectDecodeError}, false)
		return
	}
	b, herr := rc.body(r)
	if herr != nil {
		rc.fail(w, src, herr, false)
		return
	}
	if len(bytes.TrimSpace(b)) == 0 {
		rc.fail(w, src, &httpError{http.StatusBadRequest, "empty body: send call records, one JSON object per line or a JSON array", metrics.RejectDecodeError}, false)
		return
	}
	dec, err := capture.NewDecoder(bytes.NewReader(b), "body")
	if err != nil {
		rc.fail(w, src, &httpError{http.StatusBadRequest, err.Error(), metrics.RejectDecodeError}, false)
		return
	}
	if dec.Format() == capture.FormatOTLP {
		rc.fail(w, src, &httpError{http.StatusBadRequest, "this is OTLP: send it to /v1/traces", metrics.RejectInvalidJSON}, false)
		return
	}
	var calls []*audit.Record
	resp := CallsResponse{Source: source}
	reader := rc.readers.Get().(*dialect.Reader)
	defer rc.readers.Put(reader)
	defer func() {
		if rc.metrics != nil {
			rc.metrics.IngestIgnored(src, dec.Ignored)
		}
	}()
	reject := func(err error, reason metrics.RejectReason) {
		resp.Rejected++
		if len(resp.Errors) < maxRejectsReported {
			resp.Errors = append(resp.Errors, err.Error())
		}
		rc.rejected(src, reason, 1)
	}
	for {
		c, err := dec.NextRecord(reader)
		if err == io.EOF {
			break
		}
		if err != nil {
			var re *capture.RecordError
			switch {
			case errors.As(err, &re) && re.Reason == "missing":
				reject(err, metrics.RejectMissingField)
			case capture.IsReject(err):
				reject(err, metrics.RejectInvalidJSON)
			default:
				rc.fail(w, src, &httpError{http.StatusBadRequest, err.Error(), metrics.RejectDecodeError}, false)
				return
			}
			continue
		}
		if err := checkTime(c.Call); err != nil {
			reject(err, metrics.RejectInvalidJSON)
			continue
		}
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		if resp.Rejected == 0 {
			resp.Errors = append(resp.Errors, "no call record: the body holds no tools/call exchange")
		}
		writeJSON(w, http.StatusBadRequest, resp)
		return
	}
	sources := make([]string, len(calls))
	for i := range sources {
		sources[i] = source
	}
	stored, herr := rc.ingest(r.Context(), src, tenant, calls, sources)
	if herr != nil {
		rc.fail(w, src, herr, false)
		return
	}
	resp.Accepted, resp.New = len(calls), stored
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (rc *Receiver) traces(w http.ResponseWriter, r *http.Request) {
	src := metrics.SourceOTLPHTTP
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var asProto bool
	switch ct {
	case "application/x-protobuf", "application/protobuf":
		asProto = true
	case "application/json":
	default:
		rc.fail(w, src, &httpError{http.StatusUnsupportedMediaType, "Content-Type must be application/x-protobuf or application/json, not " + strconv.Quote(ct), metrics.RejectDecodeError}, false)
		return
	}
	tenant, ok := rc.tenant(r.Header.Get("Authorization"))
	if !ok {
		http.Error(w, "missing or unknown bearer token", http.StatusUnauthorized)
		return
	}
	b, herr := rc.body(r)
	if herr != nil {
		rc.fail(w, src, herr, asProto)
		return
	}
	req := ptraceotlp.NewExportRequest()
	if asProto {
		err := req.UnmarshalProto(b)
		if err != nil {
			rc.fail(w, src, &httpError{http.StatusBadRequest, "cannot decode OTLP protobuf: " + err.Error(), metrics.RejectDecodeError}, asProto)
			return
		}
	} else if err := req.UnmarshalJSON(b); err != nil {
		rc.fail(w, src, &httpError{http.StatusBadRequest, "cannot decode OTLP JSON: " + err.Error(), metrics.RejectDecodeError}, asProto)
		return
	}
	resp, herr := rc.export(r.Context(), src, tenant, req)
	if herr != nil {
		rc.fail(w, src, herr, asProto)
		return
	}
	var out []byte
	var err error
	if asProto {
		out, err = resp.MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
	} else {
		out, err = resp.MarshalJSON()
		w.Header().Set("Content-Type", "application/json")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// export converts an OTLP request and ingests its calls; unusable spans are
// reported as a partial success.
func (rc *Receiver) export(ctx context.Context, src metrics.Source, tenant string, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, *httpError) {
	reader := rc.readers.Get().(*dialect.Reader)
	res := otlp.Read(req.Traces(), string(src)+":", reader)
	rc.readers.Put(reader)
	calls, sources := res.Records[:0], res.Sources[:0]
	for i, c := range res.Records {
		if err := checkTime(c.Call); err != nil {
			res.Rejected = append(res.Rejected, otlp.RejectedSpan{Path: strings.TrimPrefix(c.Call.Source, string(src)+":"), Reason: "start time outside 1678-2261, which cannot be stored"})
			continue
		}
		calls, sources = append(calls, c), append(sources, res.Sources[i])
	}
	rc.rejected(src, metrics.RejectBadSpan, len(res.Rejected))
	if rc.metrics != nil {
		rc.metrics.IngestIgnored(src, res.Ignored)
	}
	if len(calls) > 0 {
		if _, herr := rc.ingest(ctx, src, tenant, calls, sources); herr != nil {
			return ptraceotlp.ExportResponse{}, herr
		}
	}
	resp := ptraceotlp.NewExportResponse()
	if n := len(res.Rejected); n > 0 {
		ps := resp.PartialSuccess()
		ps.SetRejectedSpans(int64(n))
		var msgs []string
		for i, r := range res.Rejected {
			if i == 5 {
				msgs = append(msgs, fmt.Sprintf("and %d more", n-5))
				break
			}
			msgs = append(msgs, r.Error())
		}
		ps.SetErrorMessage(strings.Join(msgs, "; "))
	}
	return resp, nil
}

// GRPC is the OTLP/gRPC trace service.
type GRPC struct {
	ptraceotlp.UnimplementedGRPCServer
	rc *Receiver
}

// Register registers the OTLP trace service on s.
func (rc *Receiver) Register(s *grpc.Server) {
	ptraceotlp.RegisterGRPCServer(s, &GRPC{rc: rc})
}

// Export implements the OTLP trace service. Status codes follow the OTLP
// specification: Unavailable (retryable) when the pipeline is full or the
// store is down, Unauthenticated for a bad token.
func (g *GRPC) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	authz := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	tenant, ok := g.rc.tenant(authz)
	if !ok {
		return ptraceotlp.ExportResponse{}, status.Error(codes.Unauthenticated, "missing or unknown bearer token")
	}
	resp, herr := g.rc.export(ctx, metrics.SourceOTLPGRPC, tenant, req)
	if herr != nil {
		if herr.status == http.StatusTooManyRequests || herr.status == http.StatusServiceUnavailable {
			return ptraceotlp.ExportResponse{}, status.Error(codes.Unavailable, herr.msg)
		}
		return ptraceotlp.ExportResponse{}, status.Error(codes.InvalidArgument, herr.msg)
	}
	return resp, nil
}

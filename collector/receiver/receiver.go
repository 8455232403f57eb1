// Package receiver accepts MCP traffic over the network: OTLP/HTTP
// (POST /v1/traces, protobuf or JSON, gzip), call records over HTTP
// (POST /v1/calls, NDJSON or a JSON array, gzip) and OTLP/gRPC. A request is
// acknowledged only after its calls are committed by the pipeline; bad
// records and spans are reported back while the good ones beside them are
// kept.
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
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Ingester takes calls and returns once they are durable.
type Ingester interface {
	Ingest(ctx context.Context, calls []*audit.Call) error
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
}

// New returns a receiver feeding in. m may be nil.
func New(cfg Config, in Ingester, m *metrics.Metrics, log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.Default()
	}
	return &Receiver{cfg: cfg, in: in, metrics: m, log: log}
}

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

func (rc *Receiver) ingest(ctx context.Context, src metrics.Source, tenant string, calls []*audit.Call) *httpError {
	for _, c := range calls {
		c.Tenant = tenant
	}
	err := rc.in.Ingest(ctx, calls)
	switch {
	case err == nil:
		if rc.metrics != nil {
			rc.metrics.IngestAccepted(src, len(calls))
		}
		return nil
	case errors.Is(err, pipeline.ErrQueueFull):
		rc.rejected(src, metrics.RejectQueueFull, len(calls))
		return &httpError{http.StatusTooManyRequests, "ingest queue full; retry later", metrics.RejectQueueFull}
	default:
		rc.rejected(src, metrics.RejectQueueFull, len(calls))
		rc.log.Warn("cannot store calls", "err", err, "calls", len(calls))
		return &httpError{http.StatusServiceUnavailable, "cannot store calls now; retry later", metrics.RejectQueueFull}
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
	Accepted int      `json:"accepted"`
	Rejected int      `json:"rejected"`
	Errors   []string `json:"errors,omitempty"`
}

func (rc *Receiver) calls(w http.ResponseWriter, r *http.Request) {
	src := metrics.SourceCallsHTTP
	tenant, ok := rc.tenant(r.Header.Get("Authorization"))
	if !ok {
		http.Error(w, "missing or unknown bearer token", http.StatusUnauthorized)
		return
	}
	b, herr := rc.body(r)
	if herr != nil {
		rc.fail(w, src, herr, false)
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
	var calls []*audit.Call
	var resp CallsResponse
	for {
		c, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !capture.IsReject(err) {
				rc.fail(w, src, &httpError{http.StatusBadRequest, err.Error(), metrics.RejectDecodeError}, false)
				return
			}
			resp.Rejected++
			if len(resp.Errors) < maxRejectsReported {
				resp.Errors = append(resp.Errors, err.Error())
			}
			reason := metrics.RejectInvalidJSON
			if strings.Contains(err.Error(), "missing") {
				reason = metrics.RejectMissingField
			}
			rc.rejected(src, reason, 1)
			continue
		}
		calls = append(calls, c)
	}
	if len(calls) == 0 && resp.Rejected > 0 {
		writeJSON(w, http.StatusBadRequest, resp)
		return
	}
	// A batch is put in time order, as an OTLP request is, so that both
	// carriers reach the reorder buffer alike.
	slices.SortStableFunc(calls, func(a, b *audit.Call) int { return a.Time.Compare(b.Time) })
	if herr := rc.ingest(r.Context(), src, tenant, calls); herr != nil {
		rc.fail(w, src, herr, false)
		return
	}
	resp.Accepted = len(calls)
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
	res := otlp.Convert(req.Traces(), string(src)+":")
	// A request groups spans by resource; in time order they reach the
	// reorder buffer as if streamed.
	slices.SortStableFunc(res.Calls, func(a, b *audit.Call) int { return a.Time.Compare(b.Time) })
	rc.rejected(src, metrics.RejectBadSpan, len(res.Rejected))
	if herr := rc.ingest(ctx, src, tenant, res.Calls); herr != nil {
		return ptraceotlp.ExportResponse{}, herr
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
		return ptraceotlp.ExportResponse{}, status.Error(codes.Unavailable, herr.msg)
	}
	return resp, nil
}

package receiver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// keepIngester keeps every record it is handed, as a store that holds
// them in memory (or the engine) would.
type keepIngester struct {
	mu   sync.Mutex
	recs []*audit.Record
}

func (k *keepIngester) Ingest(_ context.Context, batches ...audit.Batch) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, b := range batches {
		k.recs = append(k.recs, b.Records...)
	}
	return 0, nil
}

// TestBodyBufferReused sends many requests from several clients at once,
// so that body buffers are reused, and checks that every record kept from
// an earlier request still holds what was sent: no call refers to the body
// it came in, which a later request overwrites. Call records, OTLP
// protobuf and OTLP JSON each.
func TestBodyBufferReused(t *testing.T) {
	reqs := benchCalls(40, 50)
	for _, tc := range []struct {
		name, path, ctype string
		encode            func([]*capgen.Call) []byte
	}{
		{"calls", "/v1/calls", "application/x-ndjson", func(calls []*capgen.Call) []byte {
			var body []byte
			for i, c := range calls {
				if i > 0 {
					body = append(body, '\n')
				}
				body = c.AppendRecord(body)
			}
			return body
		}},
		{"otlp_protobuf", "/v1/traces", "application/x-protobuf", func(calls []*capgen.Call) []byte {
			req := ptraceotlp.NewExportRequest()
			capgen.AppendTraces(req.Traces(), "test", calls)
			b, err := req.MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"otlp_json", "/v1/traces", "application/json", func(calls []*capgen.Call) []byte {
			req := ptraceotlp.NewExportRequest()
			capgen.AppendTraces(req.Traces(), "test", calls)
			b, err := req.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bodies [][]byte
			for _, calls := range reqs {
				bodies = append(bodies, tc.encode(calls))
			}
			post := func(h http.Handler, body []byte) {
				req := httptest.NewRequest("POST", tc.path, bytes.NewReader(body))
				req.Header.Set("Content-Type", tc.ctype)
				rw := httptest.NewRecorder()
				h.ServeHTTP(rw, req)
				if rw.Code != http.StatusOK && rw.Code != http.StatusBadRequest {
					t.Errorf("status %d: %s", rw.Code, rw.Body)
				}
			}
			in := &keepIngester{}
			h := receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, in, nil, slog.New(slog.DiscardHandler)).Handler()
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < len(bodies); i += 4 {
						post(h, bodies[i])
					}
				}()
			}
			wg.Wait()
			// The reference: each body read by a receiver of its own.
			ref := &keepIngester{}
			for _, body := range bodies {
				post(receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, ref, nil, slog.New(slog.DiscardHandler)).Handler(), bytes.Clone(body))
			}
			show := func(r *audit.Record) string {
				c := r.Call
				return c.Server + "|" + c.Session + "|" + c.Tool + "|" + c.RPCID + "|" + c.Source + "|" + string(c.Arguments) + "|" + string(c.Result)
			}
			want := map[string]string{}
			for _, r := range ref.recs {
				want[r.Call.ID] = show(r)
			}
			if len(in.recs) != len(ref.recs) || len(in.recs) < 1000 {
				t.Fatalf("%d records taken, %d by the reference", len(in.recs), len(ref.recs))
			}
			for _, r := range in.recs {
				if w, ok := want[r.Call.ID]; !ok || show(r) != w {
					t.Fatalf("call %s holds %q after later requests; sent %q", r.Call.ID, show(r), w)
				}
			}
		})
	}
}

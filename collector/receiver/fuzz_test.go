package receiver_test

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// newEnvF is one receiver in front of a real pipeline and store for a
// whole fuzzing run.
func newEnvF(f *testing.F) *env {
	f.Helper()
	return newEnv(f, func(c *receiver.Config, p *pipeline.Config) {
		c.BodyTimeout = time.Second
		p.MaxServersPerTenant = 100_000
	})
}

var allowed = []int{200, 400, 408, 413, 415, 429, 503}

func addFiles(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzCalls: no body makes POST /v1/calls panic or answer anything but
// its documented statuses, and the metrics still gather afterwards.
func FuzzCalls(f *testing.F) {
	addFiles(f, "../../testdata/examples/thegram-*.ndjson")
	f.Add([]byte(record("bad\xff", "t", now, 1)))
	f.Add([]byte("[" + record("thegram", "gram_read", now, 2) + "]"))
	e := newEnvF(f)
	h := e.rc.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/calls", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Authorization", "Bearer "+tokAcme)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !slices.Contains(allowed, w.Code) {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if _, err := e.reg.Gather(); err != nil {
			t.Fatalf("the metrics do not gather: %v", err)
		}
	})
}

// FuzzTraces: no OTLP body, protobuf or JSON, makes POST /v1/traces panic
// or answer anything but its documented statuses.
func FuzzTraces(f *testing.F) {
	addFiles(f, "../../testdata/examples/*.otlp.json")
	req := traces("thegram", 2, func(sp ptrace.Span) { sp.Attributes().PutEmptySlice("a").AppendEmpty().SetEmptyMap().PutStr("k", "v") })
	b, _ := req.MarshalProto()
	f.Add(b)
	j, _ := req.MarshalJSON()
	f.Add(j)
	e := newEnvF(f)
	h := e.rc.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ct := range []string{"application/x-protobuf", "application/json"} {
			req := httptest.NewRequest("POST", "/v1/traces", bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Authorization", "Bearer "+tokAcme)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if !slices.Contains(allowed, w.Code) {
				t.Fatalf("%s: status %d: %s", ct, w.Code, w.Body)
			}
		}
		if _, err := e.reg.Gather(); err != nil {
			t.Fatalf("the metrics do not gather: %v", err)
		}
	})
}

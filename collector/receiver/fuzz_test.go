package receiver_test

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	// Members named twice or of the wrong type, beside a good record.
	for _, bad := range []string{`"server":"thegram","server":"x"`, `"id":{"a":1}`, `"id":1e999999`, `"method":5`, `"arguments":[1]`, `"path":"a.gram","p\u0061th":"b"`} {
		f.Add([]byte(strings.Replace(record("thegram", "gram_read", now, 3), `"server":"thegram"`, bad+`,"server":"thegram"`, 1) + "\n" + record("thegram", "gram_read", now, 4)))
	}
	f.Add([]byte(record("thegram", "gram_read", now, 5)[:len(record("thegram", "gram_read", now, 5))-1] + `,"response":{"result":{"isError":"true","isError":false}}}`))
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
	// Attributes given twice, arguments and results naming a member twice
	// or of the wrong type, in JSON and in protobuf.
	dupJSON := []byte(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}},{"key":"service.name","value":{"stringValue":"x"}}]},"scopeSpans":[{"spans":[` +
		`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060701","startTimeUnixNano":"` + strconv.FormatInt(now.UnixNano(), 10) + `","attributes":[` +
		`{"key":"gen_ai.tool.name","value":{"stringValue":"gram_patch"}},{"key":"gen_ai.tool.name","value":{"stringValue":"gram_read"}},` +
		`{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a\",\"path\":\"b\"}"}},{"key":"gen_ai.tool.call.result","value":{"stringValue":"{\"isError\":1}"}}]}]}]}]}`)
	f.Add(dupJSON)
	if td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(dupJSON); err == nil {
		if b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td); err == nil {
			f.Add(b)
		}
	}
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

package receiver_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
)

// The reasons adv22 found misleading, each as it reads now.

// TestOTLPJSON_DeepNamesMaxDepth: an OTLP JSON body nested too deep is
// refused naming the configured serve.receiver.max_depth, not only the
// body's levels it allows (adv22 C: "deeper than 112 levels" was all it
// said, with max_depth 32).
func TestOTLPJSON_DeepNamesMaxDepth(t *testing.T) {
	e := newEnv(t, func(rc *receiver.Config, _ *pipeline.Config) { rc.MaxDepth = 10 })
	req, _, _ := deepSpansRequest()
	b, err := req.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	a := e.post(t, "/v1/traces", "application/json", tokAcme, b)
	resp := ptraceotlp.NewExportResponse()
	if a.status != 200 || resp.UnmarshalJSON([]byte(a.body)) != nil {
		t.Fatalf("%d %.300q, want 200 with a partial success", a.status, a.body)
	}
	msg := resp.PartialSuccess().ErrorMessage()
	want := regexp.MustCompile(`nested deeper than 46 levels at byte offset \d+: the envelope's 16 and 3 a level for max_depth 10 \(serve\.receiver\.max_depth\)`)
	if !want.MatchString(msg) {
		t.Fatalf("partial success %q, want it to match %s", msg, want)
	}
}

// TestOTLP_StartOutOfRange: a span whose start 64 bits cannot hold as a
// time (past 2262), or that no 64-bit integer holds (year 9999 in
// nanoseconds, over JSON), is rejected saying so: before, the first was
// told it "ends -499048h7m30s before it starts" and the second that it
// "must be an integer" (adv22 D).
func TestOTLP_StartOutOfRange(t *testing.T) {
	t.Run("start_past_2262", func(t *testing.T) {
		for _, start := range []uint64{1<<63 + 5, math.MaxUint64} {
			e := newEnv(t, nil)
			req := traces("thegram", 3, func(sp ptrace.Span) { sp.SetStartTimestamp(pcommon.Timestamp(start)) })
			const want = "resourceSpans[0].scopeSpans[0].spans[0]: field start_time_unix_nano: "
			for _, carrier := range []string{"protobuf", "json", "grpc"} {
				resp, _ := e.exportBy(t, carrier, req)
				ps := resp.PartialSuccess()
				if msg := ps.ErrorMessage(); ps.RejectedSpans() != 1 || !strings.HasPrefix(msg, want) ||
					!strings.Contains(msg, "outside 1678-2261") || strings.Contains(msg, "before it starts") {
					t.Errorf("start %d over %s: partial success %d %q, want 1 %q... outside 1678-2261", start, carrier, ps.RejectedSpans(), msg, want)
				}
			}
			if n := len(e.stored(t)); n != 2 {
				t.Errorf("start %d: %d calls stored, want the 2 others", start, n)
			}
		}
	})
	t.Run("year_9999_json", func(t *testing.T) {
		e := newEnv(t, nil)
		b, err := traces("thegram", 3, nil).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// 9999-12-31 in nanoseconds: an integer, past 2^64.
		body := regexp.MustCompile(`"startTimeUnixNano":"\d+"`).ReplaceAllString(string(b), `"startTimeUnixNano":"253402300799000000000"`)
		body = strings.Replace(body, `"startTimeUnixNano":"253402300799000000000"`, `"startTimeUnixNano":253402300799000000000`, 1)
		a := e.post(t, "/v1/traces", "application/json", tokAcme, []byte(body))
		resp := ptraceotlp.NewExportResponse()
		if a.status != 200 || resp.UnmarshalJSON([]byte(a.body)) != nil {
			t.Fatalf("%d %.300q, want 200 with a partial success", a.status, a.body)
		}
		msg := resp.PartialSuccess().ErrorMessage()
		if resp.PartialSuccess().RejectedSpans() != 3 || strings.Contains(msg, "must be an integer") ||
			!strings.Contains(msg, "spans[0]: startTimeUnixNano: out of range: an integer larger than 64 bits hold") ||
			!strings.Contains(msg, "spans[1]: startTimeUnixNano: out of range") {
			t.Fatalf("partial success %d %q, want 3 spans out of range (as a number and as a string)", resp.PartialSuccess().RejectedSpans(), msg)
		}
	})
}

// TestBodies_GzipLayersCounted: a body holds two gzip layers at most, the
// Content-Encoding's counted among them, as docs/security.md says: three
// were taken with the header and refused without it (adv22 E).
func TestBodies_GzipLayersCounted(t *testing.T) {
	e := newEnv(t, nil)
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	rec := []byte(record("thegram", "gram_read", now, 1) + "\n")
	for _, tc := range []struct {
		name   string
		body   []byte
		header []string
		status int
	}{
		{"two_with_header", gz(gz(rec)), []string{"Content-Encoding", "gzip"}, 200},
		{"two_without", gz(gz(rec)), nil, 200},
		{"three_with_header", gz(gz(gz(rec))), []string{"Content-Encoding", "gzip"}, 400},
		{"three_without", gz(gz(gz(rec))), nil, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, tc.body, tc.header...)
			if a.status != tc.status || tc.status == 400 && !strings.Contains(a.body, "gzip inside gzip more than 2 layers deep (Content-Encoding's included)") {
				t.Fatalf("%d %s, want %d", a.status, a.body, tc.status)
			}
		})
	}
}

// TestBodies_PlainTooLargeNotDecompressed: a plain body sent chunked (no
// declared length) past serve.receiver.max_body_bytes is refused 413
// without a word of decompression, which it had none of (adv22 F); a
// gzip bomb still says "after decompression".
func TestBodies_PlainTooLargeNotDecompressed(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) { c.MaxBodyBytes = 1 << 20 })
	post := func(body io.Reader, header ...string) answer {
		// A reader of unknown length: the client sends it chunked.
		req, _ := http.NewRequest("POST", e.url+"/v1/calls", io.MultiReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Authorization", "Bearer "+tokAcme)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	plain := bytes.Repeat([]byte(record("thegram", "gram_read", now, 1)+"\n"), (2<<20)/200)
	a := post(bytes.NewReader(plain))
	if a.status != 413 || !strings.Contains(a.body, "body larger than 1048576 bytes (serve.receiver.max_body_bytes)") {
		t.Errorf("plain, chunked: %d %s, want 413 without decompression", a.status, a.body)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(plain)
	zw.Close()
	if a := post(&zb, "Content-Encoding", "gzip"); a.status != 413 || !strings.Contains(a.body, "after decompression") {
		t.Errorf("gzip: %d %s, want 413 after decompression", a.status, a.body)
	}
}

// TestAuth_TwoAuthorizations: a request with two Authorization headers
// (two gRPC authorization values) is refused 401 (Unauthenticated) saying
// so, whichever token comes first: the first was used without a word
// (adv22 K).
func TestAuth_TwoAuthorizations(t *testing.T) {
	e := newEnv(t, nil)
	body := []byte(record("thegram", "gram_read", now, 1) + "\n")
	for _, toks := range [][]string{{tokAcme, "tok-unknown"}, {"tok-unknown", tokAcme}, {tokAcme, tokAcme}, {tokAcme, tokGlobex}} {
		req, _ := http.NewRequest("POST", e.url+"/v1/calls", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		for _, tok := range toks {
			req.Header.Add("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(b), "2 Authorization headers: send one credential") {
			t.Errorf("HTTP %v: %d %s, want 401 naming the two headers", toks, resp.StatusCode, b)
		}
		client := ptraceotlp.NewGRPCClient(dialGRPC(t, e))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+toks[0], "authorization", "Bearer "+toks[1])
		_, err = client.Export(ctx, traces("thegram", 1, nil))
		cancel()
		if st, _ := status.FromError(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "2 Authorization headers") {
			t.Errorf("gRPC %v: %v, want Unauthenticated naming the two values", toks, err)
		}
	}
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored, want none", n)
	}
	// One header still does.
	if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, body); a.status != 200 {
		t.Errorf("one header: %d %s, want 200", a.status, a.body)
	}
}

// TestOTLPProto_TrailingGarbage: a protobuf body with a stray 0 byte after
// the request is refused naming the trailing garbage and its byte offset:
// pdata's "proto: Link: illegal field=0" was all the answer said, of a
// body without a link (adv22 H).
func TestOTLPProto_TrailingGarbage(t *testing.T) {
	e := newEnv(t, nil)
	pb, err := traces("thegram", 3, nil).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	for _, tail := range [][]byte{{0}, {0, 0, 0}, {0, 'x'}} {
		body := append(append([]byte{}, pb...), tail...)
		a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, body)
		want := "trailing garbage from byte offset " + strconv.Itoa(len(pb)) + " of " + strconv.Itoa(len(body)) + ": byte 0x00 is no field of the request (field numbers start at 1)"
		if a.status != 400 || !strings.Contains(a.body, want) {
			t.Errorf("% x after the request: %d %q, want 400 with %q", tail, a.status, a.body, want)
		}
	}
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored from refused requests", n)
	}
}

package receiver_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
)

// TestGzipCompressedBytesBounded: a gzip body sent with no declared length
// is refused once its compressed bytes pass serve.receiver.max_body_bytes,
// even when they decompress to nothing: zero padding after the last
// member, or empty members, were read to their end (64 MiB taken under a
// limit of 1 MiB, found by review). Below the limit both are taken.
func TestGzipCompressedBytesBounded(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) {
		c.MaxBodyBytes = 1 << 20
		c.BodyTimeout = 30 * time.Second
	})
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(strings.Repeat(record("thegram", "gram_read", now, 4)+"\n", 5)))
	zw.Close()
	var empty bytes.Buffer
	gzip.NewWriter(&empty).Close()
	for _, tc := range []struct {
		name string
		tail func(n int) []byte
	}{
		{"zero padding", func(n int) []byte { return make([]byte, n) }},
		{"empty members", func(n int) []byte { return bytes.Repeat(empty.Bytes(), n/empty.Len()) }},
	} {
		for _, pad := range []int{512 << 10, 8 << 20} {
			tail := tc.tail(pad)
			// io.MultiReader: the client knows no length and sends it chunked.
			status, b := postGzipped(t, e, io.MultiReader(bytes.NewReader(zb.Bytes()), bytes.NewReader(tail)))
			want := 200
			if zb.Len()+len(tail) > 1<<20+1<<20/64+64 {
				want = 413
			}
			if status != want {
				t.Errorf("%s, %d bytes: %d %.200s, want %d", tc.name, len(tail), status, b, want)
			}
			if want == 413 && !strings.Contains(string(b), "compressed bytes") {
				t.Errorf("%s: %s, want the reason to name the compressed bytes", tc.name, b)
			}
		}
	}
}

// TestGzipStoredAtLimit: a body of exactly max_body_bytes gzipped at level
// 0 (stored blocks, 5 bytes more every 64 KiB) is taken, chunked or with
// its length declared: a cap of max_body_bytes + 64 compressed bytes
// refused it (found by review).
func TestGzipStoredAtLimit(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) {
		c.MaxBodyBytes = 1 << 20
		c.BodyTimeout = 30 * time.Second
	})
	var plain []byte
	for i := 0; ; i++ {
		line := record("thegram", "gram_read", now, i) + "\n"
		if len(plain)+len(line) > 1<<20-100 {
			break
		}
		plain = append(plain, line...)
	}
	plain = append(plain, bytes.Repeat([]byte("\n"), 1<<20-len(plain))...)
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.NoCompression)
	zw.Write(plain)
	zw.Close()
	for _, chunked := range []bool{true, false} {
		var body io.Reader = bytes.NewReader(zb.Bytes())
		if chunked {
			body = io.MultiReader(body) // no length known to the client
		}
		if status, b := postGzipped(t, e, body); status != 200 {
			t.Errorf("chunked %v: %d bytes, %d gzipped at level 0: %d %.200s, want 200", chunked, len(plain), zb.Len(), status, b)
		}
	}
}

// postGzipped posts body to /v1/calls as gzip-encoded NDJSON and returns
// the status and the answer.
func postGzipped(t *testing.T, e *env, body io.Reader) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/v1/calls", body)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Authorization", "Bearer "+tokAcme)
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

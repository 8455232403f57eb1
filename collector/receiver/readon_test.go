package receiver_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
)

// noIngester fails every Ingest: the requests here are refused before.
type noIngester struct{}

func (noIngester) Ingest(context.Context, ...audit.Batch) (int, error) {
	return 0, fmt.Errorf("cannot ingest: a refused request reached Ingest: %w", audit.ErrUnavailable)
}

// TestRefusedBody_ReadOn (flk23): a request refused by the length it
// declares (413, before a byte is read) has what its sender goes on
// writing read and dropped, up to the largest body taken, so that a sender
// that writes its body before it reads the answer (Go's net/http client,
// the OpenTelemetry SDK's exporter) can write on and then read its 413.
// Without it the server closed the connection with the bytes unread, the
// write failed ("broken pipe"), and on a loaded machine Go's client
// returned that error, not the 413 (TestServe_HostileInputs' 50 MB probe).
// The 16 MiB written are more than the socket buffers take: unread, the
// write cannot complete.
func TestRefusedBody_ReadOn(t *testing.T) {
	cfg := receiver.NewDefaultConfig() // max_body_bytes 20 MiB
	srv := httptest.NewServer(receiver.New(cfg, dialect.Config{}, noIngester{}, nil, slog.New(slog.DiscardHandler)).Handler())
	defer srv.Close()
	for _, path := range []string{"/v1/calls", "/v1/traces"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A ceiling that only catches a hang: the write and the answer
			// take milliseconds.
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, 64<<20)
			if _, err := c.Write(bytes.Repeat([]byte(" "), 16<<20)); err != nil {
				t.Fatalf("writing 16 MiB of a body refused for its declared 64 MiB: %v; want them read and dropped", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 413 || !resp.Close {
				t.Errorf("answer %d (closing: %v) %q, want 413 and the connection closed", resp.StatusCode, resp.Close, b)
			}
		})
	}
}

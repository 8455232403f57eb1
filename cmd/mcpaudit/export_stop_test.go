package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestExport_StopNotHeldByReader stops serve while an export's reader
// reads nothing. The stop must break the export off (the reader sees a body
// that breaks off) and stop cleanly: before adv50, http.Server.Shutdown
// waited for the export's handler, blocked in a write until its page's
// deadline (2 minutes), so the stop spent its whole budget and then failed
// ("context deadline exceeded"), the detector's output not committed.
func TestExport_StopNotHeldByReader(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.shutdown(ctx)
		}
	})
	// More records than the socket buffers of both ends hold (the
	// kernel's send buffer grows to 4 MiB here: tcp_wmem), so that the
	// export waits in a write for its reader.
	gen := capgen.Generate(capgen.Config{Seed: 50, Sessions: 10000, Span: time.Hour, NoiseRate: 1e-9})
	var size int
	for i := 0; i < len(gen.Lines); i += 5000 {
		body := bytes.Join(gen.Lines[i:min(i+5000, len(gen.Lines))], []byte("\n"))
		size += len(body)
		postBody(t, s, "/v1/calls", "application/x-ndjson", body)
	}
	if size < 12<<20 {
		t.Fatalf("the capture holds %d bytes: too few to fill the sockets' buffers", size)
	}

	conn, err := net.Dial("tcp", s.apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /api/v1/calls/export HTTP/1.1\r\nHost: mcpaudit\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The answer's head, then nothing more read until serve has stopped.
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %s", resp.Status)
	}

	// serve's own budget for a stop.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopped = true
	if err := s.shutdown(ctx); err != nil {
		t.Fatalf("the stop with an export whose reader reads nothing: %v (want a clean stop: the export broken off)", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Fatalf("the export's body reads whole (%d bytes) after the stop broke it off", n)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reading the export after the stop: %v", err)
	}
	t.Logf("the export broke off after %d bytes of %d: %v", n, size, err)
}

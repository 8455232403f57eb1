package demo

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler serves s over MCP Streamable HTTP. A response that carries
// LoseMarker is never delivered: the HTTP response is aborted instead.
func Handler(s *mcp.Server) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &loseWriter{ResponseWriter: w}
		h.ServeHTTP(lw, r)
		if lw.lost {
			panic(http.ErrAbortHandler)
		}
	})
}

// loseWriter swallows everything from the first write that carries the
// marker on.
type loseWriter struct {
	http.ResponseWriter
	lost bool
}

var marker = []byte(LoseMarker)

func (w *loseWriter) Write(p []byte) (int, error) {
	if w.lost || bytes.Contains(p, marker) {
		w.lost = true
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *loseWriter) Flush() {
	if !w.lost {
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// RunStdio serves s on newline-delimited stdio until the input ends. A
// response that carries LoseMarker is never written.
func RunStdio(ctx context.Context, s *mcp.Server, in io.ReadCloser, out io.Writer) error {
	return s.Run(ctx, &mcp.IOTransport{Reader: in, Writer: &loseLines{w: out}})
}

// loseLines writes whole lines, dropping those that carry the marker.
type loseLines struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (l *loseLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := l.buf[:i+1]
		if !bytes.Contains(line, marker) {
			if _, err := l.w.Write(line); err != nil {
				return 0, err
			}
		}
		l.buf = l.buf[i+1:]
	}
}

func (l *loseLines) Close() error {
	if c, ok := l.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

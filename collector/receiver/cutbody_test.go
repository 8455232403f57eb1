package receiver_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCalls_BodyCutShort: a body that ends before its end (the sender
// killed, a proxy cutting the connection) is refused with how far it came,
// against its Content-Length or its chunked encoding. Found by adv48: the
// answer was "cannot read body: unexpected EOF", which named neither.
func TestCalls_BodyCutShort(t *testing.T) {
	e := newEnv(t, nil)
	line := record("cut", "gram_read", time.Now().Add(-time.Minute), 1) + "\n"
	for _, tc := range []struct {
		name, head, body, want string
	}{
		{"content_length", fmt.Sprintf("Content-Length: %d\r\n", len(line)+100), line,
			fmt.Sprintf("cannot read body: it ended after %d of the %d bytes declared (Content-Length)", len(line), len(line)+100)},
		{"chunked", "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(line), line),
			fmt.Sprintf("cannot read body: it ended after %d bytes, before the last chunk of its chunked encoding", len(line))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-ndjson\r\n%s\r\n%s", tokAcme, tc.head, tc.body)
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%d %s, want 400 %q", resp.StatusCode, b, tc.want)
			}
		})
	}
}

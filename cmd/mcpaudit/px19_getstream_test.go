package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestProxy_StopWithIdleGetStream (px19): a go-sdk client connected through
// the proxy keeps its session's GET stream open for as long as the session
// lives. Before px19 every stop with such a client connected waited its
// whole grace (30 s) for that stream, then flushed with the grace's
// expired context: records of calls answered in the grace's last second
// stayed in the buffer. Now, with no call in flight and only GET streams
// open, the stop closes them at once and says so, and sends the record.
// Real go-sdk client and server; the grace is 3 s here (proxyStopGrace).
func TestProxy_StopWithIdleGetStream(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "gram_read"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	upstream := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer upstream.Close()
	px := startProxy(t, upstream.URL, acceptingCollector(t, `{"accepted":1,"rejected":0}`).URL, 3*time.Second)
	addr, errb := px.addr, px.log
	time.Sleep(300 * time.Millisecond)
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	cs, err := c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "gram_read", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := px.stop(); err != nil {
		t.Fatal(err)
	}
	log := errb.String()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	last := lines[len(lines)-1]
	if strings.Contains(log, "stop grace over") || !strings.Contains(log, "no call in flight; the GET streams still open were closed") ||
		!strings.Contains(last, `"msg":"stopped cleanly"`) || !strings.Contains(last, `"records_sent":1,`) {
		t.Errorf("the stop with only an idle GET stream open waited its grace or did not send the call's record; want \"no call in flight; the GET streams still open were closed\", no \"stop grace over\", and a last line \"stopped cleanly\" with records_sent 1:\n%s", log)
	}
}

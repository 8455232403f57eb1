package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestProxy_StopKeepsLegacyStreamWithAnswerDue (rev19p, against px19): a
// client of the 2024-11-05 HTTP+SSE transport gets the answer to its call
// on its GET stream, its POST answered 202 at once (the proxy does not
// record such calls: collector/proxy's TestProxy_LegacySSEIsNotRecorded).
// A stop that comes while the call runs must let that answer through
// within its grace, as it did before px19: px19's "only GET streams open,
// no call in flight" saw no call (none recorded) and closed the stream the
// answer was due on within a tick, and the agent lost the answer of a call
// the upstream carried out. Real go-sdk SSE client and server; the grace
// is 5 s here (proxyStopGrace), the tool answers 1 s into the stop.
func TestProxy_StopKeepsLegacyStreamWithAnswerDue(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "gram_write"}, func(ctx context.Context, r *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
		entered <- struct{}{}
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "written"}}}, nil, nil
	})
	upstream := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer upstream.Close()
	px := startProxy(t, upstream.URL, acceptingCollector(t, `{"accepted":0,"rejected":0}`).URL, 5*time.Second)
	addr, errb := px.addr, px.log
	time.Sleep(300 * time.Millisecond)
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	cs, err := c.Connect(cctx, &mcp.SSEClientTransport{Endpoint: "http://" + addr + "/sse"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	called := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "gram_write", Arguments: map[string]any{}})
		called <- err
	}()
	<-entered
	px.cancel() // the stop begins with the call running upstream
	time.Sleep(time.Second)
	close(release)
	if err := <-called; err != nil {
		t.Errorf("the call running upstream when the stop began lost its answer: %v\n%s", err, errb.String())
	}
	cs.Close()
	if err := <-px.done; err != nil {
		t.Fatal(err)
	}
}

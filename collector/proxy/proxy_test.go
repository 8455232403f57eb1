package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpaudit/mcpaudit/collector/proxy"
	"github.com/mcpaudit/mcpaudit/collector/tap"
)

// wire is one HTTP exchange as seen at one point of the path.
type wire struct {
	seq                 string
	method, path, query string
	reqHeader           http.Header
	reqBody             []byte
	status              int
	respHeader          http.Header // for the upstream: only what the handler set
	respBody            []byte
}

// wireLog gathers exchanges by the X-Test-Seq the client gives each request.
type wireLog struct {
	mu sync.Mutex
	ex map[string]*wire
}

func newWireLog() *wireLog { return &wireLog{ex: map[string]*wire{}} }

func (l *wireLog) put(w *wire) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ex[w.seq] = w
}

// all returns a copy of the exchanges logged so far.
func (l *wireLog) all() map[string]*wire {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]*wire, len(l.ex))
	for k, v := range l.ex {
		c := *v
		c.respBody = bytes.Clone(v.respBody)
		out[k] = &c
	}
	return out
}

// serverTap records what a handler received and what it wrote.
func serverTap(log *wireLog, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		x := &wire{seq: r.Header.Get("X-Test-Seq"), method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
			reqHeader: r.Header.Clone(), reqBody: body}
		rw := &recWriter{ResponseWriter: w, w: x}
		// A handler may end in a panic (the proxy's ErrAbortHandler when
		// the client closed a stream early); the exchange is logged anyway.
		defer func() {
			if x.status == 0 {
				x.status = http.StatusOK
				x.respHeader = w.Header().Clone()
			}
			log.put(x)
		}()
		h.ServeHTTP(rw, r)
	})
}

type recWriter struct {
	http.ResponseWriter
	w   *wire
	buf bytes.Buffer
}

func (rw *recWriter) WriteHeader(code int) {
	if rw.w.status == 0 {
		rw.w.status, rw.w.respHeader = code, rw.Header().Clone()
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recWriter) Write(b []byte) (int, error) {
	if rw.w.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	n, err := rw.ResponseWriter.Write(b)
	rw.w.respBody = append(rw.w.respBody, b[:n]...)
	return n, err
}

func (rw *recWriter) Flush() { rw.ResponseWriter.(http.Flusher).Flush() }

// clientTap numbers each request and records what the client sent and
// what it received, body included, once the client closed the body.
type clientTap struct {
	log  *wireLog
	next http.RoundTripper
	n    atomic.Int64
}

func (c *clientTap) RoundTrip(r *http.Request) (*http.Response, error) {
	seq := strconv.FormatInt(c.n.Add(1), 10)
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Seq", seq)
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	x := &wire{seq: seq, method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, reqHeader: r.Header.Clone(), reqBody: body}
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		c.log.put(x)
		return nil, err
	}
	x.status, x.respHeader = resp.StatusCode, resp.Header.Clone()
	resp.Body = &teeBody{rc: resp.Body, x: x, log: c.log}
	return resp, nil
}

type teeBody struct {
	rc   io.ReadCloser
	x    *wire
	log  *wireLog
	once sync.Once
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	t.log.mu.Lock()
	t.x.respBody = append(t.x.respBody, p[:n]...)
	t.log.mu.Unlock()
	if err != nil {
		t.once.Do(func() { t.log.put(t.x) })
	}
	return n, err
}

func (t *teeBody) Close() error {
	t.once.Do(func() { t.log.put(t.x) })
	return t.rc.Close()
}

// testServer is a go-sdk MCP server whose tools exercise every kind of
// traffic: a JSON-like answer, progress and log notifications on the
// call's SSE stream, a server-to-client request, and a tool error.
func testServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "1.0.0"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	type echoOut struct {
		Echo string `json:"echo"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		return nil, echoOut{Echo: in.Text}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "notifies progress"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		for i := 1; i <= 3; i++ {
			if tok := req.Params.GetProgressToken(); tok != nil {
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3})
			}
			req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: fmt.Sprintf("step %d", i)})
		}
		return nil, echoOut{Echo: "done " + in.Text}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Description: "asks the client for its roots"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, echoOut{}, err
		}
		return nil, echoOut{Echo: fmt.Sprintf("%d roots: %s", len(res.Roots), res.Roots[0].URI)}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "fails"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "E_ARGUMENT: no"}},
			StructuredContent: map[string]any{"error": map[string]any{"code": "E_ARGUMENT", "message": "no"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "never answers in time"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
	})
	return s
}

// harness runs an upstream MCP server behind a proxy, with wire logs on
// both sides and the proxy's records.
type harness struct {
	upLog, clientLog, proxyInLog *wireLog
	upstream, front              *httptest.Server
	p                            *proxy.Proxy
	mu                           sync.Mutex
	records                      []*tap.Record
	client                       *http.Client
}

func newHarness(t *testing.T, upstream http.Handler, cfg proxy.Config) *harness {
	t.Helper()
	h := &harness{upLog: newWireLog(), clientLog: newWireLog(), proxyInLog: newWireLog()}
	h.upstream = httptest.NewServer(serverTap(h.upLog, upstream))
	t.Cleanup(h.upstream.Close)
	cfg.Upstream = h.upstream.URL
	if cfg.Server == "" {
		cfg.Server = "thegram-test"
	}
	var err error
	h.p, err = proxy.New(cfg, func(r *tap.Record) {
		h.mu.Lock()
		h.records = append(h.records, r)
		h.mu.Unlock()
	}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.front = httptest.NewServer(serverTap(h.proxyInLog, h.p))
	t.Cleanup(func() { h.front.Close(); h.p.Close() })
	h.client = &http.Client{Transport: &clientTap{log: h.clientLog, next: http.DefaultTransport.(*http.Transport).Clone()}}
	return h
}

func (h *harness) recs() []*tap.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.records)
}

// hopHeaders are not end-to-end (RFC 9110 §7.6.1) or are written by each
// hop's own HTTP stack.
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Date": true, "Content-Length": true}

// checkTransparent checks that every request reached the upstream as it
// reached the proxy, and every answer reached the client as the upstream
// wrote it: the same bytes, the same end-to-end headers.
func (h *harness) checkTransparent(t *testing.T) (n int) {
	t.Helper()
	in, up, cl := h.proxyInLog.all(), h.upLog.all(), h.clientLog.all()
	// The servers log an exchange when its handler returns, which can be
	// after the client has read the answer.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		missing := 0
		for seq := range cl {
			if in[seq] == nil || up[seq] == nil {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
		in, up, cl = h.proxyInLog.all(), h.upLog.all(), h.clientLog.all()
	}
	for seq, c := range cl {
		i, u := in[seq], up[seq]
		if i == nil || u == nil {
			t.Errorf("request %s (%s %s) did not reach both the proxy (%v) and the upstream (%v)", seq, c.method, c.reqBody, i != nil, u != nil)
			continue
		}
		n++
		if u.method != i.method || u.path != i.path || u.query != i.query || !bytes.Equal(u.reqBody, i.reqBody) {
			t.Errorf("request %s changed: %s %s?%s %q became %s %s?%s %q", seq, i.method, i.path, i.query, i.reqBody, u.method, u.path, u.query, u.reqBody)
		}
		for k, v := range i.reqHeader {
			if !hopHeaders[k] && !reflect.DeepEqual(u.reqHeader[k], v) {
				t.Errorf("request %s: header %s %q reached the upstream as %q", seq, k, v, u.reqHeader[k])
			}
		}
		for k := range u.reqHeader {
			if _, ok := i.reqHeader[k]; !ok && !hopHeaders[k] {
				t.Errorf("request %s: the proxy added header %s %q", seq, k, u.reqHeader[k])
			}
		}
		if c.status != u.status {
			t.Errorf("request %s: status %d reached the client as %d", seq, u.status, c.status)
		}
		for k, v := range u.respHeader {
			if !hopHeaders[k] && !reflect.DeepEqual(c.respHeader[k], v) {
				t.Errorf("request %s: response header %s %q reached the client as %q", seq, k, v, c.respHeader[k])
			}
		}
		if !bytes.Equal(c.respBody, u.respBody) {
			t.Errorf("request %s (%s): body changed:\nupstream %q\nclient   %q", seq, c.method, u.respBody, c.respBody)
		}
	}
	return n
}

// clientSaw pairs the tools/call requests the client sent with the
// responses it received, from its side of the wire.
func (h *harness) clientSaw(t *testing.T) map[string][2]string {
	t.Helper()
	reqs := map[string]string{}
	resps := map[string]string{}
	for _, c := range h.clientLog.all() {
		sid := c.reqHeader.Get("Mcp-Session-Id")
		if ms, err := tap.Parse(c.reqBody); err == nil {
			for _, m := range ms {
				if m.Kind == tap.KindRequest && m.Method == "tools/call" {
					reqs[sid+" "+m.ID] = string(m.Raw)
				}
			}
		}
		var bodies [][]byte
		if strings.HasPrefix(c.respHeader.Get("Content-Type"), "text/event-stream") {
			var s tap.SSE
			s.Feed(c.respBody, func(d []byte) { bodies = append(bodies, bytes.Clone(d)) })
		} else {
			bodies = append(bodies, c.respBody)
		}
		for _, b := range bodies {
			ms, _ := tap.Parse(b)
			for _, m := range ms {
				if m.Kind == tap.KindResponse {
					resps[sid+" "+m.ID] = string(m.Raw)
				}
			}
		}
	}
	out := map[string][2]string{}
	for k, r := range reqs {
		out[k] = [2]string{r, resps[k]}
	}
	return out
}

// checkRecords checks that the records are exactly the tools/call
// exchanges the client saw, with its session and client name.
func (h *harness) checkRecords(t *testing.T, wantClient string, before, after time.Time) {
	t.Helper()
	// The client's log takes an exchange once its response body is
	// closed, which may come a moment after the call returned.
	saw, recs := h.clientSaw(t), h.recs()
	for deadline := time.Now().Add(5 * time.Second); len(recs) != len(saw) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		saw, recs = h.clientSaw(t), h.recs()
	}
	if len(recs) != len(saw) {
		t.Fatalf("%d records for %d tools/call exchanges", len(recs), len(saw))
	}
	for _, r := range recs {
		ms, err := tap.Parse(r.Request)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := saw[r.Session+" "+ms[0].ID]
		if !ok {
			t.Errorf("record of a call the client did not send: %s", r.Request)
			continue
		}
		if string(r.Request) != want[0] || string(r.Response) != want[1] {
			t.Errorf("record\n request  %s\n response %s\nclient saw\n request  %s\n response %s", r.Request, r.Response, want[0], want[1])
		}
		if r.Client != wantClient || r.Server != "thegram-test" || r.TransportError != "" {
			t.Errorf("record client %q server %q transport error %q", r.Client, r.Server, r.TransportError)
		}
		if r.Time.Before(before) || r.Time.Add(r.Duration).After(after) || r.Duration <= 0 {
			t.Errorf("record time %v + %v outside [%v, %v]", r.Time, r.Duration, before, after)
		}
		line := r.AppendJSON(nil)
		var v map[string]any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Errorf("record line is not JSON: %v: %s", err, line)
		}
	}
}

func TestProxy_GoSDK(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    *mcp.StreamableHTTPOptions
		session bool
	}{
		{"sse answers", &mcp.StreamableHTTPOptions{}, true},
		{"json answers", &mcp.StreamableHTTPOptions{JSONResponse: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testServer()
			h := newHarness(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, tc.opts), proxy.NewDefaultConfig())
			before := time.Now()
			ctx := context.Background()
			progress := make(chan float64, 10)
			c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "0.1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
					progress <- r.Params.Progress
				},
			})
			c.AddRoots(&mcp.Root{URI: "file:///vault", Name: "vault"})
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.front.URL + "/mcp?tenant=a", HTTPClient: h.client}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "héllo <&>"}})
			if err != nil || res.IsError {
				t.Fatalf("echo: %v %+v", err, res)
			}
			p := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"text": "x"}}
			p.SetProgressToken("tok-1")
			if _, err := cs.CallTool(ctx, p); err != nil {
				t.Fatal(err)
			}
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}})
			if err != nil || !res.IsError {
				t.Fatalf("fail: %v %+v", err, res)
			}
			// A server-to-client request inside a call: its id and its
			// answer's live in the other direction and must not end or
			// confuse the call.
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "roots", Arguments: map[string]any{"text": "r"}})
			if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "1 roots: file:///vault") {
				t.Fatalf("roots: %v %+v", err, res)
			}
			if err := cs.Close(); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if tc.opts.JSONResponse == false && len(progress) == 0 {
				t.Error("no progress notification reached the client")
			}
			// The client may still be closing its GET stream.
			deadline := time.Now().Add(5 * time.Second)
			for len(h.clientLog.all()) > len(h.upLog.all()) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := h.checkTransparent(t); n < 5 {
				t.Errorf("only %d exchanges compared", n)
			}
			h.checkRecords(t, "agent/0.1", before, after)
			// With JSON answers the request comes on the GET stream, which
			// the client log holds once the client has closed it.
			var asked, answered bool
			for deadline := time.Now().Add(5 * time.Second); !(asked && answered) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, c := range h.clientLog.all() {
					asked = asked || bytes.Contains(c.respBody, []byte(`"method":"roots/list"`))
					answered = answered || bytes.Contains(c.reqBody, []byte(`"roots":[{`))
				}
			}
			if !asked || !answered {
				t.Errorf("the server's roots/list request (%v) or the client's answer (%v) did not cross the proxy", asked, answered)
			}
			if len(h.recs()) != 4 {
				t.Errorf("%d records, want 4", len(h.recs()))
			}
		})
	}
}

func TestProxy_MCPGo(t *testing.T) {
	srv := testServer()
	h := newHarness(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil), proxy.NewDefaultConfig())
	before := time.Now()
	ctx := context.Background()
	tr, err := mcpgotransport.NewStreamableHTTP(h.front.URL+"/mcp", mcpgotransport.WithHTTPBasicClient(h.client))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpgoclient.NewClient(tr)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-11-25"
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-agent", Version: "9"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListTools(ctx, mcpgo.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"echo", "slow", "fail"} {
		req := mcpgo.CallToolRequest{}
		req.Params.Name = name
		req.Params.Arguments = map[string]any{"text": name}
		if _, err := c.CallTool(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if n := h.checkTransparent(t); n < 5 {
		t.Errorf("only %d exchanges compared", n)
	}
	h.checkRecords(t, "mcp-go-agent/9", before, after)
	recs := h.recs()
	if len(recs) != 3 || recs[0].Session == "" {
		t.Errorf("%d records, session %q; want 3 in a session", len(recs), recs[0].Session)
	}
}

// post sends one JSON-RPC body as a client would, and returns the status
// and body it got, or the error.
func post(ctx context.Context, c *http.Client, url, session, body string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// initSession opens a session through the proxy and returns its id.
func initSession(t *testing.T, h *harness) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.front.URL+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("no session")
	}
	if code, _, err := post(context.Background(), h.client, h.front.URL+"/mcp", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("initialized: %d %v", code, err)
	}
	return sid
}

func waitRecords(t *testing.T, h *harness, n int) []*tap.Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(h.recs()) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	recs := h.recs()
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	return recs
}

const hangCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hang","arguments":{"text":"x"}}}`

func TestProxy_TransportErrors(t *testing.T) {
	srv := testServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true})

	t.Run("upstream times out", func(t *testing.T) {
		cfg := proxy.NewDefaultConfig()
		cfg.ResponseTimeout = 200 * time.Millisecond
		h := newHarness(t, handler, cfg)
		sid := initSession(t, h)
		start := time.Now()
		code, _, err := post(context.Background(), h.client, h.front.URL+"/mcp", sid, hangCall)
		if err != nil || code != http.StatusGatewayTimeout {
			t.Fatalf("client got %d %v, want 504", code, err)
		}
		r := waitRecords(t, h, 1)[0]
		if r.TransportError != tap.ErrTimeout || r.Response != nil || r.Session != sid || r.Client != "raw/1" {
			t.Fatalf("record %s", r.AppendJSON(nil))
		}
		if r.Duration < 200*time.Millisecond || r.Duration > time.Since(start) {
			t.Fatalf("duration %v", r.Duration)
		}
	})
	t.Run("client goes away", func(t *testing.T) {
		h := newHarness(t, handler, proxy.NewDefaultConfig())
		sid := initSession(t, h)
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		if _, _, err := post(ctx, h.client, h.front.URL+"/mcp", sid, hangCall); err == nil {
			t.Fatal("the client's request did not fail")
		}
		r := waitRecords(t, h, 1)[0]
		if r.TransportError != tap.ErrCanceled || r.Response != nil {
			t.Fatalf("record %s", r.AppendJSON(nil))
		}
	})
	t.Run("upstream down", func(t *testing.T) {
		h := newHarness(t, handler, proxy.NewDefaultConfig())
		h.upstream.Close()
		code, _, err := post(context.Background(), h.client, h.front.URL+"/mcp", "", hangCall)
		if err != nil || code != http.StatusBadGateway {
			t.Fatalf("client got %d %v, want 502", code, err)
		}
		r := waitRecords(t, h, 1)[0]
		if r.TransportError != tap.ErrNotSent || r.Response != nil {
			t.Fatalf("record %s", r.AppendJSON(nil))
		}
	})
	t.Run("upstream breaks the stream", func(t *testing.T) {
		broken := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})
		h := newHarness(t, broken, proxy.NewDefaultConfig())
		_, body, err := post(context.Background(), h.client, h.front.URL+"/mcp", "", hangCall)
		if err == nil {
			t.Fatalf("the client read a whole body from a broken stream: %q", body)
		}
		if !strings.Contains(body, "notifications/progress") {
			t.Errorf("the event before the break did not reach the client: %q", body)
		}
		r := waitRecords(t, h, 1)[0]
		if r.TransportError != tap.ErrConnectionReset || r.Response != nil {
			t.Fatalf("record %s", r.AppendJSON(nil))
		}
	})
	t.Run("http error answer", func(t *testing.T) {
		h := newHarness(t, handler, proxy.NewDefaultConfig())
		code, _, err := post(context.Background(), h.client, h.front.URL+"/mcp", "no-such-session", hangCall)
		if err != nil || code != http.StatusNotFound {
			t.Fatalf("client got %d %v, want 404", code, err)
		}
		r := waitRecords(t, h, 1)[0]
		if r.TransportError != "http_404" {
			t.Fatalf("record %s", r.AppendJSON(nil))
		}
	})
	t.Run("batch and cancel", func(t *testing.T) {
		h := newHarness(t, handler, proxy.NewDefaultConfig())
		sid := initSession(t, h)
		go post(context.Background(), h.client, h.front.URL+"/mcp", sid, hangCall)
		time.Sleep(50 * time.Millisecond)
		post(context.Background(), h.client, h.front.URL+"/mcp", sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
		r := waitRecords(t, h, 1)[0]
		if r.TransportError != tap.ErrCanceled {
			t.Fatalf("record %s", r.AppendJSON(nil))
		}
	})
}

// TestProxy_NotSent: a call is recorded as not_sent only when the proxy
// knows that nothing of its request reached the upstream; a refusal by
// HTTP status keeps the status; a break after the upstream read the
// request stays connection_reset.
func TestProxy_NotSent(t *testing.T) {
	var reached atomic.Int32
	counted := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			h(w, r)
		}
	}
	front := func(t *testing.T, upstream string) (*proxy.Proxy, *httptest.Server, func(n int) []*tap.Record) {
		var mu sync.Mutex
		var recs []*tap.Record
		cfg := proxy.NewDefaultConfig()
		cfg.Upstream, cfg.Server = upstream, "thegram-test"
		p, err := proxy.New(cfg, func(r *tap.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(p)
		t.Cleanup(func() { srv.Close(); p.Close() })
		return p, srv, func(n int) []*tap.Record {
			for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				got := len(recs)
				mu.Unlock()
				if got >= n {
					break
				}
			}
			time.Sleep(20 * time.Millisecond) // no more than n
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(recs)
		}
	}
	check := func(t *testing.T, recs []*tap.Record, n int, want string) {
		t.Helper()
		if len(recs) != n {
			t.Fatalf("%d records, want %d", len(recs), n)
		}
		for _, r := range recs {
			if r.TransportError != want || r.Response != nil {
				t.Errorf("record %s, want transport_error %s", r.AppendJSON(nil), want)
			}
		}
	}

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, srv, recs := front(t, "http://"+addr)
		code, _, err := post(context.Background(), srv.Client(), srv.URL+"/mcp", "s1", hangCall)
		if err != nil || code != http.StatusBadGateway {
			t.Fatalf("client got %d %v, want 502", code, err)
		}
		check(t, recs(1), 1, tap.ErrNotSent)
	})
	t.Run("tls handshake fails", func(t *testing.T) {
		// The upstream's certificate is not one the proxy trusts: the
		// handshake fails before any byte of the HTTP request is written.
		reached.Store(0)
		up := httptest.NewTLSServer(counted(func(w http.ResponseWriter, r *http.Request) {}))
		up.Config.ErrorLog = log.New(io.Discard, "", 0)
		defer up.Close()
		_, srv, recs := front(t, up.URL)
		code, _, err := post(context.Background(), srv.Client(), srv.URL+"/mcp", "s1", hangCall)
		if err != nil || code != http.StatusBadGateway {
			t.Fatalf("client got %d %v, want 502", code, err)
		}
		check(t, recs(1), 1, tap.ErrNotSent)
		if reached.Load() != 0 {
			t.Fatal("the request reached the upstream")
		}
	})
	t.Run("batch refused with 400", func(t *testing.T) {
		reached.Store(0)
		up := httptest.NewServer(counted(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			http.Error(w, "batches are not supported", http.StatusBadRequest)
		}))
		defer up.Close()
		_, srv, recs := front(t, up.URL)
		batch := `[` + hangCall + `,` + strings.Replace(hangCall, `"id":7`, `"id":8`, 1) + `]`
		code, _, err := post(context.Background(), srv.Client(), srv.URL+"/mcp", "s1", batch)
		if err != nil || code != http.StatusBadRequest {
			t.Fatalf("client got %d %v, want 400", code, err)
		}
		check(t, recs(2), 2, "http_400")
		if reached.Load() != 1 {
			t.Fatalf("the upstream got %d requests, want 1", reached.Load())
		}
	})
	t.Run("reset after the upstream read the request", func(t *testing.T) {
		reached.Store(0)
		up := httptest.NewServer(counted(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
			conn.Close()
		}))
		defer up.Close()
		_, srv, recs := front(t, up.URL)
		code, _, err := post(context.Background(), srv.Client(), srv.URL+"/mcp", "s1", hangCall)
		if err != nil || code != http.StatusBadGateway {
			t.Fatalf("client got %d %v, want 502", code, err)
		}
		check(t, recs(1), 1, tap.ErrConnectionReset)
		if reached.Load() != 1 {
			t.Fatalf("the upstream got %d requests, want 1", reached.Load())
		}
	})
	t.Run("reset on a kept-alive connection", func(t *testing.T) {
		// The first call is answered on a connection the upstream keeps;
		// the second reuses it and is reset: the proxy had a connection,
		// so the request may have been delivered.
		reached.Store(0)
		up := httptest.NewUnstartedServer(counted(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if reached.Load() == 1 {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`)
				return
			}
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}))
		var conns atomic.Int32
		up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		up.Start()
		defer up.Close()
		_, srv, recs := front(t, up.URL)
		post(context.Background(), srv.Client(), srv.URL+"/mcp", "s1", hangCall)
		code, _, err := post(context.Background(), srv.Client(), srv.URL+"/mcp", "s1", strings.Replace(hangCall, `"id":7`, `"id":8`, 1))
		if err != nil || code != http.StatusBadGateway {
			t.Fatalf("client got %d %v, want 502", code, err)
		}
		got := recs(2)
		if len(got) != 2 || got[0].Response == nil {
			t.Fatalf("%d records, want the first answered", len(got))
		}
		check(t, got[1:], 1, tap.ErrConnectionReset)
		if conns.Load() != 1 {
			t.Fatalf("the upstream saw %d connections, want one, kept alive", conns.Load())
		}
	})
}

func TestProxy_LegacySSEIsNotRecorded(t *testing.T) {
	legacy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted) // the answer would come on GET /sse
	})
	h := newHarness(t, legacy, proxy.NewDefaultConfig())
	code, _, err := post(context.Background(), h.client, h.front.URL+"/messages?sessionId=abc", "", hangCall)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("%d %v", code, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(h.recs()); n != 0 || h.p.Recorder().Len() != 0 {
		t.Fatalf("%d records, %d pending", n, h.p.Recorder().Len())
	}
}

func TestProxy_CompressedAnswerIsNotRecorded(t *testing.T) {
	gz := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write([]byte{0x1f, 0x8b, 0, 0})
	})
	h := newHarness(t, gz, proxy.NewDefaultConfig())
	req, _ := http.NewRequest(http.MethodPost, h.front.URL+"/mcp", strings.NewReader(hangCall))
	req.Header.Set("Accept-Encoding", "gzip") // the client asked for it: no transparent decoding
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(b, []byte{0x1f, 0x8b, 0, 0}) {
		t.Fatalf("body %x reached the client", b)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(h.recs()); n != 0 || h.p.Recorder().Len() != 0 {
		t.Fatalf("%d records, %d pending", n, h.p.Recorder().Len())
	}
}

func TestProxy_MCPGoServer(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			s := mcpgoserver.NewMCPServer("mcp-go-server", "1", mcpgoserver.WithLogging())
			s.AddTool(mcpgo.NewTool("echo", mcpgo.WithString("text")), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
				return mcpgo.NewToolResultText(req.GetString("text", "")), nil
			})
			h := newHarness(t, mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStateLess(stateless)), proxy.NewDefaultConfig())
			before := time.Now()
			ctx := context.Background()
			c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "0.1"}, nil)
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.front.URL + "/mcp", HTTPClient: h.client}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, text := range []string{"a", "b"} {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
				if err != nil || res.Content[0].(*mcp.TextContent).Text != text {
					t.Fatalf("echo: %v %+v", err, res)
				}
			}
			cs.Close()
			after := time.Now()
			if n := h.checkTransparent(t); n < 3 {
				t.Errorf("only %d exchanges compared", n)
			}
			h.checkRecords(t, "agent/0.1", before, after)
			if len(h.recs()) != 2 {
				t.Errorf("%d records, want 2", len(h.recs()))
			}
		})
	}
}

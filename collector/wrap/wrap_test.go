package wrap_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/collector/wrap"
)

// The test binary doubles as the child MCP server: with WRAP_TEST_CHILD set
// it serves MCP on stdio and logs the bytes it read and wrote.
func TestMain(m *testing.M) {
	if kind := os.Getenv("WRAP_TEST_CHILD"); kind != "" {
		os.Exit(child(kind))
	}
	os.Exit(m.Run())
}

// teeFile logs a stream's bytes to a file.
type teeFile struct {
	r io.Reader
	w io.Writer
	f *os.File
}

func (t *teeFile) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.f.Write(p[:n])
	return n, err
}

func (t *teeFile) Write(p []byte) (int, error) {
	t.f.Write(p)
	return t.w.Write(p)
}

func (t *teeFile) Close() error { return nil }

func child(kind string) int {
	dir := os.Getenv("WRAP_TEST_DIR")
	in, _ := os.Create(filepath.Join(dir, "child-in"))
	out, _ := os.Create(filepath.Join(dir, "child-out"))
	stdin := &teeFile{r: os.Stdin, f: in}
	stdout := &teeFile{w: os.Stdout, f: out}
	fmt.Fprintln(os.Stderr, "child: starting \x00 raw \xff bytes")
	switch kind {
	case "deaf":
		// A server that stops reading: its stdin is closed, it says so on
		// stdout and lives on until the test lets it go.
		os.Stdin.Close()
		fmt.Fprintln(os.Stdout, "stdin closed")
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				break
			}
		}
	case "gosdk":
		s := mcp.NewServer(&mcp.Implementation{Name: "child", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "echoing"})
			if in.Text == "crash" {
				os.Exit(7)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
		s.Run(context.Background(), &mcp.IOTransport{Reader: stdin, Writer: stdout})
	case "raw":
		// Answers each tools/call on a line of its own; "huge" over the
		// relay's 16 MiB message bound, the id first as SDKs write it.
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Params struct{ Name string }
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
				continue
			}
			text := m.Params.Name
			if strings.HasPrefix(text, "huge") {
				text = strings.Repeat("H", tap.DefaultMaxMessageBytes+1<<20)
			}
			if m.Params.Name == "huge-id-last" {
				fmt.Fprintf(stdout, "{\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":%q}]},\"id\":%s}\n", text, m.ID)
				continue
			}
			fmt.Fprintf(stdout, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":%q}]}}\n", m.ID, text)
		}
	case "mcpgo":
		s := mcpgoserver.NewMCPServer("child", "1")
		s.AddTool(mcpgo.NewTool("echo", mcpgo.WithString("text")), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(req.GetString("text", "")), nil
		})
		mcpgoserver.NewStdioServer(s).Listen(context.Background(), stdin, stdout)
	}
	fmt.Fprintln(os.Stderr, "child: done")
	return 3
}

// side logs what crosses one pipe.
type side struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *side) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *side) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.buf.Bytes())
}

type run struct {
	dir            string
	sent, received side // what the client wrote and read
	stderr         side
	records        []*tap.Record
	mu             sync.Mutex
	status         int
	err            error
	done           chan struct{}
	clientW        *io.PipeWriter
	clientR        *io.PipeReader
}

// start runs a relay around the test binary as a child of the given kind,
// with pipes for the client.
func start(t *testing.T, kind string) *run {
	t.Helper()
	r := &run{dir: t.TempDir(), done: make(chan struct{})}
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	r.clientW, r.clientR = stdinW, stdoutR
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "WRAP_TEST_CHILD="+kind, "WRAP_TEST_DIR="+r.dir)
	cmd.Stderr = &r.stderr
	rec := tap.NewRecorder("oddlynew-test", func(rc *tap.Record) {
		r.mu.Lock()
		r.records = append(r.records, rc)
		r.mu.Unlock()
	})
	rl := &wrap.Relay{Recorder: rec}
	go func() {
		defer close(r.done)
		r.status, r.err = rl.Run(cmd, stdinR, stdoutW)
		stdoutW.Close()
	}()
	return r
}

// clientIO is the client's end: writes go to the relay's stdin, reads come
// from its stdout, both logged.
func (r *run) clientIO() (io.Reader, io.WriteCloser) {
	return io.TeeReader(r.clientR, &r.received), &logWriter{w: r.clientW, log: &r.sent}
}

type logWriter struct {
	w   io.WriteCloser
	log *side
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.log.Write(p)
	return l.w.Write(p)
}

func (l *logWriter) Close() error { return l.w.Close() }

func (r *run) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not end")
	}
}

// check compares the bytes on both sides of the relay and the records with
// what the client saw.
func (r *run) check(t *testing.T, wantClient string, wantCalls int) {
	t.Helper()
	childIn, _ := os.ReadFile(filepath.Join(r.dir, "child-in"))
	childOut, _ := os.ReadFile(filepath.Join(r.dir, "child-out"))
	if !bytes.Equal(childIn, r.sent.bytes()) {
		t.Errorf("the child read\n%q\nthe client sent\n%q", childIn, r.sent.bytes())
	}
	if !bytes.Equal(childOut, r.received.bytes()) {
		t.Errorf("the client read\n%q\nthe child wrote\n%q", r.received.bytes(), childOut)
	}
	if !strings.HasPrefix(string(r.stderr.bytes()), "child: starting \x00 raw \xff bytes\n") {
		t.Errorf("stderr %q", r.stderr.bytes())
	}
	reqs, resps := map[string]string{}, map[string]string{}
	for _, l := range bytes.Split(r.sent.bytes(), []byte("\n")) {
		if ms, err := tap.Parse(l); err == nil && ms[0].Method == "tools/call" {
			reqs[ms[0].ID] = string(ms[0].Raw)
		}
	}
	for _, l := range bytes.Split(r.received.bytes(), []byte("\n")) {
		if ms, err := tap.Parse(l); err == nil && ms[0].Kind == tap.KindResponse {
			resps[ms[0].ID] = string(ms[0].Raw)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) != wantCalls || len(reqs) != wantCalls {
		t.Fatalf("%d records, %d calls sent; want %d", len(r.records), len(reqs), wantCalls)
	}
	for _, rec := range r.records {
		ms, _ := tap.Parse(rec.Request)
		id := ms[0].ID
		if string(rec.Request) != reqs[id] || string(rec.Response) != resps[id] {
			t.Errorf("record %s\nclient saw %s\n%s", rec.AppendJSON(nil), reqs[id], resps[id])
		}
		if rec.Client != wantClient || rec.Session != "" || rec.Server != "oddlynew-test" {
			t.Errorf("record client %q session %q server %q", rec.Client, rec.Session, rec.Server)
		}
	}
}

func TestRelay_GoSDKClient(t *testing.T) {
	for _, kind := range []string{"gosdk", "mcpgo"} {
		t.Run(kind+" server", func(t *testing.T) {
			r := start(t, kind)
			in, out := r.clientIO()
			c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "0.1"}, nil)
			cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: io.NopCloser(in), Writer: out}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.ListTools(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			for _, text := range []string{"a", "b\n\u2028c"} {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
				if err != nil || res.Content[0].(*mcp.TextContent).Text != text {
					t.Fatalf("echo: %v %+v", err, res)
				}
			}
			cs.Close() // closes the relay's stdin: the child ends
			r.wait(t)
			if r.err != nil || r.status != 3 {
				t.Fatalf("relay returned %d, %v; want the child's 3", r.status, r.err)
			}
			r.check(t, "agent/0.1", 2)
		})
	}
}

func TestRelay_MCPGoClient(t *testing.T) {
	r := start(t, "gosdk")
	in, out := r.clientIO()
	tr := mcpgotransport.NewIO(in, out, io.NopCloser(strings.NewReader("")))
	c := mcpgoclient.NewClient(tr)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-11-25"
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-agent", Version: "9"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "echo"
	req.Params.Arguments = map[string]any{"text": "x"}
	if _, err := c.CallTool(ctx, req); err != nil {
		t.Fatal(err)
	}
	c.Close()
	r.wait(t)
	if r.status != 3 {
		t.Fatalf("status %d", r.status)
	}
	r.check(t, "mcp-go-agent/9", 1)
}

func TestRelay_ChildCrashes(t *testing.T) {
	r := start(t, "gosdk")
	in, out := r.clientIO()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "0.1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: io.NopCloser(in), Writer: out}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "crash"}}); err == nil {
		t.Fatal("a call to a crashed server succeeded")
	}
	r.wait(t)
	if r.status != 7 {
		t.Fatalf("status %d, want 7", r.status)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) != 1 || r.records[0].TransportError != tap.ErrConnectionReset || r.records[0].Client != "agent/0.1" {
		t.Fatalf("records %v", r.records)
	}
}

// TestRelay_ChildGoneBeforeTheRequest: a request that the relay could not
// write at all, the child's stdin being closed, never reached the server:
// it is recorded as not_sent, which the engine takes as not applied. A
// request the child read before it died stays connection_reset
// (TestRelay_ChildCrashes).
func TestRelay_ChildGoneBeforeTheRequest(t *testing.T) {
	r := start(t, "deaf")
	in, out := r.clientIO()
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil || line != "stdin closed\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	go io.Copy(io.Discard, in)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run","arguments":{"code":"x"}}}`
	if _, err := io.WriteString(out, call+"\n"); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		n := len(r.records)
		r.mu.Unlock()
		if n > 0 {
			break
		}
	}
	os.WriteFile(filepath.Join(r.dir, "stop"), nil, 0o600)
	out.Close()
	r.wait(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) != 1 || r.records[0].TransportError != tap.ErrNotSent || string(r.records[0].Request) != call {
		for _, rc := range r.records {
			t.Log(string(rc.AppendJSON(nil)))
		}
		t.Fatalf("%d records, want 1 not_sent", len(r.records))
	}
}

// TestRelay_OversizedAnswerIsNoNoResponse: an answer over the message bound
// reaches the client whole; its call is not recorded, rather than recorded
// at the child's exit without the answer the client has (adv23's D2, seen
// through the proxy; the wrapper did the same).
func TestRelay_OversizedAnswerIsNoNoResponse(t *testing.T) {
	for _, huge := range []string{"huge", "huge-id-last"} {
		t.Run(huge, func(t *testing.T) {
			r := start(t, "raw")
			in, out := r.clientIO()
			rd := bufio.NewReaderSize(in, 64<<10)
			for i, name := range []string{huge, "after"} {
				fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`+"\n", i+1, name)
				line, err := rd.ReadString('\n')
				if err != nil || !strings.Contains(line, fmt.Sprintf(`"id":%d`, i+1)) || (name == huge) != (len(line) > tap.DefaultMaxMessageBytes) {
					t.Fatalf("answer to %s: %d bytes, %v", name, len(line), err)
				}
			}
			out.Close()
			r.wait(t)
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, rc := range r.records {
				if rc.Response == nil {
					t.Errorf("recorded without a response (%q) although answered: %.200s", rc.TransportError, rc.AppendJSON(nil))
				}
			}
			if len(r.records) != 1 || !strings.Contains(string(r.records[0].Response), "after") {
				t.Fatalf("%d records, want the one of the answer within the bound", len(r.records))
			}
		})
	}
}

package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestServe_PooledBodies posts distinct calls from eight clients at once to
// a serve process, in requests of very different sizes (so that body
// buffers are reused for requests shorter and longer than the one before),
// as NDJSON, gzip-encoded NDJSON and JSON arrays; then every stored call
// must hold, byte for byte, the arguments, result, error message and names
// it was sent with: nothing kept from a body refers to the buffer the next
// request is read into.
func TestServe_PooledBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	dir := t.TempDir()
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	os.WriteFile(config, []byte("detect:\n  idle_timeout: 1s\nserve:\n  pipeline:\n    commit_every: 50ms\n"), 0o644)
	ingest, api := freePort(t), freePort(t)
	c := startChild(t, dir, config, ingest, api)
	defer c.kill()

	type sent struct{ server, tool, args, result, errMsg string }
	var mu sync.Mutex
	want := map[string]sent{} // by session and rpc id
	client := &http.Client{Timeout: 60 * time.Second}
	now := time.Now().UTC()
	const posters, requests = 8, 30
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range requests {
				// Sizes from a few bytes to about 1 MiB a call, in an order
				// that differs between posters.
				n := 1 + (p*7+q*13)%40
				pad := 1 << ((p + q*3) % 21)
				var lines [][]byte
				for i := range n {
					id := q*1000 + i
					s := sent{
						server: fmt.Sprintf("srv%d", p%3),
						tool:   fmt.Sprintf("tool_%d_%d", p, q%5),
						args:   fmt.Sprintf(`{"p":%d,"q":%d,"i":%d,"pad":"%s"}`, p, q, i, strings.Repeat(string(rune('a'+(p+q+i)%26)), pad/n+i)),
						result: fmt.Sprintf(`{"content":[{"type":"text","text":"r%d-%d-%d-%s"}]}`, p, q, i, strings.Repeat(string(rune('A'+(p*q+i)%26)), (pad/(2*n))+1)),
					}
					resp := `"result":` + s.result
					if i%4 == 3 {
						s.errMsg = fmt.Sprintf("failed %d %d %d %s", p, q, i, strings.Repeat("z", i))
						s.result = ""
						resp = fmt.Sprintf(`"error":{"code":-32000,"message":%q}`, s.errMsg)
					}
					tm := now.Add(time.Duration(p*requests*1000+id) * time.Microsecond).Format(time.RFC3339Nano)
					lines = append(lines, fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"p%d","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}},"response":{"jsonrpc":"2.0","id":%d,%s}}`,
						tm, s.server, p, id, s.tool, s.args, id, resp))
					mu.Lock()
					want[fmt.Sprintf("p%d/%d", p, id)] = s
					mu.Unlock()
				}
				var body []byte
				ctype, enc := "application/x-ndjson", ""
				switch q % 3 {
				case 0:
					body = bytes.Join(lines, []byte("\n"))
				case 1:
					var buf bytes.Buffer
					zw := gzip.NewWriter(&buf)
					zw.Write(bytes.Join(lines, []byte("\n")))
					zw.Close()
					body, enc = buf.Bytes(), "gzip"
				case 2:
					body = append(append([]byte("["), bytes.Join(lines, []byte(","))...), ']')
					ctype = "application/json"
				}
				req, _ := http.NewRequest("POST", "http://"+ingest+"/v1/calls", bytes.NewReader(body))
				req.Header.Set("Content-Type", ctype)
				if enc != "" {
					req.Header.Set("Content-Encoding", enc)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("poster %d request %d: %v", p, q, err)
					return
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("poster %d request %d: status %d: %s", p, q, resp.StatusCode, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	c.kill()                    // acknowledged calls are stored: SIGKILL loses none
	st, err := openReading(dir) // the calls table or the call logs, as serve kept them
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := 0
	if err := st.ScanCalls(t.Context(), time.Time{}, func(r *audit.Record) error {
		c := r.Call
		k := c.Session + "/" + c.RPCID
		w, ok := want[k]
		if !ok {
			return fmt.Errorf("stored call %s (%s) was not sent", c.ID, k)
		}
		var errMsg string
		if c.Error != nil {
			errMsg = c.Error.Message
		}
		g := sent{server: c.Server, tool: c.Tool, args: string(c.Arguments), result: string(c.Result), errMsg: errMsg}
		if g != w {
			return fmt.Errorf("call %s holds\n%.300q\nsent\n%.300q", k, fmt.Sprint(g), fmt.Sprint(w))
		}
		got++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls compared", got)
	if got != len(want) {
		t.Fatalf("%d calls stored, %d sent", got, len(want))
	}
}

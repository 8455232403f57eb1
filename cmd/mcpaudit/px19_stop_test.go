package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProxy_StopWithHungUpstream (px19): a SIGTERM while the upstream hangs
// on a tools/call. The stop waits its whole grace for the open request,
// then cuts it; docs/proxy.md ("Stopping") says its call is then recorded
// canceled, and sent. Before px19 the flush after the grace ran with the
// grace's context, already expired: the call was recorded without a
// response or transport error (the recorder's Close won the race against
// the cut handler), nothing was sent, and the log ended with "call records
// left in the buffer for the next start". Through a real serve; the
// upstream is an httptest server that never answers that call (it ignores
// its request's context, as a hung server does). The grace is shortened
// to 1 s for the test (proxyStopGrace; the default is 30 s).
func TestProxy_StopWithHungUpstream(t *testing.T) {
	release := make(chan struct{})
	got := make(chan string, 4)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"hung"`)) {
			got <- "hung"
			<-release
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":"read","result":{"content":[]}}`))
	}))
	defer upstream.Close()
	defer close(release) // before upstream.Close, which waits for the handler

	api, ingest, serveLog := serveInTest(t)
	px := startProxy(t, upstream.URL, "http://"+ingest, time.Second)
	addr, errb := px.addr, px.log
	post := func(id, params string) error {
		resp, err := http.Post("http://"+addr+"/mcp", "application/json",
			strings.NewReader(`{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":`+params+`}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	var err error
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
		if err = post("read", `{"name":"gram_read","arguments":{"path":"team/a.gram"}}`); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the proxy never answered: %v\n%s", err, errb.String())
	}
	clientDone := make(chan error, 1)
	go func() {
		clientDone <- post("hung", `{"name":"gram_patch","arguments":{"path":"team/a.gram","request_id":"k-1","operations":[]}}`)
	}()
	<-got
	if err := px.stop(); err != nil {
		t.Fatalf("proxy: %v\n%s", err, errb.String())
	}
	if err := <-clientDone; err == nil {
		t.Errorf("the client of the hung call read a whole answer; want its request cut")
	}

	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	var last struct {
		Level, Msg string
		Recorded   *int `json:"calls_recorded_at_stop"`
		Sent       *int `json:"records_sent"`
		Left       *int `json:"bytes_left_in_buffer"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Level != "INFO" || last.Msg != "stopped cleanly" || last.Recorded == nil || *last.Recorded != 1 ||
		last.Sent == nil || *last.Sent != 2 || last.Left == nil || *last.Left != 0 {
		t.Errorf("the proxy's last log line is\n%s\nwant INFO stopped cleanly, calls_recorded_at_stop 1, records_sent 2, bytes_left_in_buffer 0\nthe log:\n%s",
			lines[len(lines)-1], errb.String())
	}

	// The cut call reached serve, recorded canceled, as the docs say.
	var page struct {
		Calls []map[string]any `json:"calls"`
	}
	var patch map[string]any
	for deadline := time.Now().Add(10 * time.Second); patch == nil; time.Sleep(100 * time.Millisecond) {
		getJSON(t, "http://"+api+"/api/v1/calls?limit=20", &page)
		for _, c := range page.Calls {
			if c["tool"] == "gram_patch" {
				patch = c
			}
		}
		if patch == nil && time.Now().After(deadline) {
			t.Fatalf("the call cut at the stop never reached serve: calls %v\nproxy:\n%s\nserve:\n%s", page.Calls, errb.String(), serveLog.String())
		}
	}
	if b, _ := json.Marshal(patch); !bytes.Contains(b, []byte(`"canceled"`)) {
		t.Errorf("the call cut at the stop is stored as %s; want it canceled (docs/proxy.md, Stopping)", b)
	}
}

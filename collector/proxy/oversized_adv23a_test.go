package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/collector/proxy"
)

// rawCall is one tools/call as an upstream without an SDK reads it.
type rawCall struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

// rawUpstream is an MCP server reduced to what a test needs: it reads the
// calls of a POST (one message or a batch) and writes what answer returns.
func rawUpstream(answer func(w http.ResponseWriter, calls []rawCall)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var calls []rawCall
		if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
			json.Unmarshal(body, &calls)
		} else {
			var c rawCall
			json.Unmarshal(body, &c)
			calls = []rawCall{c}
		}
		if len(calls) == 0 || calls[0].Method != "tools/call" {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		answer(w, calls)
	})
}

// textResult is a tools/call result with one text of n bytes of 'H', or
// text itself when n is 0.
func textResult(text string, n int) string {
	if n > 0 {
		text = strings.Repeat("H", n)
	}
	return `{"content":[{"type":"text","text":"` + text + `"}]}`
}

// stopAndPending stops the proxy's front server (which waits for its
// handlers to return) and then the proxy, and returns how many calls were
// still in flight: each of those the proxy records without a response.
func stopAndPending(h *harness) int {
	h.front.Close()
	return h.p.Close()
}

// TestProxy_OversizedAnswerIsNoNoResponse: an answer over the message bound
// reaches the client whole and its call is not recorded (docs/proxy.md),
// and the call no longer waits for an answer that already came. Before
// adv23a it did: recorded without a response when the proxy stopped, or as
// a timeout after twice --response-timeout, which made a gram_patch an
// unverified_write (reason no_response) whose answer the agent had
// (adv23's D2: 20,971,605 bytes answered, recorded no_response/timeout).
func TestProxy_OversizedAnswerIsNoNoResponse(t *testing.T) {
	const small = 64 << 10
	huge := func(idFirst bool, n int) func(id json.RawMessage) string {
		return func(id json.RawMessage) string {
			if idFirst {
				return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + textResult("", n) + `}`
			}
			return `{"jsonrpc":"2.0","result":` + textResult("", n) + `,"id":` + string(id) + `}`
		}
	}
	normal := func(id json.RawMessage) string {
		return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + textResult("fine", 0) + `}`
	}
	jsonAnswer := func(msg func(json.RawMessage) string) func(http.ResponseWriter, []rawCall) {
		return func(w http.ResponseWriter, calls []rawCall) {
			w.Header().Set("Content-Type", "application/json")
			if calls[0].Params.Name == "big" {
				io.WriteString(w, msg(calls[0].ID))
				return
			}
			io.WriteString(w, normal(calls[0].ID))
		}
	}
	sseAnswer := func(msg func(json.RawMessage) string) func(http.ResponseWriter, []rawCall) {
		return func(w http.ResponseWriter, calls []rawCall) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			// A notification first: the stream carries more than the answer.
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
			if calls[0].Params.Name == "big" {
				io.WriteString(w, "event: message\ndata: "+msg(calls[0].ID)+"\n\n")
				return
			}
			io.WriteString(w, "event: message\ndata: "+normal(calls[0].ID)+"\n\n")
		}
	}
	for _, tc := range []struct {
		name   string
		max    int // the proxy's message bound; 0 for the default, 16 MiB
		answer func(http.ResponseWriter, []rawCall)
	}{
		// adv23's reproduction: 20 MiB of JSON under the default bound.
		{"json 20 MiB, id first", 0, jsonAnswer(huge(true, 20<<20))},
		{"json, id after the result", small, jsonAnswer(huge(false, 4*small))},
		{"sse event, id first", small, sseAnswer(huge(true, 4*small))},
		{"sse event, id after the result", small, sseAnswer(huge(false, 4*small))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := proxy.NewDefaultConfig()
			if tc.max > 0 {
				cfg.MaxMessageBytes = tc.max
			}
			h := newHarness(t, rawUpstream(tc.answer), cfg)
			url := h.front.URL + "/mcp"
			code, body, err := post(context.Background(), h.client, url, "s1",
				`{"jsonrpc":"2.0","id":9001,"method":"tools/call","params":{"name":"big","arguments":{"path":"big/HUGE.gram","request_id":"req-huge-1"}}}`)
			if err != nil || code != http.StatusOK || len(body) < 4*small {
				t.Fatalf("client got %d, %d bytes, %v", code, len(body), err)
			}
			code, body, err = post(context.Background(), h.client, url, "s1",
				`{"jsonrpc":"2.0","id":9002,"method":"tools/call","params":{"name":"small","arguments":{}}}`)
			if err != nil || code != http.StatusOK || !strings.Contains(body, "fine") {
				t.Fatalf("client got %d %q %v", code, body, err)
			}
			if n := h.checkTransparent(t); n != 2 {
				t.Fatalf("%d exchanges checked, want 2", n)
			}
			if n := stopAndPending(h); n != 0 {
				t.Errorf("%d calls were still waiting for an answer at the stop, and were recorded without one; want 0", n)
			}
			recs := h.recs()
			for _, r := range recs {
				if r.Response == nil {
					t.Errorf("recorded without a response (transport error %q), although its answer reached the client: %.200s", r.TransportError, r.AppendJSON(nil))
				}
			}
			if len(recs) != 1 || !bytes.Contains(recs[0].Request, []byte(`"id":9002`)) {
				t.Fatalf("%d records, want only the call answered within the bound", len(recs))
			}
		})
	}
}

// TestProxy_OversizedRequestIsNotRecorded: a request over the bound is
// relayed, not recorded, and leaves nothing waiting; its answer pairs with
// nothing, and the next call of the session is recorded as usual.
func TestProxy_OversizedRequestIsNotRecorded(t *testing.T) {
	cfg := proxy.NewDefaultConfig()
	cfg.MaxMessageBytes = 64 << 10
	up := rawUpstream(func(w http.ResponseWriter, calls []rawCall) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(calls[0].ID)+`,"result":`+textResult("fine", 0)+`}`)
	})
	h := newHarness(t, up, cfg)
	url := h.front.URL + "/mcp"
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_patch","arguments":{"text":"` + strings.Repeat("x", 128<<10) + `"}}}`
	if code, body, err := post(context.Background(), h.client, url, "s1", big); err != nil || code != http.StatusOK || !strings.Contains(body, "fine") {
		t.Fatalf("client got %d %q %v", code, body, err)
	}
	if code, _, err := post(context.Background(), h.client, url, "s1", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"gram_read","arguments":{}}}`); err != nil || code != http.StatusOK {
		t.Fatalf("client got %d %v", code, err)
	}
	if n := h.checkTransparent(t); n != 2 {
		t.Fatalf("%d exchanges checked, want 2", n)
	}
	if n := stopAndPending(h); n != 0 {
		t.Errorf("%d calls recorded without a response at the stop; want 0", n)
	}
	recs := h.recs()
	if len(recs) != 1 || recs[0].Response == nil || !bytes.Contains(recs[0].Request, []byte(`"id":2`)) {
		t.Fatalf("%d records, want one, of call 2, answered", len(recs))
	}
}

// TestProxy_DuplicateIDInBatch: two calls under one id in one batch are
// both answered, and both recorded with their answers, paired in the order
// the calls were sent. Before adv23a the first was recorded without a
// response, which reads as a call nobody answered (adv23's L2).
func TestProxy_DuplicateIDInBatch(t *testing.T) {
	answers := map[string]func(http.ResponseWriter, []rawCall){
		"json batch": func(w http.ResponseWriter, calls []rawCall) {
			w.Header().Set("Content-Type", "application/json")
			var parts []string
			for _, c := range calls {
				parts = append(parts, `{"jsonrpc":"2.0","id":`+string(c.ID)+`,"result":`+textResult("ok "+c.Params.Name, 0)+`}`)
			}
			io.WriteString(w, "["+strings.Join(parts, ",")+"]")
		},
		"sse events": func(w http.ResponseWriter, calls []rawCall) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range calls {
				fmt.Fprintf(w, "event: message\ndata: %s\n\n", `{"jsonrpc":"2.0","id":`+string(c.ID)+`,"result":`+textResult("ok "+c.Params.Name, 0)+`}`)
			}
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, rawUpstream(answer), proxy.NewDefaultConfig())
			call := func(tool string) string {
				return `{"jsonrpc":"2.0","id":5001,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`
			}
			code, body, err := post(context.Background(), h.client, h.front.URL+"/mcp", "s1", "["+call("a")+","+call("b")+"]")
			if err != nil || code != http.StatusOK || !strings.Contains(body, "ok a") || !strings.Contains(body, "ok b") {
				t.Fatalf("client got %d %q %v", code, body, err)
			}
			if n := stopAndPending(h); n != 0 {
				t.Errorf("%d calls recorded without a response at the stop; want 0", n)
			}
			recs := h.recs()
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2", len(recs))
			}
			for _, r := range recs {
				var req struct {
					Params struct{ Name string }
				}
				json.Unmarshal(r.Request, &req)
				if r.Response == nil || r.TransportError != "" {
					t.Errorf("call %s recorded without its answer (transport error %q)", req.Params.Name, r.TransportError)
				} else if !bytes.Contains(r.Response, []byte("ok "+req.Params.Name)) {
					t.Errorf("call %s recorded with the answer %s", req.Params.Name, r.Response)
				}
			}
			if t.Failed() {
				for _, r := range recs {
					t.Log(string(r.AppendJSON(nil)))
				}
			}
		})
	}
}

// TestProxy_OversizedNotificationAnswersNothing: a server notification over
// the bound on a call's stream is no answer: the call is recorded with the
// answer that follows it.
func TestProxy_OversizedNotificationAnswersNothing(t *testing.T) {
	cfg := proxy.NewDefaultConfig()
	cfg.MaxMessageBytes = 64 << 10
	up := rawUpstream(func(w http.ResponseWriter, calls []rawCall) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `event: message`+"\ndata: "+`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`+strings.Repeat("L", 256<<10)+`"}}`+"\n\n")
		io.WriteString(w, "event: message\ndata: "+`{"jsonrpc":"2.0","result":`+textResult("fine", 0)+`,"id":`+string(calls[0].ID)+`}`+"\n\n")
	})
	h := newHarness(t, up, cfg)
	if code, body, err := post(context.Background(), h.client, h.front.URL+"/mcp", "s1", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{}}}`); err != nil || code != http.StatusOK || !strings.Contains(body, "fine") {
		t.Fatalf("client got %d %v", code, err)
	}
	if n := stopAndPending(h); n != 0 {
		t.Errorf("%d calls recorded without a response at the stop; want 0", n)
	}
	if recs := h.recs(); len(recs) != 1 || !bytes.Contains(recs[0].Response, []byte("fine")) {
		t.Fatalf("%d records, want the call with its answer", len(recs))
	}
}

// TestProxy_OversizedAnswerOnTheSessionStream: an answer over the bound
// whose id comes after its result, on the session's GET stream (the POST's
// stream ended without it): the proxy cannot tell which call it answered,
// and records none of the session's calls that were waiting then as
// unanswered.
func TestProxy_OversizedAnswerOnTheSessionStream(t *testing.T) {
	cfg := proxy.NewDefaultConfig()
	cfg.MaxMessageBytes = 64 << 10
	posted := make(chan json.RawMessage, 1)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			id := <-posted
			io.WriteString(w, "event: message\ndata: "+`{"jsonrpc":"2.0","result":`+textResult("", 256<<10)+`,"id":`+string(id)+`}`+"\n\n")
			return
		}
		rawUpstream(func(w http.ResponseWriter, calls []rawCall) {
			// The POST's stream ends without the answer.
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			posted <- calls[0].ID
		}).ServeHTTP(w, r)
	})
	h := newHarness(t, up, cfg)
	got := make(chan int, 1)
	req, _ := http.NewRequest(http.MethodGet, h.front.URL+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", "s1")
	resp, err := h.client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v", err)
	}
	go func() {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- len(b)
	}()
	if code, _, err := post(context.Background(), h.client, h.front.URL+"/mcp", "s1", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"gram_patch","arguments":{}}}`); err != nil || code != http.StatusOK {
		t.Fatalf("client got %d %v", code, err)
	}
	if n := <-got; n < 256<<10 {
		t.Fatalf("the GET stream carried %d bytes", n)
	}
	if n := stopAndPending(h); n != 0 {
		t.Errorf("%d calls recorded without a response at the stop; want 0", n)
	}
	if recs := h.recs(); len(recs) != 0 {
		t.Fatalf("%d records, want none: %.200s", len(recs), recs[0].AppendJSON(nil))
	}
}

// TestProxy_OversizedAnswerThenBreak: a stream that carried an answer over
// the bound whose id the proxy could not read, then broke: the call may
// have been answered, and is not recorded as connection_reset.
func TestProxy_OversizedAnswerThenBreak(t *testing.T) {
	cfg := proxy.NewDefaultConfig()
	cfg.MaxMessageBytes = 64 << 10
	up := rawUpstream(func(w http.ResponseWriter, calls []rawCall) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: "+`{"jsonrpc":"2.0","result":`+textResult("", 256<<10)+`,"id":`+string(calls[0].ID)+`}`+"\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	h := newHarness(t, up, cfg)
	_, body, _ := post(context.Background(), h.client, h.front.URL+"/mcp", "s1", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_patch","arguments":{}}}`)
	if len(body) < 256<<10 {
		t.Fatalf("the client got %d bytes", len(body))
	}
	if n := stopAndPending(h); n != 0 {
		t.Errorf("%d calls recorded without a response at the stop; want 0", n)
	}
	if recs := h.recs(); len(recs) != 0 {
		t.Fatalf("%d records, want none: %.300s", len(recs), recs[0].AppendJSON(nil))
	}
}

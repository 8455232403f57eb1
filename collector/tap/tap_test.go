package tap

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

func TestParse(t *testing.T) {
	f := func(in string, want []Message, wantErr string) {
		t.Helper()
		got, err := Parse([]byte(in))
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Fatalf("Parse(%s) error %v, want %q", in, err, wantErr)
		}
		for i := range got {
			got[i].Params = nil
		}
		if len(got) != len(want) {
			t.Fatalf("Parse(%s) = %d messages, want %d: %+v", in, len(got), len(want), got)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Kind != w.Kind || g.ID != w.ID || g.Method != w.Method || string(g.Raw) != string(w.Raw) {
				t.Errorf("Parse(%s)[%d] = %+v (raw %s), want %+v (raw %s)", in, i, g, g.Raw, w, w.Raw)
			}
		}
	}
	f(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`,
		[]Message{{Kind: KindRequest, ID: "7", Method: "tools/call", Raw: []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`)}}, "")
	// Whitespace is compacted; string ids keep their quotes.
	f(" {\"jsonrpc\": \"2.0\",\n \"id\": \"7\", \"result\": {}}\n",
		[]Message{{Kind: KindResponse, ID: `"7"`, Raw: []byte(`{"jsonrpc":"2.0","id":"7","result":{}}`)}}, "")
	f(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		[]Message{{Kind: KindNotification, Method: "notifications/initialized", Raw: []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)}}, "")
	f(`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}}`,
		[]Message{{Kind: KindResponse, ID: "3", Raw: []byte(`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}}`)}}, "")
	// A batch keeps its good elements and names the bad one.
	f(`[{"jsonrpc":"2.0","id":1,"method":"a"}, 5, {"jsonrpc":"2.0","method":"b"}]`,
		[]Message{{Kind: KindRequest, ID: "1", Method: "a", Raw: []byte(`{"jsonrpc":"2.0","id":1,"method":"a"}`)},
			{Kind: KindNotification, Method: "b", Raw: []byte(`{"jsonrpc":"2.0","method":"b"}`)}}, "batch element 1")
	f(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`, nil, "neither a method")
	f(`{"jsonrpc":"2.0"`, nil, "cannot parse message")
	f(``, nil, "empty")
	f(`[1,`, nil, "cannot parse batch")
}

func TestClientInfo(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		ms, err := Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if got := ClientInfo(&ms[0]); got != want {
			t.Errorf("ClientInfo(%s) = %q, want %q", in, got, want)
		}
	}
	f(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"agent","version":"1.2"}}}`, "agent/1.2")
	f(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"agent"}}}`, "agent")
	f(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, "")
	f(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"clientInfo":{"name":"agent"}}}`, "")
}

// feedAll feeds s in every split into two pieces and checks each gives want.
func TestSSE(t *testing.T) {
	f := func(stream string, want ...string) {
		t.Helper()
		for cut := 0; cut <= len(stream); cut++ {
			var s SSE
			var got []string
			ev := func(d []byte) { got = append(got, string(d)) }
			s.Feed([]byte(stream[:cut]), ev)
			s.Feed([]byte(stream[cut:]), ev)
			if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("cut %d of %q: events %q, want %q", cut, stream, got, want)
			}
		}
	}
	f("event: message\ndata: {\"a\":1}\n\n", `{"a":1}`)
	f("id: 5\r\ndata:{\"a\":1}\r\n\r\ndata: x\r\rdata: y\n", `{"a":1}`, "x")
	f(": keepalive\n\ndata: a\ndata: b\n\n", "a\nb")
	f("retry: 100\n\n")
	f("data\n\n", "")
}

func TestSSE_Oversized(t *testing.T) {
	s := SSE{Max: 8}
	var got []string
	s.Feed([]byte("data: 0123456789abc\n\ndata: ok\n\n"), func(d []byte) { got = append(got, string(d)) })
	if !reflect.DeepEqual(got, []string{"ok"}) || s.Oversized != 1 {
		t.Fatalf("events %q, oversized %d; want [ok] and 1", got, s.Oversized)
	}
}

func TestLines(t *testing.T) {
	stream := "{\"a\":1}\n\n  {\"b\":2}\r\nlong-line-here\n{\"c\""
	for cut := 0; cut <= len(stream); cut++ {
		l := Lines{Max: 10}
		var got []string
		fn := func(b []byte) { got = append(got, string(b)) }
		l.Feed([]byte(stream[:cut]), fn)
		l.Feed([]byte(stream[cut:]), fn)
		if want := []string{`{"a":1}`, `{"b":2}`}; !reflect.DeepEqual(got, want) || l.Oversized != 1 || string(l.Rest()) != `{"c"` {
			t.Fatalf("cut %d: lines %q oversized %d rest %q", cut, got, l.Oversized, l.Rest())
		}
	}
}

// TestLines_FeedAt: each line is told where it began in the piece that
// completed it, or -1 when it began in an earlier piece, wherever the
// stream is cut.
func TestLines_FeedAt(t *testing.T) {
	stream := "{\"a\":1}\n\n  {\"b\":2}\r\nlong-line-here\n{\"c\":3}\n"
	begins := map[string]int{`{"a":1}`: 0, `{"b":2}`: 9, `{"c":3}`: 35}
	for cut := 0; cut <= len(stream); cut++ {
		l := Lines{Max: 10}
		var got []string
		for i, piece := range []string{stream[:cut], stream[cut:]} {
			off := []int{0, cut}[i]
			l.FeedAt([]byte(piece), func(b []byte, start int) {
				want := begins[string(b)] - off
				if want < 0 {
					want = -1
				}
				if start != want {
					t.Errorf("cut %d: %s began at %d of piece %d, want %d", cut, b, start, i, want)
				}
				got = append(got, string(b))
			})
		}
		if want := []string{`{"a":1}`, `{"b":2}`, `{"c":3}`}; !reflect.DeepEqual(got, want) || l.Oversized != 1 {
			t.Fatalf("cut %d: lines %q oversized %d", cut, got, l.Oversized)
		}
	}
}

func msgs(t *testing.T, s string) []Message {
	t.Helper()
	m, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRecorder(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	call := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}}`
	}
	resp := func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[]}}` }
	newRec := func() (*Recorder, *[]*Record) {
		var out []*Record
		return NewRecorder("thegram", func(r *Record) { out = append(out, r) }), &out
	}

	t.Run("pairs by id within the session", func(t *testing.T) {
		r, out := newRec()
		r.SetClient("s1", "agent/1")
		r.FromClient("s1", 0, msgs(t, call("1")), t0)
		r.FromClient("s2", 0, msgs(t, call("1")), t0)
		// Another session's answer, a server request with the same id
		// and a notification do not complete s1's call.
		r.FromServer("s2", 0, msgs(t, resp("1")), t0.Add(time.Second))
		r.FromServer("s1", 0, msgs(t, `[{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"},{"jsonrpc":"2.0","method":"notifications/progress"}]`), t0)
		r.FromClient("s1", 0, msgs(t, `{"jsonrpc":"2.0","id":1,"result":{}}`), t0)
		if len(*out) != 1 || (*out)[0].Session != "s2" || (*out)[0].Client != "" {
			t.Fatalf("records %+v", *out)
		}
		r.FromServer("s1", 0, msgs(t, resp("1")), t0.Add(1500*time.Millisecond))
		got := (*out)[1]
		want := &Record{Time: t0, Duration: 1500 * time.Millisecond, Server: "thegram", Session: "s1", Client: "agent/1",
			Request: []byte(call("1")), Response: []byte(resp("1"))}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %+v, want %+v", got, want)
		}
		if r.Len() != 0 {
			t.Fatalf("%d still pending", r.Len())
		}
	})
	t.Run("per-request clientInfo wins", func(t *testing.T) {
		r, out := newRec()
		r.SetClient("", "old/1")
		r.FromClient("", 0, msgs(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"new","version":"2"}},"name":"x"}}`), t0)
		r.FromClient("", 0, msgs(t, call("2")), t0)
		r.Close("", t0)
		clients := map[string]bool{(*out)[0].Client: true, (*out)[1].Client: true}
		if !clients["new/2"] || !clients["old/1"] {
			t.Fatalf("clients %v", clients)
		}
	})
	t.Run("string and number ids differ", func(t *testing.T) {
		r, out := newRec()
		r.FromClient("s", 0, msgs(t, call(`"1"`)), t0)
		r.FromServer("s", 0, msgs(t, resp("1")), t0)
		if len(*out) != 0 {
			t.Fatal("a response to id 1 completed request \"1\"")
		}
	})
	t.Run("without a session the scope pairs", func(t *testing.T) {
		r, out := newRec()
		k := r.FromClient("", 1, msgs(t, call("1")), t0)
		r.FromClient("", 2, msgs(t, call("1")), t0)
		r.FromServer("", 2, msgs(t, resp("1")), t0)
		if len(*out) != 1 || r.Pending(k) != 1 {
			t.Fatalf("scope 2's answer ended scope 1's call: %d records", len(*out))
		}
	})
	t.Run("batch, cancel, fail, close", func(t *testing.T) {
		r, out := newRec()
		keys := r.FromClient("s", 0, msgs(t, "["+call("1")+","+call("2")+","+call("3")+`,{"jsonrpc":"2.0","id":4,"method":"tools/list"}]`), t0)
		if len(keys) != 3 {
			t.Fatalf("keys %v", keys)
		}
		r.FromClient("s", 0, msgs(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`), t0.Add(time.Second))
		if n := r.Fail(keys, ErrConnectionReset, t0.Add(2*time.Second)); n != 2 {
			t.Fatalf("Fail ended %d, want 2", n)
		}
		reasons := map[string]string{}
		for _, rec := range *out {
			var req struct{ ID json.RawMessage }
			json.Unmarshal(rec.Request, &req)
			reasons[string(req.ID)] = rec.TransportError
		}
		if want := map[string]string{"1": ErrConnectionReset, "2": ErrCanceled, "3": ErrConnectionReset}; !reflect.DeepEqual(reasons, want) {
			t.Fatalf("reasons %v, want %v", reasons, want)
		}
		r.FromClient("s", 0, msgs(t, call("9")), t0)
		if n := r.Close("", t0); n != 1 || (*out)[3].TransportError != "" || (*out)[3].Response != nil {
			t.Fatalf("Close ended %d: %+v", n, (*out)[3])
		}
	})
	t.Run("session end and expiry", func(t *testing.T) {
		r, out := newRec()
		r.SetClient("s", "a")
		r.FromClient("s", 0, msgs(t, call("1")), t0)
		r.FromClient("t", 0, msgs(t, call("1")), t0.Add(time.Minute))
		r.EndSession("s", ErrCanceled, t0.Add(time.Second))
		if len(*out) != 1 || (*out)[0].Session != "s" {
			t.Fatalf("records %+v", *out)
		}
		if n := r.Expire(t0.Add(30*time.Second), ErrTimeout, t0); n != 0 {
			t.Fatalf("Expire ended %d", n)
		}
		if n := r.Expire(t0.Add(2*time.Minute), ErrTimeout, t0.Add(3*time.Minute)); n != 1 || (*out)[1].Duration != 2*time.Minute {
			t.Fatalf("Expire ended %d: %+v", n, *out)
		}
		r.FromClient("s", 0, msgs(t, call("2")), t0)
		r.Close("", t0)
		if (*out)[2].Client != "" {
			t.Fatal("an ended session kept its client")
		}
	})
}

func TestRecord_AppendJSON(t *testing.T) {
	r := &Record{Time: time.Date(2026, 11, 1, 10, 0, 0, 123456789, time.UTC), Duration: 1234567 * time.Microsecond,
		Server: "thegram", Session: "s\"1", Client: "a/1", Request: []byte(`{"id":1}`), Response: []byte(`{"id":1,"result":{}}`)}
	want := `{"time":"2026-11-01T10:00:00.123456789Z","duration_ms":1234.567,"server":"thegram","session":"s\"1","client":"a/1","request":{"id":1},"response":{"id":1,"result":{}}}`
	if got := string(r.AppendJSON(nil)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	r = &Record{Time: r.Time, Server: "x", Request: []byte(`{}`), TransportError: ErrTimeout}
	want = `{"time":"2026-11-01T10:00:00.123456789Z","duration_ms":0,"server":"x","request":{},"transport_error":"timeout"}`
	if got := string(r.AppendJSON(nil)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestRecord_Outcome(t *testing.T) {
	f := func(resp string, want audit.Outcome) {
		t.Helper()
		r := &Record{}
		if resp != "" {
			r.Response = []byte(resp)
		}
		if got := r.Outcome(); got != want {
			t.Errorf("Outcome(%s) = %s, want %s", resp, got, want)
		}
	}
	f(``, audit.OutcomeNoResponse)
	f(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`, audit.OutcomeOK)
	f(`{"jsonrpc":"2.0","id":1,"result":{"isError":true}}`, audit.OutcomeToolError)
	f(`{"jsonrpc":"2.0","id":1,"error":{"code":-32603}}`, audit.OutcomeProtocolError)
}

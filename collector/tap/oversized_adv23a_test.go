package tap

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestResponseID(t *testing.T) {
	f := func(prefix, wantID string, wantOK, wantOther bool) {
		t.Helper()
		id, ok, other := ResponseID([]byte(prefix))
		if id != wantID || ok != wantOK || other != wantOther {
			t.Errorf("ResponseID(%q) = %q, %v, %v; want %q, %v, %v", prefix, id, ok, other, wantID, wantOK, wantOther)
		}
	}
	// The id before the result, cut anywhere after the result's name.
	f(`{"jsonrpc":"2.0","id":9001,"result":{"content":[{"type":"text","text":"HHH`, "9001", true, false)
	f(`{"id":"a\"b","jsonrpc":"2.0","result":`, `"a\"b"`, true, false)
	f(` {"error":{"code":-1},"id":3}`, "", false, false)
	f(`{"id":7,"jsonrpc":"2.0","error":{"code":-32603,"message":"xxx`, "7", true, false)
	f(`{"id":{"odd":[1,2]},"result":{`, `{"odd":[1,2]}`, true, false)
	// The result before the id, cut: unknown.
	f(`{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"HHH`, "", false, false)
	// A request or notification from the server is no answer.
	f(`{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{"x":"HHH`, "", false, true)
	f(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"HHH`, "", false, true)
	f(`"HHHH" `, "", false, true)
	// A batch, a null id, nothing known yet.
	f(`[{"jsonrpc":"2.0","id":1,"result":{`, "", false, false)
	f(`{"jsonrpc":"2.0","id":null,"error":{`, "", false, false)
	f(`{"jsonrpc":"2.0","id":12`, "", false, false)
	f(``, "", false, false)
}

// TestSSE_Big: the start of an event too big is handed on when the event
// ends, wherever the stream is cut, and from its first data line on.
func TestSSE_Big(t *testing.T) {
	msg := `{"jsonrpc":"2.0","id":5,"result":{"text":"` + strings.Repeat("H", 100) + `"}}`
	stream := "event: message\ndata: " + msg + "\n\ndata: ok\n\n: two lines\ndata: {\"id\":6,\ndata: \"result\":\"" + strings.Repeat("x", 100) + "\"}\n\n"
	for cut := 0; cut <= len(stream); cut++ {
		s := SSE{Max: 64}
		var big []string
		s.Big = func(p []byte) { big = append(big, string(p)) }
		var got []string
		fn := func(d []byte) { got = append(got, string(d)) }
		s.Feed([]byte(stream[:cut]), fn)
		s.Feed([]byte(stream[cut:]), fn)
		if !reflect.DeepEqual(got, []string{"ok"}) || s.Oversized != 2 || len(big) != 2 {
			t.Fatalf("cut %d: events %q, oversized %d, big %q", cut, got, s.Oversized, big)
		}
		if big[0] != msg {
			t.Fatalf("cut %d: prefix %q, want %q", cut, big[0], msg)
		}
		if id, ok, _ := ResponseID([]byte(big[1])); id != "6" || !ok {
			t.Fatalf("cut %d: prefix of a two-line event %q", cut, big[1])
		}
	}
	// Only PrefixBytes are kept.
	s := SSE{Max: 64, Big: func(p []byte) {
		if len(p) != PrefixBytes {
			t.Errorf("prefix of %d bytes, want %d", len(p), PrefixBytes)
		}
	}}
	s.Feed([]byte("data: "+strings.Repeat("H", 3*PrefixBytes)+"\n\n"), func([]byte) {})
}

func TestLines_Big(t *testing.T) {
	msg := `{"jsonrpc":"2.0","id":5,"result":{"text":"` + strings.Repeat("H", 100) + `"}}`
	stream := "{\"a\":1}\n" + msg + "\n{\"b\":2}\n"
	for cut := 0; cut <= len(stream); cut++ {
		var big []string
		l := Lines{Max: 64, Big: func(p []byte) { big = append(big, string(p)) }}
		var got []string
		fn := func(b []byte) { got = append(got, string(b)) }
		l.Feed([]byte(stream[:cut]), fn)
		l.Feed([]byte(stream[cut:]), fn)
		if !reflect.DeepEqual(got, []string{`{"a":1}`, `{"b":2}`}) || !reflect.DeepEqual(big, []string{msg}) {
			t.Fatalf("cut %d: lines %q, big %q", cut, got, big)
		}
	}
}

// TestRecorder_DuplicateIDs: requests in flight under one id (JSON-RPC
// forbids it; clients still do it) each get their answer: on an exchange,
// its own request first; elsewhere the oldest. Before adv23a the first
// ended unknown, recorded without a response although it was answered
// (adv23's L2).
func TestRecorder_DuplicateIDs(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	call := func(tool string) string {
		return `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"` + tool + `"}}`
	}
	resp := func(text string) string { return `{"jsonrpc":"2.0","id":5,"result":{"text":"` + text + `"}}` }
	newRec := func() (*Recorder, *[]*Record) {
		var out []*Record
		return NewRecorder("thegram", func(r *Record) { out = append(out, r) }), &out
	}
	paired := func(out []*Record) map[string]string {
		m := map[string]string{}
		for _, r := range out {
			m[string(r.Request)] = string(r.Response) + r.TransportError
		}
		return m
	}

	t.Run("in one batch, in order", func(t *testing.T) {
		r, out := newRec()
		keys := r.FromClient("s", 0, msgs(t, "["+call("a")+","+call("b")+"]"), t0)
		if len(keys) != 2 || r.Len() != 2 || r.Pending(keys) != 2 {
			t.Fatalf("keys %v, %d in flight", keys, r.Len())
		}
		r.FromServerOn(keys, "s", 0, msgs(t, "["+resp("A")+","+resp("B")+"]"), t0)
		want := map[string]string{call("a"): resp("A"), call("b"): resp("B")}
		if got := paired(*out); !reflect.DeepEqual(got, want) || r.Len() != 0 {
			t.Fatalf("paired %v, want %v", got, want)
		}
	})
	t.Run("two exchanges: each its own", func(t *testing.T) {
		r, out := newRec()
		ka := r.FromClient("s", 0, msgs(t, call("a")), t0)
		kb := r.FromClient("s", 0, msgs(t, call("b")), t0)
		r.FromServerOn(kb, "s", 0, msgs(t, resp("B")), t0)
		if got := paired(*out); !reflect.DeepEqual(got, map[string]string{call("b"): resp("B")}) || r.Pending(ka) != 1 {
			t.Fatalf("paired %v", got)
		}
		// A failure of an exchange ends its own request only.
		if n := r.Fail(ka, ErrTimeout, t0); n != 1 || (*out)[1].TransportError != ErrTimeout || string((*out)[1].Request) != call("a") {
			t.Fatalf("Fail ended %d: %v", n, paired(*out))
		}
	})
	t.Run("elsewhere: the oldest", func(t *testing.T) {
		r, out := newRec()
		r.FromClient("s", 0, msgs(t, call("a")), t0)
		kb := r.FromClient("s", 0, msgs(t, call("b")), t0.Add(time.Second))
		r.FromServer("s", 0, msgs(t, resp("A")), t0.Add(2*time.Second))
		if got := paired(*out); !reflect.DeepEqual(got, map[string]string{call("a"): resp("A")}) || r.Pending(kb) != 1 {
			t.Fatalf("paired %v", got)
		}
		if n := r.Expire(t0.Add(time.Hour), ErrTimeout, t0); n != 1 || r.Len() != 0 {
			t.Fatalf("Expire ended %d, %d left", n, r.Len())
		}
	})
	t.Run("close and session end end them all", func(t *testing.T) {
		r, out := newRec()
		r.FromClient("s", 0, msgs(t, "["+call("a")+","+call("b")+"]"), t0)
		r.FromClient("t", 0, msgs(t, "["+call("a")+","+call("b")+"]"), t0)
		r.EndSession("s", ErrCanceled, t0)
		if len(*out) != 2 || r.Len() != 2 {
			t.Fatalf("%d records, %d in flight", len(*out), r.Len())
		}
		if n := r.Close("", t0); n != 2 || r.Len() != 0 {
			t.Fatalf("Close ended %d", n)
		}
	})
	t.Run("an answer too large ends its call unrecorded", func(t *testing.T) {
		r, out := newRec()
		ka := r.FromClient("s", 0, msgs(t, call("a")), t0)
		kb := r.FromClient("s", 0, msgs(t, call("b")), t0)
		if n := r.Unrecordable(kb, "s", 0, "5"); n != 1 || r.Pending(kb) != 0 || r.Pending(ka) != 1 {
			t.Fatalf("Unrecordable ended %d", n)
		}
		if n := r.Unrecordable(nil, "s", 0, "5"); n != 1 || r.Len() != 0 || len(*out) != 0 {
			t.Fatalf("Unrecordable ended %d; %d records", n, len(*out))
		}
		if n := r.Unrecordable(nil, "s", 0, "5"); n != 0 {
			t.Fatalf("Unrecordable ended %d of none", n)
		}
	})
}

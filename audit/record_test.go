package audit

import (
	"reflect"
	"testing"
	"time"
)

// TestLean checks that the lean record keeps every text and the reading,
// drops the payloads, and shares no memory with the request it was cut
// from: the texts are views of one buffer, overwritten after.
func TestLean(t *testing.T) {
	buf := []byte("E_X|lost|E_Y|0011223344556677|rh-1|c_0123456789abcdef0123|fp|thegram|s-1|cl|acme|trace|span|7|tools/call|gram_patch|a.gram|key-1|doc_9|gram_read")
	at := func(s string) string {
		// A view of buf, as a decoder's strings are.
		for i := 0; i+len(s) <= len(buf); i++ {
			if string(buf[i:i+len(s)]) == s {
				b := buf[i : i+len(s)]
				return unsafeString(b)
			}
		}
		t.Fatalf("%q not in buffer", s)
		return ""
	}
	when := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	c := &Call{
		ID: at("c_0123456789abcdef0123"), Fingerprint: at("fp"), Time: when, Duration: time.Second,
		Server: at("thegram"), Session: at("s-1"), Client: at("cl"), Tenant: at("acme"), TraceID: at("trace"),
		SpanID: at("span"), RPCID: at("7"), Method: at("tools/call"), Tool: at("gram_patch"),
		Arguments: []byte(`{}`), Responded: true, Result: []byte(`{}`), Error: &RPCError{Code: 1},
		TransportError: "x", Source: "f:1", Received: when.Add(time.Second),
	}
	f := &Failure{Code: at("E_X"), Action: ActionEscalate, Message: at("lost")}
	g := &Failure{Code: at("E_Y"), Action: ActionFixInput}
	r := &Record{Call: c, Dialect: "thegram", Outcome: OutcomeOK, Tool: at("gram_patch"), Failure: f, RequestHash: at("rh-1"), Ops: []Op{
		{Seq: 0, Tool: c.Tool, Kind: OpWrite, Target: at("a.gram"), Key: at("key-1"), KeyKind: "request_id", Intent: at("0011223344556677"), Rev: 3, Failure: f},
		{Seq: 1, Tool: at("gram_read"), Kind: OpRead, Target: at("doc_9"), DocumentID: at("doc_9"), Failure: g},
		{Seq: 2, Tool: at("gram_read"), Kind: OpRead, Target: at("a.gram"), DocumentID: at("doc_9")},
	}}
	want := Record{Call: &Call{
		ID: "c_0123456789abcdef0123", Fingerprint: "fp", Time: when, Duration: time.Second, Server: "thegram",
		Session: "s-1", Client: "cl", Tenant: "acme", TraceID: "trace", SpanID: "span", RPCID: "7", Method: "tools/call",
		Tool: "gram_patch", Responded: true, Received: when.Add(time.Second),
	}, Dialect: "thegram", Outcome: OutcomeOK, Tool: "gram_patch", RequestHash: "rh-1", Ops: []Op{
		{Seq: 0, Tool: "gram_patch", Kind: OpWrite, Target: "a.gram", Key: "key-1", KeyKind: "request_id", Intent: "0011223344556677", Rev: 3},
		{Seq: 1, Tool: "gram_read", Kind: OpRead, Target: "doc_9", DocumentID: "doc_9"},
		{Seq: 2, Tool: "gram_read", Kind: OpRead, Target: "a.gram", DocumentID: "doc_9"},
	}}
	l := r.Lean()
	for i := range buf {
		buf[i] = '#'
	}
	if !reflect.DeepEqual(*l.Call, *want.Call) {
		t.Errorf("call:\n got %+v\nwant %+v", *l.Call, *want.Call)
	}
	if l.Dialect != want.Dialect || l.Outcome != want.Outcome || l.Tool != want.Tool || l.RequestHash != want.RequestHash {
		t.Errorf("record: got %+v", *l)
	}
	// The failures are copies, the call's shared as it was.
	wantF, wantG := Failure{Code: "E_X", Action: ActionEscalate, Message: "lost"}, Failure{Code: "E_Y", Action: ActionFixInput}
	if l.Failure == nil || *l.Failure != wantF || l.Failure == f {
		t.Errorf("failure: got %+v", l.Failure)
	}
	if len(l.Ops) == 3 && (l.Ops[0].Failure != l.Failure || l.Ops[1].Failure == nil || *l.Ops[1].Failure != wantG || l.Ops[2].Failure != nil) {
		t.Errorf("operations' failures: got %v %v %v", l.Ops[0].Failure, l.Ops[1].Failure, l.Ops[2].Failure)
	}
	if len(l.Ops) != len(want.Ops) {
		t.Fatalf("ops: got %d, want %d", len(l.Ops), len(want.Ops))
	}
	for i := range want.Ops {
		got := l.Ops[i]
		got.Failure = nil
		if got != want.Ops[i] {
			t.Errorf("op %d:\n got %+v\nwant %+v", i, l.Ops[i], want.Ops[i])
		}
	}
	if &l.Ops[0] == &r.Ops[0] {
		t.Error("the lean record shares the operations")
	}
}

package dialect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/valyala/fastjson"
)

// TestPatchMembers: a gram_patch read with its arguments' canonical text
// (as the decoders hand it) has the intent, binding and everything else it
// has when the reader makes each member's canonical text again, whether
// the text is the arguments as sent (already canonical) or made by
// canon.Append, and for arguments that cannot be cut (repeated keys, not an
// object).
func TestPatchMembers(t *testing.T) {
	cut := 0
	f := func(args string) {
		t.Helper()
		var pa fastjson.Parser
		v, err := pa.Parse(args)
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		read := func(canonical []byte) string {
			c := &audit.Call{Time: time.Unix(0, 0), Server: "thegram", Tool: "gram_patch", Arguments: []byte(args),
				Result: []byte(`{"structuredContent":{"path":"p","rev":3,"sync":{"state":"synced"}}}`), Responded: true}
			var pr fastjson.Parser
			res, _ := pr.Parse(string(c.Result))
			r := NewReader(Config{})
			if canonical != nil && r.patchMembers(v, canonical) != nil {
				cut++
			}
			rec := r.ReadPayload(c, &Payload{Args: v, Result: res, CanonicalArgs: canonical})
			return fmt.Sprintf("%+v", rec.Ops)
		}
		want := read(nil)
		if got := read(canon.Append(nil, v)); got != want {
			t.Errorf("%s with canon.Append's text:\n%s\nwant\n%s", args, got, want)
		}
		if canon.Canonical([]byte(args)) {
			if got := read([]byte(args)); got != want {
				t.Errorf("%s as sent:\n%s\nwant\n%s", args, got, want)
			}
		}
	}
	f(`{"base_revision":3,"operations":[{"op":"replace","text":"a\"}b"}],"path":"notes/a.gram","request_id":"r1"}`)
	f(`{"context":{"b":1,"a":[2,{"y":null,"x":"\u00e9"}]},"effective_at":"2026-11-02T09:00:00Z","expected_hash":"h","operations":[],"path":"p","request_id":"r"}`)
	f(`{"path":"p","operations":[{"op":"append"}],"request_id":"r","base_revision":4}`) // not sorted
	f(`{"p\u0061th":"p","operations":[1,2.50,-0,1e3,true,false,null]}`)                 // an escaped key
	f(`{"path":"p","path":"q","operations":[]}`)                                        // a repeated key
	f(`{"operations":[],"path":"p","p\u0061th":"q"}`)                                   // repeated once unescaped
	f(`{"context":{"a":1,"a":2},"path":"p"}`)                                           // repeated within a member
	f(`{}`)
	f(`[{"path":"p"}]`)
	f(`"path"`)
	f(`null`)
	f(`{"path":"\u2028 <>&","expected_hash":"\\\"","zz":{"path":"nested"}}`)
	if cut < 8 {
		t.Fatalf("only %d readings took the members from the canonical text", cut)
	}
}

// TestMembers: canon.Members on Append's output finds what Get finds.
func TestMembers(t *testing.T) {
	var pa fastjson.Parser
	for _, in := range []string{
		`{"a":"}\"","b":[{"c":"]"}],"c":{"d":{}},"e":-1.5e3,"f":null,"g":true}`,
		`{}`, `{"only":[]}`,
	} {
		v, _ := pa.Parse(in)
		o, _ := v.Object()
		text := canon.Append(nil, v)
		keys := []string{"a", "b", "c", "e", "f", "g", "only", "none"}
		vals := make([][]byte, len(keys))
		if n := canon.Members(text, keys, vals); n != o.Len() {
			t.Errorf("Members(%s) = %d members, want %d", text, n, o.Len())
		}
		for i, k := range keys {
			var want []byte
			if x := v.Get(k); x != nil {
				want = canon.Append(nil, x)
			}
			if string(vals[i]) != string(want) || (vals[i] == nil) != (want == nil) {
				t.Errorf("Members(%s)[%s] = %s, want %s", text, k, vals[i], want)
			}
		}
	}
	for _, bad := range []string{``, `[]`, `{"a":1`, `{"a":}`, `{"a"1}`, `{"a":"x}`, `{"a":1}}`, `{"a":[1}`} {
		if n := canon.Members([]byte(bad), []string{"a"}, make([][]byte, 1)); n != -1 {
			t.Errorf("Members(%s) = %d, want -1", bad, n)
		}
	}
}

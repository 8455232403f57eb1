package tap

import (
	"encoding/json"
	"testing"
)

// FuzzSSE: no stream, cut anywhere, makes the event framer panic or hand
// out more than its bound.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\"}\n\n"), 3)
	f.Add([]byte("data: a\r\ndata: b\r\r\n\n"), 1)
	f.Fuzz(func(t *testing.T, stream []byte, cut int) {
		s := SSE{Max: 1 << 10, Big: func(prefix []byte) {
			if len(prefix) > PrefixBytes {
				t.Fatalf("a prefix of %d bytes passed PrefixBytes", len(prefix))
			}
			ResponseID(prefix)
		}}
		if cut <= 0 || cut > len(stream) {
			cut = len(stream)
		}
		for p := stream; len(p) > 0; {
			n := min(cut, len(p))
			s.Feed(p[:n], func(data []byte) {
				if len(data) > 1<<10+len("data: ") {
					t.Fatalf("an event of %d bytes passed the bound", len(data))
				}
			})
			p = p[n:]
		}
	})
}

// FuzzParse: no message makes the JSON-RPC parser panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}`))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":"a","result":{}},7]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, _ := Parse(data)
		for i := range msgs {
			ClientInfo(&msgs[i])
		}
	})
}

// FuzzResponseID: no prefix makes the id reader panic, and an id it reads
// is one JSON value. (It may differ from Parse's on a message with two id
// members, or one spelled "ID", which encoding/json also takes: the reader
// sees only the first bytes.)
func FuzzResponseID(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":9001,"result":{"content":[]}}`))
	f.Add([]byte(`{"result":{},"id":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, ok, other := ResponseID(data)
		if ok && !json.Valid([]byte(id)) || ok && other {
			t.Fatalf("ResponseID read %q, %v, %v", id, ok, other)
		}
	})
}

package capture

import (
	"testing"

	"github.com/valyala/fastjson"
)

// TestParse_RawText checks that arguments and results are the text sent,
// and that the text parses to the value fastjson read from the record.
func TestParse_RawText(t *testing.T) {
	f := func(record, wantArgs, wantResult string) {
		t.Helper()
		var rp RecordParser
		c, err := rp.Parse([]byte(record), "in", 1)
		if err != nil {
			t.Fatalf("Parse(%s): %v", record, err)
		}
		if string(c.Arguments) != wantArgs || string(c.Result) != wantResult {
			t.Errorf("Parse(%s)\n arguments %s, result %s\nwant %s, %s", record, c.Arguments, c.Result, wantArgs, wantResult)
		}
	}
	const head = `{"time":"2026-11-02T09:00:00Z","server":"s",`
	f(head+`"request":{"params":{"name":"t","arguments":{ "a" : [1, "}\"]"] }}},"response":{"result":{"x":"{"} }}`,
		`{ "a" : [1, "}\"]"] }`, `{"x":"{"}`)
	// The first of two members wins, as with fastjson's Get.
	f(head+`"request":{"params":{"name":"t","arguments":{"a":1},"arguments":{"b":2}}},"response":{"result":1,"result":2}}`,
		`{"a":1}`, `1`)
	// An escaped key may spell the member: the value fastjson chose, which
	// here is the one spelled plainly, stands in, serialized again.
	f(head+`"request":{"params":{"name":"t","\u0061rguments":{ "a":1 },"arguments":[ 2 ]}},"response":{"result":[ 1 ]}}`,
		`[2]`, `[ 1 ]`)
	f(head+`"request":{"params":{"name":"t"}},"response":{"error":{"code":1,"data":{ "d": null }}}}`, ``, ``)
	f(head+`"request":{"params":{"name":"t","arguments":null}},"response":{"result":null}}`, ``, ``)
	f(head+`"request":{"params":{"name":"t","arguments":"x"}}, "response" : { "result" : -1.5e3 } }`, `"x"`, `-1.5e3`)
}

func TestRawMembers(t *testing.T) {
	f := func(obj string, want ...string) {
		t.Helper()
		var p fastjson.Parser
		if _, err := p.Parse(obj); err != nil {
			t.Fatalf("bad test input %s: %v", obj, err)
		}
		keys := []string{"a", "b"}
		vals := make([][]byte, 2)
		if !rawMembers([]byte(obj), keys, vals) {
			t.Fatalf("rawMembers(%s) not ok", obj)
		}
		for i := range keys {
			if string(vals[i]) != want[i] {
				t.Errorf("rawMembers(%s)[%s] = %q, want %q", obj, keys[i], vals[i], want[i])
			}
		}
	}
	f(`{}`, "", "")
	f(` { "a" : 1 , "b" : "x\\" } `, "1", `"x\\"`)
	f(`{"c":{"a":1},"b":[{"a":"]"}],"a":true}`, "true", `[{"a":"]"}]`)
	f(`{"b":"\"","a":nan}`, "nan", `"\""`)
	f(`[1]`, "", "")
}

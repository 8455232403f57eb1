package capture

import (
	"reflect"
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
	// The last of two members wins, as with the MCP SDKs (until rec50 the
	// first, as with fastjson's Get, while the canonical arguments took the
	// last).
	f(head+`"request":{"params":{"name":"t","arguments":{"a":1},"arguments":{"b":2}}},"response":{"result":1,"result":2}}`,
		`{"b":2}`, `2`)
	// An escaped key may spell the member: the earlier copy is blanked,
	// and the text of the last is found as sent.
	f(head+`"request":{"params":{"name":"t","\u0061rguments":{ "a":1 },"arguments":[ 2 ]}},"response":{"result":[ 1 ]}}`,
		`[ 2 ]`, `[ 1 ]`)
	// An escaped key that is the last copy: the values read, serialized
	// again, stand in.
	f(head+`"request":{"params":{"name":"t","arguments":[ 2 ],"\u0061rguments":{ "a":1 }}},"response":{"result":[ 1 ]}}`,
		`{"a":1}`, `[1]`)
	f(head+`"request":{"params":{"name":"t"}},"response":{"error":{"code":1,"data":{ "d": null }}}}`, ``, ``)
	f(head+`"request":{"params":{"name":"t","arguments":null}},"response":{"result":null}}`, ``, ``)
	f(head+`"request":{"params":{"name":"t","arguments":"x"}}, "response" : { "result" : -1.5e3 } }`, `"x"`, `-1.5e3`)
}

func TestFindMembers(t *testing.T) {
	f := func(obj string, want ...string) {
		t.Helper()
		var p fastjson.Parser
		if _, err := p.Parse(obj); err != nil {
			t.Fatalf("bad test input %s: %v", obj, err)
		}
		inner := []member{{key: "a"}}
		wants := []member{{key: "a"}, {key: "b"}, {key: "c", sub: inner}}
		end, ok := findMembers([]byte(obj), skipSpace([]byte(obj), 0), wants)
		if !ok {
			t.Fatalf("findMembers(%s) not ok", obj)
		}
		got := []string{string(wants[0].val), string(wants[1].val), string(wants[2].val), string(inner[0].val), obj[end:]}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("findMembers(%s) = %q, want %q", obj, got, want)
		}
	}
	f(`{}`, "", "", "", "", "")
	f(` { "a" : 1 , "b" : "x\\" } `, "1", `"x\\"`, "", "", " ")
	f(`{"c":{"b":{"a":2},"a":1},"b":[{"a":"]"}],"a":true,"c":3}`, "true", `[{"a":"]"}]`, `{"b":{"a":2},"a":1}`, "1", "")
	f(`{"b":"\"","a":nan,"c":[1]}`, "nan", `"\""`, "[1]", "", "")
	f(`[1]`, "", "", "", "", "")
}

func TestFindPath(t *testing.T) {
	f := func(obj string, want string, wantOK bool) {
		t.Helper()
		got, ok := findPath([]byte(obj), skipSpace([]byte(obj), 0), "a", "b")
		if string(got) != want || ok != wantOK {
			t.Errorf("findPath(%s) = %q %v, want %q %v", obj, got, ok, want, wantOK)
		}
	}
	f(`{"a":{"b":1}}`, "1", true)
	f(` { "x" : [ "}" ] , "a" : { "c" : { "b" : 2 } , "b" : [ 3 ] } } `, "[ 3 ]", true)
	f(`{"a":{"b":{"c":"]"}},"a":{"b":2}}`, `{"c":"]"}`, true) // the first member wins
	f(`{"a":{"c":1},"a":{"b":2}}`, "", true)                  // as fastjson's Get sees it
	f(`{"a":[{"b":1}]}`, "", true)
	f(`{"\u0061":{"b":1},"a":{"b":2}}`, "", false) // an escaped key may spell "a"
	f(`{"a":{"b":1},"\u0061":{"b":2}}`, "1", true) // found before it
	f(`{"a":{"b":`, "", true)
	f(`[]`, "", true)
}

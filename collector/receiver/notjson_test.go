package receiver_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCalls_NotJSONSaysWhereAndWhy: a line of /v1/calls that fastjson
// cannot read is rejected with one reason and the byte offset it failed
// at, not fastjson's chain of one link per level (14 kB for a line nested
// past its limit of 300, the reason at its end), and the lines beside it
// are stored.
func TestCalls_NotJSONSaysWhereAndWhy(t *testing.T) {
	e := newEnv(t, nil)
	good1, good2 := record("thegram", "gram_read", now, 1), record("thegram", "gram_read", now, 4)
	deep := strings.Replace(record("thegram", "gram_read", now, 2), `"a.gram"`, strings.Repeat("[", 305)+strings.Repeat("]", 305), 1)
	broken := strings.Replace(record("thegram", "gram_read", now, 3), `"a.gram"`, `"a.gram",}`, 1)
	// The arrays sit in 4 objects (record, request, params, arguments): the
	// 297th array is the 301st level.
	deepAt := strings.Index(deep, "[") + 296
	brokenAt := strings.Index(broken, `}}`)
	a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(good1+"\n"+deep+"\n"+broken+"\n"+good2+"\n"))
	var got struct {
		Accepted int      `json:"accepted"`
		Rejected int      `json:"rejected"`
		Errors   []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 {
		t.Fatalf("%d %.500s: %v", a.status, a.body, err)
	}
	if got.Accepted != 2 || got.Rejected != 2 || len(got.Errors) != 2 {
		t.Fatalf("accepted %d, rejected %d, errors %d: want 2, 2, 2 (%.500s)", got.Accepted, got.Rejected, len(got.Errors), a.body)
	}
	for i, want := range []string{
		"body:2: not JSON: nested deeper than 300 levels at byte offset " + itoa(deepAt) + "; unparsed tail: ",
		"body:3: not JSON: cannot find opening '\"\" for object key at byte offset " + itoa(brokenAt) + "; unparsed tail: ",
	} {
		if !strings.HasPrefix(got.Errors[i], want) || len(got.Errors[i]) > 300 {
			t.Errorf("error %d (%d bytes): %.400q\nwant it short and starting %q", i, len(got.Errors[i]), got.Errors[i], want)
		}
	}
	if n := len(e.stored(t)); n != 2 {
		t.Errorf("%d calls stored, want the 2 good ones", n)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestCalls_BadSourceNamed: a source name that cannot be taken is refused
// naming where it came from (the header or ?source=) and what is wrong
// with it, with its byte offset: the answer named the header for a bad
// ?source= and said only the rule.
func TestCalls_BadSourceNamed(t *testing.T) {
	e := newEnv(t, nil)
	body := []byte(record("thegram", "gram_read", now, 1) + "\n")
	f := func(path string, headers []string, want string) {
		t.Helper()
		a := e.post(t, path, "application/x-ndjson", tokAcme, body, headers...)
		if a.status != 400 || !strings.HasPrefix(a.body, want) {
			t.Errorf("%s %v: %d %q, want 400 starting %q", path, headers, a.status, a.body, want)
		}
	}
	f("/v1/calls", []string{"Mcpaudit-Source", "relay\xff-1"}, "Mcpaudit-Source: invalid UTF-8 at byte offset 5;")
	f("/v1/calls", []string{"Mcpaudit-Source", strings.Repeat("a", 300)}, "Mcpaudit-Source: 300 bytes, more than the limit of 256;")
	f("/v1/calls?source=relay%01", nil, "parameter source: a control character at byte offset 5;")
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored from refused requests", n)
	}
}

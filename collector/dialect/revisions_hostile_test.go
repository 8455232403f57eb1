package dialect

import (
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRevisionsOf_Hostile: payloads a broken or hostile sender may store
// (huge, nested past any parser's depth, invalid UTF-8, a key twice,
// revisions of every type, fields missing or of the wrong type) give
// what they say, or nothing, and never panic.
func TestRevisionsOf_Hostile(t *testing.T) {
	f := func(name, args, result, doc string, want Revisions) {
		t.Helper()
		c := audit.Call{Arguments: []byte(args), Result: []byte(result)}
		var got Revisions
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", name, r)
				}
			}()
			got = RevisionsOf(&c, doc)
		}()
		if got != want {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	f("nested 100000 deep", `{"base_revision":3,"x":`+deep+`}`, `{"structuredContent":`+deep+`}`, "a", Revisions{})
	big := `{"path":"a","base_revision":7,"operations":[` + strings.Repeat(`{"op":"append_block","text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},`, 100000) + `{}]}`
	f("10 MB of arguments", big, `{"structuredContent":{"path":"a","rev":8}}`, "a", Revisions{Before: "7", After: "8"})
	f("invalid UTF-8 in a hash", "{\"expected_hash\":\"\xff\xfe\"}", "", "a", Revisions{HashBefore: "\xff\xfe"})
	f("invalid UTF-8 outside strings", "{\"expected_hash\":\"h\"}\xff", "", "a", Revisions{})
	f("revision as a string", `{"base_revision":"22"}`, `{"structuredContent":{"rev":"23"}}`, "a", Revisions{Before: "22", After: "23"})
	f("revision as an object", `{"base_revision":{"n":1},"baseRevision":4}`, `{"structuredContent":{"rev":[1],"revision":5}}`, "a", Revisions{Before: "4", After: "5"})
	f("no structuredContent", `{}`, `{"content":[{"type":"text","text":"rev 3"}]}`, "a", Revisions{})
	f("structuredContent not an object", `{}`, `{"structuredContent":"x"}`, "a", Revisions{})
	f("outcomes not an array", `{}`, `{"structuredContent":{"outcomes":{"value":{"revision":3}}}}`, "a", Revisions{})
	f("result null", `null`, `null`, "a", Revisions{})
	f("empty payloads", ``, ``, "a", Revisions{})
	f("100000 outcomes", `{}`, `{"structuredContent":{"outcomes":[`+strings.Repeat(`{"value":{"documentId":"b","revision":1}},`, 100000)+`{"value":{"documentId":"a","revision":2}}]}}`, "a", Revisions{After: "2"})
}

// TestRevisionsOf_ExactNumbers: a revision is an integer (the spec's
// receipts: base_revision, rev), and the detector reads it exactly
// (GetInt64); the timeline must show the number the receipt holds, not
// the nearest float64 (2^53 + 1 reads 2^53 through GetFloat64).
func TestRevisionsOf_ExactNumbers(t *testing.T) {
	f := func(n string) {
		t.Helper()
		c := audit.Call{Arguments: []byte(`{"base_revision":` + n + `}`), Result: []byte(`{"structuredContent":{"rev":` + n + `}}`)}
		if got := RevisionsOf(&c, "a"); got.Before != n || got.After != n {
			t.Errorf("revision %s reads %+v", n, got)
		}
	}
	f("22")
	f("9007199254740993")
	f("9223372036854775807")
}

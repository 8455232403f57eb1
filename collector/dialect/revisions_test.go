package dialect

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

func TestRevisionsOf(t *testing.T) {
	f := func(args, result, doc string, want Revisions) {
		t.Helper()
		c := audit.Call{Arguments: []byte(args), Result: []byte(result)}
		if got := RevisionsOf(&c, doc); got != want {
			t.Errorf("RevisionsOf(%s, %s) = %+v, want %+v", args, result, got, want)
		}
	}
	// Thegram gram_patch: the CAS base in, the new revision out.
	f(`{"path":"a.gram","base_revision":22,"expected_hash":"1a70","request_id":"r"}`,
		`{"isError":false,"structuredContent":{"path":"a.gram","rev":23,"hash":"2edd"}}`, "a.gram",
		Revisions{Before: "22", After: "23", HashBefore: "1a70", HashAfter: "2edd"})
	// A create: an explicit null base.
	f(`{"path":"a.gram","base_revision":null}`, `{"structuredContent":{"path":"a.gram","rev":1,"hash":"aa"}}`, "a.gram",
		Revisions{Before: "null", After: "1", HashAfter: "aa"})
	// No response: only what was sent.
	f(`{"path":"a.gram","base_revision":5,"expected_hash":"h5"}`, ``, "a.gram", Revisions{Before: "5", HashBefore: "h5"})
	// Oddlynew run: the result's revision.
	f(`{"code":"..."}`, `{"structuredContent":{"result":{"documentId":"doc_1","writeConfirmed":true,"revision":15}}}`, "doc_1",
		Revisions{After: "15"})
	// Oddlynew run that timed out: the outcome of the write on this document.
	f(`{"code":"..."}`, `{"isError":true,"structuredContent":{"error":"Execution timed out","outcomes":[{"seq":2,"value":{"documentId":"doc_2","revision":9}},{"seq":3,"value":{"documentId":"doc_1","revision":14}}]}}`, "doc_1",
		Revisions{After: "14"})
	// Another document's answer says nothing about this one.
	f(`{"path":"b.gram"}`, `{"structuredContent":{"path":"a.gram","rev":3}}`, "b.gram", Revisions{})
	// Values of every JSON type a key may hold; an answer that is no object.
	f(`{"base_revision":1e3,"expected_hash":true}`, `[1,2]`, "a.gram", Revisions{Before: "1000", HashBefore: "true"})
	// A path that is no string names no document: documentId does.
	f(`{}`, `{"structuredContent":{"path":5,"documentId":"doc_1","revision":2.5}}`, "doc_1", Revisions{After: "2.5"})
	// Outcomes that are not objects are passed over; of two on the
	// document, the last is read.
	f(`{}`, `{"structuredContent":{"outcomes":[1,{"value":"x"},{"value":{"documentId":"doc_1","revision":3}},{"value":{"documentId":"doc_1","revision":4,"hash":"h4"}}]}}`, "doc_1",
		Revisions{After: "4", HashAfter: "h4"})
	// Not JSON.
	f(`nope`, `nope`, "a.gram", Revisions{})
}

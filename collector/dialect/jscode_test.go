package dialect

import (
	"reflect"
	"testing"
)

func TestExtractCalls(t *testing.T) {
	f := func(code string, want ...string) {
		t.Helper()
		var got []string
		for _, c := range extractCalls(code) {
			got = append(got, c.Tool+"("+c.Args+")")
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("extractCalls(%q)\n got %q\nwant %q", code, got, want)
		}
	}
	f(`async () => await documents.getDocument({ documentId: "d1" })`, `documents.getDocument({ documentId: "d1" })`)
	f("async () => {\n const d = await documents.getDocument({documentId:\"d\"});\n return documents.editDocument({ documentId: \"d\", writeBasis: d.writeBasis, edits: [{op: \"x(\"}] });\n}",
		`documents.getDocument({documentId:"d"})`, `documents.editDocument({ documentId: "d", writeBasis: d.writeBasis, edits: [{op: "x("}] })`)
	f(`// documents.archiveDocument({documentId: "x"})
"documents.createDocument(" + ids.mintOperationIds ({ count: 1 })`, `ids.mintOperationIds({ count: 1 })`)
	f(`mydocuments.getDocument({})`)
	f(`x.documents.getDocument({})`)
	f(`/* organizations.planDocumentCopy() */ organizations.applyDocumentCopy({ operationId: "op", planToken: "pt" `,
		`organizations.applyDocumentCopy({ operationId: "op", planToken: "pt" )`)
	f(``)
}

func TestLiterals(t *testing.T) {
	got := literals(`{ documentId: "doc_1", "creationId": '01a', copyId: ` + "`c1`" + `, title: "A \"q\"", documentId: "doc_2", n: 3 }`)
	want := map[string]string{"documentId": "doc_1", "creationId": "01a", "copyId": "c1", "title": `A \"q\"`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("literals = %q, want %q", got, want)
	}
}

func TestStripWriteBasis(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := stripWriteBasis(in); got != want {
			t.Errorf("stripWriteBasis(%q) = %q, want %q", in, got, want)
		}
	}
	f(`{ documentId: "d", writeBasis: "wb_1", edits: [] }`, `{ documentId: "d", writeBasis:, edits: [] }`)
	f(`{ documentId: "d", writeBasis: d.writeBasis,
  edits: [] }`, `{ documentId: "d", writeBasis:,
  edits: [] }`)
	f(`{ writeBasis: 'x' }`, `{ writeBasis: }`)
}

func TestStripKey(t *testing.T) {
	if got := stripKey(`{ creationId: "01a", title: "T" }`, "creationId"); got != `{ creationId:, title: "T" }` {
		t.Fatalf("stripKey = %q", got)
	}
}

package dialect

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// FuzzExtractCalls: the code-literal extractor never panics and returns
// argument text that is part of the code.
func FuzzExtractCalls(f *testing.F) {
	f.Add(`async () => await documents.editDocument({ documentId: "doc_1", writeBasis: d.writeBasis, edits: [] })`)
	f.Add(`async () => { const d = await documents.getDocument({ documentId: 'x' }); /* ids.mintOperationIds() */ return organizations.planDocumentCopy({ copyId: ` + "`c`" + ` }) }`)
	f.Add(`documents.createDocument({ "creationId": "01a", title: "a \" b" `)
	f.Fuzz(func(t *testing.T, code string) {
		for _, c := range extractCalls(code) {
			if !strings.Contains(code, c.Args) || c.Pos < 0 || c.Pos >= len(code) {
				t.Fatalf("call %+v is not in the code", c)
			}
			_ = literals(c.Args)
		}
		_ = stripWriteBasis(code)
		_ = stripKey(code, "creationId")
	})
}

// FuzzAppendCalls: the scan finds the calls the character-by-character
// scan it replaced found.
func FuzzAppendCalls(f *testing.F) {
	f.Add(`async () => await documents.editDocument({ documentId: "doc_1", writeBasis: d.writeBasis, edits: [] })`)
	f.Add(`x2documents.getDocument({}); $documents.getDocument(); _ids.x(); a.ids.mint(); /* documents.a() */ // ids.b()
'documents.c()' ids.mintOperationIds ( { n: "(" } ) organizations.p(`)
	f.Fuzz(func(t *testing.T, code string) {
		got, want := appendCalls(nil, code), refAppendCalls(nil, code)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("appendCalls(%q)\n got %+v\nwant %+v", code, got, want)
		}
	})
}

// refAppendCalls is appendCalls as it was before its scan skipped runs: the
// reference the fuzz test holds it to. It appends the provider calls written in code to calls.
func refAppendCalls(calls []codeCall, code string) []codeCall {
	n := len(code)
	for i := 0; i < n; {
		c := code[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(code, i)
			continue
		case c == '/' && i+1 < n && code[i+1] == '/':
			for i < n && code[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < n && code[i+1] == '*':
			end := strings.Index(code[i+2:], "*/")
			if end < 0 {
				return calls
			}
			i += end + 4
			continue
		}
		if isIdentStart(c) && (i == 0 || !isIdentPart(code[i-1]) && code[i-1] != '.') {
			j := i
			for j < n && isIdentPart(code[j]) {
				j++
			}
			ns := code[i:j]
			if isProvider(ns) && j < n && code[j] == '.' {
				k := j + 1
				for k < n && isIdentPart(code[k]) {
					k++
				}
				method := code[j+1 : k]
				p := k
				for p < n && (code[p] == ' ' || code[p] == '\t' || code[p] == '\n' || code[p] == '\r') {
					p++
				}
				if method != "" && p < n && code[p] == '(' {
					end := matchParen(code, p)
					// code[i:k] is ns + "." + method, without the copy.
					calls = append(calls, codeCall{Tool: code[i:k], Args: code[p+1 : end], Pos: i})
					i = p + 1
					continue
				}
			}
			i = j
			continue
		}
		i++
	}
	return calls
}

// FuzzOddlynewRun: any run result is read without panicking.
func FuzzOddlynewRun(f *testing.F) {
	f.Add(`async () => await documents.editDocument({ documentId: "d" })`, `{"isError":true,"structuredContent":{"error":"Execution timed out","calls":[{"tool":"documents.editDocument","outcome":"in_flight_unknown","count":1}],"outcomes":[{"seq":1,"tool":"documents.editDocument","access":"write","outcome":"in_flight_unknown"}]}}`)
	f.Add(`documents.createDocument({creationId:"c"})`, `{"isError":false,"structuredContent":{"result":[{"documentId":"d","action":"created"}],"calls":[{"tool":"documents.createDocument","outcome":"succeeded","count":3}]}}`)
	r := NewReader(Config{})
	f.Fuzz(func(t *testing.T, code, result string) {
		args := []byte(`{"code":` + quote(code) + `}`)
		c := &audit.Call{Time: time.Unix(0, 0), Server: "oddlynew", Tool: "run", Arguments: args, Result: []byte(result), Responded: true}
		a := r.Read(c)
		for _, op := range a.Ops {
			if op.Status == 0 {
				t.Fatalf("op without status: %+v", op)
			}
		}
		// What is read survives the store's encoding.
		var back audit.Record
		if err := audit.ReadReading(audit.AppendReading(nil, a), &back); err != nil {
			t.Fatal(err)
		}
		back.Call = a.Call
		if !reflect.DeepEqual(&back, a) {
			t.Fatalf("reading changed through the codec:\n%+v\n%+v", &back, a)
		}
	})
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(" ")
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

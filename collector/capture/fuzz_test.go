package capture

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func addExamples(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
}

// FuzzRecordParser: no input makes the call-record parser panic, and a
// record it accepts has what every call needs.
func FuzzRecordParser(f *testing.F) {
	f.Add([]byte(good))
	for _, l := range bytes.Split(mustRead(f, "../../testdata/examples/oddlynew-edit-double-apply.ndjson"), []byte("\n")) {
		f.Add(l)
	}
	for _, l := range lenientSeeds {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rp RecordParser
		c, err := rp.Parse(data, "fuzz", 1)
		if err != nil {
			if !IsReject(err) {
				t.Fatalf("a parse error must be a reject: %v", err)
			}
			return
		}
		if c.ID == "" || c.Server == "" || c.Time.IsZero() {
			t.Fatalf("accepted an incomplete call: %+v", c)
		}
		// Read as encoding/json reads it (a name given twice: the last
		// copy), written again with each name once, the record is the
		// same call.
		if !utf8.Valid(data) {
			return // encoding/json reads bytes that are not UTF-8 otherwise
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			return
		}
		var rp2 RecordParser
		c2, err := rp2.Parse(again, "fuzz", 1)
		if err != nil {
			t.Fatalf("%s kept, its last copies %s rejected: %v", data, again, err)
		}
		if c.ID != c2.ID || c.Fingerprint != c2.Fingerprint || c.RPCID != c2.RPCID || c.Tool != c2.Tool || c.Session != c2.Session ||
			c.Server != c2.Server || c.Method != c2.Method || c.Responded != c2.Responded || c.RespSum != c2.RespSum || c.TransportError != c2.TransportError {
			t.Fatalf("%s read as\n%+v\nits last copies %s as\n%+v", data, c, again, c2)
		}
	})
}

// lenientSeeds are records with members of the wrong type or named twice,
// each kept with a warning (strict49's seeds, cef8d99, which it refused).
var lenientSeeds = []string{
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","server":"x","request":{"method":"tools/call","params":{"name":"gram_read"}}}`,
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","request":{"id":1,"id":2,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a","p\u0061th":"b"}}}}`,
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","request":{"id":{"a":1},"method":5,"params":{"name":"gram_read","arguments":[1]}}}`,
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","request":{"id":1e999999,"method":"tools/call","params":{"name":"gram_read"}},"response":{"result":{"isError":"true"}}}`,
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","request":{"id":-1E400,"method":"tools/call","params":{"name":"gram_read"}},"response":{"result":[1],"error":{"message":7}}}`,
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","x":{"a":1,"a":2},"request":{"id":null,"method":null,"params":{"name":"gram_read","arguments":null}},"response":{"result":{"isError":null,"isError":false}}}`,
	`{"time":"2026-11-02T09:00:00Z","server":"thegram","trace_id":"ab","span_id":"cd","request":{"method":"tools/call","params":{"name":"gram_read","name":"gram_patch","arguments":{"request_id":"a","request_id":"b"}}},"response":{"result":{"isError":true},"result":{}}}`,
}

// FuzzDecoder: the whole decoding path, OTLP JSON included, never panics
// and never loops: it ends with io.EOF or a fatal error.
func FuzzDecoder(f *testing.F) {
	addExamples(f, "../../testdata/examples/*.otlp.json")
	addExamples(f, "../../testdata/examples/thegram-normal-edit.ndjson")
	f.Add([]byte(`[` + good + `]`))
	f.Add([]byte(strings.Join(lenientSeeds, "\n")))
	f.Add([]byte("[" + strings.Join(lenientSeeds, ",") + "]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := NewDecoder(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		for i := 0; i < 1_000_000; i++ {
			_, err := d.Next()
			if err == io.EOF {
				return
			}
			if err != nil && !IsReject(err) {
				return
			}
		}
		t.Fatal("decoder does not end")
	})
}

func mustRead(f *testing.F, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzOTLPJSON: an OTLP JSON document that pdata decodes is read block by
// block into the calls, readings, rejects and order of decoding it whole
// and sorting it by time.
var emptyKey = regexp.MustCompile(`""\s*:`)

func FuzzOTLPJSON(f *testing.F) {
	addExamples(f, "../../testdata/examples/*.otlp.json")
	f.Add([]byte(oneDoc("thegram", oneSpan(2, "gram_read"), oneSpan(1, "gram_patch"))))
	f.Add([]byte(`{"resource_spans":[{"resource":{"attributes":[{"key":"service.name","value":{"string_value":"x"}},{"key":"mcpaudit.tenant","value":{"intValue":"7"}}]},` +
		`"scope_spans":[{"spans":[{"start_time_unix_nano":5,"kind":"SPAN_KIND_CLIENT","attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":"t"}},` +
		`{"key":"server.address","value":{"stringValue":"s"}},{"key":"gen_ai.tool.call.arguments","value":{"kvlistValue":{"values":[{"key":"b","value":{"doubleValue":1.5}},{"key":"a","value":{"arrayValue":{"values":[{"boolValue":true}]}}}]}}}],` +
		`"status":{"code":"STATUS_CODE_ERROR","message":"Boom"}}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantRej, wantIgn, err := viaPdata(t, data, "fuzz")
		if err != nil || !json.Valid(data) {
			return
		}
		if d, err := NewDecoder(bytes.NewReader(data), "fuzz"); err != nil || d.Format() != FormatOTLP {
			return // call records, or not JSON
		}
		if emptyKey.Match(data) {
			// pdata's decoder takes an empty key for the end of its object
			// and reads what follows as the object's parent: not a reading
			// to copy.
			return
		}
		got, gotRej, gotIgn := viaStream(t, bytes.NewReader(data), "fuzz", true)
		sameRecords(t, "fuzz", want, got)
		slices.Sort(wantRej)
		slices.Sort(gotRej)
		if !reflect.DeepEqual(wantRej, gotRej) || wantIgn != gotIgn {
			t.Fatalf("rejects %q ignored %d, want %q %d", gotRej, gotIgn, wantRej, wantIgn)
		}
	})
}

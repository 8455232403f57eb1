package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

func decodeAll(t *testing.T, in []byte) (calls int, rejects []error, format Format) {
	t.Helper()
	d, err := NewDecoder(bytes.NewReader(in), "in")
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := d.Next()
		if err == io.EOF {
			return calls, rejects, d.Format()
		}
		if err != nil {
			if !IsReject(err) {
				t.Fatal(err)
			}
			rejects = append(rejects, err)
			continue
		}
		if c.ID == "" || c.Server == "" || c.Time.IsZero() {
			t.Fatalf("incomplete call %+v", c)
		}
		calls++
	}
}

const good = `{"time":"2026-11-02T09:00:00.000Z","server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a"}}},"response":{"jsonrpc":"2.0","id":1,"result":{"isError":false}}}`

func TestDecoder_BadLinesKeepGoodOnes(t *testing.T) {
	in := strings.Join([]string{
		good,
		`not json`,
		`{"server":"thegram","request":{}}`,
		`{"time":"yesterday","server":"thegram","request":{}}`,
		`{"time":"2026-11-02T09:00:00Z","request":{}}`,
		`{"time":"2026-11-02T09:00:00Z","server":"x","request":"nope"}`,
		`{"time":"2026-11-02T09:00:00Z","server":"x","request":{"params":{"arguments":{}}}}`,
		`{"time":"2026-11-02T09:00:00Z","server":"x","duration_ms":"slow","request":{"params":{"name":"t"}}}`,
		`{"time":"2026-11-02T09:00:00Z","server":"x","request":{"method":"tools/call","params":{"name":5}}}`,
		``,
		good,
	}, "\n")
	n, rejects, f := decodeAll(t, []byte(in))
	if f != FormatRecords || n != 2 {
		t.Fatalf("format %v, %d calls, want NDJSON and 2", f, n)
	}
	// Each reject with the reason it is counted under (Kind, "" being
	// invalid_json), whatever its words.
	missing, badTime := string(metrics.RejectMissingField), string(metrics.RejectBadTime)
	want := []struct{ msg, kind string }{
		{"in:2: not JSON", ""},
		{"in:3: field time: missing", missing},
		{"in:4: field time: not an RFC 3339 time", badTime},
		{"in:5: field server: missing", missing},
		{"in:6: field request: must be a JSON-RPC request object", ""},
		{"in:7: field request.params.name: missing tool name", missing},
		{"in:8: field duration_ms: must be a non-negative number", badTime},
		{"in:9: field request.params.name: must be a string (the tool's name), not number", ""},
	}
	if len(rejects) != len(want) {
		t.Fatalf("rejects = %v", rejects)
	}
	for i, w := range want {
		if !strings.HasPrefix(rejects[i].Error(), w.msg) {
			t.Errorf("reject %d = %q, want prefix %q", i, rejects[i], w.msg)
		}
		var re *RecordError
		if !errors.As(rejects[i], &re) || re.Line != i+2 {
			t.Errorf("reject %d has no line %d", i, i+2)
		} else if re.Kind != w.kind {
			t.Errorf("reject %d (%s) of kind %q, want %q", i, re, re.Kind, w.kind)
		}
	}
}

func TestDecoder_Formats(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(good + "\n" + good + "\n"))
	zw.Close()
	otlp, err := os.ReadFile("../../testdata/examples/thegram-normal-edit.otlp.json")
	if err != nil {
		t.Fatal(err)
	}
	oneLine := bytes.Join(bytes.Fields(otlp), []byte(" "))
	f := func(name string, in []byte, wantFormat Format, wantCalls, wantRejects int) {
		t.Helper()
		n, rejects, format := decodeAll(t, in)
		if format != wantFormat || n != wantCalls || len(rejects) != wantRejects {
			t.Errorf("%s: format %v calls %d rejects %v; want %v %d %d", name, format, n, rejects, wantFormat, wantCalls, wantRejects)
		}
	}
	f("ndjson", []byte(good+"\n"+good), FormatRecords, 2, 0)
	f("other methods ignored", []byte(good+"\n"+`{"time":"2026-11-02T09:00:00Z","server":"thegram","request":{"jsonrpc":"2.0","id":9,"method":"tools/list"}}`), FormatRecords, 1, 0)
	f("json-seq", []byte("\x1e"+good+"\n\x1e"+good+"\n"), FormatRecords, 2, 0)
	f("crlf and bom", []byte("\ufeff"+good+"\r\n"+good+"\r\n"), FormatRecords, 2, 0)
	f("gzip", gz.Bytes(), FormatRecords, 2, 0)
	f("array", []byte("[\n"+good+",\n"+good+", 5]"), FormatRecordArray, 2, 1)
	f("broken array", []byte("["+good+", {"), FormatRecordArray, 1, 1)
	f("array and white space", []byte("["+good+"]\n \n"), FormatRecordArray, 1, 0)
	// What follows the array is not dropped unsaid.
	f("two arrays", []byte("["+good+"]\n["+good+"]\n"), FormatRecordArray, 1, 1)
	f("array then a record", []byte("["+good+"]\n"+good+"\n"), FormatRecordArray, 1, 1)
	// An array that breaks off or closes with a brace has lost what
	// follows: that is said, not taken for its end.
	f("array without its end", []byte("["+good+",\n"+good), FormatRecordArray, 2, 1)
	f("array closed by a brace", []byte("["+good+"}, "+good+"]"), FormatRecordArray, 1, 1)
	f("empty", nil, FormatRecords, 0, 0)
	f("otlp document", otlp, FormatOTLP, 5, 0)
	f("otlp json lines", append(append(append([]byte{}, oneLine...), '\n'), oneLine...), FormatOTLP, 10, 0)
	f("otlp broken", []byte(`{"resourceSpans": [ {`), FormatOTLP, 0, 1)
}

func TestDecoder_LongLine(t *testing.T) {
	long := `{"time":"` + strings.Repeat("x", MaxLine+10) + `"}`
	n, rejects, _ := decodeAll(t, []byte(good+"\n"+long+"\n"+good+"\n"))
	if n != 2 || len(rejects) != 1 || !strings.Contains(rejects[0].Error(), "in:2: line longer") {
		t.Fatalf("calls %d rejects %v", n, rejects)
	}
	if re := (*RecordError)(nil); !errors.As(rejects[0], &re) || re.Kind != string(metrics.RejectTooLarge) {
		t.Errorf("%v: of kind %q, want too_large", rejects[0], re.Kind)
	}
}

// TestDecoder_OTLPLongerThanALine: in an OTLP JSON file (analyze), a
// resource or a span longer than MaxLine is rejected as too large, as a
// record line is, and as serve counts a payload past its cap; the other
// spans are read.
func TestDecoder_OTLPLongerThanALine(t *testing.T) {
	str := func(k, v string) string { return `{"key":"` + k + `","value":{"stringValue":"` + v + `"}}` }
	span := func(id int, attrs ...string) string {
		return fmt.Sprintf(`{"traceId":"%032x","spanId":"%016x","kind":2,"startTimeUnixNano":"1793610008000000000","endTimeUnixNano":"1793610009000000000","attributes":[%s]}`,
			id, id, strings.Join(append([]string{str("mcp.method.name", "tools/call"), str("gen_ai.tool.name", "gram_read"), str("jsonrpc.request.id", strconv.Itoa(id))}, attrs...), ","))
	}
	block := func(res string, spans ...string) string {
		return `{"resource":{"attributes":[` + res + `]},"scopeSpans":[{"spans":[` + strings.Join(spans, ",") + `]}]}`
	}
	huge := strings.Repeat("x", MaxLine)
	in := `{"resourceSpans":[` + block(str("service.name", "thegram")+","+str("pad", huge), span(1)) + "," +
		block(str("service.name", "thegram"), span(2), span(3, str("gen_ai.tool.call.arguments", huge)), span(4)) + `]}`
	n, rejects, f := decodeAll(t, []byte(in))
	if f != FormatOTLP || n != 2 || len(rejects) != 3 {
		t.Fatalf("format %v, %d calls, rejects %v; want OTLP, 2 calls and 3 rejects", f, n, rejects)
	}
	// The span of the resource rejected has no server to be read under.
	for i, want := range []struct{ msg, kind string }{
		{"resourceSpans[0].resource: longer than", string(metrics.RejectTooLarge)},
		{"resourceSpans[0].scopeSpans[0].spans[0]: no server identity", string(metrics.RejectBadSpan)},
		{"resourceSpans[1].scopeSpans[0].spans[1]: longer than", string(metrics.RejectTooLarge)},
	} {
		if !strings.Contains(rejects[i].Error(), want.msg) || RejectKind(rejects[i]) != want.kind {
			t.Errorf("reject %d %.200q counted as %q; want %q, %s", i, rejects[i], RejectKind(rejects[i]), want.msg, want.kind)
		}
	}
}

func TestRecordParser_IDAgreesAcrossEncodings(t *testing.T) {
	var rp RecordParser
	a, err := rp.Parse([]byte(`{"time":"2026-11-02T09:00:00.1234Z","server":"s","request":{"id":"7","params":{"name":"t","arguments":{"b":1,"a":"x"}}}}`), "f", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rp.Parse([]byte(`{"time":"2026-11-02T09:00:00.1232Z","server":"s","request":{"id":7,"params":{"name":"t","arguments":{"a":"\u0078","b":1}}}}`), "f", 2)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID {
		t.Fatalf("ids differ: %s %s", a.ID, b.ID)
	}
	if a.Responded || a.TransportError != "" {
		t.Fatalf("a record without response must be an unknown outcome: %+v", a)
	}
}

// TestDecoder_TruncatedGzip: a gzip capture cut off (a copy interrupted, a
// disk that filled up) keeps the records before the cut, and the cut is
// one reject naming the line it falls in and the compressed byte offset,
// not an error that drops the whole input. In every format.
func TestDecoder_TruncatedGzip(t *testing.T) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	var lines []string
	for range 400 {
		lines = append(lines, good)
	}
	ndjson := []byte(strings.Join(lines, "\n") + "\n")
	// Stored (level 0), so that the cut falls at a known place: half-way,
	// in line 201.
	cut := gz(ndjson)[:10+len(ndjson)/2+len(good)/2]
	n, rejects, format := decodeAll(t, cut)
	if format != FormatRecords || n < 190 || n > 200 || len(rejects) != 1 {
		t.Fatalf("format %v, %d calls, rejects %v; want the ~200 records before the cut and one reject", format, n, rejects)
	}
	var re *RecordError
	if !errors.As(rejects[0], &re) || re.Line != n+1 || !strings.Contains(re.Error(), "gzip") || !strings.Contains(re.Error(), fmt.Sprintf("byte %d", len(cut))) {
		t.Errorf("reject %q: want line %d, the gzip stream named and its end at byte %d", rejects[0], n+1, len(cut))
	}
	arr := []byte("[" + strings.Join(lines, ",\n") + "]")
	n, rejects, _ = decodeAll(t, gz(arr)[:10+len(arr)/2])
	if n < 190 || len(rejects) != 1 || !strings.Contains(rejects[0].Error(), "gzip") {
		t.Errorf("array: %d calls, rejects %v; want the ~200 records before the cut and one reject naming gzip", n, rejects)
	}
	// OTLP JSON, one document a line: the documents before the cut.
	otlpDoc, err := os.ReadFile("../../testdata/examples/thegram-normal-edit.otlp.json")
	if err != nil {
		t.Fatal(err)
	}
	oneLine := append(bytes.Join(bytes.Fields(otlpDoc), []byte(" ")), '\n')
	docs := bytes.Repeat(oneLine, 10)
	n, rejects, _ = decodeAll(t, gz(docs)[:10+len(docs)/2+len(oneLine)/2])
	if n != 5*5 || len(rejects) != 1 || !strings.Contains(rejects[0].Error(), "in:6: the gzip stream") {
		t.Errorf("OTLP JSON lines: %d calls, rejects %v; want the 25 calls of the 5 documents before the cut, and line 6 rejected naming gzip", n, rejects)
	}
}

// TestDecoder_BrokenArraySaysWhereAndWhatIsLost: an element of a JSON
// array that breaks its syntax is named with the byte offset it breaks at,
// and the answer says the elements after it are not read (they cannot be
// told apart without the array's syntax), so a sender does not take them
// for stored.
func TestDecoder_BrokenArraySaysWhereAndWhatIsLost(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		n, rejects, _ := decodeAll(t, []byte(in))
		if n != 1 || len(rejects) != 1 || rejects[0].Error() != want {
			t.Errorf("%d calls, rejects %q; want 1 and %q", n, rejects, want)
		}
	}
	f("["+good+",\n{\"time\": x},\n"+good+"]",
		"in:2: broken JSON array after element 1 at byte offset "+fmt.Sprint(1+len(good)+len(",\n{\"time\": "))+": invalid character 'x' looking for beginning of value; what follows is not read")
	// Nested past encoding/json's limit of 10000, counted within the
	// element: its 10001st bracket.
	f("["+good+",\n"+strings.Repeat("[", 10001)+"\n"+good+"]",
		"in:2: broken JSON array after element 1 at byte offset "+fmt.Sprint(1+len(good)+len(",\n")+10000)+": invalid character '[' exceeded max depth; what follows is not read")
}

// TestDecoder_OTLPDeepSpanAlone: a span whose attribute value nests deep
// is read, or rejected alone with its path, and never takes the spans
// beside it down: at 16 OTLP levels (64 of JSON and more), which serve
// takes, the whole document was refused ("nested deeper than 64").
func TestDecoder_OTLPDeepSpanAlone(t *testing.T) {
	in, err := os.ReadFile("../../testdata/examples/thegram-normal-edit.otlp.json")
	if err != nil {
		t.Fatal(err)
	}
	withDeep := func(levels int) []byte {
		var doc map[string]any
		if err := json.Unmarshal(in, &doc); err != nil {
			t.Fatal(err)
		}
		v := strings.Repeat(`{"kvlistValue":{"values":[{"key":"a","value":`, levels) + `{"stringValue":"x"}` + strings.Repeat(`}]}}`, levels)
		var deep any
		if err := json.Unmarshal([]byte(v), &deep); err != nil {
			t.Fatal(err)
		}
		sp := doc["resourceSpans"].([]any)[0].(map[string]any)["scopeSpans"].([]any)[0].(map[string]any)["spans"].([]any)[1].(map[string]any)
		sp["attributes"] = append(sp["attributes"].([]any), map[string]any{"key": "deep", "value": deep})
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if n, rejects, _ := decodeAll(t, withDeep(20)); n != 5 || len(rejects) != 0 {
		t.Errorf("an attribute 20 OTLP levels deep: %d calls, rejects %v; want 5 and none", n, rejects)
	}
	n, rejects, _ := decodeAll(t, withDeep(80))
	if n != 4 || len(rejects) != 1 || !strings.Contains(rejects[0].Error(), "resourceSpans[0].scopeSpans[0].spans[1]: not JSON: nested deeper than 300 levels at byte offset ") {
		t.Errorf("an attribute 80 OTLP levels deep: %d calls, rejects %v; want 4 and that span rejected alone", n, rejects)
	}
}

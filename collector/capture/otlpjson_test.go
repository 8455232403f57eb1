package capture

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// viaPdata reads one OTLP JSON document as the receiver does (pdata decodes
// it whole) and puts its calls in time order with a stable sort, as the
// decoder did when it held documents in memory.
func viaPdata(t testing.TB, doc []byte, name string) (recs []*audit.Record, rejected []string, ignored int, err error) {
	td, err := otlp.DecodeJSON(doc)
	if err != nil {
		return nil, nil, 0, err
	}
	res := otlp.Read(td, name+":", dialect.NewReader(dialect.Config{}))
	slices.SortStableFunc(res.Records, func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	for _, r := range res.Rejected {
		rejected = append(rejected, r.Error())
	}
	return res.Records, rejected, res.Ignored, nil
}

// viaStream reads an input with the decoder, as analyze does.
func viaStream(t testing.TB, r io.Reader, name string, keep bool) (recs []*audit.Record, rejected []string, ignored int) {
	t.Helper()
	d, err := NewDecoder(r, name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !keep {
		d.DropPayloads()
	}
	rd := dialect.NewReader(dialect.Config{})
	for {
		rec, err := d.NextRecord(rd)
		if err == io.EOF {
			return recs, rejected, d.Ignored
		}
		if err != nil {
			if !IsReject(err) {
				t.Fatal(err)
			}
			var se *SpanError
			if errors.As(err, &se) {
				rejected = append(rejected, se.RejectedSpan.Error())
			} else {
				rejected = append(rejected, err.Error())
			}
			continue
		}
		recs = append(recs, rec)
	}
}

// sameRecords fails unless a and b hold equal calls with equal readings,
// in the same order.
func sameRecords(t testing.TB, what string, a, b []*audit.Record) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d calls, want %d", what, len(b), len(a))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i].Call, b[i].Call) {
			t.Fatalf("%s: call %d differs:\n%+v\n%+v", what, i, a[i].Call, b[i].Call)
		}
		if ra, rb := audit.AppendReading(nil, a[i]), audit.AppendReading(nil, b[i]); !bytes.Equal(ra, rb) {
			t.Fatalf("%s: reading of call %d (%s) differs:\n%+v\n%+v", what, i, a[i].Call.Source, a[i], b[i])
		}
	}
}

// generated returns a generated capture as call records and as one OTLP
// JSON document of pods resources per server, spans in end order.
func generated(t testing.TB, seed int64, sessions, pods int) (ndjson, doc []byte) {
	t.Helper()
	c := capgen.Generate(capgen.Config{Seed: seed, Sessions: sessions, Span: 30 * time.Minute, AnomalyRate: 0.3, NoiseRate: 0.01})
	var b bytes.Buffer
	if err := capgen.WriteOTLP(&b, c.Lines, pods); err != nil {
		t.Fatal(err)
	}
	return bytes.Join(c.Lines, []byte("\n")), b.Bytes()
}

// TestOTLP_StreamedAsDecodedWhole: a document read block by block gives
// the calls, readings, rejects and order that decoding it whole with pdata
// and sorting it by time gives: the examples (several resources) and
// generated documents whose blocks are in end order.
func TestOTLP_StreamedAsDecodedWhole(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.otlp.json")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	inputs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = b
	}
	for _, pods := range []int{1, 3} {
		_, doc := generated(t, int64(pods), 400, pods)
		inputs[fmt.Sprintf("generated-%d-pods", pods)] = doc
	}
	for name, doc := range inputs {
		t.Run(name, func(t *testing.T) {
			want, wantRej, wantIgn, err := viaPdata(t, doc, name)
			if err != nil {
				t.Fatal(err)
			}
			got, gotRej, gotIgn := viaStream(t, bytes.NewReader(doc), name, true)
			sameRecords(t, name, want, got)
			if !reflect.DeepEqual(wantRej, gotRej) || wantIgn != gotIgn {
				t.Fatalf("rejects %v ignored %d, want %v %d", gotRej, gotIgn, wantRej, wantIgn)
			}
		})
	}
}

// TestOTLP_SameCallsAsRecords: the same exchanges as call records and as
// an OTLP document of three pods per server are the same calls, with the
// same ids and readings.
func TestOTLP_SameCallsAsRecords(t *testing.T) {
	lines, doc := generated(t, 7, 600, 3)
	recs, _, _ := viaStream(t, bytes.NewReader(lines), "records", false)
	spans, rej, _ := viaStream(t, bytes.NewReader(doc), "spans", false)
	if len(rej) != 0 {
		t.Fatalf("rejected spans: %v", rej)
	}
	byID := map[string]*audit.Record{}
	for _, r := range recs {
		byID[r.Call.ID] = r
	}
	if len(spans) != len(recs) {
		t.Fatalf("%d spans, %d records", len(spans), len(recs))
	}
	for _, s := range spans {
		r := byID[s.Call.ID]
		if r == nil {
			t.Fatalf("span %s has no record of its id", s.Call.Source)
		}
		if !bytes.Equal(audit.AppendReading(nil, r), audit.AppendReading(nil, s)) || r.Call.Fingerprint != s.Call.Fingerprint {
			t.Fatalf("span %s is read otherwise than its record:\n%+v\n%+v", s.Call.Source, s, r)
		}
	}
	// Time order, each block's end order undone.
	for i := 1; i < len(spans); i++ {
		if spans[i].Call.Time.Before(spans[i-1].Call.Time) {
			t.Fatalf("call %d before call %d", i, i-1)
		}
	}
}

// oneSpan is a span of a minimal document.
func oneSpan(start int, tool string) string {
	return fmt.Sprintf(`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"01020304050607%02x","kind":2,"startTimeUnixNano":"%d","endTimeUnixNano":"%d",`+
		`"attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":%q}},{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a\"}"}}]}`,
		start%256, 1793610000000000000+int64(start)*1e9, 1793610000000000000+int64(start)*1e9+5e8, tool)
}

func oneDoc(service string, spans ...string) string {
	return `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"` + service + `"}}]},"scopeSpans":[{"spans":[` +
		strings.Join(spans, ",") + `]}]}]}`
}

// TestOTLP_JSONLines: a file of one document per line (the Collector's
// file exporter) is read line by line; a broken line costs that line only,
// and the errors name their line.
func TestOTLP_JSONLines(t *testing.T) {
	in := strings.Join([]string{
		oneDoc("thegram", oneSpan(1, "gram_read"), oneSpan(2, "gram_read")),
		``,
		oneDoc("thegram", oneSpan(3, "gram_read"), `{"traceId":"zz"}`),
		`{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[` + oneSpan(4, "gram_read") + `,{"kind":`,
		`not json at all`,
		oneDoc("thegram", oneSpan(5, "gram_read")),
	}, "\n")
	d, err := NewDecoder(strings.NewReader(in), "f.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if d.Format() != FormatOTLP {
		t.Fatalf("format %v", d.Format())
	}
	var times []int
	var errs []string
	for {
		c, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !IsReject(err) {
				t.Fatal(err)
			}
			errs = append(errs, err.Error())
			continue
		}
		times = append(times, int(c.Time.Unix()-1793610000))
	}
	// The broken fourth line keeps its complete span; its service is not
	// known, so that span is rejected, and the lines after it are read.
	if !reflect.DeepEqual(times, []int{1, 2, 3, 5}) {
		t.Errorf("calls at %v", times)
	}
	want := []string{
		"f.jsonl:3: resourceSpans[0].scopeSpans[0].spans[1]: traceId: must be hex digits",
		"f.jsonl:4: broken OTLP JSON at byte ",
		"f.jsonl:4: resourceSpans[0].scopeSpans[0].spans[0]: no server identity",
		"f.jsonl:5: broken OTLP JSON at byte ",
	}
	if len(errs) != len(want) {
		t.Fatalf("errors %q", errs)
	}
	slices.Sort(errs)
	for i, w := range want {
		if !strings.HasPrefix(errs[i], w) {
			t.Errorf("error %q, want prefix %q", errs[i], w)
		}
	}
	if !strings.Contains(errs[1], "the document does not end on its line; the rest of the line is skipped") ||
		!strings.Contains(errs[3], "not an OTLP JSON document (a JSON object with resourceSpans); the rest of the line is skipped") {
		t.Errorf("errors %q and %q do not say what broke and what was skipped", errs[1], errs[3])
	}
}

// TestOTLP_BrokenDocument: a pretty-printed document cut off keeps every
// span before the cut, and says at which byte and line it broke.
func TestOTLP_BrokenDocument(t *testing.T) {
	doc, err := os.ReadFile("../../testdata/examples/thegram-normal-edit.otlp.json")
	if err != nil {
		t.Fatal(err)
	}
	whole, _, _ := viaStream(t, bytes.NewReader(doc), "in", true)
	// Cut inside the last span.
	cut := bytes.LastIndex(doc, []byte(`"traceId"`)) + 20
	got, rej, _ := viaStream(t, bytes.NewReader(doc[:cut]), "in", true)
	if len(got) != len(whole)-1 {
		t.Fatalf("%d calls kept of %d", len(got), len(whole))
	}
	line := bytes.Count(doc[:cut], []byte("\n")) + 1
	if len(rej) != 1 || !strings.HasPrefix(rej[0], fmt.Sprintf("in:%d: broken OTLP JSON at byte %d: ", line, cut)) || !strings.Contains(rej[0], "the rest of the input is skipped") {
		t.Fatalf("rejects %q, want the break at line %d, byte %d", rej, line, cut)
	}
	// A document that starts a line after the break is read.
	in := append(append(doc[:cut:cut], '\n'), oneDoc("thegram", oneSpan(1, "gram_read"))...)
	got, rej, _ = viaStream(t, bytes.NewReader(in), "in", true)
	if len(got) != len(whole) || len(rej) != 1 || !strings.HasSuffix(rej[0], fmt.Sprintf("skipped to line %d", line+1)) {
		t.Fatalf("%d calls, rejects %q", len(got), rej)
	}
}

// onlyReader hides everything of a reader but Read: an input that cannot
// be read at offsets (standard input).
type onlyReader struct{ io.Reader }

// TestOTLP_Spooled: a document that cannot be read at offsets (standard
// input, gzip) is spooled, in memory and past spoolMemory in a temporary
// file, and reads as the same document read from a file.
func TestOTLP_Spooled(t *testing.T) {
	_, doc := generated(t, 3, 300, 2)
	want, _, _ := viaStream(t, bytes.NewReader(doc), "in", true)
	defer func(n int) { spoolMemory = n }(spoolMemory)
	for _, limit := range []int{1 << 30, 64 << 10} {
		spoolMemory = limit
		got, _, _ := viaStream(t, onlyReader{bytes.NewReader(doc)}, "in", true)
		sameRecords(t, fmt.Sprintf("spooled, %d in memory", limit), want, got)
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(doc)
		zw.Close()
		got, _, _ = viaStream(t, bytes.NewReader(z.Bytes()), "in", true)
		sameRecords(t, fmt.Sprintf("gzip, %d in memory", limit), want, got)
	}
}

// TestOTLP_Bounded: reading a document holds the blocks open at once and
// the calls within a block's disorder, not the document: three pods per
// server, spans in end order, over half an hour.
func TestOTLP_Bounded(t *testing.T) {
	_, doc := generated(t, 11, 3000, 3)
	d, err := NewDecoder(bytes.NewReader(doc), "in")
	if err != nil {
		t.Fatal(err)
	}
	rd := dialect.NewReader(dialect.Config{})
	n, maxHeld, maxOpen := 0, 0, 0
	for {
		_, err := d.NextRecord(rd)
		if err == io.EOF {
			break
		}
		if err != nil {
			continue
		}
		n++
		held := 0
		for _, b := range d.otlp.open {
			held += len(b.held)
		}
		maxHeld, maxOpen = max(maxHeld, held), max(maxOpen, len(d.otlp.open))
	}
	if maxOpen > 6 || maxHeld > n/20 {
		t.Fatalf("%d calls: up to %d blocks open and %d calls held", n, maxOpen, maxHeld)
	}
	t.Logf("%d calls: up to %d blocks open and %d calls held", n, maxOpen, maxHeld)
}

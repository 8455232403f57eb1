package otlp_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"google.golang.org/protobuf/encoding/protowire"
)

// sameAsPdata checks ReadProto against pdata's decoding and Read on one
// message: when CheckProto accepts it, pdata must decode it and Read must
// give what ReadProto gave, after b was overwritten. It reports whether CheckProto accepted it.
func sameAsPdata(t *testing.T, b []byte) bool {
	t.Helper()
	const maxAttrs = 64
	m, ok := otlp.CheckProto(b, maxAttrs)
	if !ok {
		return false
	}
	orig := bytes.Clone(b)
	got := otlp.NewConverter().ReadProto(m, "otlp:", dialect.NewReader(dialect.Config{}))
	// The receiver gives the message's buffer back once ReadProto returns:
	// nothing read may still point into it.
	for i := range b {
		b[i] = 0xa5
	}
	defer copy(b, orig)
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(orig); err != nil {
		t.Fatalf("ReadProto read a message pdata refuses: %v", err)
	}
	want := otlp.Read(req.Traces(), "otlp:", dialect.NewReader(dialect.Config{}))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadProto and pdata differ:\n got %+v\nwant %+v", got, want)
	}
	return true
}

func marshal(t testing.TB, td ptrace.Traces) []byte {
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// protoSeeds are messages ReadProto reads and messages it leaves to pdata.
func protoSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	s := capgen.NewStream(capgen.Config{Seed: 3, Sessions: 1 << 40, AnomalyRate: 0.2, NoiseRate: 0.01, Span: 1 << 62})
	for range 4 {
		var calls []*capgen.Call
		for range 4 {
			c, _ := s.Next()
			calls = append(calls, c)
		}
		td := ptrace.NewTraces()
		capgen.AppendTraces(td, "seed", calls)
		seeds = append(seeds, marshal(t, td))
	}
	files, _ := filepath.Glob("../../testdata/examples/*.otlp.json")
	for _, f := range files {
		j, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(j)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, marshal(t, td))
	}
	// Values of other kinds, an event, a span without status or ids.
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "svc")
	rs.Resource().Attributes().PutInt("tenant.id", 7)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("scope")
	ss.Scope().Attributes().PutEmptySlice("list").AppendEmpty().SetStr("x")
	sp := ss.Spans().AppendEmpty()
	sp.SetStartTimestamp(pcommon.Timestamp(1_800_000_000_000_000_000))
	sp.Attributes().PutStr("gen_ai.tool.name", "edit")
	sp.Attributes().PutInt("rpc.response.status_code", -32000)
	sp.Attributes().PutEmptyMap("other").PutDouble("d", 1.5)
	sp.Attributes().PutStr("gen_ai.tool.call.arguments", `{"a":1}`)
	sp.Status().SetCode(ptrace.StatusCodeError)
	sp.Status().SetMessage("boom")
	seeds = append(seeds, marshal(t, td))
	// Events (SDKs record errors as events) and links are not read, but
	// checked.
	ev := sp.Events().AppendEmpty()
	ev.SetName("exception")
	ev.SetTimestamp(pcommon.Timestamp(1_800_000_000_000_000_001))
	ev.Attributes().PutStr("exception.message", "boom")
	ev.Attributes().PutEmptyMap("nested").PutDouble("d", 2.5)
	ev.SetDroppedAttributesCount(1)
	ln := sp.Links().AppendEmpty()
	ln.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	ln.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
	ln.TraceState().FromRaw("k=v")
	ln.Attributes().PutInt("n", 3)
	ln.SetFlags(1)
	sp.SetDroppedEventsCount(2)
	seeds = append(seeds, marshal(t, td))
	// The last seed is pdata's: a session id that is not a string.
	sp.Attributes().PutBool("mcp.session.id", true)
	seeds = append(seeds, marshal(t, td))
	return seeds
}

// withField returns b, a message of one ResourceSpans of one ScopeSpans
// of one span, with field num of wire type typ and value v appended to the
// span, and the lengths around it fixed up.
func withField(t *testing.T, b []byte, num protowire.Number, v []byte) []byte {
	t.Helper()
	// Unwrap ResourceSpans(1) > ScopeSpans(2) > Span(2).
	path := []protowire.Number{1, 2, 2}
	var outer [][]byte // the bytes before each level's message
	var tails [][]byte
	cur := b
	for _, want := range path {
		var before []byte
		found := false
		for rest := cur; len(rest) > 0; {
			n, typ, tl := protowire.ConsumeTag(rest)
			if tl < 0 {
				t.Fatal("bad seed")
			}
			fl := protowire.ConsumeFieldValue(n, typ, rest[tl:])
			if n == want && typ == protowire.BytesType && !found {
				val, _ := protowire.ConsumeBytes(rest[tl:])
				outer = append(outer, append(before, rest[:0]...))
				tails = append(tails, rest[tl+fl:])
				cur, found = val, true
				break
			}
			before = append(before, rest[:tl+fl]...)
			rest = rest[tl+fl:]
		}
		if !found {
			t.Fatal("seed without the path")
		}
	}
	msg := append(bytes.Clone(cur), protowire.AppendTag(nil, num, protowire.BytesType)...)
	msg = protowire.AppendBytes(msg, v)
	for i := len(path) - 1; i >= 0; i-- {
		w := append(bytes.Clone(outer[i]), protowire.AppendTag(nil, path[i], protowire.BytesType)...)
		w = protowire.AppendBytes(w, msg)
		msg = append(w, tails[i]...)
	}
	return msg
}

// TestReadProto_EventsAndLinks: spans with events and links are read from
// the wire like any other; a link with an id of the wrong size is left to
// pdata, which refuses it as before.
func TestReadProto_EventsAndLinks(t *testing.T) {
	seeds := protoSeeds(t)
	b := seeds[len(seeds)-2]
	if !sameAsPdata(t, b) {
		t.Fatal("a span with an event and a link was left to pdata")
	}
	badLink := protowire.AppendTag(nil, 1, protowire.BytesType)
	badLink = protowire.AppendBytes(badLink, []byte{1, 2, 3})
	bad := withField(t, b, 13, badLink)
	if _, ok := otlp.CheckProto(bad, 64); ok {
		t.Error("CheckProto took a link whose trace id has 3 bytes")
	}
	if err := ptraceotlp.NewExportRequest().UnmarshalProto(bad); err == nil {
		t.Error("pdata took a link whose trace id has 3 bytes: the test does not make what it means to")
	}
	badEvent := protowire.AppendTag(nil, 1, protowire.BytesType) // time as bytes
	badEvent = protowire.AppendBytes(badEvent, []byte{1})
	if _, ok := otlp.CheckProto(withField(t, b, 11, badEvent), 64); ok {
		t.Error("CheckProto took an event whose time has the wrong wire type")
	}
	goodEvent := protowire.AppendTag(nil, 2, protowire.BytesType)
	goodEvent = protowire.AppendBytes(goodEvent, []byte("retry"))
	if !sameAsPdata(t, withField(t, b, 11, goodEvent)) {
		t.Error("a second event, appended, was left to pdata")
	}
}

func TestReadProto_SameAsPdata(t *testing.T) {
	read := 0
	seeds := protoSeeds(t)
	for i, b := range seeds {
		if sameAsPdata(t, b) {
			read++
		} else if i < len(seeds)-1 {
			t.Errorf("seed %d: ReadProto left an ordinary message to pdata", i)
		}
	}
	// The last (a boolean session id) is pdata's.
	if read != len(seeds)-1 {
		t.Errorf("ReadProto read %d of %d seeds, want all but the last", read, len(seeds))
	}
}

// FuzzReadProto checks that whatever CheckProto accepts, pdata decodes
// without error into the same records.
func FuzzReadProto(f *testing.F) {
	for _, b := range protoSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsPdata(t, b) })
}

// TestReadProto_ConverterReused: the receiver pools its converters, so a
// converter reads one request after another; what it read of the first
// must not change when it reads the next (nothing of a Result may point
// into the converter's parsers or buffers).
func TestReadProto_ConverterReused(t *testing.T) {
	seeds := protoSeeds(t)
	cv := otlp.NewConverter()
	var got []otlp.Result
	var msgs [][]byte
	for _, b := range seeds {
		m, ok := otlp.CheckProto(b, 64)
		if !ok {
			continue
		}
		got = append(got, cv.ReadProto(m, "otlp:", dialect.NewReader(dialect.Config{})))
		msgs = append(msgs, b)
	}
	if len(got) < 2 {
		t.Fatalf("%d seeds read, want several", len(got))
	}
	for i, b := range msgs {
		m, _ := otlp.CheckProto(b, 64)
		want := otlp.NewConverter().ReadProto(m, "otlp:", dialect.NewReader(dialect.Config{}))
		if len(want.Records) == 0 {
			t.Fatalf("seed %d: no records", i)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("seed %d: what a reused converter read changed once it read the next requests", i)
		}
	}
}

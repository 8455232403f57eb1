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
	sp.Attributes().PutBool("mcp.session.id", true)
	seeds = append(seeds, marshal(t, td))
	sp.Attributes().Remove("mcp.session.id")
	sp.Events().AppendEmpty().SetName("ev")
	seeds = append(seeds, marshal(t, td))
	return seeds
}

func TestReadProto_SameAsPdata(t *testing.T) {
	read := 0
	seeds := protoSeeds(t)
	for i, b := range seeds {
		if sameAsPdata(t, b) {
			read++
		} else if i < len(seeds)-2 {
			t.Errorf("seed %d: ReadProto left an ordinary message to pdata", i)
		}
	}
	// The last two (a boolean session id, an event) are pdata's.
	if read != len(seeds)-2 {
		t.Errorf("ReadProto read %d of %d seeds, want all but the last two", read, len(seeds))
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

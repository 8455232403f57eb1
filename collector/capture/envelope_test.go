package capture

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/valyala/fastjson"
)

// sameAsTree checks one record: when parseFast reads it, parse from the
// whole record's tree (parseTree) reads the same call and payloads.
func sameAsTree(t testing.TB, data []byte) (fast bool) {
	t.Helper()
	var fp, tp RecordParser
	fc, ok := fp.parseFast(data, "f", 7)
	if !ok {
		return false
	}
	tc, err := tp.parseTree(data, "f", 7, false)
	if err != nil {
		t.Fatalf("parseFast read what parse rejects (%v):\n%s", err, data)
	}
	if !reflect.DeepEqual(fc, tc) {
		t.Fatalf("calls differ:\nfast %+v\ntree %+v\n%s", fc, tc, data)
	}
	marshal := func(v *fastjson.Value) string {
		if v == nil {
			return "<nil>"
		}
		return string(v.MarshalTo(nil))
	}
	f, w := fp.payload, tp.payload
	if marshal(f.Args) != marshal(w.Args) || marshal(f.Result) != marshal(w.Result) || marshal(f.ErrorData) != marshal(w.ErrorData) ||
		!bytes.Equal(f.CanonicalArgs, w.CanonicalArgs) || (f.CanonicalArgs == nil) != (w.CanonicalArgs == nil) {
		t.Fatalf("payloads differ:\nfast %s %s %s %q\ntree %s %s %s %q\n%s", marshal(f.Args), marshal(f.Result), marshal(f.ErrorData), f.CanonicalArgs,
			marshal(w.Args), marshal(w.Result), marshal(w.ErrorData), w.CanonicalArgs, data)
	}
	return true
}

// TestParseFast_SameAsTree: over the examples, a generated capture with
// its noise, records written by hand to take every branch, and random
// damage to all of them, parseFast reads what parse reads from the whole
// record's tree, or declines; and it reads most records.
func TestParseFast_SameAsTree(t *testing.T) {
	var lines [][]byte
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.Split(b, []byte("\n"))...)
	}
	gen := capgen.Generate(capgen.Config{Seed: 9, Sessions: 1500, Span: time.Hour, AnomalyRate: 0.5, NoiseRate: 0.05})
	lines = append(lines, gen.Lines...)
	fast := 0
	for _, l := range lines {
		if sameAsTree(t, l) {
			fast++
		}
	}
	if fast < len(lines)*9/10 {
		t.Fatalf("parseFast read %d records of %d", fast, len(lines))
	}

	// Each case is read by parseFast (true) or declined (false).
	base := `"time":"2026-11-02T09:00:00.000Z","server":"thegram"`
	req := `"request":{"id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a"}}}`
	cases := []struct {
		rec  string
		fast bool
	}{
		{`{` + base + `,` + req + `}`, true},
		{` {` + base + ` , ` + req + ` } `, true},
		{`{` + base + `,` + req + `,"response":null,"session":null,"duration_ms":null,"x":[1,-2.5e3,true,false,null,{"a":[]}]}`, true},
		{`{` + base + `,` + req + `,"response":{"error":{"code":-32000,"message":"boom","data":{"k":[1]}},"result":{"isError":false}}}`, true},
		{`{` + base + `,` + req + `,"response":{"error":null,"result":"text"}}`, true},
		{`{` + base + `,"duration_ms":12,"request":{"id":"r-1","method":"tools/call","params":{"name":"gram_read","arguments":"a"}}}`, true},
		{`{` + base + `,"request":{"id":null,"method":"initialize","params":{}}}`, true},
		{`{` + base + `,"request":{"id":1.5e2,"method":"tools/call","params":{"name":"t","arguments":{ "b" : 1, "a" : [ 2 ] }}}}`, true},
		{`{` + base + `,"request":{"id":7,"method":"tools/call","params":{"name":"t","arguments":null}}}`, true},
		{`{` + base + `,` + req + `,"x":"a\"b\\"}`, true},

		{`{` + base + `,` + req + `,"server":"again"}`, false},
		{`{"server":null,` + base + `,` + req + `}`, false},
		{`{` + base + `,` + req + `,"sess\u0069on":"s"}`, false},
		{`{` + base + `,"session":"a\nb",` + req + `}`, false},
		{`{` + base + `,"session":1,` + req + `}`, false},
		{`{` + base + `,"duration_ms":1.5,` + req + `}`, false},
		{`{` + base + `,"duration_ms":-1,` + req + `}`, false},
		{`{` + base + `,"duration_ms":012,` + req + `}`, false},
		{`{` + base + `,` + req + `,"response":{"error":{"code":1.5}}}`, false},
		{`{` + base + `,` + req + `,"response":{"error":{"message":1}}}`, false},
		{`{` + base + `,` + req + `,"response":{"result":{"a":1},"result":2}}`, false},
		{`{` + base + `,` + req + `,"response":[]}`, false},
		{`{` + base + `,"request":{"id":true,"method":"tools/call","params":{"name":"t"}}}`, false},
		{`{` + base + `,"request":{"method":"tools/call","params":{"name":"t","name":"u"}}}`, false},
		{`{` + base + `,"request":{"method":"tools/call","params":{}}}`, false},
		{`{` + base + `,"request":null}`, false},
		{`{"time":"2026-11-02T09:00:00+01:00","server":"thegram",` + req + `}`, false},
		{`{` + base + `,` + req + `,}`, false},
		{`{` + base + `,` + req + `}x`, false},
		{`{` + base + `,` + req + `,"x":nan}`, false},
		{`{` + base + `,` + req + `,"x":tru}`, false},
		{`{` + base + `,` + req + `,"x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, false},
		{`{` + base + `,"request":{"method":"tools/call","params":{"name":"t","arguments":` + strings.Repeat("[", 298) + strings.Repeat("]", 298) + `}}}`, false},
		{`[` + base + `]`, false},
	}
	for i, c := range cases {
		if got := sameAsTree(t, []byte(c.rec)); got != c.fast {
			t.Errorf("case %d: parseFast read it: %v, want %v\n%s", i, got, c.fast, c.rec)
		}
		lines = append(lines, []byte(c.rec))
	}

	// Damage: bytes changed, cut out, doubled, and records cut short.
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]":,\ 0123456789-.eEtrufalsn` + "\x00\xff")
	damaged, read := 0, 0
	for _, l := range lines {
		if len(l) == 0 {
			continue
		}
		for k := 0; k < 8; k++ {
			d := append([]byte(nil), l...)
			switch j := rng.IntN(len(d)); k % 4 {
			case 0:
				d[j] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				d = append(d[:j], d[j+1:]...)
			case 2:
				d = append(d[:j], append([]byte{d[j]}, d[j:]...)...)
			default:
				d = d[:j]
			}
			damaged++
			if sameAsTree(t, d) {
				read++
			}
		}
	}
	t.Logf("damaged records: %d, read by parseFast: %d", damaged, read)
}

// FuzzParseFast: whatever parseFast reads, parse reads alike from the
// whole record's tree.
func FuzzParseFast(f *testing.F) {
	f.Add([]byte(good))
	for _, l := range bytes.Split(mustRead(f, "../../testdata/examples/oddlynew-edit-double-apply.ndjson"), []byte("\n")) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameAsTree(t, data) })
}

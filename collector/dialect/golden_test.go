package dialect_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

var update = flag.Bool("update", false, "rewrite the golden readings under testdata/readings")

// TestReadingsGolden pins the reading of every call of the example
// captures and of a generated capture (its operations, their targets, keys
// and fingerprints) to testdata/readings: the detector compares the
// fingerprints and the store keeps them, so a change of any of them is a
// change of what is found and of what stored calls mean, and shows in
// review. Each call is read as analyze and serve read it, by the decoder's
// one parse (NextRecord), from both carriers, which must read alike. The
// generated capture is capgen's for a fixed seed: a change of capgen's
// output changes generated.txt too. The hand-made captures under
// testdata/captures exercise the paths no example reaches (their README
// says which, and where the reading departs from the reference).
func TestReadingsGolden(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	own, _ := filepath.Glob(filepath.Join("testdata", "captures", "*.ndjson"))
	if len(own) == 0 {
		t.Fatal("no captures under testdata/captures")
	}
	files = append(files, own...)
	for _, nd := range files {
		name := strings.TrimSuffix(filepath.Base(nd), ".ndjson")
		t.Run(name, func(t *testing.T) {
			records, err := os.ReadFile(nd)
			if err != nil {
				t.Fatal(err)
			}
			spans, err := os.ReadFile(strings.TrimSuffix(nd, ".ndjson") + ".otlp.json")
			if err != nil {
				t.Fatal(err)
			}
			goldenReadings(t, name, records, spans)
		})
	}
	// A golden file whose capture is gone is not left behind.
	kept, _ := filepath.Glob(filepath.Join("testdata", "readings", "*.txt"))
	for _, k := range kept {
		name := strings.TrimSuffix(filepath.Base(k), ".txt")
		if name != "generated" && !slices.ContainsFunc(files, func(f string) bool { return filepath.Base(f) == name+".ndjson" }) {
			t.Errorf("%s reads no capture: remove it", k)
		}
	}
	t.Run("generated", func(t *testing.T) {
		c := capgen.Generate(capgen.Config{Seed: 14, Sessions: 120, AnomalyRate: 0.6, NoiseRate: 0.02})
		var spans bytes.Buffer
		if err := capgen.WriteOTLP(&spans, c.Lines, 2); err != nil {
			t.Fatal(err)
		}
		goldenReadings(t, "generated", bytes.Join(c.Lines, []byte("\n")), spans.Bytes())
	})
}

// goldenReadings compares the readings of the call records with
// testdata/readings/NAME.txt, in the capture's order, and those of the
// same calls as OTLP spans with the same lines, in any order (an exporter
// sends spans in the order they ended).
func goldenReadings(t *testing.T, name string, records, spans []byte) {
	t.Helper()
	got := readings(t, name+".ndjson", records)
	otlp := readings(t, name+".otlp.json", spans)
	// Both carriers hold the same calls: the lines, sorted, are equal.
	a, b := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(otlp))
	if !slices.Equal(a, b) {
		t.Errorf("call records and OTLP spans read differently:\n%s", lineDiff(a, b))
	}
	text := strings.Join(got, "\n") + "\n"
	path := filepath.Join("testdata", "readings", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("readings differ from %s (run go test -update and review the diff):\n%s", path, lineDiff(want, got))
	}
}

// readings reads every call of a capture through the decoder and the
// dialect reader, as analyze does, and returns one line per call, its bad
// lines left out. Each reading also comes back from the store's encoding
// (audit.AppendReading) as it went in.
func readings(t *testing.T, name string, data []byte) []string {
	t.Helper()
	dec, err := capture.NewDecoder(bytes.NewReader(data), name)
	if err != nil {
		t.Fatal(err)
	}
	rd := dialect.NewReader(goldenConfig)
	var lines []string
	for {
		rec, err := dec.NextRecord(rd)
		if err == io.EOF {
			break
		}
		if capture.IsReject(err) {
			continue // a capture's bad lines: their rejection is tested apart
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		line := readingLine(t, rec)
		var back audit.Record
		if err := audit.ReadReading(audit.AppendReading(nil, rec), &back); err != nil {
			t.Fatalf("%s: call %s: %v", name, rec.Call.ID, err)
		}
		back.Call = rec.Call
		// Equal values, and the operations that share the call's failure
		// still share it (the line says "call").
		if again := readingLine(t, &back); again != line || !reflect.DeepEqual(&back, rec) {
			t.Fatalf("%s: the stored reading of call %s reads back otherwise:\n%s\n%s", name, rec.Call.ID, again, line)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		t.Fatalf("%s: no calls", name)
	}
	return lines
}

// readingLine writes a call's reading as one line: the call's id, the
// record's fields, then each operation's, by name, those set only. Every
// field of audit.Record and audit.Op is written, by reflection, so that a
// field added later shows in the golden files once they are updated.
func readingLine(t *testing.T, rec *audit.Record) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(rec.Call.ID)
	writeFields(t, &b, reflect.ValueOf(rec).Elem(), nil, "Call", "Ops")
	for i := range rec.Ops {
		b.WriteString(" | op")
		writeFields(t, &b, reflect.ValueOf(&rec.Ops[i]).Elem(), rec.Failure)
	}
	return b.String()
}

// writeFields writes the set fields of the struct v, but those skipped,
// as " Name=value" (a set flag by its name alone). An operation's failure
// that is the call's own, callFailure, is written "call".
func writeFields(t *testing.T, b *strings.Builder, v reflect.Value, callFailure *audit.Failure, skip ...string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if slices.Contains(skip, sf.Name) || f.IsZero() {
			continue
		}
		b.WriteString(" ")
		b.WriteString(sf.Name)
		switch x := f.Interface().(type) {
		case bool:
			continue // set: its name says it
		case audit.OpKind:
			b.WriteString("=" + named(kinds[x], int(x)))
		case audit.OpStatus:
			b.WriteString("=" + named(statuses[x], int(x)))
		case *audit.Failure:
			if x == callFailure {
				b.WriteString("=call")
			} else {
				fmt.Fprintf(b, "={%s %s %s}", strconv.Quote(x.Code), x.Action, strconv.Quote(x.Message))
			}
		case time.Time:
			b.WriteString("=" + x.UTC().Format(time.RFC3339Nano))
		default:
			switch f.Kind() {
			case reflect.String:
				b.WriteString("=" + strconv.Quote(f.String()))
			case reflect.Int, reflect.Int64:
				b.WriteString("=" + strconv.FormatInt(f.Int(), 10))
			default:
				t.Fatalf("the golden readings do not write %s.%s (%s): teach writeFields", v.Type(), sf.Name, sf.Type)
			}
		}
	}
}

// goldenConfig names the write tools of the generic server of
// testdata/captures (no other capture has a server of that name), so that
// generic writes are read too.
var goldenConfig = dialect.Config{Writes: map[string]map[string]dialect.WriteTool{
	"notesvc": {"put_note": {TargetArg: "note_id", KeyArg: "idempotency_key"}},
}}

var (
	kinds    = map[audit.OpKind]string{audit.OpOther: "other", audit.OpRead: "read", audit.OpWrite: "write", audit.OpCopyPlan: "copy_plan"}
	statuses = map[audit.OpStatus]string{audit.OpSucceeded: "succeeded", audit.OpFailed: "failed", audit.OpUncertain: "uncertain"}
)

// named returns name, or n when the value has none.
func named(name string, n int) string {
	if name == "" {
		return strconv.Itoa(n)
	}
	return name
}

// lineDiff lists the first lines of want and got that differ, by
// position, and how many differ.
func lineDiff(want, got []string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			if n++; n <= 3 {
				fmt.Fprintf(&b, "line %d:\n-%s\n+%s\n", i+1, w, g)
			}
		}
	}
	fmt.Fprintf(&b, "%d lines differ", n)
	return b.String()
}

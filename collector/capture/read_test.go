package capture

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestNextRecord_ReadOnce: a call read from the decoder's own parse
// (NextRecord) has the reading of the same call parsed again by its
// dialect (Next, then Reader.Read), with its payloads kept or left out.
func TestNextRecord_ReadOnce(t *testing.T) {
	inputs := map[string][]byte{}
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = b
	}
	c := capgen.Generate(capgen.Config{Seed: 4, Sessions: 800, Span: time.Hour, AnomalyRate: 0.5, NoiseRate: 0.02})
	inputs["generated"] = bytes.Join(c.Lines, []byte("\n"))
	rd := dialect.NewReader(dialect.Config{})
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			var again []*audit.Record
			d, err := NewDecoder(bytes.NewReader(in), name)
			if err != nil {
				t.Fatal(err)
			}
			for {
				c, err := d.Next()
				if err == io.EOF {
					break
				}
				if err == nil {
					again = append(again, rd.Read(c))
				}
			}
			for _, keep := range []bool{true, false} {
				once, _, _ := viaStream(t, bytes.NewReader(in), name, keep)
				if len(once) != len(again) {
					t.Fatalf("keep %v: %d calls, want %d", keep, len(once), len(again))
				}
				for i := range once {
					a, b := once[i], again[i]
					if !bytes.Equal(audit.AppendReading(nil, a), audit.AppendReading(nil, b)) || a.Call.ID != b.Call.ID || a.Call.Fingerprint != b.Call.Fingerprint {
						t.Fatalf("keep %v: call %s read otherwise:\n%+v\n%+v", keep, b.Call.Source, a, b)
					}
					if keep != (a.Call.Arguments != nil) && b.Call.Arguments != nil {
						t.Fatalf("keep %v: arguments %q", keep, a.Call.Arguments)
					}
					if keep && (!bytes.Equal(a.Call.Arguments, b.Call.Arguments) || !bytes.Equal(a.Call.Result, b.Call.Result)) {
						t.Fatalf("payloads differ: %s", b.Call.Source)
					}
				}
			}
		})
	}
}

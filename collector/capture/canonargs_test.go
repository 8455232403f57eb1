package capture

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestCanonicalArguments: the one-read check of a record's arguments says
// what finding them (rawArguments) and then checking them (canon.Canonical)
// says, and gives the same text, over the examples, a generated capture
// and records made to take each way.
func TestCanonicalArguments(t *testing.T) {
	var lines [][]byte
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.Split(b, []byte("\n"))...)
	}
	c := capgen.Generate(capgen.Config{Seed: 4, Sessions: 800, Span: time.Hour, AnomalyRate: 0.5, NoiseRate: 0.02})
	lines = append(lines, c.Lines...)
	for _, s := range []string{
		`{"request":{"params":{"arguments":{"a":1,"b":"}"},"name":"x"}}}`,
		`{"request":{"params":{"arguments":{"b":1,"a":2},"name":"x"}}}`,
		`{"request":{"params":{"arguments": {"a":1},"name":"x"}}}`,
		`{"request":{"params":{"arguments":{"a": 1},"name":"x"}}}`,
		`{"request":{"params":{"arguments":[{"a":"q\"}"}],"name":"x"}}}`,
		`{"request":{"params":{"arguments":{"a":"\u00e9"}}}}`,
		`{"request":{"params":{"arguments":"text","name":"x"}}}`,
		`{"request":{"params":{"arguments":12}}}`,
		`{"request":{"params":{"arguments":null}}}`,
		`{"request":{"params":{"name":"x"}}}`,
		`{"request":{"par\u0061ms":{"arguments":{"a":1}}}}`,
		`{"request":{"params":{"arguments":{"a":{"b":[1,{"c":2}]}}}}}`,
		`{"request":{"params":{"arguments":{"a":1`,
		`{"request":{"params":{"arguments":`,
		`{}`, ``,
	} {
		lines = append(lines, []byte(s))
	}
	var yes, no int
	for _, line := range lines {
		raw := rawArguments(line)
		wantOK := raw != nil && canon.Canonical(raw)
		got, ok := canonicalArguments(line)
		if ok != wantOK || ok && !bytes.Equal(got, raw) {
			t.Fatalf("canonicalArguments(%s) = %s, %v; want %s, %v", line, got, ok, raw, wantOK)
		}
		if ok {
			yes++
		} else {
			no++
		}
	}
	if yes < 1000 || no < 10 {
		t.Fatalf("%d lines with canonical arguments and %d without: the inputs no longer take both ways", yes, no)
	}
}

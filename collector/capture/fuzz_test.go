package capture

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
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
	})
}

// FuzzDecoder: the whole decoding path, OTLP JSON included, never panics
// and never loops: it ends with io.EOF or a fatal error.
func FuzzDecoder(f *testing.F) {
	addExamples(f, "../../testdata/examples/*.otlp.json")
	addExamples(f, "../../testdata/examples/thegram-normal-edit.ndjson")
	f.Add([]byte(`[` + good + `]`))
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

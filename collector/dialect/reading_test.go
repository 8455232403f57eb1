package dialect_test

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestReadingRoundTrip: the reading of every example call, in both
// carriers, comes back from the store's encoding as it went in, the call's
// own failure still shared with the operations that carry it.
func TestReadingRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.*json")
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".expected.json") })
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	r := dialect.NewReader(dialect.Config{})
	n := 0
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := capture.NewDecoder(f, path)
		if err != nil {
			f.Close()
			continue // the expected-findings files
		}
		for {
			c, err := dec.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			rec := r.Read(c)
			enc := audit.AppendReading(nil, rec)
			var back audit.Record
			if err := audit.ReadReading(enc, &back); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			// The views form, as a waiting call is unpacked.
			var viewed audit.Record
			if err := audit.ReadReadingViews(enc, &viewed); err != nil {
				t.Fatalf("%s: views: %v", path, err)
			}
			for _, back := range []*audit.Record{&back, &viewed} {
				back.Call = rec.Call
				if !reflect.DeepEqual(back, rec) {
					t.Fatalf("%s: reading changed:\n%+v\n%+v", path, back, rec)
				}
				for i := range back.Ops {
					if rec.Ops[i].Failure == rec.Failure && rec.Failure != nil && back.Ops[i].Failure != back.Failure {
						t.Fatalf("%s: op %d no longer shares the call's failure", path, i)
					}
				}
			}
			n++
		}
		f.Close()
	}
	if n < 60 {
		t.Fatalf("read %d calls", n)
	}
	if err := audit.ReadReading([]byte{1, 3, 'a'}, &audit.Record{}); err == nil {
		t.Fatal("a truncated reading decoded")
	}
	if err := audit.ReadReadingViews([]byte{1, 3, 'a'}, &audit.Record{}); err == nil {
		t.Fatal("a truncated reading decoded into views")
	}
}

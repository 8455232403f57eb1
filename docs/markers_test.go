package docs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestNoMergeMarkers fails on a document committed with the markers of an
// unresolved merge conflict (a merge on 2026-12-05 left them around two
// sections of benchmarks.md, and nothing noticed).
func TestNoMergeMarkers(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no documents found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, m := range []string{"<<<<<<< ", ">>>>>>> "} {
				if bytes.HasPrefix(line, []byte(m)) {
					t.Errorf("%s:%d: a merge conflict marker: %.60s", f, i+1, line)
				}
			}
		}
	}
}

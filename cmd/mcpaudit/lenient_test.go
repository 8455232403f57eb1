package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnalyze_ReadLeniently: analyze keeps records with a name given twice
// or a member of the wrong type, reads each name's last copy (its findings
// those of the records holding only the last copies), says each warning
// with its file, line, field and byte offset in the summary, and counts
// them in --metrics under source="file".
func TestAnalyze_ReadLeniently(t *testing.T) {
	b, err := os.ReadFile("../../testdata/examples/thegram-both-succeeded-double-apply.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// The retry's key given twice, the second copy the one sent: the
	// record holding it alone is the double apply of the example.
	lines[1] = strings.Replace(lines[1], `"request_id":"req-57ccf06ebddd"`, `"request_id":"req-other","request_id":"req-57ccf06ebddd"`, 1)
	lines[2] = strings.Replace(lines[2], `"method":"tools/call"`, `"method":7`, 1)
	dir := t.TempDir()
	in, metricsFile := filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "run.prom")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"analyze", "--format", "json", "--progress", "never", "--fail-on", "never", "--metrics", metricsFile, in}, nil, &out, &errb); code != 0 {
		t.Fatalf("analyze: exit %d: %s", code, errb.String())
	}
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var f struct{ Kind string }
		if json.Unmarshal([]byte(l), &f) == nil && f.Kind != "" {
			kinds = append(kinds, f.Kind)
		}
	}
	if len(kinds) != 1 || kinds[0] != "double_applied_write" || !strings.Contains(out.String(), `"key":"req-57ccf06ebddd"`) {
		t.Errorf("findings %v, want the example's double_applied_write under the last copy of request_id:\n%s", kinds, out.String())
	}
	for _, want := range []string{
		"Read leniently (records kept, docs/api.md \"Members read leniently\"): 2",
		in + ":2: field request.params.arguments.request_id at byte offset ",
		in + ":3: field request.method at byte offset ",
		"Rejected input: 0",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, errb.String())
		}
	}
	m, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`mcpaudit_ingest_warnings_total{reason="duplicate_name",source="file"} 1`,
		`mcpaudit_ingest_warnings_total{reason="wrong_type_method",source="file"} 1`,
		`mcpaudit_ingest_records_total{result="accepted",source="file"} 3`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("--metrics lacks %s", want)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestAnalyze_LateAfterWindowClosed_Classes (rev18w): each class of late
// call dated within a write's closed window, made from live18's reproA by
// rewriting the late line (the same-key call of session s-b, 15 s after
// the write, delivered 12 s after the rest): analyze of the lines as
// delivered must give what it gives in time order.
func TestAnalyze_LateAfterWindowClosed_Classes(t *testing.T) {
	const canceled = `"duration_ms": 15000, "transport_error": "canceled"`
	accepted := func(replayed string) string {
		return `"response": {"jsonrpc": "2.0", "id": 151, "result": {"isError": false, "structuredContent": {"path": "ops/reproA.gram", "rev": 4, "hash": "bb", "replayed": ` + replayed + `, "request_id": "req-A"}}}`
	}
	for _, tc := range []struct{ name, from, to string }{
		{"replay_accepted", canceled, accepted("true")},
		{"same_key_applied_again", canceled, accepted("false")},
		{"retry_without_key_uncertain", `, "request_id": "req-A"`, ``},
		{"retry_other_key_uncertain", `"request_id": "req-A"`, `"request_id": "req-B"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"inorder.ndjson", "delivered.ndjson"} {
				b, err := os.ReadFile(filepath.Join("testdata/late-closed", f))
				if err != nil {
					t.Fatal(err)
				}
				lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
				n := 0
				for i, l := range lines {
					if bytes.Contains(l, []byte(`"session": "s-b"`)) {
						l = bytes.Replace(l, []byte(tc.from), []byte(tc.to), 1)
						lines[i] = l
						n++
					}
				}
				if n != 1 {
					t.Fatalf("%s: %d lines of s-b, want 1", f, n)
				}
				writeLines(t, filepath.Join(dir, f), lines)
			}
			args := func(file string) []string {
				return []string{"--verify-window", "20s", "--correlation-window", "2m", filepath.Join(dir, file)}
			}
			want := analyzeJSON(t, args("inorder.ndjson")...)
			got := analyzeJSON(t, args("delivered.ndjson")...)
			if !slices.Equal(got, want) {
				t.Errorf("delivered out of order:\n  %s\nin time order:\n  %s", bytes.Join(toBytes(got), []byte("\n  ")), bytes.Join(toBytes(want), []byte("\n  ")))
			}
			t.Logf("in time order: %s", bytes.Join(toBytes(want), []byte("\n  ")))
		})
	}
}

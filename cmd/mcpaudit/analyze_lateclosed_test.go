package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// TestAnalyze_LateRetryAfterWindowClosed: live18's reproA (copied to
// testdata/late-closed), a canceled write and, 15 s later, its retry
// under the same key, delivered 12 s after the rest as a proxy posts a
// timed-out call at its end. analyze of the lines in that order judges the
// retry late, after the write's window (20 s) closed; it must give the
// findings of the same lines in time order: one unverified_write (it gave
// one more, the retry's own).
func TestAnalyze_LateRetryAfterWindowClosed(t *testing.T) {
	args := func(file string) []string {
		return []string{"--verify-window", "20s", "--correlation-window", "2m", "testdata/late-closed/" + file}
	}
	want := analyzeJSON(t, args("inorder.ndjson")...)
	if len(want) != 1 {
		t.Fatalf("in time order %d findings, want 1: %v", len(want), want)
	}
	got := analyzeJSON(t, args("delivered.ndjson")...)
	if !slices.Equal(got, want) {
		t.Errorf("delivered out of order:\n  %s\nin time order:\n  %s", bytes.Join(toBytes(got), []byte("\n  ")), bytes.Join(toBytes(want), []byte("\n  ")))
	}
	var out, errb bytes.Buffer
	run(context.Background(), append([]string{"analyze", "--progress", "never"}, args("delivered.ndjson")...), nil, &out, &errb)
	if !bytes.Contains(out.Bytes(), []byte("1 out of time order by more than the lateness bound, judged late")) {
		t.Errorf("the retry was not judged late: the test shows nothing\n%s", out.String())
	}
}

func toBytes(s []string) [][]byte {
	out := make([][]byte, len(s))
	for i := range s {
		out[i] = []byte(s[i])
	}
	return out
}

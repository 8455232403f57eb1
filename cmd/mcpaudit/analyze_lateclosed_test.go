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

// TestAnalyze_SiblingsAfterWindowClosed (review rev19w's D3, wd20): an
// oddlynew run edits doc_x twice, both saves blocked (revisions 10 and
// 12); the two writes of one call to one document under one key share
// their unverified_write's id. A read dated within the window shows doc_x
// saved at revision 11: it proves the first write durable, not the
// second. In time order (siblings-inorder) the finding stands, once;
// delivered after the window closed (siblings-delivered, judged late) it
// must too, once; with no read (siblings-noread) both writes end
// unverified and the one finding is printed once, as the store keeps one
// row of an id (main printed it twice).
func TestAnalyze_SiblingsAfterWindowClosed(t *testing.T) {
	args := func(file string) []string {
		return []string{"--verify-window", "20s", "--correlation-window", "2m", "testdata/late-closed/" + file}
	}
	want := analyzeJSON(t, args("siblings-inorder.ndjson")...)
	if len(want) != 1 {
		t.Fatalf("in time order %d findings, want 1: %v", len(want), want)
	}
	if got := analyzeJSON(t, args("siblings-delivered.ndjson")...); !slices.Equal(got, want) {
		t.Errorf("delivered out of order:\n  %s\nin time order:\n  %s", bytes.Join(toBytes(got), []byte("\n  ")), bytes.Join(toBytes(want), []byte("\n  ")))
	}
	if got := analyzeJSON(t, args("siblings-noread.ndjson")...); !slices.Equal(got, want) {
		t.Errorf("without the read:\n  %s\nwant the one finding:\n  %s", bytes.Join(toBytes(got), []byte("\n  ")), bytes.Join(toBytes(want), []byte("\n  ")))
	}
	// siblings-noread too: the list shows the one finding, and the summary
	// must count one (wd20 counted 2, one per write; review rev20w).
	for _, file := range []string{"siblings-inorder.ndjson", "siblings-delivered.ndjson", "siblings-noread.ndjson"} {
		var out, errb bytes.Buffer
		run(context.Background(), append([]string{"analyze", "--progress", "never"}, args(file)...), nil, &out, &errb)
		if !bytes.Contains(out.Bytes(), []byte("Findings by kind: unverified_write=1")) {
			t.Errorf("%s: the summary does not count one unverified_write:\n%s", file, out.String())
		}
	}
}

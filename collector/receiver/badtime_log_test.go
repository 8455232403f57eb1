package receiver_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLogs_BadTimeShowsItsValue: a record whose time is not RFC 3339 is
// logged with the start of the value it had (redacted, at most 40 bytes,
// "…" when cut, a secret masked), where the error's own quote of it is hidden. op23 D14:
// loadgen's planted bad line was logged as `not an RFC 3339 time: "…"`,
// which left the operator nothing to go on.
func TestLogs_BadTimeShowsItsValue(t *testing.T) {
	e := newEnv(t, nil)
	long := "2026-12-06 18:30:52.419421816 +0000 UTC m=+0.000000001 (Go's time.String)"
	for i, tc := range []struct{ time, want string }{
		{"not a time", `"not a time"`},
		{long, fmt.Sprintf("%q…", long[:40])},
		// A secret sent as a time is masked as the redaction rules mask it
		// anywhere in the log.
		{"sk-live-0123456789abcdefghij", ""},
	} {
		rec := strings.Replace(record("thegram", "gram_read", now, 10+i), now.Format(time.RFC3339Nano), tc.time, 1)
		if !strings.Contains(rec, tc.time) {
			t.Fatalf("the record's time was not replaced: %s", rec)
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(rec+"\n"))
		if !strings.Contains(a.body, "not an RFC 3339 time") {
			t.Fatalf("%d %s: want the record rejected for its time", a.status, a.body)
		}
		got := e.logs.lines(t, "rejected_record")
		if len(got) != i+1 {
			t.Fatalf("%d rejected_record lines, want %d: %v", len(got), i+1, got)
		}
		m := got[i]
		if tc.want == "" {
			if v := fmt.Sprint(m["value"]); strings.Contains(v, "0123456789abcdef") || !strings.Contains(v, "[redacted:") {
				t.Errorf("rejected_record line %v: want the secret of its value masked", m)
			}
			continue
		}
		if m["reason"] != "bad_time" || m["value"] != tc.want || !strings.Contains(fmt.Sprint(m["error"]), "not an RFC 3339 time") {
			t.Errorf("rejected_record line %v: want reason bad_time and value %s", m, tc.want)
		}
	}
}

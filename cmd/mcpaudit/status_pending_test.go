package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatus_SaysPendingWrites: `mcpaudit status` does not leave "judged:
// yes" to be read as final: beside it, it says how many judged writes are
// still pending (their state may change: a later call settles them or
// their verification window ends) and when the last window ends, or that
// none is; against a serve whose answer does not count them, it says
// neither.
func TestStatus_SaysPendingWrites(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		want, not    []string
	}{
		{"pending", `{"time":"2026-12-04T18:29:02Z","judged":true,"pending_writes":4,"partitions":[
			{"server":"thegram","watermark":"2026-12-04T18:29:01Z","lag_seconds":1,"pending_writes":3,"pending_until":"2026-12-04T18:33:39Z","sources":[]},
			{"server":"oddlynew","watermark":"2026-12-04T18:29:01Z","lag_seconds":1,"pending_writes":1,"pending_until":"2026-12-04T18:31:02Z","sources":[]}],"sources":[]}`,
			[]string{"every acknowledged call judged: yes", "Of the writes judged, 4 are still pending: their state may change", "detect.verify_window",
				"the last window ends at event time 2026-12-04T18:33:39Z"},
			[]string{"none is pending", "everything acknowledged judged"}},
		{"one", `{"time":"2026-12-04T18:29:02Z","judged":false,"pending_writes":1,"partitions":[
			{"server":"thegram","watermark":"2026-12-04T18:29:01Z","lag_seconds":1,"pending_writes":1,"pending_until":"2026-12-04T18:30:00Z","sources":[]}],"sources":[]}`,
			[]string{"every acknowledged call judged: no", "Of the writes judged, 1 is still pending", "ends at event time 2026-12-04T18:30:00Z"}, []string{"1 are"}},
		{"none", `{"time":"2026-12-04T18:29:02Z","judged":true,"pending_writes":0,"partitions":[],"sources":[]}`,
			[]string{"every acknowledged call judged: yes", "Of the writes judged, none is pending"}, []string{"still pending"}},
		// Every call judged but for those counted too late: a plain "yes"
		// beside "133 too late (stored, never judged)" read as a
		// contradiction (out25 O3).
		{"too late", `{"time":"2026-12-04T18:29:02Z","judged":true,"pending_writes":0,"too_late":133,"too_late_before_start":2,"partitions":[],"sources":[]}`,
			[]string{"133 too late (stored, never judged", "every acknowledged call judged: yes, but for the 135 stored too late"}, []string{"judged: yes\n"}},
		{"older serve", `{"time":"2026-12-04T18:29:02Z","judged":false,"partitions":[],"sources":[]}`,
			[]string{"every acknowledged call judged: no"}, []string{"Of the writes judged"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(tc.answer)) }))
			defer hs.Close()
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{"status", "--api-url", hs.URL}, nil, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			head, _, _ := strings.Cut(out.String(), "\n\n")
			for _, w := range tc.want {
				if !strings.Contains(head, w) {
					t.Errorf("status says not %q:\n%s", w, head)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(head, n) {
					t.Errorf("status says %q:\n%s", n, head)
				}
			}
		})
	}
}

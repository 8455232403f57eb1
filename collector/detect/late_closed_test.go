package detect_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestDetector_LateAfterWindowClosed: a call of a write delivered late,
// after the write's verification window closed, is judged against the
// closed window as judging in order would have judged it while the window
// was open (docs/detection.md, "Late calls"). Found from outside (live18,
// reproA): a retry under the same key that a proxy posted 12 s after the
// rest, at its end, gave an unverified_write of its own beside the first
// attempt's, where analyze of the same calls gives one.
func TestDetector_LateAfterWindowClosed(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	cfg.VerifyWindow = 20 * sec
	cfg.CorrelationWindow = 2 * time.Minute
	getZ := code(`async () => await documents.getDocument({ documentId: "doc_z" })`)
	gotZ := runOK(obj{"documentId": "doc_z", "title": "Z"}, ledger(getDoc, "succeeded"))
	inFlight := runFail("Execution timed out", []obj{ledger(create, "in_flight_unknown")},
		outcomeOf(1, create, "write", "in_flight_unknown", nil))
	replayed := runOK(obj{"documentId": "doc_a", "action": "alreadyBootstrapped"}, ledger(create, "succeeded"))
	for _, tc := range []struct {
		name   string
		server string
		// write adds the write at 0; late adds the call at 15 s that
		// comes after the write's window closed.
		write, late func(s *scenario)
		// findings in order: the test shows something only when the late
		// call changes them.
		kinds []audit.Kind
	}{
		{
			name: "retry_under_same_key_uncertain", server: tg,
			write: func(s *scenario) { s.call(0, tg, "s-a", "gram_patch", patch("a.gram", 3, "req-A", "x"), "canceled") },
			late: func(s *scenario) {
				s.call(15*sec, tg, "s-b", "gram_patch", patch("a.gram", 3, "req-A", "x"), "canceled")
			},
			kinds: []audit.Kind{audit.KindUnverifiedWrite},
		},
		{
			name: "replay_under_same_key_accepted", server: tg,
			write: func(s *scenario) { s.call(0, tg, "s-a", "gram_patch", patch("a.gram", 3, "req-A", "x"), "canceled") },
			late: func(s *scenario) {
				s.call(15*sec, tg, "s-b", "gram_patch", patch("a.gram", 3, "req-A", "x"), okDoc("a.gram", 4, ""))
			},
		},
		{
			name: "replay_of_in_flight_unknown_create", server: on,
			write: func(s *scenario) { s.call(0, on, "s1", "run", code(createJS("01a-1", "R")), inFlight) },
			late:  func(s *scenario) { s.call(15*sec, on, "s1", "run", code(createJS("01a-1", "R")), replayed) },
		},
		{
			// The retry's window (to 25 s) closed with no finding of its
			// own, the first attempt's reported: settled late, only the
			// first attempt's finding is withdrawn.
			name: "retry_then_late_accepted_replay", server: tg,
			write: func(s *scenario) {
				s.call(0, tg, "s-a", "gram_patch", patch("a.gram", 3, "req-A", "x"), "canceled")
				s.call(5*sec, tg, "s-b", "gram_patch", patch("a.gram", 3, "req-A", "x"), "canceled")
			},
			late: func(s *scenario) {
				s.call(15*sec, tg, "s-c", "gram_patch", patch("a.gram", 3, "req-A", "x"), okDoc("a.gram", 4, ""))
			},
		},
		{
			name: "read_by_the_writer", server: tg,
			write: func(s *scenario) { s.call(0, tg, "s-a", "gram_patch", patch("a.gram", 3, "req-A", "x"), "canceled") },
			late:  func(s *scenario) { s.call(15*sec, tg, "s-a", "gram_read", read("a.gram"), okDoc("a.gram", 4, "")) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scenario{}
			tc.write(s)
			n := len(s.lines)
			tc.late(s)
			// Other traffic of the server up to 29 s: the watermark passes
			// the write's window (20 s) before the late call comes.
			for i := 1; i <= 29; i++ {
				if tc.server == tg {
					s.call(time.Duration(i)*sec, tg, "s-o", "gram_projects", obj{}, obj{"isError": false, "structuredContent": obj{"projects": []any{}}})
				} else {
					s.call(time.Duration(i)*sec, on, "s-o", "run", getZ, gotZ)
				}
			}
			recs := readRecords(t, bytes.Split(bytes.TrimSpace(s.ndjson(true)), []byte("\n")))
			late := recs[n]
			sorted := slices.Clone(recs)
			slices.SortStableFunc(sorted, func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
			want := inOrderCfg(sorted, cfg)
			var kinds []audit.Kind
			for _, f := range want.findings {
				kinds = append(kinds, f.Kind)
			}
			if len(kinds) != len(tc.kinds) {
				t.Fatalf("in order: %v, want %v", kinds, tc.kinds)
			}
			// One poster, two requests: everything but the late call, then
			// the late call 12 s after the partition began judging (a proxy
			// posts a timed-out call at its end).
			wall := t0.Add(40 * sec)
			var ds []delivered
			for _, r := range recs {
				if r != late && r != recs[len(recs)-1] {
					ds = append(ds, delivered{r, "poster", wall})
				}
			}
			post2 := wall.Add(cfg.JoinWait + 12*sec)
			ds = append(ds, delivered{late, "poster", post2}, delivered{recs[len(recs)-1], "poster", post2})
			got := live(cfg, ds)
			if got.stats.Late == 0 {
				t.Fatal("the late call was not judged late: the test shows nothing")
			}
			compare(t, tc.name, want, got)
			// Counted as made less withdrawn (analyze's summary).
			if n := got.stats.Findings[audit.KindUnverifiedWrite]; n != int64(len(tc.kinds)) {
				t.Errorf("%d unverified_write counted, want %d", n, len(tc.kinds))
			}
		})
	}
}

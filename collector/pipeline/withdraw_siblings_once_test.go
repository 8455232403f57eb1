package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestSiblings_ToldOnce (review rev20w of wd20): two writes of one call
// to one document under one key share their unverified_write's id, and
// the store keeps one finding of it (analyze prints one). The sinks must
// be told it as one finding: mcpaudit_findings_total less
// mcpaudit_findings_withdrawn_total is what stands (docs/metrics.md), so
// for the id the findings told less the withdrawals told must be the
// findings that stand judged in time order: 1 with one write settled, 0
// with both, 1 with none.
func TestSiblings_ToldOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readRev int // 0: no read
		open    int
	}{
		{"none_settled", 0, 1},
		{"one_settled", 11, 1},
		{"both_settled", 12, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSiblings(max(tc.readRev, 11))
			dir := t.TempDir()
			clock := newClock(wallStart)
			rec := newRecorder()
			r := openRunDetect(t, dir, clock, nil, s.dedit, rec)
			if _, err := r.ingest(batch(t, "calls:sib", slices.Concat([][]byte{s.write}, s.others)...)); err != nil {
				t.Fatal(err)
			}
			clock.Add(3 * time.Second)
			r.status()
			open := openFindings(r.read())
			if len(open) != 1 {
				t.Fatalf("findings before the read came %v, want one", open)
			}
			clock.Add(9 * time.Second)
			r.status()
			if tc.readRev > 0 {
				if _, err := r.ingest(batch(t, "calls:sib", s.read)); err != nil {
					t.Fatal(err)
				}
			}
			clock.Add(10 * time.Minute)
			if _, err := r.ingest(batch(t, "calls:sib", s.tail)); err != nil {
				t.Fatal(err)
			}
			r.steps(20, nil)
			rec.mu.Lock()
			told, withdrawn := rec.findings[open[0]], rec.withdrawn[open[0]]
			rec.mu.Unlock()
			if told-withdrawn != tc.open {
				t.Errorf("the sinks were told the finding %d times and its withdrawal %d times: %d stands for the metrics, want %d (the store keeps one finding of the id)",
					told, withdrawn, told-withdrawn, tc.open)
			}
			r.stop()
		})
	}
}

// TestSiblings_WithdrawnBeforeCommit (review rev20w of wd20): the store
// cannot take commits (unavailable, Commit failing) while both writes'
// windows close, each making the unverified_write of the id, and while
// the read that settles both is judged late. The pipeline keeps the
// output for the next commit; withdrawing the finding drops one copy of
// it from that output and must drop both: judged in time order there is
// no finding, and the sinks told the finding must be told it withdrawn.
func TestSiblings_WithdrawnBeforeCommit(t *testing.T) {
	s := newSiblings(12)
	want := s.inOrder(t)
	if got := openFindings(want); len(got) != 0 {
		t.Fatalf("judged in time order: findings %v, want none", got)
	}
	dir := t.TempDir()
	clock := newClock(wallStart)
	rec := newRecorder()
	r := openRunDetect(t, dir, clock, nil, s.dedit, rec)
	r.cs.failCommit.Store(true)
	if _, err := r.ingest(batch(t, "calls:sib", slices.Concat([][]byte{s.write}, s.others)...)); err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * time.Second)
	r.status()
	rec.mu.Lock()
	told := len(rec.findings)
	rec.mu.Unlock()
	if told != 1 {
		t.Fatalf("the sinks were told %d findings before the read, want the writes' unverified_write: the test shows nothing", told)
	}
	clock.Add(9 * time.Second)
	r.status()
	if _, err := r.ingest(batch(t, "calls:sib", s.read)); err != nil {
		t.Fatal(err)
	}
	if st := r.status()[detect.PartitionKey{Server: "oddlynew"}]; st.TooLate != 0 {
		t.Fatalf("the read was counted too late (%d): the test shows nothing", st.TooLate)
	}
	r.cs.failCommit.Store(false)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:sib", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if got := openFindings(r.read()); len(got) != 0 {
		t.Errorf("open findings %v after the store came back, want none: the read settled both writes", got)
	}
	sameStored(t, "live", r.stop(), want)
}

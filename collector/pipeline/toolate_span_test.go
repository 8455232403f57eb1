package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestTooLate_SpanNamed is one of two Collectors cut off from the
// collector for 3 minutes while the other delivers the same server live,
// then replaying its backlog (found from outside with two real
// Collectors, docs/detection.md "Live delivery, checked from outside"):
// its calls more than allowed_lateness (2 m) behind the watermark are
// stored, not judged. The operator must be able to tell which findings may
// be missing: the status gives, for the source and the partition, the
// event-time span of the calls not judged, and the WARN line names it.
// Before, both told only how many.
func TestTooLate_SpanNamed(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	rpc := 0
	var backlog [][]byte
	var cut time.Time
	for i := 0; i < 240; i++ {
		now := clock.Now()
		rpc++
		if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		rpc++
		l := callLine("thegram", "s1", rpc, now.Add(-time.Second))
		switch {
		case i < 30:
			if _, err := r.ingest(batch(t, "pod-1", l)); err != nil {
				t.Fatal(err)
			}
		case i < 210:
			if i == 30 {
				cut = now.Add(-time.Second)
			}
			backlog = append(backlog, l)
		default:
			if backlog != nil {
				if _, err := r.ingest(batch(t, "pod-1", backlog...)); err != nil {
					t.Fatal(err)
				}
				backlog = nil
			}
			if _, err := r.ingest(batch(t, "pod-1", l)); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(time.Second)
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	var src detect.SourceStatus
	for _, s := range st.Sources {
		if s.Name == "pod-1" {
			src = s
		}
	}
	t.Logf("partition: %d too late, %s to %s; pod-1: %d too late, %s to %s", st.TooLate, st.TooLateFrom.Format(time.TimeOnly),
		st.TooLateTo.Format(time.TimeOnly), src.TooLate, src.TooLateFrom.Format(time.TimeOnly), src.TooLateTo.Format(time.TimeOnly))
	if src.TooLate == 0 || src.TooLate != st.TooLate {
		t.Fatalf("pod-1 has %d calls too late, its partition %d: want the same, more than none", src.TooLate, st.TooLate)
	}
	// The backlog's first calls are the ones too late: from the cut, one a
	// second, as many as were counted.
	wantTo := cut.Add(time.Duration(src.TooLate-1) * time.Second)
	if !src.TooLateFrom.Equal(cut) || !src.TooLateTo.Equal(wantTo) {
		t.Errorf("pod-1's calls too late span %s to %s, want %s to %s", src.TooLateFrom, src.TooLateTo, cut, wantTo)
	}
	if !st.TooLateFrom.Equal(src.TooLateFrom) || !st.TooLateTo.Equal(src.TooLateTo) {
		t.Errorf("the partition's span %s to %s, want pod-1's", st.TooLateFrom, st.TooLateTo)
	}
	for _, s := range st.Sources {
		if s.Name == "pod-0" && (s.TooLate != 0 || !s.TooLateFrom.IsZero()) {
			t.Errorf("pod-0: %d too late, from %s", s.TooLate, s.TooLateFrom)
		}
	}
	r.stop()
	logs := r.logs.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "kind=too_late_calls") {
			line = l
			break
		}
	}
	if want := "too_late_from=" + cut.UTC().Format("2006-01-02T15:04:05.000Z07:00"); !strings.Contains(line, want) {
		t.Errorf("the WARN line does not name the span (%s): %q", want, line)
	}
}

// TestTooLate_OverflowSendersNamed: a partition with room for one source
// (detect.max_sources) takes a second pod's calls under its overflow
// source; a third pod's calls that come too late are counted under it too.
// The WARN line names the overflow source, which no stored call carries,
// and the sender whose calls they are: the operator lists them by it.
func TestTooLate_OverflowSendersNamed(t *testing.T) {
	clock := newClock(wallStart)
	r := openRunDetect(t, t.TempDir(), clock, nil, func(c *detect.Config) { c.MaxSources = 1 }, nil)
	rpc := 0
	send := func(src string, at time.Time) {
		t.Helper()
		rpc++
		if _, err := r.ingest(batch(t, src, callLine("thegram", "s-"+src, rpc, at))); err != nil {
			t.Fatal(err)
		}
	}
	for range 30 {
		now := clock.Now()
		send("pod-0", now.Add(-time.Second))
		send("pod-1", now.Add(-time.Second))
		clock.Add(time.Second)
	}
	send("pod-2", clock.Now().Add(-10*time.Minute))
	for range 3 {
		clock.Add(time.Second)
		send("pod-0", clock.Now().Add(-time.Second))
		send("pod-1", clock.Now().Add(-time.Second))
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	if st.TooLate != 1 || st.OverflowCalls == 0 {
		t.Fatalf("the partition: %d too late, %d overflow calls; want 1, and some", st.TooLate, st.OverflowCalls)
	}
	r.stop()
	var line string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, "kind=too_late_calls") {
			line = l
			break
		}
	}
	if !strings.Contains(line, detect.OverflowSource) || !strings.Contains(line, "overflow_senders=[pod-2]") {
		t.Errorf("the WARN line does not name the overflow source and its sender pod-2: %q", line)
	}
}

package detect_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestDeliveryExamples_ResendLate: the blind re-send of an uncertain write
// comes late, after the writer's read that followed it has settled the
// first attempt: a Collector's queue replaying its backlog after an outage
// sends its requests in parallel, and the one with the re-send came last
// (found from outside: 3 unsafe_retry findings of each run with a real
// Collector said "with an uncertain outcome at ... ()" where analyze says
// why). The settling read cleared the first attempt's reason; the finding
// made when the re-send came must still name it, as judging in order does.
func TestDeliveryExamples_ResendLate(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/examples/thegram-blind-new-id-cas-saved.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, bytes.Split(bytes.TrimSpace(raw), []byte("\n")))
	// The first attempt (timed out), the blind re-send, the writer's read,
	// a harmless call 10 minutes on.
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	// A harmless call 5 s after the read, delivered before the re-send: the
	// read is judged (and settles the first attempt) before the re-send
	// comes.
	c := *recs[3].Call
	c.Time = recs[2].Call.Time.Add(5 * time.Second)
	c.ID = "c_after_the_read"
	after := *recs[3]
	after.Call = &c
	recs = []*audit.Record{recs[0], recs[1], recs[2], &after, recs[3]}
	want := inOrder(recs)
	if len(want.findings) == 0 {
		t.Fatal("the example gives no finding in order")
	}
	wall := recs[2].Call.Time.Add(40 * time.Second)
	cfg := detect.NewDefaultConfig()
	// After the new partition's wait for its sources (join_wait).
	grace := cfg.JoinWait
	ds := []delivered{
		{recs[0], "pod-0", wall},
		{recs[2], "pod-0", wall.Add(time.Second)},
		{recs[3], "pod-0", wall.Add(2 * time.Second)},
		// Behind the read, judged by then: judged late.
		{recs[1], "pod-0", wall.Add(grace + 5*time.Second)},
		{recs[4], "pod-0", wall.Add(grace + 10*time.Second)},
	}
	got := live(cfg, ds)
	if got.stats.Late == 0 {
		t.Fatal("the re-send was not judged late: the test shows nothing")
	}
	compare(t, "resend_late", want, got)
}

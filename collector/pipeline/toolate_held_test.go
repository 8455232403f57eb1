package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestTooLate_HeldCopyCountedOnce (the outside pass live21's D4): a second
// observer of every call (a server exporter) delivers 170 s behind the
// first (the client's), past allowed_lateness (2 m) and past the time the
// engine remembers an observation. Every copy is held by the store, its
// call stored and judged through the first observer: an identical copy of
// each read, and the answered copy of a gram_patch the first observer saw
// unanswered (kept aside, too late to be taken: docs/detection.md,
// "Responses under one call id"). Each copy must be counted once, as a
// duplicate (the store held it: Ingest stores none of them), not also too
// late: neither the partition's nor the source's too-late count (which
// give mcpaudit_pipeline_late_calls_total{result="too_late"} and the
// status's "Not judged" line) may count them. On main 075bcac all were
// counted both ways, and the status said the calls of the second observer
// were not judged.
func TestTooLate_HeldCopyCountedOnce(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	const lag = 170
	var copies [][][]byte // by second: what the second observer sends
	rpc := 0
	var patch, patchAnswered []byte
	for i := 0; i < 240; i++ {
		now := clock.Now()
		rpc++
		l := callLine("thegram", "s0", rpc, now.Add(-time.Second))
		sent := [][]byte{l}
		seen := [][]byte{l}
		if i == 10 {
			patch, patchAnswered = laLinesWith(now.Add(-time.Second), laAccepted)
			sent = append(sent, patch)
			seen = append(seen, patchAnswered)
		}
		if _, err := r.ingest(batch(t, "client", sent...)); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, seen)
		if i >= lag {
			lines := copies[i-lag]
			n, err := r.ingest(batch(t, "server", lines...))
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("second %d: %d copies stored anew, want none (each held by the store)", i, n)
			}
		}
		clock.Add(time.Second)
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	var server *detect.SourceStatus
	for i := range st.Sources {
		if st.Sources[i].Name == "server" {
			server = &st.Sources[i]
		}
	}
	if server == nil {
		t.Fatalf("no status of source server: %+v", st.Sources)
	}
	if st.TooLate != 0 || server.TooLate != 0 {
		t.Fatalf("%d calls of the partition and %d of source server counted too late; want none: each copy was held by the store (a duplicate), its call judged through the client's observation",
			st.TooLate, server.TooLate)
	}
	if storedAnswered(t, r, patch) {
		t.Fatalf("the gram_patch is stored answered; its answer came later than allowed_lateness and stays aside")
	}
}

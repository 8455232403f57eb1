package pipeline

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestFreed_FailedAppendNotFreed: an append that reports an error may have
// stored the calls all the same (a ClickHouse insert goes on when its
// caller stops waiting): no floor covers them and the engine never took
// them. Ingest notes their partitions (unsure), and one the engine frees
// afterwards is not kept as freed: kept, the file took their output as
// committed after a crash, and the sender's retry after the restart was a
// repeat of a replayed call (found by review13g, whose rig this is).
func TestFreed_FailedAppendNotFreed(t *testing.T) {
	r := newFreedRig(t)
	first := r.batch(1, r.wall.Add(-time.Minute))
	r.ack(first)
	late := r.batch(2, first.Records[0].Call.Time.Add(time.Second))
	at := late.Records[0].Call.Time
	arrived, err := r.p.comeback([]audit.Batch{late})
	if err != nil {
		t.Fatal(err)
	}
	// p.append stored the call and returned an error: Ingest's error path.
	r.p.unsure([]audit.Batch{late})
	arrived()
	wm := r.expire()
	r.save()
	committed, kept := r.restart()
	if kept || committed(at) {
		t.Errorf("a call stored by an append that reported an error is taken as committed after a restart (the file keeps thegram freed at %v: %v)", wm, kept)
	}
}

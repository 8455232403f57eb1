package clickhouse

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestAckLog_CallsPagesSettleOnce: with Ack "log", a read of calls page by
// page waits for the spool once, at its first page, though calls are
// acknowledged between its pages: a wait per page forced an insert per
// page under ingest.
func TestAckLog_CallsPagesSettleOnce(t *testing.T) {
	o := testOptions(t)
	o.Ack = AckLog
	o.BatchAge = time.Second
	s := openStore(t, o)
	g, err := storetest.NewGenerator(3, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	recs := g.Records(3500)
	storetest.WaitsOfPagedRead(t, s, recs[:2500], recs[2500:], s.settles.Load)
}

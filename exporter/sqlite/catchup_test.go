package sqlite

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestAckLog_CallsPagesCatchUpOnce: with ack "log", a read of calls page
// by page waits for the call log once, at its first page, though calls are
// acknowledged between its pages: a wait per page forced a small commit
// per page under ingest (adv50: 92 s for 200k calls beside ingest against
// 8–11 s idle).
func TestAckLog_CallsPagesCatchUpOnce(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog})
	defer s.Close()
	recs := records(t, 3500)
	storetest.WaitsOfPagedRead(t, s, recs[:2500], recs[2500:], s.catchUps.Load)
}

package clickhouse

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestConformance runs the store suite every backend passes, against a real
// server: the same data gives the same answers as the SQLite store.
func TestConformance(t *testing.T) {
	serverDSN(t)
	storetest.Run(t, func(t *testing.T) audit.Store { return openStore(t, testOptions(t)) })
}

// TestConformance_AckLog runs the suite with Ack "log": calls and results
// are acknowledged once synced to the local spool and inserted behind;
// every query still sees what was acknowledged before it.
func TestConformance_AckLog(t *testing.T) {
	serverDSN(t)
	storetest.Run(t, func(t *testing.T) audit.Store {
		o := testOptions(t)
		o.Ack = AckLog
		o.BatchAge = time.Second // reads must not wait for it
		return openStore(t, o)
	})
}

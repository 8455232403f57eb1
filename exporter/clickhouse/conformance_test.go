package clickhouse

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestConformance runs the store suite every backend passes, against a real
// server: the same data gives the same answers as the SQLite store.
func TestConformance(t *testing.T) {
	serverDSN(t)
	storetest.Run(t, func(t *testing.T) audit.Store { return openStore(t, testOptions(t)) })
}

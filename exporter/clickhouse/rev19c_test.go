package clickhouse

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestRev19c_KeylessCut (review rev19c, D1): review rev17c's false alarm,
// fixed for the embedded store by ch19, is still there in the ClickHouse
// store: retention run while serve has no signing key cuts the chains and
// signs nothing, and verify with the public key reports the cut as
// "no checkpoint signed it: history was removed outside retention"
// (TAMPERED, exit 1) for an honest history. ch19 removed the "known false
// alarm" limit from docs/storage.md, which now says every unsigned cut was
// TAMPERED only until ch19. Skipped unless MCPAUDIT_REV19C_DEFECTS=1 (not
// fixed here).
func TestRev19c_KeylessCut(t *testing.T) {
	if os.Getenv("MCPAUDIT_REV19C_DEFECTS") == "" {
		t.Skip("known defect D1 of review rev19c (keyless retention cut reported TAMPERED by the ClickHouse verify); set MCPAUDIT_REV19C_DEFECTS=1 to run")
	}
	o, pub, conn := chainedStore(t, AckInsert)
	o.SigningKey = nil // serve started without its key
	o.Retention.Tenants = map[string]time.Duration{"acme": 24 * time.Hour}
	s := openStore(t, o)
	if err := s.enforceRetention(context.Background(), time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatalf("enforceRetention: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".chain_cuts WHERE tenant = 'acme'"); n == 0 {
		t.Fatal("retention made no cut: the test shows nothing")
	}
	r, text := verifyOf(t, o, pub)
	if !r.OK() {
		t.Errorf("an honest keyless retention cut is reported as tampering:\n%s", text)
	}
}

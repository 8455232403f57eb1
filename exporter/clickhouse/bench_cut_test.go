package clickhouse

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// BenchmarkCutPass times one retention cut of the chains (Store.cut, as
// each retention pass makes it) over 10 tenants with a signing key: each
// tenant holds one entry of 100 calls older than its cutoff and one newer,
// so that every pass records a cut (main) and appends its cut entry (ch20),
// signed by a checkpoint. Written for ch20's measurement.
func BenchmarkCutPass(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	o := testOptions(b)
	o.SigningKey = priv
	o.Retention.Tenants = map[string]time.Duration{}
	now := time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)
	var recs []audit.Record
	for tn := range 10 {
		tenant := fmt.Sprintf("t%02d", tn)
		o.Retention.Tenants[tenant] = 24 * time.Hour
		for i := range 200 {
			age := 48 * time.Hour
			if i >= 100 {
				age = time.Hour
			}
			c := &audit.Call{ID: fmt.Sprintf("%s-%d", tenant, i), Tenant: tenant, Server: "s", Time: now.Add(-age + time.Duration(i)*time.Second)}
			recs = append(recs, audit.Record{Call: c, Ops: []audit.Op{{Kind: audit.OpRead, Target: "a"}}})
		}
	}
	s := openStore(b, o)
	ctx := context.Background()
	for i := 0; i < len(recs); i += 100 {
		if _, err := s.AppendCalls(ctx, recs[i:i+100]); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.cut(ctx, now); err != nil { // the old entries go once
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.cut(ctx, now.Add(time.Duration(i+1)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}

package sqlite

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// changedStore fills a signed store with calls calls of acme and globex
// and a finding per 10 calls, each acknowledged once, and returns it, its
// file, the public key and the time after every row.
func changedStore(b *testing.B, calls int) (*Store, string, ed25519.PublicKey, time.Time) {
	b.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "mcpaudit.db")
	s, err := Open(path, Options{SigningKey: priv})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	g, err := storetest.NewGenerator(11, storetest.T0)
	if err != nil {
		b.Fatal(err)
	}
	recs := g.Records(calls)
	for i := range recs {
		recs[i].Call.Tenant = []string{"acme", "globex"}[i%2]
	}
	for i := 0; i < calls; i += 500 {
		if _, err := s.AppendCalls(ctx, recs[i:min(i+500, calls)]); err != nil {
			b.Fatal(err)
		}
	}
	var fs []audit.Finding
	for i := 0; i < calls; i += 10 {
		r := recs[i].Call
		fs = append(fs, audit.Finding{Kind: audit.KindUnsafeRetry, Severity: audit.SeverityWarning, Server: r.Server,
			Tenant: r.Tenant, Document: "doc", Time: r.Time, Calls: []string{r.ID}, Summary: "s"})
	}
	last := recs[calls-1].Call.Time
	if err := s.Commit(ctx, audit.Results{Findings: fs, Watermark: last}); err != nil {
		b.Fatal(err)
	}
	for _, f := range fs {
		if _, err := s.ChangeFinding(ctx, audit.FindingChange{FindingID: f.ID(), Tenant: f.Tenant, State: audit.FindingAcknowledged,
			By: "ann", Note: "n", Time: last.Add(time.Minute)}); err != nil {
			b.Fatal(err)
		}
	}
	return s, path, pub, last.Add(time.Hour)
}

// BenchmarkRetentionChanges (review rev20c): one retention pass
// (DeleteBefore) removing 5,000 calls and 500 findings, each changed once,
// of a signed store: what a pass costs (ch20 deletes each finding's changes
// with it).
func BenchmarkRetentionChanges(b *testing.B) {
	for range b.N {
		b.StopTimer()
		s, _, _, after := changedStore(b, 5000)
		b.StartTimer()
		if _, err := s.DeleteBefore(context.Background(), after); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
	}
}

// BenchmarkVerifyChanged (review rev20c): verify of a signed store of
// 50,000 calls and 5,000 findings, each changed once.
func BenchmarkVerifyChanged(b *testing.B) {
	s, path, pub, _ := changedStore(b, 50000)
	s.Close()
	b.ResetTimer()
	for range b.N {
		if _, err := Verify(context.Background(), path, chain.KeysOf(pub)); err != nil {
			b.Fatal(err)
		}
	}
}

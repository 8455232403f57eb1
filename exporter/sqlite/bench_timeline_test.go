package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// BenchmarkTimeline reads one document's timeline of 1000 Thegram calls
// (reads and patches, with their payloads: arguments of about 300 bytes,
// results of about 200), the API's default page. It measures what a
// timeline costs, the payloads read for each call's revisions included.
//
//	go test -run '^$' -bench Timeline -benchtime 200x ./exporter/sqlite/
func BenchmarkTimeline(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "audit.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const doc = "ops/notes-1d0459.gram"
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	recs := make([]audit.Record, 1000)
	for i := range recs {
		tool, args := "gram_read", fmt.Sprintf(`{"path":%q,"include":["body","meta"],"note":"%0200d"}`, doc, i)
		kind := audit.OpRead
		if i%2 == 1 {
			tool, kind = "gram_patch", audit.OpWrite
			args = fmt.Sprintf(`{"path":%q,"base_revision":%d,"expected_hash":"%012x","request_id":"req-%012x","ops":[{"op":"append","text":"%0180d"}]}`, doc, i, i, i, i)
		}
		c := &audit.Call{ID: fmt.Sprintf("c_%020x", i), Time: t0.Add(time.Duration(i) * time.Second), Server: "thegram", Session: "s-1",
			RPCID: fmt.Sprint(i), Method: "tools/call", Tool: tool, Arguments: []byte(args), Responded: true,
			Result: []byte(fmt.Sprintf(`{"isError":false,"structuredContent":{"path":%q,"rev":%d,"hash":"%012x","sync":{"state":"synced"},"size":%d}}`, doc, i+1, i+1, 1000+i))}
		recs[i] = audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: tool,
			Ops: []audit.Op{{Tool: tool, Kind: kind, Target: doc, Status: audit.OpSucceeded}}}
	}
	if _, err := s.AppendCalls(context.Background(), recs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p, err := s.Timeline(context.Background(), audit.TimelineQuery{Document: doc})
		if err != nil || len(p.Events) != len(recs) {
			b.Fatalf("%d events, %v", len(p.Events), err)
		}
	}
}

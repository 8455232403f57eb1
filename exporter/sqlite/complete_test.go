package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestVerify_AnswerCompletes: a store whose unanswered calls were
// completed by their answers (in later requests and in the same one, with
// either ack) verifies clean against its signed checkpoints, keeps one
// answered row per call id across a reopen, still verifies after
// retention cut the entries whose rows were replaced, and still reports
// an answered row deleted behind its back.
func TestVerify_AnswerCompletes(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		t.Run(ack, func(t *testing.T) {
			s, path, pub, priv := openSigned(t, Options{Ack: ack})
			ctx := context.Background()
			g, recs := tenantRecords(t, 200)
			for i := range recs {
				if !recs[i].Call.Responded {
					recs[i].Call.Responded, recs[i].Call.Result = true, []byte(`{"isError":false}`)
				}
			}
			unanswered := func(r audit.Record) audit.Record {
				c := *r.Call
				c.Responded, c.Result, c.Error, c.TransportError = false, nil, nil, "timeout"
				r.Call = &c
				return r
			}
			// Calls 0–79 stored unanswered, in two requests; 80–199 answered.
			var first []audit.Record
			for i := range 80 {
				first = append(first, unanswered(recs[i]))
			}
			for _, b := range [][]audit.Record{first[:40], first[40:], recs[80:]} {
				if _, _, _, err := s.AppendCallsCompared(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			// The answers of 0–59 in later requests; 200–219 new calls,
			// each unanswered then answered in one request.
			if _, _, _, err := s.AppendCallsCompared(ctx, recs[:60]); err != nil {
				t.Fatal(err)
			}
			more := g.Records(20)
			var both []audit.Record
			for i := range more {
				more[i].Call.Responded, more[i].Call.Result = true, []byte(`{"isError":false}`)
				both = append(both, unanswered(more[i]), more[i])
			}
			if n, _, differ, err := s.AppendCallsCompared(ctx, both); err != nil || n != 20 || len(differ) != 0 {
				t.Fatalf("AppendCallsCompared = %d, %v, %v; want 20 stored, none differing", n, differ, err)
			}
			// The engine took the answers of 0–49 and 200–219 (those of
			// 50–59 came after it judged their calls): only those take
			// their calls' places, in the commit that names them.
			var refs []audit.CallRef
			for _, r := range append(recs[:50:50], more...) {
				refs = append(refs, audit.CallRef{Tenant: r.Call.Tenant, ID: r.Call.ID, Time: r.Call.Time})
			}
			if err := s.Commit(ctx, audit.Results{Answered: refs}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if r := verify(t, path, pub); !r.OK() || r.Calls != 220 {
				t.Fatalf("verify after completions: %d calls, problems %v; want 220, none", r.Calls, r.Problems)
			}

			s, err := Open(path, Options{SigningKey: priv, Ack: ack})
			if err != nil {
				t.Fatal(err)
			}
			answered := map[string]bool{}
			if err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
				if _, dup := answered[r.Call.ID]; dup {
					return fmt.Errorf("call %s read twice", r.Call.ID)
				}
				answered[r.Call.ID] = r.Call.Responded
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i, r := range append(recs, more...) {
				if got, want := answered[r.Call.ID], i < 50 || i >= 80; got != want {
					t.Errorf("call %d (%s) answered = %v, want %v", i, r.Call.ID, got, want)
				}
			}
			// Retention past the first requests' calls: their entries,
			// whose rows are deleted or replaced, are cut.
			if _, err := s.DeleteBefore(ctx, recs[100].Call.Time); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if r := verify(t, path, pub); !r.OK() {
				t.Fatalf("verify after retention: problems %v", r.Problems)
			}
			// An answered row deleted behind the store's back is reported.
			tampered := edit(t, path, `DELETE FROM calls WHERE rid = (SELECT max(rid) FROM calls)`)
			if r := verify(t, tampered, pub); r.OK() {
				t.Fatal("verify missed an answered row deleted")
			}
		})
	}
}

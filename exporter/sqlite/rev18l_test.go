package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestVerify_AnswerAsideDeleted (review rev18l's D4, fixed by ch19): an
// answer of a stored unanswered call is acknowledged once it is kept
// aside (answers_late); until a commit names it (and for good, when the
// engine dropped it) it was in no chain entry, and deleting it left verify
// green. It is chained in an answers entry now, and its deletion reported.
func TestVerify_AnswerAsideDeleted(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		t.Run(ack, func(t *testing.T) {
			s, path, pub, _ := openSigned(t, Options{Ack: ack})
			ctx := context.Background()
			t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
			call := func(answered bool) audit.Record {
				c := &audit.Call{ID: "c_b3000000000000000000", Time: t0, Server: "thegram", Tool: "gram_projects", Source: "calls:1"}
				if answered {
					c.Responded, c.Result = true, []byte(`{"isError":false,"structuredContent":{"n":1}}`)
				} else {
					c.TransportError = "timeout"
				}
				return audit.Record{Call: c}
			}
			if _, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call(false)}); err != nil {
				t.Fatal(err)
			}
			_, _, _, answered, err := s.AppendCallsAnswered(ctx, []audit.Record{call(true)})
			if err != nil || len(answered) != 1 {
				t.Fatalf("AppendCallsAnswered: answered %v, %v; want the answer kept", answered, err)
			}
			if err := s.Commit(ctx, audit.Results{Watermark: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if r := verify(t, path, pub); !r.OK() {
				t.Fatalf("verify before the deletion: %v", r.Problems)
			}
			db := openRaw(t, path)
			res, err := db.Exec(`DELETE FROM answers_late`)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%d answers deleted, want 1", n)
			}
			db.Close()
			r := verify(t, path, pub)
			var b strings.Builder
			r.Print(&b)
			if r.OK() || !strings.Contains(b.String(), "(1 answer kept aside") || !strings.Contains(b.String(), "1 row recorded, 0 found") {
				t.Errorf("verify after an acknowledged answer was deleted: want its answers entry short of it:\n%s", b.String())
			}
		})
	}
}

// openRaw opens the data file at path without the store, as someone who
// can write the file would.
func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

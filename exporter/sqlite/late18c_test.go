package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAnswersAside (late18c, review rev18l's D3): the store lists the
// answers it keeps aside whose calls are dated in the range asked, with
// their responses, across a reopen, and no longer once a commit named
// their calls; the read goes through answers_late_time.
func TestAnswersAside(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		t.Run(ack, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.db")
			s, err := Open(path, Options{Ack: ack})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			ctx := context.Background()
			t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
			call := func(id string, at time.Time, answered bool) audit.Record {
				c := &audit.Call{ID: id, Time: at, Server: "thegram", Tool: "gram_projects", Source: "calls:1", Tenant: "acme"}
				if answered {
					c.Responded, c.Result = true, []byte(`{"isError":false,"structuredContent":{"n":1}}`)
				} else {
					c.TransportError = "timeout"
				}
				return audit.Record{Call: c}
			}
			const early, late = "c_c1800000000000000001", "c_c1800000000000000002"
			t1 := t0.Add(time.Hour)
			if _, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call(early, t0, false), call(late, t1, false)}); err != nil {
				t.Fatal(err)
			}
			if _, _, _, answered, err := s.AppendCallsAnswered(ctx, []audit.Record{call(early, t0, true), call(late, t1, true)}); err != nil || len(answered) != 2 {
				t.Fatalf("AppendCallsAnswered: answered %v, %v; want both answers kept", answered, err)
			}
			ids := func(since time.Time) []string {
				t.Helper()
				recs, err := s.AnswersAside(ctx, since)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, r := range recs {
					if !r.Call.Responded || string(r.Call.Result) == "" || r.Call.Tenant != "acme" || r.Call.Server != "thegram" {
						t.Errorf("answer aside %s read as %+v, want its response, tenant and server", r.Call.ID, r.Call)
					}
					out = append(out, r.Call.ID)
				}
				slices.Sort(out)
				return out
			}
			if got := ids(time.Time{}); !slices.Equal(got, []string{early, late}) {
				t.Errorf("every answer aside: %v, want both", got)
			}
			if got := ids(t0.Add(time.Minute)); !slices.Equal(got, []string{late}) {
				t.Errorf("answers aside since %v: %v, want the later one", t0.Add(time.Minute), got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(path, Options{Ack: ack}); err != nil {
				t.Fatal(err)
			}
			if got := ids(time.Time{}); !slices.Equal(got, []string{early, late}) {
				t.Errorf("every answer aside after a reopen: %v, want both", got)
			}
			if err := s.Commit(ctx, audit.Results{Watermark: t0, Answered: []audit.CallRef{{Tenant: "acme", ID: early, Time: t0}}}); err != nil {
				t.Fatal(err)
			}
			if got := ids(time.Time{}); !slices.Equal(got, []string{late}) {
				t.Errorf("answers aside after the commit naming %s: %v, want the other only", early, got)
			}
			var plan string
			var a, b int
			if err := s.r.QueryRowContext(ctx, `EXPLAIN QUERY PLAN SELECT id, time, rec FROM answers_late WHERE time >= ?`, 0).Scan(&a, &b, new(int), &plan); err != nil {
				t.Fatal(err)
			}
			if want := "answers_late_time"; !containsWord(plan, want) {
				t.Errorf("the read's plan %q does not use %s", plan, want)
			}
		})
	}
}

func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w {
			return true
		}
	}
	return false
}

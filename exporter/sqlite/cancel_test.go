package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAnswerAside_RequestCanceled: a request whose sender gives up on it
// (the OTel SDK exporter's 10 s timeout cancels its context) right after
// its calls were stored, before their answers were compared and kept
// aside (appendedHook, a fault injection: nothing else cancels at that
// exact point), must leave the store and the engine agreeing. The test
// plays the engine as serve's pipeline does: it takes the answers an
// append reports (answered) once, commits them (audit.Results.Answered),
// takes nothing of a request that failed, and drops a second copy of an
// answer it took. The sender sends the request again after its timeout.
// Every call must end answered. Before the fix (the outside pass live21's
// D3) the canceled reads reported every answer as completing its call
// with none kept aside: the commit named them, nothing took their place,
// and the re-send, dropped by the engine, completed nothing.
func TestAnswerAside_RequestCanceled(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		t.Run(ack, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mcpaudit.db")
			s, err := Open(path, Options{Ack: ack})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			bg := context.Background()
			_, answered := tenantRecords(t, 40)
			var first []audit.Record
			for i := range answered {
				answered[i].Call.Responded, answered[i].Call.Result = true, []byte(`{"isError":false}`)
				answered[i].Call.Error, answered[i].Call.TransportError = nil, ""
				c := *answered[i].Call
				c.Responded, c.Result, c.Error, c.TransportError = false, nil, nil, "timeout"
				first = append(first, audit.Record{Call: &c, Ops: answered[i].Ops})
			}
			if _, _, _, _, err := s.AppendCallsAnswered(bg, first); err != nil {
				t.Fatal(err)
			}

			took := map[string]bool{} // the answers the engine took
			engine := func(recs []audit.Record, idx []int) {
				var refs []audit.CallRef
				for _, i := range idx {
					c := recs[i].Call
					if took[c.Tenant+"\x00"+c.ID] {
						continue // a second copy: dropped as a duplicate
					}
					took[c.Tenant+"\x00"+c.ID] = true
					refs = append(refs, audit.CallRef{Tenant: c.Tenant, ID: c.ID, Time: c.Time})
				}
				if len(refs) > 0 {
					if err := s.Commit(bg, audit.Results{Answered: refs}); err != nil {
						t.Fatal(err)
					}
				}
			}

			ctx, cancel := context.WithCancel(bg)
			appendedHook = func(context.Context) { cancel() }
			_, _, _, idx, err := s.AppendCallsAnswered(ctx, answered)
			appendedHook = nil
			cancel()
			if err == nil {
				engine(answered, idx)
			} else {
				t.Logf("canceled request: %v (the engine takes nothing of it)", err)
			}
			// The sender sends it again after its timeout, twice.
			for range 2 {
				_, _, _, idx, err := s.AppendCallsAnswered(bg, answered)
				if err != nil {
					t.Fatal(err)
				}
				engine(answered, idx)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(path, Options{Ack: ack}); err != nil {
				t.Fatal(err)
			}
			var n, unanswered int
			err = s.ScanCalls(bg, time.Time{}, func(r *audit.Record) error {
				n++
				if !r.Call.Responded {
					unanswered++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n != len(answered) || unanswered != 0 {
				t.Fatalf("stored %d calls, %d of them unanswered; want %d, none unanswered (the engine took %d answers)",
					n, unanswered, len(answered), len(took))
			}
		})
	}
}

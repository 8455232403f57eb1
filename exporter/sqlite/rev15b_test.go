package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAnswerCompletes_DrainHeld (review rev15b, same15): with ack "log"
// and the call log's drain held up past compareWait (a lock on the file),
// an answered copy of a stored unanswered call is acknowledged
// (AppendCallsCompared returns no error) but does not take the stored
// row's place, neither then nor once the drain goes on: the answer is lost
// while its sender was told it is stored, and the store keeps the call
// unanswered, which is what same15 set out to mend (docs/storage.md, "An
// answer under a stored unanswered call": "before the append is
// acknowledged"; "the same ... with ack: log"). Fails on same15: the
// comparison gives up after compareWait (warning "cannot compare the
// responses") and the completion is never tried.
func TestAnswerCompletes_DrainHeld(t *testing.T) {
	t.Skip("known defect (review rev15b), not fixed: with the drain held past compareWait the comparison, and so the completion, is given up while the append is acknowledged; refusing it would also refuse the plain re-sends TestAppendCallsCompared_DrainHeld keeps acknowledged (docs/storage.md)")
	s := openTemp(t, Options{Ack: AckLog, LogWait: 10 * time.Second})
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	call := func(answered bool) audit.Record {
		c := &audit.Call{ID: "c_b0000000000000000000", Time: t0, Server: "thegram", Tool: "gram_projects", Source: "calls:1"}
		if answered {
			c.Responded, c.Result = true, []byte(`{"isError":false}`)
		} else {
			c.TransportError = "timeout"
		}
		return audit.Record{Call: c}
	}
	if _, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call(false)}); err != nil {
		t.Fatal(err)
	}
	if err := s.caughtUp(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	s.clog.gate.Lock()
	if _, err := s.AppendCalls(ctx, records(t, 1)); err != nil {
		s.clog.gate.Unlock()
		t.Fatal(err)
	}
	_, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call(true)})
	s.clog.gate.Unlock()
	if err != nil {
		// Refusing (retryable) would keep the promise: the sender sends
		// the answer again.
		t.Skipf("the answer was refused with the drain held (%v): the sender retries", err)
	}
	if err := s.caughtUp(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	var got *audit.Record
	if err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
		if r.Call.ID == "c_b0000000000000000000" {
			got = r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got == nil || !got.Call.Responded {
		t.Errorf("the answer acknowledged with the drain held is not stored: the call reads back unanswered (%v)", got != nil)
	}
}

// TestAnswerCompletes_TwoAnswersInOneRequest (review rev15b, same15; fixed): a
// call stored unanswered, then one request carrying two answered copies
// of it with different responses. The first completes the stored call;
// the second is, by docs/storage.md ("The first answered copy of a key
// wins; later ones are duplicates or id collisions, compared with it as
// before"), an id collision to report (differ). Across requests it is
// (the conformance case's "another response after the answer"); in one
// request the second copy is only skipped as a copy of the first.
func TestAnswerCompletes_TwoAnswersInOneRequest(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		t.Run(ack, func(t *testing.T) {
			s := openTemp(t, Options{Ack: ack})
			defer s.Close()
			ctx := context.Background()
			t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
			call := func(result string) audit.Record {
				c := &audit.Call{ID: "c_b1000000000000000000", Time: t0, Server: "thegram", Tool: "gram_projects", Source: "calls:1"}
				if result != "" {
					c.Responded, c.Result = true, []byte(result)
				} else {
					c.TransportError = "timeout"
				}
				return audit.Record{Call: c}
			}
			if _, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call("")}); err != nil {
				t.Fatal(err)
			}
			n, _, differ, err := s.AppendCallsCompared(ctx, []audit.Record{call(`{"isError":false,"structuredContent":{"n":1}}`), call(`{"isError":false,"structuredContent":{"n":2}}`)})
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 || len(differ) != 1 || differ[0] != 1 {
				t.Errorf("AppendCallsCompared(two answers of a stored unanswered call) = %d, %v; want 0 new, the second differing ([1])", n, differ)
			}
		})
	}
}

// TestAnswerAside_NamedAgainAfterCancel (late18): the pipeline puts a
// commit's output back when the commit fails or its context ends, and
// names the calls whose answer the engine took again in the next commit,
// though the first may have committed. Naming a call again changes
// nothing: one row of the call, answered, and the data file verifies
// (the unanswered row on record once).
func TestAnswerAside_NamedAgainAfterCancel(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		t.Run(ack, func(t *testing.T) {
			s, path, pub, _ := openSigned(t, Options{Ack: ack})
			ctx := context.Background()
			t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
			call := func(answered bool) audit.Record {
				c := &audit.Call{ID: "c_b2000000000000000000", Time: t0, Server: "thegram", Tool: "gram_projects", Source: "calls:1"}
				if answered {
					c.Time = t0.Add(200 * time.Microsecond)
					c.Responded, c.Result = true, []byte(`{"isError":false,"structuredContent":{"n":1}}`)
				} else {
					c.TransportError = "timeout"
				}
				return audit.Record{Call: c}
			}
			if _, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call(false)}); err != nil {
				t.Fatal(err)
			}
			if _, _, _, _, err := s.AppendCallsAnswered(ctx, []audit.Record{call(true)}); err != nil {
				t.Fatal(err)
			}
			named := audit.Results{Answered: []audit.CallRef{{ID: call(false).Call.ID, Time: t0}}}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			s.Commit(cancelled, named) // may or may not have committed
			for range 2 {
				if err := s.Commit(ctx, named); err != nil {
					t.Fatal(err)
				}
			}
			var n, answered int
			if err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
				n++
				if r.Call.Responded {
					answered++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if n != 1 || answered != 1 {
				t.Errorf("%d rows of the call, %d answered; want one, answered", n, answered)
			}
			// Replaced once: one row on record as replaced, no answer
			// left aside.
			var pruned, aside int
			if err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM chain_pruned WHERE typeof(row) = 'integer'), (SELECT count(*) FROM answers_late)`).Scan(&pruned, &aside); err != nil {
				t.Fatal(err)
			}
			if pruned != 1 || aside != 0 {
				t.Errorf("%d rows on record as replaced, %d answers aside; want 1, 0", pruned, aside)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if r := verify(t, path, pub); !r.OK() || r.Calls != 1 {
				t.Errorf("verify: %d calls, problems %v; want 1, none", r.Calls, r.Problems)
			}
		})
	}
}

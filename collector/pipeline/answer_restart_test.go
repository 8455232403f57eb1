package pipeline_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// answerLines are one exchange (a durable gram_patch) as two observers
// see it: without its answer (a client observer that timed out) and with
// it (the server's observer).
func answerLines(t0 time.Time) (unanswered, answered []byte) {
	const request = `"request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"team/x.gram","base_revision":3,"expected_hash":"aa","request_id":"req-1","operations":[{"op":"append_block","target":"h1","text":"x"}]}}}`
	unanswered = fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s0",%s}`, t0.Format(time.RFC3339Nano), request)
	answered = fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s0",%s,"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"team/x.gram","rev":4,"hash":"bb","replayed":false,"request_id":"req-1"}}}}`,
		t0.Format(time.RFC3339Nano), request)
	return unanswered, answered
}

// answerRuns returns a new data directory, a clock, and open, which
// opens a run over that directory whose store acknowledges calls as ack
// (sqlite.AckCommit or sqlite.AckLog).
func answerRuns(t *testing.T, ack string) (dir string, clock *testClock, open func() *run) {
	dir, clock = t.TempDir(), newClock(wallStart)
	opts := sqlite.Options{Synchronous: "normal", Ack: ack}
	return dir, clock, func() *run { return openRunWith(t, dir, clock, nil, nil, nil, nil, opts) }
}

// writesKept fails t for each write stored before a restart whose state
// differs after it.
func writesKept(t *testing.T, before, after outcome) {
	t.Helper()
	for k, s := range before.writes {
		if after.writes[k] != s {
			t.Errorf("write %s was %s before the restart, %s after", k, s, after.writes[k])
		}
	}
}

// TestRestart_AnswerCompletingObservationStaysDurable: one exchange seen
// twice under one call id, first without its answer and then with it,
// both before the watermark passes them: the engine judges the answered
// one (a durable write), and a restart, whose replay reads back what the
// store kept of the call, must leave it so, with no finding. Before the
// store kept the answer (same15), it kept the unanswered row: the replay
// judged the write pending, and its window's end rewrote the stored
// durable write as unverified with a false unverified_write. Also in one
// request, with ack "log", and in the other order (the answer first).
func TestRestart_AnswerCompletingObservationStaysDurable(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ack           string
		oneRequest    bool
		answeredFirst bool
	}{
		{"two_requests", sqlite.AckCommit, false, false},
		{"one_request", sqlite.AckCommit, true, false},
		{"two_requests_ack_log", sqlite.AckLog, false, false},
		{"one_request_ack_log", sqlite.AckLog, true, false},
		{"answer_first", sqlite.AckCommit, false, true},
		{"answer_first_one_request", sqlite.AckCommit, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, clock, open := answerRuns(t, tc.ack)
			r := open()
			t0 := wallStart.Add(-time.Minute)
			unanswered, answered := answerLines(t0)
			first, second := batch(t, "client", unanswered), batch(t, "server", answered)
			if tc.answeredFirst {
				first, second = batch(t, "server", answered), batch(t, "client", unanswered)
			}
			if tc.oneRequest {
				first.Records = append(first.Records, second.Records...)
				if _, err := r.ingest(first); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, b := range []audit.Batch{first, second} {
					if _, err := r.ingest(b); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range 10 {
				if _, err := r.ingest(batch(t, "server", callLine("thegram", "s1", 10+i, t0.Add(time.Duration(i+1)*time.Second)))); err != nil {
					t.Fatal(err)
				}
			}
			for range 6 { // past the join wait and the client's idle timeout
				clock.Add(5 * time.Second)
				checkPendingCount(t, r, "live")
			}
			before := r.read()
			durable := 0
			for _, s := range before.writes {
				if s == audit.StateDurable {
					durable++
				}
			}
			if durable != 1 || len(before.findings) > 0 {
				t.Fatalf("before the restart: writes %v, findings %v; want one durable write, no finding", before.writes, sortedKeys(before.findings))
			}
			r.stop()
			clock.Add(time.Second)
			r = open()
			for i := range 80 {
				checkPendingCount(t, r, fmt.Sprintf("after restart +%ds", i*5))
				clock.Add(5 * time.Second)
			}
			after := r.stop()
			writesKept(t, before, after)
			if len(after.findings) > 0 {
				t.Errorf("findings after the restart: %v", sortedKeys(after.findings))
			}
			// The data directory verifies: the answer took the place of
			// the unanswered row on the record.
			rep, err := sqlite.Verify(t.Context(), filepath.Join(dir, "mcpaudit.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Errorf("verify: %v", rep.Problems)
			}
		})
	}
}

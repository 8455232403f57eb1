package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// twoEditsAnswer is the oddlynew run of twoEditsLine (two provider writes
// to doc_x under no key: one unverified_write id) seen without its
// response, and the same record with its answer: both edits saved
// (revisions 10 and 12), or the run timed out with the first saved and
// the second in flight (in_flight_unknown: the oddlynew reference's
// uncertain outcome, "Execution timed out").
func twoEditsAnswer(at time.Time, secondInFlight bool) (unanswered, answered []byte) {
	code := `async () => { await documents.editDocument({ documentId: \"doc_x\", edits: [{ op: \"appendParagraph\", text: \"a\" }] }); return await documents.editDocument({ documentId: \"doc_x\", edits: [{ op: \"appendParagraph\", text: \"b\" }] }); }`
	req := fmt.Sprintf(`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run","arguments":{"code":"%s"}}}`, code)
	head := fmt.Sprintf(`"time":%q,"server":"oddlynew","session":"s-w"`, at.Format(time.RFC3339Nano))
	value := func(rev int) string {
		return fmt.Sprintf(`{"documentId":"doc_x","writeConfirmed":true,"revision":%d,"saveState":"saved"}`, rev)
	}
	result := fmt.Sprintf(`{"isError":false,"structuredContent":{"result":%s,"logs":[],"outcomes":[{"seq":1,"tool":"documents.editDocument","access":"write","outcome":"succeeded","value":%s},{"seq":2,"tool":"documents.editDocument","access":"write","outcome":"succeeded","value":%s}]}}`,
		value(12), value(10), value(12))
	if secondInFlight {
		result = fmt.Sprintf(`{"isError":true,"structuredContent":{"error":"Execution timed out","logs":[],"calls":[{"tool":"documents.editDocument","outcome":"succeeded","count":1},{"tool":"documents.editDocument","outcome":"in_flight_unknown","count":1}],"outcomes":[{"seq":1,"tool":"documents.editDocument","access":"write","outcome":"succeeded","value":%s},{"seq":2,"tool":"documents.editDocument","access":"write","outcome":"in_flight_unknown"}]},"content":[{"type":"text","text":"Execution timed out"}]}`,
			value(10))
	}
	unanswered = fmt.Appendf(nil, `{%s,%s}`, head, req)
	answered = fmt.Appendf(nil, `{%s,"duration_ms":30000,%s,"response":{"jsonrpc":"2.0","id":1,"result":%s}}`, head, req, result)
	return unanswered, answered
}

// TestLateAnswer_Siblings (fx21, found by the lead reading answer.go): an
// oddlynew run of two provider writes to one document under one key,
// seen without its response; its windows close (one unverified_write,
// the two writes' shared id), then its answer comes within
// allowed_lateness. The answer settling one write and leaving the other
// in flight must leave the finding standing, as judging in time order
// (analyze) does; settling both must withdraw it once, the loop over the
// answer's writes reaching the first while the second is still
// unverified: the sinks told the finding once must be told its
// withdrawal once. fx20a's answerWrite withdrew it at the first write
// without the sibling check settle makes.
func TestLateAnswer_Siblings(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, tc := range []struct {
			name     string
			inFlight bool
			open     int // findings judged in time order
		}{
			{"second_in_flight", true, 1},
			{"both_saved", false, 0},
		} {
			t.Run(ack+"/"+tc.name, func(t *testing.T) {
				dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
				at := wallStart.Add(-time.Minute)
				unanswered, answered := twoEditsAnswer(at, tc.inFlight)
				var first, rest [][]byte
				first = append(first, unanswered)
				for i := 1; i <= 40; i++ {
					l := callLine("oddlynew", "s-o", 100+i, at.Add(time.Duration(i)*time.Second))
					if i < 25 {
						first = append(first, l)
					} else {
						rest = append(rest, l)
					}
				}
				tail := callLine("oddlynew", "s-o", 999, at.Add(10*time.Minute))
				want := inOrderWith(t, dedit, slices.Concat(first[:1], [][]byte{answered}, first[1:], rest, [][]byte{tail}))
				if got := openFindings(want); len(got) != tc.open {
					t.Fatalf("judged in time order: findings %v, want %d", got, tc.open)
				}

				dir := t.TempDir()
				clock := newClock(wallStart)
				rec := newRecorder()
				r := openRunWith(t, dir, clock, nil, dedit, rec, nil, sqlite.Options{Synchronous: "normal", Ack: ack})
				if _, err := r.ingest(batch(t, "calls:client", first...)); err != nil {
					t.Fatal(err)
				}
				clock.Add(3 * time.Second)
				r.status()
				open := openFindings(r.read())
				if len(open) != 1 {
					t.Fatalf("findings before the answer came %v, want the writes' one unverified_write: the test shows nothing", open)
				}
				clock.Add(25 * time.Second)
				if _, err := r.ingest(batch(t, "calls:server", answered)); err != nil {
					t.Fatal(err)
				}
				if _, err := r.ingest(batch(t, "calls:client", rest...)); err != nil {
					t.Fatal(err)
				}
				clock.Add(10 * time.Minute)
				if _, err := r.ingest(batch(t, "calls:client", tail)); err != nil {
					t.Fatal(err)
				}
				r.steps(20, nil)
				if !storedAnswered(t, r, unanswered) {
					t.Fatalf("the store holds the run unanswered: the answer was not taken, the test shows nothing")
				}
				f := findingByID(t, r, open[0])
				wantState := audit.FindingOpen
				if tc.open == 0 {
					wantState = audit.FindingWithdrawn
				}
				if f.StateOf() != wantState {
					t.Errorf("the writes' unverified_write %s is %s (by %v), want %s: judged in time order %v",
						open[0], f.StateOf(), f.Status, wantState, want.writes)
				}
				rec.mu.Lock()
				told, withdrawn := rec.findings[open[0]], rec.withdrawn[open[0]]
				rec.mu.Unlock()
				if told-withdrawn != tc.open {
					t.Errorf("the sinks were told the finding %d times and its withdrawal %d times: %d stands for the metrics, want %d",
						told, withdrawn, told-withdrawn, tc.open)
				}
				sameStored(t, "live", r.stop(), want)
				r = openRunWith(t, dir, clock, nil, dedit, nil, nil, sqlite.Options{Synchronous: "normal", Ack: ack})
				r.steps(20, nil)
				sameStored(t, "after a restart", r.stop(), want)
			})
		}
	}
}

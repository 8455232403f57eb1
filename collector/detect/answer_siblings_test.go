package detect_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// twoEditsRun is an oddlynew run at t that edits doc_x twice (two
// provider calls, seq 1 and 2, under no key: one unverified_write id),
// seen without its response, and the same record with its answer: both
// edits saved, or the run timed out with the first saved and the second
// in flight (in_flight_unknown, "Execution timed out").
func twoEditsRun(at time.Time, secondInFlight bool) (unanswered, answered []byte) {
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

// TestDetector_LateAnswerSiblings (fx21, found by the lead reading
// answer.go): the late answer of an oddlynew run whose two writes to one
// document share an unverified_write id, after their windows closed.
// One write saved and one in flight: the finding stands, as in time
// order; both saved: it is withdrawn once, not at the first write the
// answer settles (the second still unverified then) and again at the
// second. The engine's counts (analyze's summary: made less withdrawn)
// must say so.
func TestDetector_LateAnswerSiblings(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	cfg.VerifyWindow = 20 * sec
	cfg.CorrelationWindow = 2 * time.Minute
	for _, tc := range []struct {
		name     string
		inFlight bool
		open     int
	}{
		{"second_in_flight", true, 1},
		{"both_saved", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unanswered, answered := twoEditsRun(t0, tc.inFlight)
			lines := [][]byte{unanswered}
			for i := 1; i <= 40; i++ {
				lines = append(lines, fmt.Appendf(nil, `{"time":%q,"server":"oddlynew","session":"s-o","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":"async () => await documents.getDocument({ documentId: \"doc_z\" })"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":{"documentId":"doc_z","title":"Z"},"logs":[],"calls":[{"tool":"documents.getDocument","outcome":"succeeded","count":1}]}}}}`,
					t0.Add(time.Duration(i)*sec).Format(time.RFC3339Nano), 100+i, 100+i))
			}
			recs := readRecords(t, slices.Concat(lines, [][]byte{answered}))
			late := recs[len(recs)-1]
			want := inOrderCfg(slices.Concat(recs[:1], []*audit.Record{late}, recs[1:len(recs)-1]), cfg)
			if len(want.findings) != tc.open {
				t.Fatalf("in order: %d findings, want %d", len(want.findings), tc.open)
			}
			// The server's observer delivers the answer 25 s after the
			// write, its window (20 s) closed on the client's traffic.
			var ds []delivered
			for i, r := range recs[:len(recs)-1] {
				at := t0
				if i > 25 {
					at = t0.Add(time.Duration(i) * sec)
				}
				ds = append(ds, delivered{r, "client", at.Add(cfg.JoinWait)})
			}
			ds = append(ds, delivered{late, "server", t0.Add(25*sec + cfg.JoinWait + 500*time.Millisecond)})
			got := live(cfg, ds)
			if got.stats.LateAnswers != 1 {
				t.Fatalf("late answers %d, want 1: the test shows nothing", got.stats.LateAnswers)
			}
			if got.stats.Withdrawn == 0 && tc.open == 0 {
				t.Fatalf("nothing withdrawn: the windows did not close before the answer, the test shows nothing")
			}
			// The finding made before the answer came keeps no_response
			// where in order it says in_flight_unknown (docs/detection.md,
			// Responses under one call id): its id and the writes' states
			// are compared.
			if g, w := slices.Sorted(maps.Keys(got.findings)), slices.Sorted(maps.Keys(want.findings)); !slices.Equal(g, w) {
				t.Errorf("findings %v, in time order %v", g, w)
			}
			if !maps.Equal(got.states, want.states) {
				t.Errorf("write states %v, in time order %v", got.states, want.states)
			}
			if n := got.stats.Findings[audit.KindUnverifiedWrite]; n != int64(tc.open) {
				t.Errorf("%d unverified_write counted (made less withdrawn: %d withdrawn), want %d", n, got.stats.Withdrawn, tc.open)
			}
		})
	}
}

package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// twoEditsLine is an oddlynew run of session at t that edits doc_x twice
// (two provider calls, seq 1 and 2): both accepted with the save blocked,
// at revisions 10 and 12. Two writes of one call to one document under one
// key (none): their unverified_write findings share one id
// (audit.Finding.ID names the call, not the provider call).
func twoEditsLine(session string, rpc int, t time.Time) []byte {
	value := func(rev int) string {
		return fmt.Sprintf(`{"documentId":"doc_x","writeConfirmed":true,"revision":%d,"saveState":"blocked","saveBlockedReason":"projection_lag"}`, rev)
	}
	code := `async () => { await documents.editDocument({ documentId: \"doc_x\", edits: [{ op: \"appendParagraph\", text: \"a\" }] }); return await documents.editDocument({ documentId: \"doc_x\", edits: [{ op: \"appendParagraph\", text: \"b\" }] }); }`
	return fmt.Appendf(nil, `{"time":%q,"server":"oddlynew","session":%q,"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":"%s"}}},"duration_ms":40,"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":%s,"logs":[],"outcomes":[{"seq":1,"tool":"documents.editDocument","access":"write","outcome":"succeeded","value":%s},{"seq":2,"tool":"documents.editDocument","access":"write","outcome":"succeeded","value":%s}]}}}}`,
		t.Format(time.RFC3339Nano), session, rpc, code, rpc, value(12), value(10), value(12))
}

// savedReadLine is an oddlynew run of session at t that reads doc_x saved
// at revision rev: it proves durable a save-blocked write at rev or
// before, not one after.
func savedReadLine(session string, rpc, rev int, t time.Time) []byte {
	v := fmt.Sprintf(`{"documentId":"doc_x","revision":%d,"saveState":"saved"}`, rev)
	return fmt.Appendf(nil, `{"time":%q,"server":"oddlynew","session":%q,"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":"async () => await documents.getDocument({ documentId: \"doc_x\" })"}}},"duration_ms":20,"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":%s,"logs":[],"outcomes":[{"seq":1,"tool":"documents.getDocument","access":"read","outcome":"succeeded","value":%s}]}}}}`,
		t.Format(time.RFC3339Nano), session, rpc, rpc, v, v)
}

// siblings is the scenario of review rev19w's D3: a run writes doc_x twice
// (save blocked at revisions 10 and 12), the server's other traffic runs
// 10 s past the writes' window (20 s), and a read dated 5 s before the
// window's end, which shows doc_x saved at revision 11, comes after the
// window closed. Judged in time order the read proves the first write
// durable and not the second: the second's unverified_write stands, and
// its id is the first's too.
type siblings struct {
	dedit  func(*detect.Config)
	write  []byte
	read   []byte
	others [][]byte
	tail   []byte
	before int // others dated before the read
}

func newSiblings(readRev int) siblings {
	vw := 20 * time.Second
	s := siblings{dedit: func(c *detect.Config) { c.VerifyWindow = vw; c.CorrelationWindow = 2 * time.Minute }}
	at := wallStart.Add(-vw - 40*time.Second)
	s.write = twoEditsLine("s-w", 1, at)
	s.read = savedReadLine("s-r", 2, readRev, at.Add(vw-5*time.Second))
	for i := 1; i < int(vw/time.Second)+10; i++ {
		if at.Add(time.Duration(i) * time.Second).Before(at.Add(vw - 5*time.Second)) {
			s.before++
		}
		s.others = append(s.others, callLine("oddlynew", "s-o", 100+i, at.Add(time.Duration(i)*time.Second)))
	}
	s.tail = callLine("oddlynew", "s-o", 99999, at.Add(vw+10*time.Minute))
	return s
}

// inOrder returns what the store holds after the calls are judged in time
// order, in one request (what analyze judges).
func (s siblings) inOrder(t *testing.T) outcome {
	t.Helper()
	lines := slices.Concat([][]byte{s.write}, s.others[:s.before], [][]byte{s.read}, s.others[s.before:], [][]byte{s.tail})
	r := openRunDetect(t, t.TempDir(), newClock(wallStart.Add(20*time.Minute)), nil, s.dedit, nil)
	if _, err := r.ingest(batch(t, "calls:sib", lines...)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	return r.stop()
}

// TestLateAfterWindowClosed_SiblingStaysUnverified (review rev19w's D3):
// two writes of one call to one document under one key share their
// unverified_write's id. A read judged late, after their window closed,
// settles the first and leaves the second unverified: the finding must
// stay open, as judging in time order leaves it (and as the same calls
// judged in time order in one request, analyze's path, store it), live
// and after a restart. With a read that settles both, the finding is
// withdrawn, live, as before.
func TestLateAfterWindowClosed_SiblingStaysUnverified(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readRev int
		open    int // unverified_write findings judged in time order
		// crash: the process dies at the commit after the read is judged
		// (what it judged lost), and the restart judges the stored calls
		// in time order (gate.storedUnverified).
		crash bool
	}{
		{"one_settled", 11, 1, false},
		{"both_settled", 12, 0, false},
		{"one_settled_crash", 11, 1, true},
		{"both_settled_crash", 12, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSiblings(tc.readRev)
			want := s.inOrder(t)
			if got := len(openFindings(want)); got != tc.open {
				t.Fatalf("judged in time order: %d findings %v, want %d", got, openFindings(want), tc.open)
			}
			dir := t.TempDir()
			clock := newClock(wallStart)
			rec := newRecorder()
			r := openRunDetect(t, dir, clock, nil, s.dedit, rec)
			if _, err := r.ingest(batch(t, "calls:sib", slices.Concat([][]byte{s.write}, s.others)...)); err != nil {
				t.Fatal(err)
			}
			clock.Add(3 * time.Second)
			r.status()
			open := openFindings(r.read())
			if len(open) != 1 {
				t.Fatalf("findings before the read came %v, want the writes' one unverified_write: the test shows nothing", open)
			}
			clock.Add(9 * time.Second)
			r.status()
			r.cs.dieAtCommit.Store(tc.crash)
			if _, err := r.ingest(batch(t, "calls:sib", s.read)); err != nil {
				t.Fatal(err)
			}
			if st := r.status()[detect.PartitionKey{Server: "oddlynew"}]; st.TooLate != 0 {
				t.Fatalf("the read was counted too late (%d): the test shows nothing", st.TooLate)
			}
			if tc.crash {
				r.cs.mu.RLock()
				crashed := r.cs.crashed
				r.cs.mu.RUnlock()
				if !crashed {
					t.Fatal("no commit after the read: the test shows nothing")
				}
				r.die()
				rec = newRecorder()
				r = openRunDetect(t, dir, clock, nil, s.dedit, rec)
			}
			clock.Add(10 * time.Minute)
			if _, err := r.ingest(batch(t, "calls:sib", s.tail)); err != nil {
				t.Fatal(err)
			}
			r.steps(20, nil)
			f := findingByID(t, r, open[0])
			wantState := audit.FindingOpen
			if tc.open == 0 {
				wantState = audit.FindingWithdrawn
			}
			if f.StateOf() != wantState {
				t.Errorf("the writes' unverified_write %s is %s (by %v), want %s: judged in time order its second write stays unverified: %v",
					open[0], f.StateOf(), f.Status, wantState, want.writes)
			}
			rec.mu.Lock()
			told := len(rec.withdrawn)
			rec.mu.Unlock()
			// Live, or made by the restart, the withdrawal is counted once.
			if want := 1 - tc.open; told != want {
				t.Errorf("sinks told %d withdrawals, want %d", told, want)
			}
			sameStored(t, "live", r.read(), want)
			r.stop()
			r = openRunDetect(t, dir, clock, nil, s.dedit, nil)
			r.steps(20, nil)
			sameStored(t, "after a restart", r.stop(), want)
		})
	}
}

package pipeline_test

import (
	"context"
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

// eachAckAndEnd runs f as one subtest for each way the store acknowledges
// (sqlite.AckCommit, sqlite.AckLog) and each way the first process ends:
// stopped, or killed when crash is set.
func eachAckAndEnd(t *testing.T, f func(t *testing.T, ack string, crash bool)) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/crash=%v", ack, crash), func(t *testing.T) { f(t, ack, crash) })
		}
	}
}

// eachLateAnswerGap runs f as one subtest for each gap between a call and
// its late answer, 30 s (within allowed_lateness) and 150 s (past it), and
// each case of eachAckAndEnd; one case runs under the race detector.
func eachLateAnswerGap(t *testing.T, f func(t *testing.T, gap int, ack string, crash bool)) {
	for _, gap := range []int{30, 150} {
		t.Run(fmt.Sprintf("answer_%ds_later", gap), func(t *testing.T) {
			eachAckAndEnd(t, func(t *testing.T, ack string, crash bool) {
				onlyOnceUnderRace(t, gap == 30 && ack == sqlite.AckLog && crash)
				f(t, gap, ack, crash)
			})
		})
	}
}

// twoPods is a run over a new data directory fed by two pods: each tick
// sends one call of each, dated a second before the clock, and moves the
// clock a second on, so that the watermark moves with it.
type twoPods struct {
	t     *testing.T
	dir   string
	clock *testClock
	opts  sqlite.Options
	r     *run
	rpc   int
}

// newTwoPods opens a twoPods whose store acknowledges calls as ack.
func newTwoPods(t *testing.T, ack string) *twoPods {
	p := &twoPods{t: t, dir: t.TempDir(), clock: newClock(wallStart), opts: sqlite.Options{Synchronous: "normal", Ack: ack}}
	p.open()
	return p
}

func (p *twoPods) open() {
	p.r = openRunWith(p.t, p.dir, p.clock, nil, nil, nil, nil, p.opts)
}

// tick sends n rounds of the two pods' calls.
func (p *twoPods) tick(n int) {
	for range n {
		now := p.clock.Now()
		for _, src := range []string{"pod-0", "pod-1"} {
			p.rpc++
			p.send(src, callLine("thegram", "s-"+src, 100+p.rpc, now.Add(-time.Second)))
		}
		p.clock.Add(time.Second)
	}
}

// send ingests line as from source src.
func (p *twoPods) send(src string, line []byte) {
	p.t.Helper()
	if _, err := p.r.ingest(batch(p.t, src, line)); err != nil {
		p.t.Fatal(err)
	}
}

// restart stops the run, or kills it when crash is set, moves the clock
// down on, and opens another run over the same directory.
func (p *twoPods) restart(crash bool, down time.Duration) {
	stopOrCrash(p.r, crash)
	p.clock.Add(down)
	p.open()
}

// answerPairRestart sends the two observations of one exchange under one
// call id, first as from a client and second as from the server, with a
// commit between them when commitBetween is set, then calls of the next
// ten seconds after t0. The engine must judge the write durable with no
// finding and the store hold the call answered, and so after the process
// is stopped, or killed when crash is set, and opened again, its chain
// intact.
func answerPairRestart(t *testing.T, ack string, crash bool, t0 time.Time, first, second []byte, commitBetween bool) {
	dir, clock, open := answerRuns(t, ack)
	r := open()
	if a, b := ids(batch(t, "c", first))[0], ids(batch(t, "s", second))[0]; a != b {
		t.Fatalf("the two observations have ids %s and %s, want one", a, b)
	}
	if _, err := r.ingest(batch(t, "client", first)); err != nil {
		t.Fatal(err)
	}
	if commitBetween {
		clock.Add(time.Second)
		r.status()
	}
	if _, err := r.ingest(batch(t, "server", second)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := r.ingest(batch(t, "server", callLine("thegram", "s1", 10+i, t0.Add(time.Duration(i+1)*time.Second)))); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 {
		clock.Add(5 * time.Second)
		r.status()
	}
	before := r.read()
	if !storedAnswered(t, r, first) {
		t.Errorf("the store holds the call unanswered, though the engine judged it answered")
	}
	if n := countState(before.writes, audit.StateDurable); n != 1 || len(before.findings) > 0 {
		t.Fatalf("before the restart: writes %v, findings %v; want one durable write, no finding", before.writes, sortedKeys(before.findings))
	}
	stopOrCrash(r, crash)
	clock.Add(time.Second)
	r = open()
	for range 80 {
		clock.Add(5 * time.Second)
		r.status()
	}
	answeredAfter := storedAnswered(t, r, first)
	after := r.stop()
	writesKept(t, before, after)
	if len(after.findings) > 0 {
		t.Errorf("findings after the restart: %v", sortedKeys(after.findings))
	}
	if !answeredAfter {
		t.Errorf("after the restart the store holds the call unanswered")
	}
	rep, err := sqlite.Verify(t.Context(), filepath.Join(dir, "mcpaudit.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("verify: %v", rep.Problems)
	}
}

// answerNamedAfterRestart: the unanswered call committed, its answer
// acknowledged (kept aside), the process stopped, or killed when crash is
// set, before a commit names it; between runs beforeOpen (when not nil)
// sees the data directory. After the restart and calls that move the
// watermark past the write, the write must be durable with no finding and
// the call stored answered: the acknowledged answer is not lost to
// detection.
func answerNamedAfterRestart(t *testing.T, ack string, crash bool, beforeOpen func(dir string)) {
	dir, clock, open := answerRuns(t, ack)
	r := open()
	unanswered, answered := answerLines(wallStart.Add(-time.Minute))
	if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second) // the unanswered call committed
	r.status()
	// Acknowledged; the process ends before a commit names it.
	if _, err := r.p.Ingest(context.Background(), batch(t, "server", answered)); err != nil {
		t.Fatal(err)
	}
	stopOrCrash(r, crash)
	if beforeOpen != nil {
		beforeOpen(dir)
	}
	clock.Add(time.Second)
	r = open()
	for i := range 10 {
		if _, err := r.ingest(batch(t, "server", callLine("thegram", "s1", 10+i, clock.Now()))); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	for range 80 {
		clock.Add(5 * time.Second)
		r.status()
	}
	answeredAfter := storedAnswered(t, r, unanswered)
	after := r.stop()
	if n := countState(after.writes, audit.StateDurable); n != 1 || len(after.findings) > 0 {
		t.Errorf("after the restart: writes %v, findings %v; want one durable write, no finding", after.writes, sortedKeys(after.findings))
	}
	if !answeredAfter {
		t.Errorf("after the restart the store holds the call unanswered, its acknowledged answer aside")
	}
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

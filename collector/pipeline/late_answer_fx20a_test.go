package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// laRequest is op20's gram_patch under the key req-la-<n>.
func laRequest(rpc int, key string) string {
	return fmt.Sprintf(`"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"la/doc.gram","base_revision":3,"expected_hash":"h3","request_id":%q,"operations":[{"op":"append_block","target":"h1","text":"x"}]}}}`, rpc, key)
}

// laLinesWith are op20's repro (/tmp/op20/repro-late-answer.sh): a gram_patch
// seen without its response, and the same record (same time, so the same
// call id) with its answer: accepted, rev 4, synced.
// laAccepted is the answer of op20's repro: accepted, rev 4, synced.
const laAccepted = `{"isError":false,"structuredContent":{"path":"la/doc.gram","rev":4,"hash":"h4","sync":{"state":"synced"}}}`

// laLinesWith is laLines with the answer's result given.
func laLinesWith(at time.Time, result string) (unanswered, answered []byte) {
	req := laRequest(1, "req-la-1")
	unanswered = fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-la",%s}`, at.Format(time.RFC3339Nano), req)
	answered = fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-la","duration_ms":900,%s,"response":{"jsonrpc":"2.0","id":1,"result":%s}}`,
		at.Format(time.RFC3339Nano), req, result)
	return unanswered, answered
}

// laRetry is the client's blind re-send of the same edit under a new key
// at, accepted (rev 5, synced): after an unanswered write an unsafe
// retry, after an accepted one the same edit applied twice.
func laRetry(at time.Time) []byte {
	return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-la","duration_ms":40,%s,"response":{"jsonrpc":"2.0","id":2,"result":{"isError":false,"structuredContent":{"path":"la/doc.gram","rev":5,"hash":"h5","sync":{"state":"synced"}}}}}`,
		at.Format(time.RFC3339Nano), laRequest(2, "req-la-2"))
}

// inOrderWith judges lines as analyze does (one stream in time order,
// repeated ids dropped) under the detector config edited by dedit.
func inOrderWith(t testing.TB, dedit func(*detect.Config), lines [][]byte) outcome {
	o := outcome{findings: map[string]audit.Finding{}, writes: map[string]audit.WriteState{}}
	cfg := detect.NewDefaultConfig()
	dedit(&cfg)
	e := detect.NewEngine(cfg, outcomeSink{o})
	e.DropRepeatedIDs()
	for _, r := range decode(t, lines) {
		e.Add("file", r, time.Time{})
	}
	e.Flush()
	return o
}

// laCase is one delivery of op20's repro through serve's pipeline.
type laCase struct {
	// gap is how long after the write its answer comes (and how far the
	// rest of the traffic has gone by then).
	gap int
	// retry sends the blind re-send 3 s after the write, before the answer.
	retry bool
	// restart, "stop" or "crash", restarts the process between the two
	// observations; crashAfterAnswer kills it right after the answer was
	// acknowledged, before a commit names it.
	restart          string
	crashAfterAnswer bool
	// crashAtWithdrawal kills it once the commit that names the answer
	// went through, before the withdrawal's change (fx21: the crash
	// point crashAfterAnswer hits in about 1 run of 20-40).
	crashAtWithdrawal bool
	ack               string
	// skew dates the answer that much after the unanswered observation:
	// two carriers' start times (a client span and the server's), two
	// call ids within the second that makes them one exchange.
	skew time.Duration
	// result, when set, is the answer's result instead of laAccepted.
	result string
	// staleReason: the unverified_write made before an uncertain answer
	// came keeps no_response (docs/detection.md), where in order it says
	// the answer's reason. The harness's idle source may close a 10 s
	// gap's window before the answer comes (the wall clock is a minute
	// ahead): TestLateAnswer_UncertainAnswerReason pins the open window.
	staleReason bool
}

// playLateAnswer delivers the repro as a lagging server exporter does:
// the write seen without its response (a client observer that timed out)
// with the partition's other traffic up to gap seconds after it, then
// the answer gap seconds late, then the rest. The store must end as
// judging the same records in time order (analyze) does: the findings,
// the write states, the call held answered; an unverified_write made
// before the answer came withdrawn by mcpaudit.
func playLateAnswer(t *testing.T, tc laCase) {
	dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
	at := wallStart.Add(-time.Minute)
	result := laAccepted
	if tc.result != "" {
		result = tc.result
	}
	unanswered, answered := laLinesWith(at, result)
	if tc.skew != 0 {
		_, answered = laLinesWith(at.Add(tc.skew), result)
		if a, b := ids(batch(t, "c", unanswered))[0], ids(batch(t, "s", answered))[0]; a == b {
			t.Fatalf("one call id %s: the test shows nothing", a)
		}
	}
	var first, rest [][]byte
	first = append(first, unanswered)
	for i := 1; i <= 40; i++ {
		l := callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second))
		if i == 3 && tc.retry {
			if i < tc.gap {
				first = append(first, laRetry(at.Add(3*time.Second)))
			} else {
				rest = append(rest, laRetry(at.Add(3*time.Second)))
			}
		}
		if i < tc.gap {
			first = append(first, l)
		} else {
			rest = append(rest, l)
		}
	}
	tail := callLine("thegram", "s-o", 999, at.Add(10*time.Minute))
	want := inOrderWith(t, dedit, slices.Concat(first[:1], [][]byte{answered}, first[1:], rest, [][]byte{tail}))
	if tc.gap < 20 && len(want.findings) == 0 && !tc.retry && tc.result == "" {
		// Judged in time order: durable, no finding.
		if w := countState(want.writes, audit.StateDurable); w == 0 {
			t.Fatalf("in time order no durable write (%v): the test shows nothing", want.writes)
		}
	}

	dir := t.TempDir()
	clock := newClock(wallStart)
	opts := sqlite.Options{Synchronous: "normal", Ack: tc.ack}
	rec := newRecorder()
	r := openRunWith(t, dir, clock, nil, dedit, rec, nil, opts)
	var rec2 *recorder
	if _, err := r.ingest(batch(t, "calls:client", first...)); err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * time.Second)
	r.status()
	if tc.gap > 20 {
		if n := len(openFindings(r.read())); n == 0 {
			t.Fatalf("no finding before the answer came (window closed): the test shows nothing")
		}
	}
	switch tc.restart {
	case "stop":
		r.stop()
		r = openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
	case "crash":
		r.crash()
		r = openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
	}
	clock.Add(time.Duration(tc.gap) * time.Second)
	switch {
	case tc.crashAtWithdrawal:
		r.cs.dieAtChange.Store(true)
		if _, err := r.ingest(batch(t, "calls:server", answered)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50 && !crashedNow(r.cs); i++ {
			clock.Add(200 * time.Millisecond)
			r.status()
		}
		if !crashedNow(r.cs) {
			t.Fatal("no withdrawal after the answer: the test shows nothing")
		}
		if !storedAnswered(t, r, unanswered) {
			t.Fatal("the crash came before the commit that names the answer: the test shows nothing")
		}
		r.die()
		rec2 = newRecorder()
		r = openRunWith(t, dir, clock, nil, dedit, rec2, nil, opts)
	case !tc.crashAfterAnswer:
		if _, err := r.ingest(batch(t, "calls:server", answered)); err != nil {
			t.Fatal(err)
		}
	default:
		// Acknowledged; the process is killed before a commit names it.
		if _, err := r.p.Ingest(context.Background(), batch(t, "calls:server", answered)); err != nil {
			t.Fatal(err)
		}
		if storedAnswered(t, r, unanswered) {
			// The commit loop ran before the crash: this run shows the
			// live path only.
			t.Logf("the answer was named before the crash")
		}
		r.crash()
		r = openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
	}
	if _, err := r.ingest(batch(t, "calls:client", rest...)); err != nil {
		t.Fatal(err)
	}
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:client", tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if tc.skew == 0 && !storedAnswered(t, r, unanswered) {
		t.Errorf("the store holds the call unanswered; judged in time order it is answered")
	}
	if rec2 != nil {
		// Over the two runs each withdrawal is counted once: the state
		// file kept it before the commit, so the restart takes it as the
		// dead run's, counted (wd21 counted a live one only at its first
		// attempt to store it, which the crash prevented).
		want := 1
		if tc.retry {
			want = 2
		}
		rec.mu.Lock()
		rec2.mu.Lock()
		told := map[string]int{}
		for id, n := range rec.withdrawn {
			told[id] += n
		}
		for id, n := range rec2.withdrawn {
			told[id] += n
		}
		rec2.mu.Unlock()
		rec.mu.Unlock()
		if len(told) != want {
			t.Errorf("withdrawals told over the two runs %v; want %d, each once", told, want)
		}
		for id, n := range told {
			if n != 1 {
				t.Errorf("withdrawal %s told %d times over the two runs; want once", id, n)
			}
		}
	}
	if tc.gap > 20 && tc.restart == "" && !tc.crashAfterAnswer && !tc.crashAtWithdrawal && tc.result != laCommitUnknown {
		pg, err := r.store.Findings(context.Background(), audit.FindingQuery{State: audit.FindingWithdrawn, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		wantKinds := []audit.Kind{audit.KindUnverifiedWrite}
		if tc.retry {
			wantKinds = []audit.Kind{audit.KindUnsafeRetry, audit.KindUnverifiedWrite}
		}
		var kinds []audit.Kind
		for _, f := range pg.Findings {
			kinds = append(kinds, f.Kind)
			if f.Status == nil || f.Status.By != "mcpaudit" || !strings.Contains(f.Status.Note, "the answer of call "+f.Calls[0]) {
				t.Errorf("withdrawn %s: status %+v, want by mcpaudit, the note naming the answer", f.Kind, f.Status)
			}
		}
		slices.Sort(kinds)
		if !slices.Equal(kinds, wantKinds) {
			t.Errorf("state=withdrawn: %v, want %v: the findings of the unanswered reading", kinds, wantKinds)
		}
		rec.mu.Lock()
		if len(rec.withdrawn) != len(wantKinds) {
			t.Errorf("sinks told withdrawn %v; want the %v they were told", rec.withdrawn, wantKinds)
		}
		rec.mu.Unlock()
	}
	got := r.stop()
	sameStored(t, "live", got, want)
	if !tc.staleReason {
		sameReasons(t, got, want)
	}

	// A restart on the same data changes nothing.
	r = openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
	r.steps(20, nil)
	sameStored(t, "after a restart", r.stop(), want)
}

// TestLateAnswer_JudgedAsInOrder (op20's D1, fx20a): a write posted with
// no response, then 10 s later the same record with its answer (ok, rev
// 4, synced). serve made an unverified_write (no_response) and kept the
// call unanswered, the answer counted a duplicate and kept aside, never
// judged; analyze of the same records gives no finding. Within
// allowed_lateness the answer is judged as in order, whether the write's
// window is still open (10 s) or closed (25 s: its unverified_write
// withdrawn), after a blind retry (an unsafe_retry taken back, the retry
// the same edit applied twice), across a restart between the two
// observations (a stop or a crash) and a crash right after the answer
// was acknowledged, with both ways of acknowledging.
func TestLateAnswer_JudgedAsInOrder(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, tc := range []struct {
			name string
			c    laCase
		}{
			{"window_open", laCase{gap: 10}},
			{"window_closed", laCase{gap: 25}},
			{"blind_retry", laCase{gap: 10, retry: true}},
			{"blind_retry_window_closed", laCase{gap: 25, retry: true}},
			{"stop_between", laCase{gap: 10, restart: "stop"}},
			{"crash_between", laCase{gap: 10, restart: "crash"}},
			{"crash_between_window_closed", laCase{gap: 25, restart: "crash"}},
			{"crash_after_answer", laCase{gap: 10, crashAfterAnswer: true}},
			// The crash lands anywhere around the answer's commit: before
			// fx21, after that commit and before its withdrawal (about 1
			// run in 20-40) the finding stayed open; crash_at_withdrawal_*
			// pin that point. A crash before that commit with the state
			// file's mark behind (about 1 run in 350) is the gap
			// docs/detection.md documents, still open.
			{"crash_after_answer_window_closed", laCase{gap: 25, crashAfterAnswer: true}},
			{"crash_at_withdrawal_window_closed", laCase{gap: 25, crashAtWithdrawal: true}},
			{"crash_at_withdrawal_blind_retry", laCase{gap: 25, retry: true, crashAtWithdrawal: true}},
			{"two_call_ids", laCase{gap: 10, skew: 300 * time.Millisecond}},
			{"two_call_ids_window_closed", laCase{gap: 25, skew: 300 * time.Millisecond}},
		} {
			t.Run(ack+"/"+tc.name, func(t *testing.T) {
				onlyOnceUnderRace(t, ack == sqlite.AckLog && tc.name == "window_closed")
				tc.c.ack = ack
				playLateAnswer(t, tc.c)
			})
		}
	}
}

// sameReasons fails unless each open finding got and want both hold has
// the same reason and retry action: a write judged from its answer is
// unverified for the answer's reason, not for want of a response (rev20a).
func sameReasons(t *testing.T, got, want outcome) {
	t.Helper()
	for _, id := range openFindings(want) {
		g, ok := got.findings[id]
		w := want.findings[id]
		if ok && (g.Reason != w.Reason || g.RetryAction != w.RetryAction) {
			t.Errorf("%s %v: reason %q, retry action %q; in time order %q, %q", g.Kind, g.Calls, g.Reason, g.RetryAction, w.Reason, w.RetryAction)
		}
	}
}

// laCommitUnknown is an answer that leaves the write uncertain for its own
// reason (commit_unknown, replay_same_request); laConflict one that
// rejects it.
const (
	laCommitUnknown = `{"isError":true,"structuredContent":{"error":{"code":"COMMIT_UNKNOWN","message":"Replacement published but durability is uncertain: disk"}},"content":[{"type":"text","text":"COMMIT_UNKNOWN: Replacement published but durability is uncertain: disk"}]}`
	laConflict      = `{"isError":true,"structuredContent":{"error":{"code":"STORAGE_CONFLICT","message":"base revision is stale"}},"content":[{"type":"text","text":"STORAGE_CONFLICT: base revision is stale"}]}`
)

// TestLateAnswer_ErrorAnswer (rev20a): the late answer is an error. A
// rejection (STORAGE_CONFLICT) makes the write rejected, as in order; an
// uncertain error (COMMIT_UNKNOWN) leaves it uncertain, but for the
// answer's reason and retry class, and the store holds the call answered,
// as judging the two observations in time order does.
func TestLateAnswer_ErrorAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    laCase
	}{
		{"rejected_window_open", laCase{gap: 10, result: laConflict}},
		{"rejected_window_closed", laCase{gap: 25, result: laConflict}},
		{"commit_unknown_window_open", laCase{gap: 10, result: laCommitUnknown, staleReason: true}},
		{"commit_unknown_window_closed", laCase{gap: 25, result: laCommitUnknown, staleReason: true}},
		{"commit_unknown_blind_retry", laCase{gap: 10, retry: true, result: laCommitUnknown, staleReason: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.ack = sqlite.AckCommit
			playLateAnswer(t, tc.c)
		})
	}
}

// TestLateAnswer_UncertainAnswerReason (rev20a): the engine alone, live
// (wall times), the write's window open when its COMMIT_UNKNOWN answer
// comes behind the watermark. The unverified_write made when the window
// closes must say commit_unknown, as in order; fx20a left such an answer
// untaken (the write no_response, the call stored unanswered).
func TestLateAnswer_UncertainAnswerReason(t *testing.T) {
	dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
	at := wallStart.Add(-time.Minute)
	unanswered, answered := laLinesWith(at, laCommitUnknown)
	var before, after [][]byte
	for i := 1; i <= 40; i++ {
		l := callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second))
		if i < 17 {
			before = append(before, l)
		} else {
			after = append(after, l)
		}
	}
	want := inOrderWith(t, dedit, slices.Concat([][]byte{unanswered, answered}, before, after))

	o := outcome{findings: map[string]audit.Finding{}, writes: map[string]audit.WriteState{}}
	cfg := detect.NewDefaultConfig()
	dedit(&cfg)
	e := detect.NewEngine(cfg, outcomeSink{o})
	took := 0
	e.OnAnswer(func(*audit.Call) { took++ })
	for _, r := range decode(t, slices.Concat([][]byte{unanswered}, before, [][]byte{answered}, after)) {
		e.Add("calls", r, r.Call.Time)
	}
	e.Flush()
	if e.Stats().LateAnswers != 1 || took != 1 {
		t.Errorf("late answers %d, told the store %d times; want 1, 1", e.Stats().LateAnswers, took)
	}
	sameStored(t, "live", o, want)
	if len(openFindings(want)) == 0 {
		t.Fatalf("in time order no finding: the test shows nothing")
	}
	sameReasons(t, o, want)
}

// TestLateAnswer_PendingAnswerSettledByRead (rev20a probe): the late
// answer says the write is pending its sync (rev 4, sync pending); a read
// of rev 4, synced, judged between the two observations, proves it: in
// order the write is durable, no finding. The engine alone, live, the
// write's window open when the answer comes.
func TestLateAnswer_PendingAnswerSettledByRead(t *testing.T) {
	dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
	at := wallStart.Add(-time.Minute)
	unanswered, answered := laLinesWith(at, `{"isError":false,"structuredContent":{"path":"la/doc.gram","rev":4,"hash":"h4","sync":{"state":"pending"}}}`)
	read := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-la","request":{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"la/doc.gram"}}},"response":{"jsonrpc":"2.0","id":7,"result":{"isError":false,"structuredContent":{"path":"la/doc.gram","rev":4,"hash":"h4","sync":{"state":"synced"},"text":"..."}}}}`,
		at.Add(5*time.Second).Format(time.RFC3339Nano))
	var before, after [][]byte
	for i := 1; i <= 40; i++ {
		l := callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second))
		if i < 17 {
			before = append(before, l)
		} else {
			after = append(after, l)
		}
	}
	before = append(before, read)
	want := inOrderWith(t, dedit, slices.Concat([][]byte{unanswered, answered}, before, after))
	if countState(want.writes, audit.StateDurable) == 0 {
		t.Fatalf("in time order no durable write (%v): the test shows nothing", want.writes)
	}
	o := outcome{findings: map[string]audit.Finding{}, writes: map[string]audit.WriteState{}}
	cfg := detect.NewDefaultConfig()
	dedit(&cfg)
	e := detect.NewEngine(cfg, outcomeSink{o})
	recs := decode(t, slices.Concat([][]byte{unanswered}, before, [][]byte{answered}, after))
	slices.SortStableFunc(recs[:len(before)+1], func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	for _, r := range recs {
		e.Add("calls", r, r.Call.Time)
	}
	e.Flush()
	if e.Stats().LateAnswers != 1 {
		t.Errorf("late answers %d, want 1", e.Stats().LateAnswers)
	}
	sameStored(t, "live", o, want)
}

// crashedNow reports whether the store took the process as dead.
func crashedNow(s *crashStore) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.crashed
}

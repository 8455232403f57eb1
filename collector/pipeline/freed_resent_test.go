package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// resendCase is how TestRestart_FreedPartitionCallSentAgain's variants
// run: over which store (ack "log"; what the pipeline is shown of the
// calls it held: crashStore.tells), and whether the first run crashes.
type resendCase struct {
	ackLog bool
	tells  int
	crash  bool
}

func (c resendCase) String() string {
	return fmt.Sprintf("ack_log=%v/tells=%d/crash=%v", c.ackLog, c.tells, c.crash)
}

// freedThenRestarted runs TestRestart_FreedPartitionCallSentAgain's first
// run, its calls lines (of thegram) stored, judged and freed as idle, and
// opens the second: it returns that run and the ids of the findings the
// first stored.
func freedThenRestarted(t *testing.T, c resendCase, clock *testClock, lines ...[]byte) (*run, map[string]bool) {
	t.Helper()
	dir := t.TempDir()
	key := detect.PartitionKey{Server: "thegram"}
	opts := sqlite.Options{Synchronous: "normal"}
	if c.ackLog {
		opts.Ack = sqlite.AckLog
	}
	fault := func(cs *crashStore) { cs.tells = c.tells }
	r := openRunWith(t, dir, clock, nil, nil, nil, fault, opts)
	if _, err := r.ingest(batch(t, "poster", lines...)); err != nil {
		t.Fatal(err)
	}
	r.steps(40, nil)
	freeIdle(t, r, key)
	for deadline := time.Now().Add(hangCeiling); freedIn(t, dir, key).IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the state file does not keep thegram freed")
		}
		clock.Add(time.Second)
		r.status()
	}
	before := stopOrCrash(r, c.crash)
	if len(before) == 0 {
		t.Fatal("no finding stored before the restart: the test shows nothing")
	}
	clock.Add(time.Second)
	r = openRunWith(t, dir, clock, nil, nil, nil, fault, opts)
	r.steps(2, nil)
	return r, before
}

// TestRestart_FreedPartitionCallSentAgainVariants: TestRestart_FreedPartitionCallSentAgain
// over a store acknowledging calls once in its call log (ack "log"), after
// a crash, and over stores that do not say which held calls may complete
// the stored one (a store that only compares, and one that cannot tell
// which calls it held, as the ClickHouse store): those judge the call
// again as before, its write states announced again (pending, then
// unverified).
func TestRestart_FreedPartitionCallSentAgainVariants(t *testing.T) {
	var cases []resendCase
	for _, ackLog := range []bool{false, true} {
		for _, crash := range []bool{false, true} {
			cases = append(cases, resendCase{ackLog: ackLog, crash: crash})
		}
	}
	cases = append(cases, resendCase{tells: tellsCompared}, resendCase{tells: tellsNothing})
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { sentAgain(t, c) })
	}
}

// sentAgain runs TestRestart_FreedPartitionCallSentAgain's case as c says.
func sentAgain(t *testing.T, c resendCase) {
	clock := newClock(wallStart)
	line := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
	w := batch(t, "poster", line)
	r, before := freedThenRestarted(t, c, clock, line)
	if _, err := r.ingest(batch(t, "poster", line)); err != nil {
		t.Fatal(err)
	}
	r.steps(30, nil)
	n, states := announcedWritesOf(r, ids(w)[0])
	_, announced := r.rec.snapshot()
	logs := r.logs.String()
	got := r.stop()
	if c.tells != tellsAll {
		// As before: judged as new.
		if n != 2 || !strings.Contains(states, "pending×1") || !strings.Contains(states, "unverified×1") {
			t.Errorf("write states announced %q, want pending and unverified once each (judged again, as before)", states)
		}
		if strings.Contains(logs, "not judged again") {
			t.Errorf("the call was passed over by a pipeline not told which calls may complete the stored one\n%s", logs)
		}
	} else {
		if n > 0 {
			t.Errorf("write states of the re-sent write announced again: %s\n%s", states, logs)
		}
		for id := range before {
			if announced[id] > 0 {
				t.Errorf("the finding %s, stored before the restart, announced again %d times", id, announced[id])
			}
		}
		if !strings.Contains(logs, "not judged again") {
			t.Errorf("no log line tells the call sent again was passed over\n%s", logs)
		}
	}
	if len(got.findings) != len(before) {
		t.Errorf("%d findings stored, want the %d from before", len(got.findings), len(before))
	}
	if s := writeStateOf(got, ids(w)[0]); s != string(audit.StateUnverified) {
		t.Errorf("the write is stored as %s, want unverified", s)
	}
}

// TestRestart_FreedResentBesideNewCalls: in one request with the call sent
// again (passed over), a late new write of the freed partition dated before
// its watermark, and the same call in another tenant (one call id, not the
// call the store held): both are judged, their pending and unverified
// states and unverified_write announced once and stored.
func TestRestart_FreedResentBesideNewCalls(t *testing.T) {
	clock := newClock(wallStart)
	line := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
	r, before := freedThenRestarted(t, resendCase{}, clock, line)
	w := batch(t, "poster", line)
	late := batch(t, "poster", pendingPatchLine("s1", 2, wallStart.Add(-30*time.Second), "team/y.gram"))
	other := inTenant(batch(t, "poster", line), "acme")
	req := audit.Batch{Source: "poster", Records: append(append(w.Records, late.Records...), other.Records...)}
	if _, err := r.ingest(req); err != nil {
		t.Fatal(err)
	}
	r.steps(30, nil)
	id := ids(w)[0]
	if ids(other)[0] != id {
		t.Fatalf("the call in another tenant has id %s, not %s: the test shows nothing", ids(other)[0], id)
	}
	n, states := announcedWritesOf(r, id)
	nl, lateStates := announcedWritesOf(r, ids(late)[0])
	_, announced := r.rec.snapshot()
	logs := r.logs.String()
	got := r.stop()
	// The write of the other tenant's copy is announced under the same
	// call id: pending and unverified once each, the held one's none.
	if n != 2 {
		t.Errorf("write states under %s announced %q, want the other tenant's pending and unverified only\n%s", id, states, logs)
	}
	if nl != 2 {
		t.Errorf("the late write's states announced %q, want pending and unverified once each", lateStates)
	}
	for fid := range before {
		if announced[fid] > 0 {
			t.Errorf("the finding %s, stored before the restart, announced again %d times", fid, announced[fid])
		}
	}
	var lateF, otherF int
	for fid, f := range got.findings {
		if before[fid] {
			continue
		}
		switch {
		case f.Kind == audit.KindUnverifiedWrite && f.Calls[0] == ids(late)[0]:
			lateF++
		case f.Kind == audit.KindUnverifiedWrite && f.Calls[0] == id && f.Tenant == "acme":
			otherF++
		default:
			t.Errorf("a finding no run should have made: %s %s %v", f.Kind, f.Tenant, f.Calls)
			continue
		}
		if announced[fid] != 1 {
			t.Errorf("the finding %s (%s %v) announced %d times, want once", fid, f.Tenant, f.Calls, announced[fid])
		}
	}
	if lateF != 1 || otherF != 1 {
		t.Errorf("%d findings of the late write and %d of the other tenant's copy stored, want one each", lateF, otherF)
	}
}

// TestRestart_FreedResentAnswerCompletes: the freed partition's write was
// stored without its response (an observer that timed out); sent again
// after the restart with it, the store holds the call, but the answer is
// new: the call is judged (the store keeps the answer in the stored row's
// place), as before.
func TestRestart_FreedResentAnswerCompletes(t *testing.T) {
	clock := newClock(wallStart)
	answered := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
	unanswered := unansweredLine(t, answered)
	r, _ := freedThenRestarted(t, resendCase{}, clock, unanswered)
	w := batch(t, "poster", answered)
	if _, err := r.ingest(w); err != nil {
		t.Fatal(err)
	}
	r.steps(30, nil)
	n, states := announcedWritesOf(r, ids(w)[0])
	logs := r.logs.String()
	r.stop()
	if n == 0 {
		t.Errorf("no write state of the answered call announced (%q): the answer, new, was not judged\n%s", states, logs)
	}
	if strings.Contains(logs, "not judged again") {
		t.Errorf("the answered call was passed over\n%s", logs)
	}
}

// unansweredLine is line without its response.
func unansweredLine(t *testing.T, line []byte) []byte {
	t.Helper()
	s := string(line)
	i := strings.Index(s, `,"response":`)
	if i < 0 {
		t.Fatal("no response in the line")
	}
	return []byte(s[:i] + "}")
}

// TestRestart_FreedResentThenRestartAgain: after the call sent again was
// passed over, the freed entry it took out of the state file is kept again
// (nothing new of its partition was stored), so that the next restart,
// after a clean stop or a crash, passes over the call too instead of
// judging it again.
func TestRestart_FreedResentThenRestartAgain(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			clock := newClock(wallStart)
			key := detect.PartitionKey{Server: "thegram"}
			line := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
			w := batch(t, "poster", line)
			r, before := freedThenRestarted(t, resendCase{}, clock, line)
			if _, err := r.ingest(batch(t, "poster", line)); err != nil {
				t.Fatal(err)
			}
			r.steps(2, nil)
			// Until the engine took the request, the floor holds at the
			// call (a crash then judges it again, the lesser harm): wait
			// for a save after that.
			at := w.Records[0].Call.Time
			for deadline := time.Now().Add(hangCeiling); ; time.Sleep(10 * time.Millisecond) {
				if wm, floor := freedIn(t, r.dir, key), floorIn(t, r.dir); !wm.IsZero() && (floor.IsZero() || floor.After(at)) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the state file does not keep thegram freed again, its floor past the call, after the call sent again (freed at %v, floor %v)", freedIn(t, r.dir, key), floorIn(t, r.dir))
				}
				clock.Add(time.Second)
				r.status()
			}
			dir := r.dir
			stopOrCrash(r, crash)
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			r.steps(30, nil)
			n, states := announcedWritesOf(r, ids(w)[0])
			_, announced := r.rec.snapshot()
			logs := r.logs.String()
			got := r.stop()
			if n > 0 {
				t.Errorf("the third run announced write states of the call: %s\n%s", states, logs)
			}
			for id := range before {
				if announced[id] > 0 {
					t.Errorf("the finding %s, stored in the first run, announced again %d times", id, announced[id])
				}
			}
			if len(got.findings) != len(before) {
				t.Errorf("%d findings stored, want the %d from before", len(got.findings), len(before))
			}
		})
	}
}

package pipeline_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestLateAnswer_CommitRefusedThenCrash (review rev21f of fx21): the late
// answer of op20's repro comes after the write's window closed; fx21's
// keepBeforeCommit writes the commit's withdrawal into the state file,
// then the commit that would put the answer in its call's place FAILS
// (the store unreachable), and the process dies before a commit goes
// through. The store holds the call unanswered, its answer aside; the
// file holds the withdrawal. The restart must end as judging the records
// in time order does (the answer, acknowledged, is judged: the finding
// withdrawn, the call answered), and the sinks of both runs, told the
// finding once, must be told its withdrawal once in all
// (findings_withdrawn_total counted once over the runs, docs/metrics.md).
func TestLateAnswer_CommitRefusedThenCrash(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		t.Run(ack, func(t *testing.T) {
			dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
			at := wallStart.Add(-time.Minute)
			unanswered, answered := laLinesWith(at, laAccepted)
			var first, rest [][]byte
			first = append(first, unanswered)
			for i := 1; i <= 40; i++ {
				l := callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second))
				if i < 25 {
					first = append(first, l)
				} else {
					rest = append(rest, l)
				}
			}
			tail := callLine("thegram", "s-o", 999, at.Add(10*time.Minute))
			want := inOrderWith(t, dedit, slices.Concat(first[:1], [][]byte{answered}, first[1:], rest, [][]byte{tail}))

			dir := t.TempDir()
			clock := newClock(wallStart)
			opts := sqlite.Options{Synchronous: "normal", Ack: ack}
			rec1 := newRecorder()
			r := openRunWith(t, dir, clock, nil, dedit, rec1, nil, opts)
			if _, err := r.ingest(batch(t, "calls:client", first...)); err != nil {
				t.Fatal(err)
			}
			clock.Add(3 * time.Second)
			r.status()
			open := openFindings(r.read())
			if len(open) != 1 {
				t.Fatalf("findings before the answer came %v, want one unverified_write: the test shows nothing", open)
			}
			id := open[0]
			clock.Add(25 * time.Second)
			r.cs.failCommit.Store(true)
			if _, err := r.ingest(batch(t, "calls:server", answered)); err != nil {
				t.Fatal(err)
			}
			kept := false
			for i := 0; i < 50 && !kept; i++ {
				clock.Add(200 * time.Millisecond)
				r.status()
				b, _ := os.ReadFile(r.cs.marksPath)
				kept = strings.Contains(string(b), id)
			}
			if !kept {
				t.Fatal("the state file never kept the withdrawal before the failed commit: the test shows nothing")
			}
			if storedAnswered(t, r, unanswered) {
				t.Fatal("the store holds the call answered: the commit went through, the test shows nothing")
			}
			r.crash()

			rec2 := newRecorder()
			r = openRunWith(t, dir, clock, nil, dedit, rec2, nil, opts)
			if _, err := r.ingest(batch(t, "calls:client", rest...)); err != nil {
				t.Fatal(err)
			}
			clock.Add(10 * time.Minute)
			if _, err := r.ingest(batch(t, "calls:client", tail)); err != nil {
				t.Fatal(err)
			}
			r.steps(20, nil)
			if !storedAnswered(t, r, unanswered) {
				t.Errorf("the store holds the call unanswered; judged in time order it is answered")
			}
			f := findingByID(t, r, id)
			if f.StateOf() != audit.FindingWithdrawn {
				t.Errorf("unverified_write %s is %s (by %v), want withdrawn", id, f.StateOf(), f.Status)
			}
			got := r.stop()
			told := rec1.findings[id] + rec2.findings[id]
			withdrawn := rec1.withdrawn[id] + rec2.withdrawn[id]
			if told != 1 || withdrawn != 1 {
				t.Errorf("over the two runs the sinks were told the finding %d times (%d, %d) and its withdrawal %d times (%d, %d), want once each",
					told, rec1.findings[id], rec2.findings[id], withdrawn, rec1.withdrawn[id], rec2.withdrawn[id])
			}
			sameStored(t, "after the crash", got, want)
		})
	}
}

// fileMark returns the watermark the state file at path holds for the
// thegram partition (zero when none).
func fileMark(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}
	}
	var f struct {
		Partitions []struct {
			Server    string    `json:"server"`
			Watermark time.Time `json:"watermark"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Partitions {
		if p.Server == "thegram" {
			return p.Watermark
		}
	}
	return time.Time{}
}

// TestLateAnswer_CrashBeforeAnswerCommitMarkBehind (review rev21f of
// fx21, its documented gap made deterministic): the commit that stores
// the write's unverified_write comes less than a second after the state
// file was last saved, so the file's mark of the partition does not
// cover the call; the late answer is acknowledged (kept aside) and the
// process dies before any commit names it (the engine held at the
// answer: nothing of it committed, nothing kept in the file). The
// restart hands the answer to the replay as a call no mark covers and
// judges the write durable, but the stored unverified_write stays open;
// judging in time order gives none.
func TestLateAnswer_CrashBeforeAnswerCommitMarkBehind(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		t.Run(ack, func(t *testing.T) {
			dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
			at := wallStart.Add(-time.Minute)
			unanswered, answered := laLinesWith(at, laAccepted)
			var first, rest [][]byte
			first = append(first, unanswered)
			for i := 1; i <= 40; i++ {
				l := callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second))
				if i < 25 {
					first = append(first, l)
				} else {
					rest = append(rest, l)
				}
			}
			tail := callLine("thegram", "s-o", 999, at.Add(10*time.Minute))
			want := inOrderWith(t, dedit, slices.Concat(first[:1], [][]byte{answered}, first[1:], rest, [][]byte{tail}))

			dir := t.TempDir()
			clock := newClock(wallStart)
			opts := sqlite.Options{Synchronous: "normal", Ack: ack}
			rec := newRecorder()
			r := openRunWith(t, dir, clock, nil, dedit, rec, nil, opts)
			if _, err := r.ingest(batch(t, "calls:client", first...)); err != nil {
				t.Fatal(err)
			}
			// The state file as saved before the commit that stores the
			// write's unverified_write: saved at most once a second, the
			// save after that commit may be put off, and the crash come
			// first (fx21's known gap, about 1 run in 350 of
			// crash_after_answer_window_closed, made deterministic here by
			// putting this file back at the crash).
			clock.Add(1500 * time.Millisecond)
			r.status()
			before, err := os.ReadFile(r.cs.marksPath)
			if err != nil {
				t.Fatal(err)
			}
			if m := fileMark(t, r.cs.marksPath); m.After(at) {
				t.Fatalf("the file's mark %v covers the call already: the test shows nothing", m)
			}
			clock.Add(600 * time.Millisecond)
			r.status()
			open := openFindings(r.read())
			if len(open) != 1 {
				t.Fatalf("findings before the answer came %v, want one unverified_write: the test shows nothing", open)
			}
			// The crash comes before the commit that would name the
			// answer (fx21's keepBeforeCommit, run at that commit, never
			// ran).
			r.cs.dieAtCommit.Store(true)
			if _, err := r.p.Ingest(context.Background(), batch(t, "calls:server", answered)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 50 && !crashedNow(r.cs); i++ {
				r.status()
			}
			if !crashedNow(r.cs) {
				t.Fatal("no commit after the answer: the test shows nothing")
			}
			if storedAnswered(t, r, unanswered) {
				t.Fatal("the store holds the call answered: the test shows nothing")
			}
			r.die()
			if err := os.WriteFile(r.cs.marksPath, before, 0o644); err != nil {
				t.Fatal(err)
			}

			r = openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
			if _, err := r.ingest(batch(t, "calls:client", rest...)); err != nil {
				t.Fatal(err)
			}
			clock.Add(10 * time.Minute)
			if _, err := r.ingest(batch(t, "calls:client", tail)); err != nil {
				t.Fatal(err)
			}
			r.steps(20, nil)
			sameStored(t, "after the crash", r.stop(), want)
		})
	}
}

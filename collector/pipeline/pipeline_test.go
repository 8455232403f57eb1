package pipeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestIngest_StoresBeforeAck: Ingest returns only after the store has
// committed the calls, every call it acknowledged is in the store, and a
// batch the store refused is neither acknowledged nor judged.
func TestIngest_StoresBeforeAck(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	b := batch(t, "calls:a",
		callLine("thegram", "s1", 1, wallStart.Add(-time.Minute)),
		callLine("thegram", "s1", 2, wallStart.Add(-59*time.Second)),
		callLine("oddlynew", "s2", 1, wallStart.Add(-58*time.Second)))
	want := ids(b)

	t.Run("acknowledged_after_commit", func(t *testing.T) {
		r.cs.appendGate, r.cs.appendEntered = make(chan struct{}), make(chan struct{})
		done := make(chan bool, 1)
		go func() {
			_, err := r.ingest(b)
			if err != nil {
				t.Error(err)
			}
			done <- r.cs.appended.Load()
		}()
		<-r.cs.appendEntered
		select {
		case <-done:
			t.Fatal("Ingest returned while the store was still appending")
		case <-time.After(50 * time.Millisecond):
		}
		close(r.cs.appendGate)
		if appended := <-done; !appended {
			t.Fatal("Ingest returned before AppendCalls did")
		}
		r.cs.appendGate = nil
		got := r.read().calls
		for _, id := range want {
			if got[id] != 1 {
				t.Errorf("acknowledged call %s stored %d times, want 1", id, got[id])
			}
		}
	})

	t.Run("refused_by_the_store", func(t *testing.T) {
		c := batch(t, "calls:a", callLine("thegram", "s3", 1, wallStart.Add(-50*time.Second)))
		r.cs.failAppend.Store(true)
		n, err := r.ingest(c)
		r.cs.failAppend.Store(false)
		if !errors.Is(err, audit.ErrUnavailable) || n != 0 {
			t.Fatalf("Ingest = %d, %v; want 0 and the store's ErrUnavailable", n, err)
		}
		clock.Add(5 * time.Second)
		st := r.status()
		if got := st[detect.PartitionKey{Server: "thegram"}].Calls; got != 2 {
			t.Errorf("thegram partition took %d calls, want the 2 acknowledged (the refused one is the sender's to re-send)", got)
		}
		calls, _ := r.rec.snapshot()
		if calls[c.Records[0].Call.ID] != 0 {
			t.Error("a call the store refused was judged")
		}
		if _, _, queued := statusQueued(r); queued != 0 {
			t.Errorf("%d calls queued after a status, want 0", queued)
		}
	})
}

func statusQueued(r *run) ([]detect.PartitionStatus, int, int64) {
	parts, q := r.p.Status()
	return parts, len(parts), q
}

// TestIngest_BackPressure: at the cap on open state or on queued calls,
// Ingest refuses a request whole with an error wrapping
// audit.ErrOverloaded, and stores none of it; it accepts again once the
// engine has caught up.
func TestIngest_BackPressure(t *testing.T) {
	reads := func(session string, n int, at time.Time) audit.Batch {
		var lines [][]byte
		for i := range n {
			lines = append(lines, callLine("thegram", session, i+1, at.Add(time.Duration(i)*time.Millisecond)))
		}
		return batch(t, "calls:"+session, lines...)
	}

	t.Run("open_state", func(t *testing.T) {
		clock := newClock(wallStart)
		r := openRun(t, t.TempDir(), clock, func(c *pipeline.Config) { c.MaxOpenCalls = 50 }, nil)
		// The clock stands still: a new partition holds its watermark, so
		// every call stays open.
		for i := range 5 {
			if _, err := r.ingest(reads(fmt.Sprintf("s%d", i), 10, wallStart.Add(-time.Hour))); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			r.status()
		}
		b1, b2 := reads("x1", 5, wallStart.Add(-time.Hour)), reads("x2", 5, wallStart.Add(-time.Hour))
		n, err := r.ingest(b1, b2)
		if !errors.Is(err, pipeline.ErrOpenState) || !errors.Is(err, audit.ErrOverloaded) || n != 0 {
			t.Fatalf("Ingest at the cap = %d, %v; want 0 and ErrOpenState (overloaded)", n, err)
		}
		stored := r.read().calls
		if len(stored) != 50 {
			t.Errorf("%d calls stored, want the 50 acknowledged", len(stored))
		}
		for _, id := range append(ids(b1), ids(b2)...) {
			if stored[id] != 0 {
				t.Errorf("refused call %s was stored", id)
			}
		}
		if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.Buffered != 50 {
			t.Errorf("%d calls buffered, want 50", st.Buffered)
		}
		// The hold ends: the open calls are judged, room is made.
		clock.Add(3 * time.Second)
		r.status()
		clock.Add(20 * time.Second) // the sources go idle: the watermark follows the wall clock
		if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.Buffered != 0 {
			t.Fatalf("%d calls still buffered after the sources went idle", st.Buffered)
		}
		// The count of open calls Ingest checks is the engine's as of its
		// last tick (every commit_every).
		deadline := time.Now().Add(hangCeiling)
		for {
			_, err := r.ingest(reads("x1", 5, wallStart.Add(-time.Hour)), reads("x2", 5, wallStart.Add(-time.Hour)))
			if err == nil {
				break
			}
			if !errors.Is(err, pipeline.ErrOpenState) || time.Now().After(deadline) {
				t.Fatalf("Ingest after the engine caught up: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("queue", func(t *testing.T) {
		clock := newClock(wallStart)
		rec, unblock := newBlockingRecorder()
		// Registered after openRun's cleanup, so run before it: a failed
		// test does not leave the engine stuck in the sink.
		defer unblock()
		r := openRun(t, t.TempDir(), clock, func(c *pipeline.Config) { c.QueueCalls = 30 }, rec)
		// Dated an hour ahead of the wall clock, calls are judged on
		// arrival: the first stops the engine goroutine in the sink.
		ahead := wallStart.Add(time.Hour)
		for i := range 3 {
			if _, err := r.p.Ingest(t.Context(), reads(fmt.Sprintf("s%d", i), 10, ahead)); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		<-rec.blocked
		b := reads("s9", 10, ahead)
		n, err := r.p.Ingest(t.Context(), b)
		if !errors.Is(err, pipeline.ErrQueueFull) || !errors.Is(err, audit.ErrOverloaded) || n != 0 {
			t.Fatalf("Ingest with a full queue = %d, %v; want 0 and ErrQueueFull (overloaded)", n, err)
		}
		stored := r.read().calls
		if len(stored) != 30 {
			t.Errorf("%d calls stored, want the 30 acknowledged", len(stored))
		}
		for _, id := range ids(b) {
			if stored[id] != 0 {
				t.Errorf("refused call %s was stored", id)
			}
		}
		unblock()
		r.status() // the queued count is taken before the engine answers
		if _, _, q := statusQueued(r); q != 0 {
			t.Fatalf("%d calls still queued after the engine went on", q)
		}
		if _, err := r.ingest(reads("s9", 10, ahead)); err != nil {
			t.Fatalf("Ingest after the queue drained: %v", err)
		}
		st := r.status()[detect.PartitionKey{Server: "thegram"}]
		if st.Calls != 40 || st.Ahead != 40 {
			t.Errorf("partition took %d calls (%d ahead), want 40 (40)", st.Calls, st.Ahead)
		}
	})
}

// TestIngest_DuplicateIDs: a call sent again, in a later request, in two
// batches of one request or twice in one batch, is stored once, counted
// once as stored and judged once.
func TestIngest_DuplicateIDs(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	at := wallStart.Add(-time.Minute)
	x, y, z, w := callLine("thegram", "s1", 1, at), callLine("thegram", "s1", 2, at.Add(time.Second)),
		callLine("thegram", "s1", 3, at.Add(2*time.Second)), callLine("thegram", "s2", 1, at.Add(3*time.Second))
	steps := []struct {
		name    string
		batches []audit.Batch
		stored  int
	}{
		{"first", []audit.Batch{batch(t, "calls:a", x, y)}, 2},
		{"one_again_one_new", []audit.Batch{batch(t, "calls:a", y, z)}, 1},
		{"again_from_two_sources", []audit.Batch{batch(t, "calls:a", x), batch(t, "calls:b", z)}, 0},
		{"twice_in_one_batch", []audit.Batch{batch(t, "calls:b", w, w)}, 1},
	}
	for _, s := range steps {
		n, err := r.ingest(s.batches...)
		if err != nil || n != s.stored {
			t.Errorf("%s: Ingest = %d, %v; want %d stored for the first time", s.name, n, err, s.stored)
		}
		clock.Add(200 * time.Millisecond)
	}
	clock.Add(time.Minute)
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	o := r.read()
	calls, _ := r.rec.snapshot()
	for _, id := range ids(batch(t, "", x, y, z, w)) {
		if o.calls[id] != 1 {
			t.Errorf("call %s stored %d times, want 1", id, o.calls[id])
		}
		if calls[id] != 1 {
			t.Errorf("call %s judged %d times, want 1", id, calls[id])
		}
	}
	// The partition's count is of deliveries: every call handed to the
	// engine, the repeated ones too.
	if st.Calls != 8 || st.Buffered != 0 {
		t.Errorf("partition: %d calls delivered, %d buffered; want 8, 0", st.Calls, st.Buffered)
	}
}

// TestStatus: what Status reports per partition and source as calls come
// in time, late, too late, from a source with its clock ahead and from
// sources that go idle.
func TestStatus(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	w0 := wallStart
	thegram, oddlynew := detect.PartitionKey{Server: "thegram"}, detect.PartitionKey{Server: "oddlynew"}
	mustIngest := func(b audit.Batch) {
		t.Helper()
		if _, err := r.ingest(b); err != nil {
			t.Fatal(err)
		}
	}
	source := func(ps detect.PartitionStatus, name string) detect.SourceStatus {
		t.Helper()
		for _, s := range ps.Sources {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("partition %s has no source %s: %+v", ps.Server, name, ps.Sources)
		return detect.SourceStatus{}
	}
	mustIngest(batch(t, "calls:a", callLine("thegram", "s1", 1, w0.Add(-10*time.Second)), callLine("thegram", "s1", 2, w0.Add(-9*time.Second))))
	mustIngest(batch(t, "calls:b", callLine("thegram", "s2", 1, w0.Add(-8*time.Second))))
	mustIngest(batch(t, "calls:c", callLine("oddlynew", "s3", 1, w0.Add(-7*time.Second))))

	t.Run("new_partition_holds", func(t *testing.T) {
		st := r.status()
		p := st[thegram]
		if !p.Watermark.IsZero() || p.Buffered != 3 || p.Calls != 3 || len(p.Sources) != 2 {
			t.Fatalf("thegram = %+v; want no watermark yet, 3 calls buffered from 2 sources", p)
		}
		a := source(p, "calls:a")
		if !a.LastEvent.Equal(w0.Add(-9*time.Second)) || !a.LastSeen.Equal(w0) || a.Lag != 9*time.Second || a.Idle || a.Calls != 2 {
			t.Errorf("source a = %+v", a)
		}
		if st[oddlynew].Calls != 1 || len(st) != 2 {
			t.Errorf("partitions = %+v", st)
		}
	})

	t.Run("watermark_is_the_slowest_active_source", func(t *testing.T) {
		clock.Add(3 * time.Second)
		p := r.status()[thegram]
		// min(a: -9 s, b: -8 s) less the 1 s lateness bound.
		if want := w0.Add(-10 * time.Second); !p.Watermark.Equal(want) {
			t.Errorf("watermark %s, want %s", p.Watermark, want)
		}
		if p.Lag != 13*time.Second || p.Buffered != 2 {
			t.Errorf("lag %s, buffered %d; want 13s, 2", p.Lag, p.Buffered)
		}
	})

	t.Run("idle_sources_release_the_partition", func(t *testing.T) {
		clock.Add(11 * time.Second)
		p := r.status()[thegram]
		if p.Buffered != 0 || !source(p, "calls:a").Idle || !source(p, "calls:b").Idle {
			t.Fatalf("thegram = %+v; want every call judged and both sources idle", p)
		}
		// Quiet: the latest source clock (-8 s) goes on with the wall
		// clock since its last delivery (14 s ago), less the 1 s
		// lateness bound.
		if want := w0.Add(5 * time.Second); !p.Watermark.Equal(want) {
			t.Errorf("watermark %s, want %s", p.Watermark, want)
		}
	})

	t.Run("late_too_late_and_ahead", func(t *testing.T) {
		now := clock.Now()
		wm := r.status()[thegram].Watermark
		late := batch(t, "calls:a", callLine("thegram", "s1", 3, wm.Add(-30*time.Second)))
		tooLate := batch(t, "calls:a", callLine("thegram", "s1", 4, wm.Add(-3*time.Minute)))
		ahead := batch(t, "calls:d", callLine("thegram", "s4", 1, now.Add(2*time.Hour)))
		mustIngest(late)
		mustIngest(tooLate)
		mustIngest(ahead)
		p := r.status()[thegram]
		if p.Calls != 6 || p.Late != 1 || p.TooLate != 1 || p.Ahead != 1 || p.Buffered != 0 {
			t.Errorf("thegram = %+v; want 6 calls, 1 late, 1 too late, 1 ahead, none buffered", p)
		}
		if a := source(p, "calls:a"); a.Late != 1 || a.TooLate != 1 || a.Idle {
			t.Errorf("source a = %+v; want 1 late, 1 too late, active again", a)
		}
		d := source(p, "calls:d")
		// Its clock is clamped to the wall clock plus the allowed skew.
		if d.Ahead != 1 || !d.LastEvent.Equal(now.Add(time.Minute)) {
			t.Errorf("source d = %+v; want 1 ahead, clock at %s", d, now.Add(time.Minute))
		}
		calls, _ := r.rec.snapshot()
		if calls[late.Records[0].Call.ID] != 1 || calls[ahead.Records[0].Call.ID] != 1 {
			t.Error("the late call and the call ahead are judged on arrival")
		}
		if calls[tooLate.Records[0].Call.ID] != 0 {
			t.Error("a call beyond the allowed lateness was judged")
		}
		if r.read().calls[tooLate.Records[0].Call.ID] != 1 {
			t.Error("a call beyond the allowed lateness was not stored")
		}
		// Each is logged, naming its partition and source.
		logs := r.logs.String()
		for _, want := range []string{"late calls judged against open state", "stored, not judged", "judged on arrival"} {
			if !strings.Contains(logs, want) {
				t.Errorf("no %q in the log:\n%s", want, logs)
			}
		}
		if !strings.Contains(logs, "sources=[calls:a]") || !strings.Contains(logs, "sources=[calls:d]") {
			t.Errorf("the log does not name the sources:\n%s", logs)
		}
	})

	// A source whose clock is ahead sends on: a few lines a minute say so,
	// not one at every status update.
	t.Run("ahead_logged_at_a_bounded_rate", func(t *testing.T) {
		before := strings.Count(r.logs.String(), "judged on arrival")
		for i := range 30 {
			mustIngest(batch(t, "calls:d", callLine("thegram", "s4", 10+i, clock.Now().Add(2*time.Hour))))
			r.status()
		}
		logs := r.logs.String()
		if n := strings.Count(logs, "judged on arrival") - before; n == 0 || n > 10 {
			t.Errorf("30 updates with calls ahead wrote %d lines, want 1 to 10", n)
		}
	})
}

// plannedBatch is one request of one source: capture lines, decoded
// afresh at each delivery.
type plannedBatch struct {
	source string
	lines  [][]byte
}

// makePlan cuts a generated capture into the requests its sources send:
// each server's sessions split over two sources (two pods exporting
// apart), each source in time order, the sources taking turns. It also
// returns the capture's good lines in time order, as analyze reads them.
func makePlan(t testing.TB, seed int64, sessions, size int) ([]plannedBatch, [][]byte) {
	c := capgen.Generate(capgen.Config{Seed: seed, Sessions: sessions})
	per := map[string][][]byte{}
	var names []string
	var all [][]byte
	for _, l := range c.Lines {
		recs := decode(t, [][]byte{l})
		if len(recs) == 0 {
			continue // a bad line of the capture's noise
		}
		all = append(all, l)
		h := fnv.New32a()
		h.Write([]byte(recs[0].Call.Session))
		src := fmt.Sprintf("calls:%s-pod%d", recs[0].Call.Server, h.Sum32()%2)
		if per[src] == nil {
			names = append(names, src)
		}
		per[src] = append(per[src], l)
	}
	var plan []plannedBatch
	for more := true; more; {
		more = false
		for _, s := range names {
			if len(per[s]) == 0 {
				continue
			}
			n := min(size, len(per[s]))
			plan = append(plan, plannedBatch{s, per[s][:n]})
			per[s] = per[s][n:]
			more = true
		}
	}
	return plan, all
}

// inOrder judges the lines as analyze does: one stream in time order.
func inOrder(t testing.TB, lines [][]byte) outcome {
	o := outcome{findings: map[string]audit.Finding{}, writes: map[string]audit.WriteState{}}
	e := detect.NewEngine(detect.NewDefaultConfig(), outcomeSink{o})
	e.DropRepeatedIDs()
	for _, r := range decode(t, lines) {
		e.Add("file", r, time.Time{})
	}
	e.Flush()
	return o
}

type outcomeSink struct{ o outcome }

func (s outcomeSink) Call(*audit.Record) {}
func (s outcomeSink) Write(w *audit.Write, _ audit.WriteState) {
	s.o.writes[fmt.Sprintf("%s/%d", w.CallID, w.Seq)] = w.State
}
func (s outcomeSink) Finding(f *audit.Finding) { s.o.findings[f.ID()] = *f }

// crashAt is one crash: before batch's acknowledgement, with or without
// its calls stored; marks, when set, replace the state file before the
// restart.
type crashAt struct {
	batch       int
	afterAppend bool
	marks       []byte
}

// delivery is what a delivery with crashes gave: the store's outcome, and
// what the sinks were told across the runs.
type delivery struct {
	outcome
	// announced counts, per finding, the runs that announced it.
	announced map[string]int
	// reannounced lists findings announced by a run that were committed
	// by an earlier one.
	reannounced []string
	logs        string
}

// deliver sends the plan through pipelines over one data directory,
// crashing as told and re-sending what was not acknowledged, as an
// exporter does. At the end the wall clock runs on two hours, so that
// every source goes idle and every window closes.
func deliver(t testing.TB, plan []plannedBatch, crashes []crashAt) delivery {
	t.Helper()
	dir := t.TempDir()
	clock := newClock(wallStart)
	d := delivery{announced: map[string]int{}}
	committed := map[string]bool{}
	r := openRun(t, dir, clock, nil, nil)
	endRun := func(r *run) {
		_, found := r.rec.snapshot()
		for id := range found {
			d.announced[id]++
			if committed[id] {
				d.reannounced = append(d.reannounced, id)
			}
		}
		d.logs += r.logs.String()
	}
	for i := 0; i < len(plan); {
		b := audit.Batch{Source: plan[i].source, Records: decode(t, plan[i].lines)}
		if len(crashes) > 0 && crashes[0].batch == i {
			c := crashes[0]
			crashes = crashes[1:]
			if c.afterAppend {
				r.cs.dieAfterAppend.Store(true)
			} else {
				r.cs.crash()
			}
			if _, err := r.ingest(b); err == nil {
				t.Fatalf("batch %d acknowledged by a dead process", i)
			}
			before := r.die()
			endRun(r)
			for id := range before {
				committed[id] = true
			}
			if c.marks != nil {
				if err := os.WriteFile(filepath.Join(dir, "partitions.json"), c.marks, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			continue // the batch was not acknowledged: it is sent again
		}
		if _, err := r.ingest(b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		clock.Add(200 * time.Millisecond)
		i++
	}
	clock.Add(2 * time.Hour)
	r.status()
	d.outcome = r.stop()
	endRun(r)
	return d
}

// sameOutcome compares two stores' findings (with their evidence) and
// write states, and checks that every call is stored once.
func sameOutcome(t testing.TB, name string, got, want outcome) {
	t.Helper()
	for _, id := range sortedKeys(want.findings) {
		g, ok := got.findings[id]
		w := want.findings[id]
		switch {
		case !ok:
			t.Errorf("%s: missing %s %s %s %s", name, w.Kind, w.Server, w.Document, w.Key)
		case !slices.Equal(g.Calls, w.Calls) || g.Summary != w.Summary:
			t.Errorf("%s: %s %s differs:\n got %v %q\nwant %v %q", name, w.Kind, w.Document, g.Calls, g.Summary, w.Calls, w.Summary)
		}
	}
	for _, id := range sortedKeys(got.findings) {
		if _, ok := want.findings[id]; !ok {
			f := got.findings[id]
			t.Errorf("%s: extra %s %s %s %s", name, f.Kind, f.Server, f.Document, f.Key)
		}
	}
	diff := 0
	for k, s := range want.writes {
		if got.writes[k] != s {
			if diff++; diff <= 5 {
				t.Errorf("%s: write %s is %q, want %q", name, k, got.writes[k], s)
			}
		}
	}
	if len(got.writes) != len(want.writes) || diff > 0 {
		t.Errorf("%s: %d writes (%d differ), want %d", name, len(got.writes), diff, len(want.writes))
	}
	if want.calls != nil {
		if len(got.calls) != len(want.calls) {
			t.Errorf("%s: %d calls stored, want %d", name, len(got.calls), len(want.calls))
		}
		for id, n := range got.calls {
			if n != 1 {
				t.Errorf("%s: call %s stored %d times", name, id, n)
			}
		}
	}
}

// TestRecovery: after crashes at any moment (before a request's calls
// are stored, or after, with the acknowledgement lost), a restart on the
// same data and the re-sending of what was not acknowledged give the same
// findings and write states as one uninterrupted run and as analyze; no
// finding committed before a crash is announced again.
func TestRecovery(t *testing.T) {
	plan, all := makePlan(t, 7, 300, 15)
	want := inOrder(t, all)
	if len(want.findings) < 20 {
		t.Fatalf("the capture gives %d findings; too few to test with", len(want.findings))
	}
	base := deliver(t, plan, nil)
	sameOutcome(t, "uninterrupted run against analyze", base.outcome, want)

	rng := rand.New(rand.NewSource(1))
	var many []crashAt
	for i := 3; i < len(plan); i += 2 + rng.Intn(len(plan)/8) {
		many = append(many, crashAt{batch: i, afterAppend: rng.Intn(2) == 0})
	}
	cases := []struct {
		name    string
		crashes []crashAt
	}{
		{"before_the_first_commit", []crashAt{{batch: 2}}},
		{"mid_stream_before_store", []crashAt{{batch: len(plan) / 2}}},
		{"mid_stream_ack_lost", []crashAt{{batch: len(plan) / 2, afterAppend: true}}},
		{"twice_in_a_row", []crashAt{{batch: len(plan) / 3, afterAppend: true}, {batch: len(plan) / 3}}},
		{fmt.Sprintf("%d_crashes", len(many)), many},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := deliver(t, plan, c.crashes)
			sameOutcome(t, c.name, got.outcome, base.outcome)
			if len(got.reannounced) > 0 {
				t.Errorf("%d findings committed before a crash were announced again: %v", len(got.reannounced), got.reannounced)
			}
			repeats := 0
			for id := range got.findings {
				if got.announced[id] == 0 {
					t.Errorf("finding %s stored but never announced to the sinks", id)
				}
				if got.announced[id] > 1 {
					repeats++
				}
			}
			// A finding made but not yet committed when the process died is
			// made again after the restart: the sinks of the dead process
			// saw it too.
			t.Logf("%d crashes: %d of %d findings announced by two runs (made, not committed, at a crash)", len(c.crashes), repeats, len(got.findings))
		})
	}
}

// TestRecovery_NewPartitionFarBehind: a partition seen for the first time
// with a backlog from hours ago, acknowledged just before a crash, before
// any commit or state file knew of it, is still judged after the restart.
// The state file's marks are saved at most once a second, so its floor is
// lowered to the backlog before the backlog is acknowledged: the replay
// reaches back to it.
func TestRecovery_NewPartitionFarBehind(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	for i := range 20 {
		if _, err := r.ingest(batch(t, "calls:live", callLine("thegram", "s1", i+1, wallStart.Add(time.Duration(i-30)*time.Second)))); err != nil {
			t.Fatal(err)
		}
		clock.Add(500 * time.Millisecond)
	}
	wm := r.status()[detect.PartitionKey{Server: "thegram"}].Watermark
	// The state file is written at most once a second of the (test's)
	// wall clock: once it holds the last watermark, it is not written
	// again before the crash, which the clock does not reach. A second
	// more (well under the idle timeout: the watermark stays) lets the
	// write that holds wm come, whichever tick wrote last before it (with
	// the clock frozen, a write half a second before the last call kept
	// the file from ever holding wm: a flake under -race).
	clock.Add(time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for !markOf(t, dir, "thegram").Equal(wm) {
		if time.Now().After(deadline) {
			t.Fatalf("the state file never held the watermark %s", wm)
		}
		time.Sleep(10 * time.Millisecond)
	}
	old := wallStart.Add(-3 * time.Hour)
	backlog := batch(t, "calls:backlog",
		pendingPatchLine("s9", 1, old, "old/a.gram"),
		callLine("thegram", "s9", 2, old.Add(6*time.Minute)))
	for _, rec := range backlog.Records {
		rec.Call.Tenant = "acme"
	}
	if _, err := r.ingest(backlog); err != nil {
		t.Fatal(err)
	}
	r.crash()

	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	clock.Add(time.Minute)
	r.status()
	clock.Add(2 * time.Hour)
	r.status()
	o := r.stop()
	found := false
	for _, f := range o.findings {
		if f.Tenant == "acme" && f.Kind == audit.KindUnverifiedWrite && f.Document == "old/a.gram" {
			found = true
		}
	}
	if !found {
		t.Errorf("the backlog's unverified write was never judged: %d findings %v", len(o.findings), o.findings)
	}
}

// TestRecovery_StateFileLost: a backlog far behind every watermark is
// stored, then the process dies before the engine takes it, and the state
// file (which alone said how far back the replay must reach) is lost or
// damaged. At start every stored call is judged again, so the backlog's
// unverified write is still reported, and nothing judged before is
// reported twice. A backlog the engine took, too late to be judged (more
// than allowed_lateness behind), is passed over by that replay as the live
// run passed over it (too_late: the store keeps which calls came too late).
func TestRecovery_StateFileLost(t *testing.T) {
	for _, tc := range []struct {
		damage  string
		tooLate bool
	}{{"removed", false}, {"truncated", false}, {"removed", true}, {"truncated", true}} {
		name := tc.damage
		if tc.tooLate {
			name += "_too_late"
		}
		damage := tc.damage
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			r := openRun(t, dir, clock, nil, nil)
			for i := range 20 {
				if _, err := r.ingest(batch(t, "calls:live", callLine("thegram", "s1", i+1, wallStart.Add(time.Duration(i-30)*time.Second)))); err != nil {
					t.Fatal(err)
				}
				clock.Add(500 * time.Millisecond)
			}
			old := wallStart.Add(-3 * time.Hour)
			backlog := batch(t, "calls:backlog",
				pendingPatchLine("s9", 1, old, "old/a.gram"),
				callLine("thegram", "s9", 2, old.Add(6*time.Minute)))
			if tc.tooLate {
				if _, err := r.ingest(backlog); err != nil {
					t.Fatal(err)
				}
				if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 2 {
					t.Fatalf("%d calls of the backlog too late, want 2", st.TooLate)
				}
				r.crash()
			} else {
				r.cs.dieAfterAppend.Store(true)
				if _, err := r.ingest(backlog); err == nil {
					t.Fatal("the backlog was acknowledged by a process that died after storing it")
				}
				r.die()
			}
			path := filepath.Join(dir, "partitions.json")
			if damage == "removed" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(`{"version":2,"partitions":[{"ten`), 0o600); err != nil {
				t.Fatal(err)
			}
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			clock.Add(time.Minute)
			r.status()
			clock.Add(2 * time.Hour)
			r.status()
			o := r.stop()
			found := 0
			for _, f := range o.findings {
				if f.Kind == audit.KindUnverifiedWrite && f.Document == "old/a.gram" {
					found++
				}
			}
			want := 1
			if tc.tooLate {
				want = 0
			}
			if found != want {
				t.Errorf("the backlog's unverified write was reported %d times, want %d: %d findings", found, want, len(o.findings))
			}
		})
	}
}

// stateFile is the state file's content as the tests read it.
type stateFile struct {
	Version    int `json:"version"`
	Partitions []struct {
		Tenant    string    `json:"tenant"`
		Server    string    `json:"server"`
		Watermark time.Time `json:"watermark"`
	} `json:"partitions"`
}

// markOf returns the watermark the state file in dir holds for server
// (zero when it holds none).
func markOf(t testing.TB, dir, server string) time.Time {
	raw, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		return time.Time{}
	}
	var f stateFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("state file %s: %v", raw, err)
	}
	for _, p := range f.Partitions {
		if p.Server == server {
			return p.Watermark
		}
	}
	return time.Time{}
}

// TestStateFile_RoundTrip: the state file holds every partition's
// watermark as the engine had it at the stop, and the restart uses each
// partition's own: what a partition ahead of the others had committed is
// not told to the sinks again.
func TestStateFile_RoundTrip(t *testing.T) {
	for _, keep := range []bool{true, false} {
		name := "kept"
		if !keep {
			name = "removed"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			r := openRun(t, dir, clock, nil, nil)
			// thegram's source runs 20 minutes ahead of oddlynew's.
			for i := range 40 {
				b := batch(t, "calls:a", callLine("thegram", "s1", i+1, wallStart.Add(-40*time.Minute+time.Duration(i)*30*time.Second)))
				c := batch(t, "calls:b", callLine("oddlynew", "s2", i+1, wallStart.Add(-60*time.Minute+time.Duration(i)*30*time.Second)))
				if _, err := r.ingest(b, c); err != nil {
					t.Fatal(err)
				}
				clock.Add(200 * time.Millisecond)
			}
			st := r.status()
			if err := r.p.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			r.store.Close()
			r.closed = true

			raw, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
			if err != nil {
				t.Fatal(err)
			}
			var f stateFile
			if err := json.Unmarshal(raw, &f); err != nil || f.Version != 2 || len(f.Partitions) != 2 {
				t.Fatalf("state file %s: %v", raw, err)
			}
			for _, p := range f.Partitions {
				want := st[detect.PartitionKey{Tenant: p.Tenant, Server: p.Server}].Watermark
				if want.IsZero() || !p.Watermark.Equal(want) {
					t.Errorf("%s: state file watermark %s, engine's %s", p.Server, p.Watermark, want)
				}
			}
			tg := st[detect.PartitionKey{Server: "thegram"}].Watermark
			if !keep {
				os.Remove(filepath.Join(dir, "partitions.json"))
			}

			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			clock.Add(time.Hour)
			r.status()
			r.stop()
			calls, _ := r.rec.snapshot()
			// The gate counts output later than a mark less the allowed
			// lateness (2m) and the lateness bound (1s) as possibly
			// uncommitted.
			settled := tg.Add(-2*time.Minute - time.Second)
			again := 0
			for id := range calls {
				if r.rec.callPart[id].Server == "thegram" && r.rec.callTime[id].Before(settled) {
					again++
				}
			}
			switch {
			case keep && again > 0:
				t.Errorf("%d thegram calls judged before the stop were announced again", again)
			case !keep && again == 0:
				t.Error("without the state file, nothing was announced again: the test no longer shows what the file is for")
			}
			t.Logf("state file %s: %d thegram calls announced again", name, again)
		})
	}
}

// TestStateFile_Damaged: a state file that cannot be read (garbage, cut
// short by a full disk, another version, empty) is reported in the log
// and the restart falls back to the store's watermark: after a crash,
// the findings are still those of an uninterrupted run.
func TestStateFile_Damaged(t *testing.T) {
	plan, _ := makePlan(t, 11, 150, 15)
	base := deliver(t, plan, nil)
	good := []byte(`{"version":2,"partitions":[{"tenant":"","server":"thegram","watermark":"2026-11-02T09:30:00Z","waiting":"0001-01-01T00:00:00Z"}]}`)
	for _, c := range []struct {
		name  string
		marks []byte
	}{
		{"garbage", []byte("\x00\x01not json")},
		{"truncated", good[:len(good)/2]},
		{"other_version", []byte(`{"version":1,"partitions":[]}`)},
		{"empty", []byte{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := deliver(t, plan, []crashAt{{batch: len(plan) / 2, afterAppend: true, marks: c.marks}})
			sameOutcome(t, c.name, got.outcome, base.outcome)
			if !strings.Contains(got.logs, "set aside (not overwritten)") {
				t.Errorf("a damaged state file was not reported; log:\n%s", got.logs)
			}
		})
	}
}

// TestStatusWithin: while the engine goroutine is busy (here stopped in a
// sink), StatusWithin returns the last status the engine took once its
// wait is over, where Status waits for the engine; once the engine goes
// on, StatusWithin answers with the engine's status again. Found from
// outside: /metrics asked the engine at every scrape and took 9.4 s while
// a new partition's backlog was judged.
func TestStatusWithin(t *testing.T) {
	clock := newClock(wallStart)
	rec, unblock := newBlockingRecorder()
	defer unblock() // before openRun's cleanup, which waits for the engine
	r := openRun(t, t.TempDir(), clock, nil, rec)
	// Dated ahead of the wall clock, the calls are judged on arrival: the
	// first stops the engine goroutine in the sink.
	var lines [][]byte
	for i := range 10 {
		lines = append(lines, callLine("thegram", "s1", i+1, wallStart.Add(time.Hour+time.Duration(i)*time.Millisecond)))
	}
	if _, err := r.p.Ingest(t.Context(), batch(t, "calls:a", lines...)); err != nil {
		t.Fatal(err)
	}
	<-rec.blocked
	asked := make(chan struct{})
	go func() {
		r.p.Status()
		close(asked)
	}()
	start := time.Now()
	parts, _ := r.p.StatusWithin(50 * time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("StatusWithin(50ms) took %s with the engine busy", took)
	}
	for _, ps := range parts {
		if ps.Calls != 0 {
			t.Errorf("last status %+v, want the one taken before the calls", ps)
		}
	}
	select {
	case <-asked:
		t.Fatal("Status answered while the engine was busy")
	default:
	}
	unblock()
	<-asked
	parts, _ = r.p.StatusWithin(5 * time.Second)
	if len(parts) != 1 || parts[0].Calls != 10 {
		t.Errorf("status after the engine went on %+v, want thegram's 10 calls", parts)
	}
}

// TestStatusWithinAgesLag: the status StatusWithin falls back on, while
// the engine is busy, gives the lags as of now, not as of the engine's last
// step: its watermarks stand still while the wall clock goes on, and a lag
// alert must see them fall behind. Found in review: the fallback froze
// mcpaudit_pipeline_lag_seconds at its value before the engine stalled.
func TestStatusWithinAgesLag(t *testing.T) {
	clock := newClock(wallStart)
	rec := newRecorder()
	r := openRun(t, t.TempDir(), clock, nil, rec)
	if _, err := r.ingest(batch(t, "calls:a", callLine("thegram", "s1", 1, wallStart.Add(-10*time.Second)))); err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * time.Second) // past the harness's join wait
	before, _ := r.p.StatusWithin(5 * time.Second)
	if len(before) != 1 || before[0].Watermark.IsZero() || len(before[0].Sources) != 1 {
		t.Fatalf("status %+v, want thegram with a watermark and its source", before)
	}

	release := make(chan struct{})
	defer close(release) // before openRun's cleanup, which waits for the engine
	rec.mu.Lock()
	rec.block, rec.blocked = release, make(chan struct{})
	rec.mu.Unlock()
	if _, err := r.p.Ingest(t.Context(), batch(t, "calls:a", callLine("thegram", "s1", 2, wallStart.Add(-9*time.Second)))); err != nil {
		t.Fatal(err)
	}
	<-rec.blocked
	clock.Add(time.Minute)
	after, _ := r.p.StatusWithin(50 * time.Millisecond)
	if len(after) != 1 || !after[0].Watermark.Equal(before[0].Watermark) {
		t.Fatalf("status while busy %+v, want the last one taken, watermark %s", after, before[0].Watermark)
	}
	if got, want := after[0].Lag, before[0].Lag+time.Minute; got != want {
		t.Errorf("partition lag while the engine is busy %s, want %s (a minute later)", got, want)
	}
	if got, want := after[0].Sources[0].Lag, before[0].Sources[0].Lag+time.Minute; got != want {
		t.Errorf("source lag while the engine is busy %s, want %s", got, want)
	}
}

package pipeline_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// spanLine is callLine carrying span ids.
func spanLine(session string, rpc int, t time.Time, trace, span string) []byte {
	l := callLine("thegram", session, rpc, t)
	return bytes.Replace(l, []byte(`{"time"`), []byte(`{"trace_id":"`+trace+`","span_id":"`+span+`","time"`), 1)
}

// TestIngest_IDCollision: two pods send different calls under one trace
// and span id. Both are stored; one is judged, as the spec's dedupe by
// span ids has it, and the other is counted as an id collision in the
// status of its partition and source and logged as a WARN naming tenant,
// server, source, call ids and what differed. The exact second
// observation of a call is neither counted nor logged. A restart that
// replays the stored calls does not log the collision again.
func TestIngest_IDCollision(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	at := wallStart.Add(-time.Minute)
	const trace = "0af7651916cd43dd8448eb211c80319c"
	a := spanLine("s1", 1, at, trace, "b7ad6b7169203331")
	b := spanLine("s2", 5, at.Add(10*time.Millisecond), trace, "b7ad6b7169203331") // another exchange, same ids
	c := spanLine("s1", 2, at.Add(time.Second), trace, "00f067aa0ba902b7")
	ba, bb := batch(t, "otlp:pod-a", a, c), batch(t, "otlp:pod-b", b, c)
	idA, idB := ids(ba)[0], ids(bb)[0]
	if n, err := r.ingest(ba); err != nil || n != 2 {
		t.Fatalf("Ingest = %d, %v", n, err)
	}
	if n, err := r.ingest(bb); err != nil || n != 1 {
		t.Fatalf("Ingest = %d, %v; want the colliding call stored, the exact duplicate not", n, err)
	}
	clock.Add(time.Minute)
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	if st.IDCollisions != 1 {
		t.Errorf("partition counts %d id collisions, want 1", st.IDCollisions)
	}
	for _, src := range st.Sources {
		if want := map[string]int64{"otlp:pod-a": 0, "otlp:pod-b": 1}[src.Name]; src.IDCollisions != want {
			t.Errorf("source %s counts %d id collisions, want %d", src.Name, src.IDCollisions, want)
		}
	}
	o := r.read()
	if o.calls[idA] != 1 || o.calls[idB] != 1 {
		t.Errorf("stored %v; want both colliding calls", o.calls)
	}
	calls, _ := r.rec.snapshot()
	if calls[idA] != 1 || calls[idB] != 0 {
		t.Errorf("judged %v; want %s once and %s not (dedupe by span ids is unchanged)", calls, idA, idB)
	}
	var lines []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, "kind=id_collision") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d id_collision lines, want 1:\n%s", len(lines), r.logs.String())
	}
	for _, want := range []string{"level=WARN", "tenant=\"\"", "server=thegram", "source=otlp:pod-b", "call_id=" + idB,
		"kept_call_id=" + idA, "kept_source=otlp:pod-a", "trace_id=" + trace, "span_id=b7ad6b7169203331", "differs=\"[session rpc_id]\""} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the line lacks %s: %s", want, lines[0])
		}
	}
	// The watermark moves past the allowed lateness: what the calls
	// caused is committed for good. Then the partition, quiet, is freed as
	// idle (what a tick of the run loop may do at any time here): its mark
	// leaves the engine, and the state file keeps the watermark it was
	// freed at.
	clock.Add(5 * time.Minute)
	r.status()
	freeIdle(t, r, detect.PartitionKey{Server: "thegram"})
	r.stop()

	// The restart does not judge the freed partition's calls again (they
	// were committed, its state dropped): the collision is not logged
	// twice.
	r = openRun(t, dir, clock, nil, nil)
	r.status()
	if !strings.Contains(r.logs.String(), " partitions=0 replayed_calls=0 freed_calls_skipped=3 ") {
		t.Fatalf("the restart did not pass over the freed partition's 3 calls:\n%s", r.logs.String())
	}
	if strings.Contains(r.logs.String(), "kind=id_collision") {
		t.Errorf("the replay logged the collision again:\n%s", r.logs.String())
	}
}

// freeIdle moves the clock on until the engine has freed the partition k
// as idle (a tick of the run loop, expireEvery after the last look, finds
// it so).
func freeIdle(t *testing.T, r *run, k detect.PartitionKey) {
	t.Helper()
	// Bounded in steps of the test's clock (4 hours of it), each waiting
	// for the engine's ticker, which frees idle partitions, to have run at
	// the new time (run.saved), not in real time: see run.stepsUntil.
	for range 240 {
		if _, ok := r.status()[k]; !ok {
			return
		}
		r.clock.Add(time.Minute)
		r.status()
		r.saved()
	}
	if _, ok := r.status()[k]; !ok {
		return
	}
	t.Fatalf("the partition %v was never freed as idle (clock %s)", k, r.clock.Now())
}

// responseLine is callLine with another result.
func responseLine(session string, rpc int, t time.Time, project string) []byte {
	return bytes.Replace(callLine("thegram", session, rpc, t), []byte(`"projects":[]`), []byte(`"projects":["`+project+`"]`), 1)
}

// TestIngest_ResponseCollisionOnce: another response under a call id the
// engine still holds is seen by the store (it skips the stored id and
// compares the responses) and would be by the engine (it holds both
// response sums): it is counted and logged once, for the source that sent
// it; the same response sent again is neither. Then, with the first call
// forgotten by the engine (too late), the store alone tells it, and it is
// counted as an id collision, not as too late.
func TestIngest_ResponseCollisionOnce(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	at := wallStart.Add(-time.Minute)
	first := batch(t, "poster-a", callLine("thegram", "s1", 1, at))
	if n, err := r.ingest(first); err != nil || n != 1 {
		t.Fatalf("Ingest = %d, %v", n, err)
	}
	if n, err := r.ingest(batch(t, "poster-b", callLine("thegram", "s1", 1, at), responseLine("s1", 1, at, "x"))); err != nil || n != 0 {
		t.Fatalf("Ingest = %d, %v; want nothing stored", n, err)
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	if st.IDCollisions != 1 || st.TooLate != 0 {
		t.Errorf("partition counts %d id collisions and %d too late, want 1 and 0", st.IDCollisions, st.TooLate)
	}
	for _, src := range st.Sources {
		if want := map[string]int64{"poster-a": 0, "poster-b": 1}[src.Name]; src.IDCollisions != want {
			t.Errorf("source %s counts %d id collisions, want %d", src.Name, src.IDCollisions, want)
		}
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(l, "kind=id_collision") {
				out = append(out, l)
			}
		}
		return out
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "source=poster-b") || !strings.Contains(l[0], `differs=[response]`) ||
		!strings.Contains(l[0], "call_id="+ids(first)[0]) {
		t.Fatalf("id_collision lines %q, want one from poster-b, differs=[response], call_id=%s", l, ids(first)[0])
	}
	// The same other response sent again (a retry after a lost
	// acknowledgement, a backlog re-sent) is the same collision: not
	// counted or logged again.
	for range 3 {
		if n, err := r.ingest(batch(t, "poster-b", callLine("thegram", "s1", 1, at), responseLine("s1", 1, at, "x"))); err != nil || n != 0 {
			t.Fatalf("Ingest = %d, %v; want nothing stored", n, err)
		}
	}
	if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.IDCollisions != 1 || len(lines()) != 1 {
		t.Errorf("the same response sent 3 times more: %d id collisions and %d lines, want 1 and 1", st.IDCollisions, len(lines()))
	}
	// Much later: the engine no longer holds the first call.
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "poster-a", callLine("thegram", "s2", 1, clock.Now().Add(-time.Second)))); err != nil {
		t.Fatal(err)
	}
	clock.Add(10 * time.Second)
	// (Compared with the counts now: the partition may have been freed as
	// idle meanwhile, with its counts, and made again by that call.)
	before := r.status()[detect.PartitionKey{Server: "thegram"}]
	if _, err := r.ingest(batch(t, "poster-b", responseLine("s1", 1, at, "y"))); err != nil {
		t.Fatal(err)
	}
	st = r.status()[detect.PartitionKey{Server: "thegram"}]
	if st.IDCollisions != before.IDCollisions+1 || st.TooLate != before.TooLate {
		t.Errorf("later: partition counts %d id collisions and %d too late, want %d and %d",
			st.IDCollisions, st.TooLate, before.IDCollisions+1, before.TooLate)
	}
	if l := lines(); len(l) != 2 {
		t.Errorf("later: %d id_collision lines, want 2:\n%s", len(l), r.logs.String())
	}
	// Sent again, after the engine forgot the first: the store finds it,
	// and it is the same collision.
	if _, err := r.ingest(batch(t, "poster-b", responseLine("s1", 1, at, "y"))); err != nil {
		t.Fatal(err)
	}
	if st2 := r.status()[detect.PartitionKey{Server: "thegram"}]; st2.IDCollisions != st.IDCollisions || len(lines()) != 2 {
		t.Errorf("later, sent again: %d id collisions and %d lines, want %d and 2", st2.IDCollisions, len(lines()), st.IDCollisions)
	}
}

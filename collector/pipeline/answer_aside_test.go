package pipeline_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// storedAnswered reports whether the store holds the call of line
// answered, failing t unless it holds it once.
func storedAnswered(t *testing.T, r *run, line []byte) bool {
	t.Helper()
	pg, err := r.store.Calls(context.Background(), audit.CallQuery{IDs: ids(batch(t, "client", line))})
	if err != nil {
		t.Fatal(err)
	}
	if len(pg.Calls) != 1 {
		t.Fatalf("the store holds %d calls of the id, want 1", len(pg.Calls))
	}
	return pg.Calls[0].Call.Responded
}

// TestRestart_InTimeAnswerStaysAnswered (late18, the review of the lost
// first attempt, regression 2): an answer the engine merged in time must
// take its call's place in the store, whatever else happens: the answer a
// fraction of a millisecond from the unanswered observation (another
// observer's clock: one call id, ids hash the millisecond), in a later
// request and a later commit than it, and the process killed right after.
// Put back as unanswered, the call was replayed without its answer and
// the durable write became unverified, with a false unverified_write.
// The store completes exactly the calls the engine names
// (audit.Results.Answered), not what a guess from times would.
func TestRestart_InTimeAnswerStaysAnswered(t *testing.T) {
	eachAckAndEnd(t, func(t *testing.T, ack string, crash bool) {
		t0 := wallStart.Add(-time.Minute)
		unanswered, _ := answerLines(t0)
		_, answered := answerLines(t0.Add(300 * time.Microsecond))
		answerPairRestart(t, ack, crash, t0, unanswered, answered, true)
	})
}

func countState(writes map[string]audit.WriteState, s audit.WriteState) int {
	n := 0
	for _, w := range writes {
		if w == s {
			n++
		}
	}
	return n
}

// TestIngest_SecondLateAnswerIsCollision (late18, the review of the lost
// first attempt, regression 1): an answer that came after its call was
// judged is dropped by the engine and kept aside by the store, the call
// left unanswered. A second answer of the same call with another response
// must be compared with the answer kept, not taken as the first answer
// of an unanswered call: it is an id collision (counted, not stored), and
// the first answer, acknowledged, is not lost: a later restart finds it
// kept and the call judged as before. The same answer sent again is a
// plain copy.
func TestIngest_SecondLateAnswerIsCollision(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		t.Run(ack, func(t *testing.T) {
			dir, clock, open := answerRuns(t, ack)
			r := open()
			tick := func(n int) {
				for i := range n {
					now := clock.Now()
					if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s-pod", 100+i, now.Add(-time.Second)))); err != nil {
						t.Fatal(err)
					}
					clock.Add(time.Second)
				}
			}
			tick(20)
			unanswered, answered := answerLines(clock.Now().Add(-time.Second))
			other := bytes.Replace(answered, []byte(`"rev":4`), []byte(`"rev":5`), 1)
			if bytes.Equal(other, answered) {
				t.Fatal("no rev in the answer")
			}
			if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
				t.Fatal(err)
			}
			tick(30)
			if _, err := r.ingest(batch(t, "server", answered)); err != nil {
				t.Fatal(err)
			}
			tick(2)
			key := detect.PartitionKey{Server: "thegram"}
			if n := r.status()[key].IDCollisions; n != 0 {
				t.Fatalf("%d id collisions after the first answer, want 0", n)
			}
			for _, line := range [][]byte{answered, other} {
				if _, err := r.ingest(batch(t, "server2", line)); err != nil {
					t.Fatal(err)
				}
			}
			tick(2)
			if n := r.status()[key].IDCollisions; n != 1 {
				t.Errorf("%d id collisions after a second answer with another response (and the first sent again), want 1", n)
			}
			// The first answer, 30 s late, is within allowed_lateness:
			// the engine judged the call with it and the store put it in
			// the call's place (fx20a; until then it stayed aside, the
			// call judged without it).
			if !storedAnswered(t, r, unanswered) {
				t.Errorf("the store holds the call unanswered, though the engine judged it with its first answer")
			}
			tick(400)
			want := r.stop()
			clock.Add(time.Second)
			// The first answer is kept, by the store: a restart reads the
			// call as judged, and the answer is still there (read from the
			// file, not from memory).
			r = open()
			tick(10)
			got := r.stop()
			writesKept(t, want, got)
			// Named now, the call takes the answer kept: the first one.
			st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.Options{Synchronous: "normal", Ack: ack})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			c := batch(t, "client", unanswered).Records[0].Call
			if err := st.Commit(context.Background(), audit.Results{Answered: []audit.CallRef{{Tenant: c.Tenant, ID: c.ID, Time: c.Time}}}); err != nil {
				t.Fatal(err)
			}
			pg, err := st.Calls(context.Background(), audit.CallQuery{IDs: []string{c.ID}})
			if err != nil {
				t.Fatal(err)
			}
			if len(pg.Calls) != 1 || !pg.Calls[0].Call.Responded || !bytes.Contains(pg.Calls[0].Call.Result, []byte(`"rev":4`)) {
				t.Errorf("the answer kept is not the first: %d calls, %+v", len(pg.Calls), pg.Calls)
			}
		})
	}
}

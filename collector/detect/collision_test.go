package detect_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// spanCall is a read of thegram observed on a span: the same ids may be
// given to another exchange.
func spanCall(t time.Time, session, rpcID, tool, path, trace, span string) *audit.Call {
	args := json.RawMessage(`{"path":"` + path + `"}`)
	return &audit.Call{
		ID:   audit.StableID("thegram", session, rpcID, t, tool, canon.Bytes(args)),
		Time: t, Server: "thegram", Session: session, RPCID: rpcID, Method: "tools/call", Tool: tool,
		Arguments: args, Responded: true, Result: json.RawMessage(`{"content":[]}`),
		TraceID: trace, SpanID: span,
	}
}

// TestEngine_IDCollision: a second call under the span ids of one taken is
// dropped as a duplicate, as the spec allows; when its request differs it
// is another exchange, and the engine counts it and says what differed.
// An exact second observation is no collision.
func TestEngine_IDCollision(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	const trace, span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	type fed struct {
		src  string
		call *audit.Call
	}
	run := func(t *testing.T, calls ...fed) (*detect.Engine, []detect.Collision) {
		t.Helper()
		e := detect.NewEngine(detect.NewDefaultConfig())
		var got []detect.Collision
		e.OnCollision(func(c detect.Collision) {
			// Dropped is the engine's: keep only what the test reads.
			d := *c.Dropped
			c.Dropped = &d
			got = append(got, c)
		})
		r := dialect.NewReader(dialect.Config{})
		for _, f := range calls {
			e.Add(f.src, r.Read(f.call), time.Time{})
		}
		e.Flush()
		return e, got
	}
	check := func(t *testing.T, e *detect.Engine, got []detect.Collision, dups int64, want ...detect.Collision) {
		t.Helper()
		if s := e.Stats(); s.Duplicates != dups || s.Collisions != int64(len(want)) {
			t.Errorf("duplicates %d, collisions %d; want %d, %d", s.Duplicates, s.Collisions, dups, len(want))
		}
		if len(got) != len(want) {
			t.Fatalf("told of %d collisions, want %d: %+v", len(got), len(want), got)
		}
		for i, w := range want {
			g := got[i]
			if g.PartitionKey != (detect.PartitionKey{Server: "thegram"}) || g.TraceID != trace || g.SpanID != span ||
				g.Kept != w.Kept || g.KeptSource != w.KeptSource || g.Dropped.ID != w.Dropped.ID ||
				g.DroppedSource != w.DroppedSource || !slices.Equal(g.Differs, w.Differs) {
				t.Errorf("collision %d:\n got %+v (dropped %s)\nwant %+v (dropped %s)", i, g, g.Dropped.ID, w, w.Dropped.ID)
			}
		}
		var n int64
		for _, p := range e.Status(time.Time{}) {
			n += p.IDCollisions
		}
		if n != int64(len(want)) {
			t.Errorf("status counts %d collisions, want %d", n, len(want))
		}
	}
	collision := func(kept, keptSrc string, dropped *audit.Call, droppedSrc string, differs ...string) detect.Collision {
		return detect.Collision{Kept: kept, KeptSource: keptSrc, Dropped: dropped, DroppedSource: droppedSrc, Differs: differs}
	}

	t.Run("exact_second_observation", func(t *testing.T) {
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		b := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-b", b})
		check(t, e, got, 1)
	})
	t.Run("other_arguments", func(t *testing.T) {
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		b := spanCall(t0.Add(100*time.Millisecond), "s1", "1", "gram_read", "b.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-b", b})
		check(t, e, got, 1, collision(a.ID, "pod-a", b, "pod-b", detect.DiffArguments))
	})
	t.Run("other_session_id_and_tool", func(t *testing.T) {
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		b := spanCall(t0.Add(100*time.Millisecond), "s2", "7", "gram_projects", "a.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-b", b})
		check(t, e, got, 1, collision(a.ID, "pod-a", b, "pod-b", detect.DiffSession, detect.DiffRPCID, detect.DiffTool))
	})
	t.Run("earlier_one_stands_for_the_ids", func(t *testing.T) {
		// The one waiting is dropped: the earlier stands for the ids.
		a := spanCall(t0.Add(200*time.Millisecond), "s1", "1", "gram_read", "a.gram", trace, span)
		b := spanCall(t0, "s1", "2", "gram_read", "a.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-b", b})
		check(t, e, got, 1, collision(b.ID, "pod-b", a, "pod-a", detect.DiffRPCID))
	})
	t.Run("same_request_seconds_apart", func(t *testing.T) {
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		b := spanCall(t0.Add(1500*time.Millisecond), "s1", "1", "gram_read", "a.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-b", b})
		check(t, e, got, 1, collision(a.ID, "pod-a", b, "pod-b", detect.DiffTime))
	})
	t.Run("kept_one_judged", func(t *testing.T) {
		// A call 2.5 s later moves the watermark past a: judged, its
		// record forgotten, still held by its span ids.
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		later := spanCall(t0.Add(2500*time.Millisecond), "s1", "9", "gram_read", "z.gram", "", "")
		b := spanCall(t0.Add(10*time.Millisecond), "s1", "2", "gram_read", "a.gram", trace, span)
		same := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-a", later}, fed{"pod-b", b}, fed{"pod-b", same})
		check(t, e, got, 2, collision("", "pod-a", b, "pod-b", detect.DiffRequest))
	})
	// The same colliding observation sent again (a retry after a lost
	// acknowledgement, a backlog re-sent) is one collision, counted and
	// told once, and a duplicate each time; another one is counted.
	t.Run("sent_again", func(t *testing.T) {
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		b := spanCall(t0.Add(100*time.Millisecond), "s1", "1", "gram_read", "b.gram", trace, span)
		c := spanCall(t0.Add(200*time.Millisecond), "s1", "1", "gram_read", "c.gram", trace, span)
		again := func(x *audit.Call) *audit.Call { y := *x; return &y }
		e, got := run(t, fed{"pod-a", a}, fed{"pod-b", b}, fed{"pod-b", again(b)}, fed{"pod-c", again(b)}, fed{"pod-b", c}, fed{"pod-b", again(c)})
		check(t, e, got, 5, collision(a.ID, "pod-a", b, "pod-b", detect.DiffArguments), collision(a.ID, "pod-a", c, "pod-b", detect.DiffArguments))
	})
	t.Run("kept_one_forgotten", func(t *testing.T) {
		// 20 s later, a is held only as hashes (observed.go): its id and
		// source are no longer known.
		a := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		later := spanCall(t0.Add(20*time.Second), "s1", "9", "gram_read", "z.gram", "", "")
		b := spanCall(t0.Add(10*time.Millisecond), "s1", "2", "gram_read", "a.gram", trace, span)
		same := spanCall(t0, "s1", "1", "gram_read", "a.gram", trace, span)
		e, got := run(t, fed{"pod-a", a}, fed{"pod-a", later}, fed{"pod-b", b}, fed{"pod-b", same})
		check(t, e, got, 2, collision("", "", b, "pod-b", detect.DiffRequest))
	})
}

package receiver_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestOTLP_IDCollision: one OTLP/HTTP request with two resources (two pods
// of thegram) whose spans share trace and span ids. Three of pod-b's spans
// are other exchanges (another session, another path); the fourth is the
// same exchange as pod-a's. Every distinct call is stored; the three
// collisions are counted in the status and the metric and each logged as
// a WARN naming the call; the exact second observation is none of these.
func TestOTLP_IDCollision(t *testing.T) {
	e := newEnv(t, nil)
	watchCollisions(t, e)
	// The spans of each pod, the i-th under trace and span ids made of i.
	// Three of pod-b's are other exchanges, 100 ms later: pod-a's call
	// stands for the ids (the earlier one does, whatever the order they
	// come in). The fourth is the same exchange as pod-a's.
	type call struct {
		session, path string
		later         time.Duration
	}
	same, other := call{"s1", "a.gram", 0}, call{"s2", "b.gram", 100 * time.Millisecond}
	td := ptrace.NewTraces()
	for _, pod := range []struct {
		name  string
		calls []call
	}{
		{"pod-a", []call{same, same, same, same}},
		{"pod-b", []call{other, other, other, same}},
	} {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "thegram")
		rs.Resource().Attributes().PutStr("service.instance.id", pod.name)
		ss := rs.ScopeSpans().AppendEmpty()
		for i, c := range pod.calls {
			sp := appendCall(ss, i, c.session, now.Add(time.Duration(i)*time.Millisecond+c.later))
			sp.Attributes().PutStr("gen_ai.tool.call.arguments", `{"path":"`+c.path+`"}`)
		}
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	if a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, body); a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	stored := e.stored(t)
	if len(stored) != 7 {
		t.Errorf("stored %d calls, want 7 (4 of pod-a, 3 colliding of pod-b)", len(stored))
	}
	lines, ids := checkCollisions(t, e, stored, 3)
	for _, l := range lines {
		if l["level"] != "WARN" || l["tenant"] != "acme" || l["server"] != "thegram" || l["source"] != "otlp:thegram/pod-b" ||
			l["kept_source"] != "otlp:thegram/pod-a" || fmt.Sprint(l["differs"]) != "[session]" {
			t.Errorf("line %v", l)
		}
		if id, _ := l["call_id"].(string); !ids[id] {
			t.Errorf("the line names call %q, not one stored", l["call_id"])
		}
	}
}

// watchCollisions has the pipeline's partitions, with their id
// collisions, gathered into e's registry, as serve does.
func watchCollisions(t *testing.T, e *env) {
	t.Helper()
	if err := e.m.WatchPipeline(e.reg, func() []metrics.PartitionView {
		parts, _ := e.pipe.Status()
		var out []metrics.PartitionView
		for _, p := range parts {
			v := metrics.NewPartitionView(p.Server, p.Lag.Seconds(), !p.Watermark.IsZero(), p.Buffered, p.Late, p.TooLate, p.Ahead, nil)
			v.IDCollisions = p.IDCollisions
			out = append(out, v)
		}
		return out
	}); err != nil {
		t.Fatal(err)
	}
}

// checkCollisions checks that the status and the metric count want id
// collisions and that as many id_collision lines were logged, and returns
// the lines and the ids of the stored calls.
func checkCollisions(t *testing.T, e *env, stored []*audit.Call, want int) (lines []map[string]any, ids map[string]bool) {
	t.Helper()
	parts, _ := e.pipe.Status()
	var n int64
	for _, p := range parts {
		n += p.IDCollisions
	}
	if n != int64(want) {
		t.Errorf("status counts %d id collisions, want %d", n, want)
	}
	// The server's series is its own: no sink here counts its calls, but a
	// partition with counts hands its server a label as a counted call
	// does (a server whose calls are all collisions or too late has them).
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(fmt.Sprintf(`
# HELP mcpaudit_pipeline_id_collisions_total Calls not judged because a different call came under the same trace and span id, or another response under the same call id (a broken exporter, or a replay tool rewriting ids).
# TYPE mcpaudit_pipeline_id_collisions_total counter
mcpaudit_pipeline_id_collisions_total{server="thegram"} %d
`, want)), metrics.PipelineIDCollisionsTotal); err != nil {
		t.Error(err)
	}
	lines = e.logs.lines(t, "id_collision")
	if len(lines) != want {
		t.Fatalf("%d id_collision lines, want %d: %v", len(lines), want, lines)
	}
	ids = map[string]bool{}
	for _, c := range stored {
		ids[c.ID] = true
	}
	return lines, ids
}

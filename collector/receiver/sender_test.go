package receiver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// TestStoredSender: a stored call names the sender it came on as status
// and held_by name it, whatever the carrier: the resource of its spans
// (two pods in one request, over each OTLP carrier) or the poster's
// Mcpaudit-Source. The calls of one sender are found by it, and a span's
// call is still known for one (store.FromSpan).
func TestStoredSender(t *testing.T) {
	e := newEnv(t, nil)
	want := map[string]string{} // JSON-RPC id: sender
	for k, carrier := range []string{"protobuf", "json", "grpc"} {
		td := ptrace.NewTraces()
		for p, pod := range []string{"pod-a", "pod-b"} {
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", "thegram")
			rs.Resource().Attributes().PutStr("service.instance.id", pod)
			ss := rs.ScopeSpans().AppendEmpty()
			for j := range 2 {
				i := 10*k + 4*p + j
				appendCall(ss, i, "s1", now.Add(time.Duration(i)*time.Millisecond))
				want[fmt.Sprint(i)] = "otlp:thegram/" + pod
			}
		}
		if resp, _ := e.exportBy(t, carrier, ptraceotlp.NewExportRequestFromTraces(td)); resp.PartialSuccess().RejectedSpans() != 0 {
			t.Fatalf("%s: %q rejected", carrier, resp.PartialSuccess().ErrorMessage())
		}
	}
	body := record("thegram", "gram_read", now, 100) + "\n" + record("thegram", "gram_read", now.Add(time.Millisecond), 101) + "\n"
	if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(body), "Mcpaudit-Source", "x"); a.status != 200 {
		t.Fatalf("%d %s, want 200", a.status, a.body)
	}
	want["100"], want["101"] = "calls:x", "calls:x"

	calls := e.stored(t)
	if len(calls) != len(want) {
		t.Fatalf("%d calls stored, want %d", len(calls), len(want))
	}
	bySender := map[string][]string{}
	for _, c := range calls {
		if c.Source != want[c.RPCID] {
			t.Errorf("call %s: source %q, want %q", c.RPCID, c.Source, want[c.RPCID])
		}
		if got, span := store.FromSpan(c), strings.HasPrefix(want[c.RPCID], "otlp:"); got != span {
			t.Errorf("call %s (source %q): FromSpan %v, want %v", c.RPCID, c.Source, got, span)
		}
		bySender[want[c.RPCID]] = append(bySender[want[c.RPCID]], c.RPCID)
	}
	for sender, ids := range bySender {
		page, err := e.store.Calls(context.Background(), audit.CallQuery{Source: sender})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page.Calls {
			got = append(got, r.Call.RPCID)
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("calls of %s: %v, want %v", sender, got, ids)
		}
	}
}

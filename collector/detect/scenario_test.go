package detect_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// t0 is the start of every scenario.
var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// scenario builds a capture call by call. Each call is one NDJSON record.
type scenario struct {
	lines []map[string]any
	id    int
}

type obj = map[string]any

// call adds a record at t0+at with the given session, tool, arguments and
// outcome. outcome is a result object, an rpcError, or a transport error
// string; nil means nothing was observed.
func (s *scenario) call(at time.Duration, server, session, tool string, args obj, outcome any) *scenario {
	s.id++
	rec := obj{
		"time":    t0.Add(at).Format(time.RFC3339Nano),
		"server":  server,
		"session": session,
		"request": obj{"jsonrpc": "2.0", "id": s.id, "method": "tools/call", "params": obj{"name": tool, "arguments": args}},
	}
	switch o := outcome.(type) {
	case nil:
	case string:
		rec["transport_error"] = o
	case rpcError:
		rec["response"] = obj{"jsonrpc": "2.0", "id": s.id, "error": obj(o)}
	case obj:
		rec["response"] = obj{"jsonrpc": "2.0", "id": s.id, "result": o}
	default:
		panic(fmt.Sprintf("bad outcome %T", outcome))
	}
	s.lines = append(s.lines, rec)
	return s
}

type rpcError obj

// ndjson renders the scenario, plus a tail call far later so that every
// window has closed, unless open is set.
func (s *scenario) ndjson(tail bool) []byte {
	var b bytes.Buffer
	for _, l := range s.lines {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	if tail {
		j, _ := json.Marshal(obj{"time": t0.Add(3 * time.Hour).Format(time.RFC3339Nano), "server": "thegram", "session": "s-tail",
			"request":  obj{"jsonrpc": "2.0", "id": 9999, "method": "tools/call", "params": obj{"name": "gram_projects", "arguments": obj{}}},
			"response": obj{"jsonrpc": "2.0", "id": 9999, "result": obj{"isError": false, "structuredContent": obj{"projects": []any{}}}}})
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func run(t *testing.T, data []byte) *sink {
	t.Helper()
	dec, err := capture.NewDecoder(bytes.NewReader(data), "scenario")
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	d := newRunner(detect.NewDefaultConfig(), s)
	for {
		c, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		d.Add(c)
	}
	d.Flush()
	return s
}

// want checks the kinds of the findings (in any order).
func (s *scenario) want(t *testing.T, kinds ...audit.Kind) *sink {
	t.Helper()
	got := run(t, s.ndjson(true))
	checkKinds(t, got.findings, kinds)
	return got
}

func checkKinds(t *testing.T, fs []audit.Finding, kinds []audit.Kind) {
	t.Helper()
	count := map[audit.Kind]int{}
	for _, f := range fs {
		count[f.Kind]++
	}
	for _, k := range kinds {
		count[k]--
	}
	for k, n := range count {
		if n != 0 {
			var desc []string
			for _, f := range fs {
				desc = append(desc, string(f.Kind)+": "+f.Summary)
			}
			t.Fatalf("finding kinds differ (%s off by %d); got:\n%s", k, n, strings.Join(desc, "\n"))
		}
	}
}

// Thegram helpers.

const tg, on = "thegram", "oddlynew"

func patch(path string, base int, reqID string, text string) obj {
	return obj{"path": path, "base_revision": base, "expected_hash": fmt.Sprintf("h%d", base), "request_id": reqID,
		"operations": []any{obj{"op": "append_block", "target": "h0-1", "text": text}}}
}

func okDoc(path string, rev int, sync string) obj {
	sc := obj{"path": path, "rev": rev, "hash": fmt.Sprintf("h%d", rev)}
	if sync != "" {
		sc["sync"] = obj{"state": sync}
	}
	return obj{"isError": false, "structuredContent": sc}
}

func toolErr(code, msg string) obj {
	return obj{"isError": true, "structuredContent": obj{"error": obj{"code": code, "message": msg}},
		"content": []any{obj{"type": "text", "text": code + ": " + msg}}}
}

func read(path string) obj { return obj{"path": path} }

// Oddlynew helpers.

func code(js string) obj { return obj{"code": js} }

func runOK(result obj, calls ...obj) obj {
	return obj{"isError": false, "structuredContent": obj{"result": result, "logs": []any{}, "calls": toAny(calls)}}
}

func runFail(msg string, calls []obj, outcomes ...obj) obj {
	sc := obj{"error": msg, "logs": []any{}, "calls": toAny(calls)}
	if outcomes != nil {
		sc["outcomes"] = toAny(outcomes)
	}
	return obj{"isError": true, "structuredContent": sc, "content": []any{obj{"type": "text", "text": msg}}}
}

func toAny(o []obj) []any {
	out := make([]any, len(o))
	for i := range o {
		out[i] = o[i]
	}
	return out
}

func ledger(tool, outcome string) obj { return obj{"tool": tool, "outcome": outcome, "count": 1} }

func outcomeOf(seq int, tool, access, outcome string, value obj) obj {
	o := obj{"seq": seq, "tool": tool, "access": access, "outcome": outcome}
	if value != nil {
		o["value"] = value
	}
	return o
}

func editJS(doc, wb, text string) string {
	return fmt.Sprintf(`async () => await documents.editDocument({ documentId: %q, writeBasis: %q, edits: [{ op: "appendParagraph", text: %q }] })`, doc, wb, text)
}

func createJS(cid, title string) string {
	return fmt.Sprintf(`async () => await documents.createDocument({ creationId: %q, title: %q, type: "note" })`, cid, title)
}

const (
	edit   = "documents.editDocument"
	create = "documents.createDocument"
	getDoc = "documents.getDocument"
	sec    = time.Second
)

func TestDetector_DoubleApply(t *testing.T) {
	t.Run("both_succeeded_under_new_keys", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.call(9*time.Minute, tg, "s1", "gram_patch", patch("a.gram", 2, "r2", "x"), okDoc("a.gram", 3, "synced"))
		got := s.want(t, audit.KindDoubleAppliedWrite)
		if st := got.states(); st[audit.StateDoubleApplied] != 1 || st[audit.StateDurable] != 1 {
			t.Fatalf("states = %v", st)
		}
	})
	t.Run("timeout_then_rebased_retry", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 5, "r1", "x"), "timeout")
		s.call(10*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 6, "synced"))
		s.call(20*sec, tg, "s1", "gram_patch", patch("a.gram", 6, "r2", "x"), okDoc("a.gram", 7, "synced"))
		s.want(t, audit.KindDoubleAppliedWrite)
	})
	t.Run("oddlynew_edit_landed_then_resent", func(t *testing.T) {
		s := &scenario{}
		js := editJS("doc_1", "wb_1", "hello")
		s.call(0, on, "s1", "run", code(js), runFail("Execution timed out", []obj{ledger(edit, "succeeded")},
			outcomeOf(1, edit, "write", "succeeded", obj{"documentId": "doc_1", "writeConfirmed": true, "revision": 4})))
		s.call(5*sec, on, "s1", "run", code(strings.ReplaceAll(editJS("doc_1", "wb_2", "hello"), " ", "  ")),
			runOK(obj{"documentId": "doc_1", "writeConfirmed": true, "revision": 5}, ledger(edit, "succeeded")))
		s.want(t, audit.KindDoubleAppliedWrite)
	})
	t.Run("replay_under_same_key", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.call(time.Minute, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("same_operations_on_other_documents", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.call(time.Minute, tg, "s1", "gram_patch", patch("b.gram", 1, "r2", "x"), okDoc("b.gram", 2, "synced"))
		s.call(2*time.Minute, on, "s2", "run", code(editJS("doc_1", "wb", "same")), runOK(obj{"documentId": "doc_1", "writeConfirmed": true}, ledger(edit, "succeeded")))
		s.call(3*time.Minute, on, "s2", "run", code(editJS("doc_2", "wb", "same")), runOK(obj{"documentId": "doc_2", "writeConfirmed": true}, ledger(edit, "succeeded")))
		s.want(t)
	})
	t.Run("outside_correlation_window", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.call(61*time.Minute, tg, "s1", "gram_patch", patch("a.gram", 2, "r2", "x"), okDoc("a.gram", 3, "synced"))
		s.want(t)
	})
	t.Run("rebased_retry_rejected", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 5, "r1", "x"), "timeout")
		s.call(10*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 6, "synced"))
		s.call(20*sec, tg, "s1", "gram_patch", patch("a.gram", 6, "r2", "x"), toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.want(t)
	})
	t.Run("retry_on_same_base_after_read", func(t *testing.T) {
		// The first did not land (the base did not move): no double apply.
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 5, "r1", "x"), "timeout")
		s.call(10*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 5, "synced"))
		s.call(20*sec, tg, "s1", "gram_patch", patch("a.gram", 5, "r2", "x"), okDoc("a.gram", 6, "synced"))
		s.want(t)
	})
	t.Run("two_edits_in_one_run", func(t *testing.T) {
		s := &scenario{}
		js := `async () => { await documents.editDocument({ documentId: "doc_1", writeBasis: "a", edits: [1] }); return await documents.editDocument({ documentId: "doc_1", writeBasis: "b", edits: [2] }) }`
		s.call(0, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1", "writeConfirmed": true}, obj{"tool": edit, "outcome": "succeeded", "count": 2}))
		s.want(t)
	})
}

func TestDetector_DuplicateCreate(t *testing.T) {
	created := func(doc, title string) obj {
		return runOK(obj{"documentId": doc, "action": "created", "title": title, "type": "note"}, ledger(create, "succeeded"))
	}
	t.Run("two_keys_one_document", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "Report")), created("doc_a", "Report"))
		s.call(time.Minute, on, "s1", "run", code(createJS("01a-2", "Report")), created("doc_b", "Report"))
		got := s.want(t, audit.KindDuplicateCreate)
		if f := got.findings[0]; f.Document != "doc_b" {
			t.Fatalf("document = %q, want the duplicate doc_b", f.Document)
		}
	})
	t.Run("missing_keys", func(t *testing.T) {
		s := &scenario{}
		js := `async () => await documents.createDocument({ title: "Report", type: "note" })`
		s.call(0, on, "s1", "run", code(js), created("doc_a", "Report"))
		s.call(time.Minute, on, "s1", "run", code(js), created("doc_b", "Report"))
		s.want(t, audit.KindDuplicateCreate)
	})
	t.Run("replay_same_creation_id", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "Report")), created("doc_a", "Report"))
		s.call(time.Minute, on, "s1", "run", code(createJS("01a-1", "Report")),
			runOK(obj{"documentId": "doc_a", "action": "alreadyBootstrapped", "title": "Report", "type": "note"}, ledger(create, "succeeded")))
		s.want(t)
	})
	t.Run("other_session", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "Report")), created("doc_a", "Report"))
		s.call(time.Minute, on, "s2", "run", code(createJS("01a-2", "Report")), created("doc_b", "Report"))
		s.want(t)
	})
	t.Run("two_sessions_of_one_client", func(t *testing.T) {
		// "in one session or one client": an agent back in a new session.
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "Report")), created("doc_a", "Report"))
		s.call(time.Minute, on, "s2", "run", code(createJS("01a-2", "Report")), created("doc_b", "Report"))
		for _, l := range s.lines {
			l["client"] = "agent/1.0"
		}
		s.want(t, audit.KindDuplicateCreate)
	})
	t.Run("two_creates_in_one_run", func(t *testing.T) {
		s := &scenario{}
		js := `async () => { await documents.createDocument({ creationId: "c1", title: "Alpha", type: "note" }); await documents.createDocument({ creationId: "c2", title: "Alpha", type: "note" }) }`
		s.call(0, on, "s1", "run", code(js), runFail("Execution timed out", []obj{{"tool": create, "outcome": "succeeded", "count": 2}},
			outcomeOf(1, create, "write", "succeeded", obj{"documentId": "doc_1", "action": "created", "title": "Alpha", "type": "note"}),
			outcomeOf(2, create, "write", "succeeded", obj{"documentId": "doc_2", "action": "created", "title": "Alpha", "type": "note"})))
		got := s.want(t, audit.KindDuplicateCreate)
		if got.findings[0].Document != "doc_2" {
			t.Fatalf("document = %q", got.findings[0].Document)
		}
	})
	t.Run("equal_titles_returned_together", func(t *testing.T) {
		s := &scenario{}
		js := `async () => [await documents.createDocument({ creationId: "c1", title: "Alpha", type: "note" }), await documents.createDocument({ creationId: "c2", title: "Alpha", type: "note" })]`
		s.call(0, on, "s1", "run", code(js), runOK(nil, obj{"tool": create, "outcome": "succeeded", "count": 2}))
		s.lines[0]["response"].(obj)["result"].(obj)["structuredContent"].(obj)["result"] = []any{
			obj{"documentId": "doc_x1", "action": "created", "title": "Alpha", "type": "note"},
			obj{"documentId": "doc_x2", "action": "created", "title": "Alpha", "type": "note"}}
		got := s.want(t, audit.KindDuplicateCreate)
		if got.findings[0].Document != "doc_x2" {
			t.Fatalf("document = %q, want the later doc_x2", got.findings[0].Document)
		}
	})
	t.Run("run_returning_several_creates", func(t *testing.T) {
		s := &scenario{}
		js := `async () => [await documents.createDocument({ creationId: "c1", title: "Alpha", type: "note" }), await documents.createDocument({ creationId: "c2", title: "Beta", type: "note" })]`
		s.call(0, on, "s1", "run", code(js), runOK(nil, obj{"tool": create, "outcome": "succeeded", "count": 2}))
		s.lines[0]["response"].(obj)["result"].(obj)["structuredContent"].(obj)["result"] = []any{
			obj{"documentId": "doc_a", "action": "created", "title": "Alpha", "type": "note"},
			obj{"documentId": "doc_b", "action": "created", "title": "Beta", "type": "note"}}
		s.call(time.Minute, on, "s1", "run", code(createJS("c3", "Alpha")), created("doc_c", "Alpha"))
		got := s.want(t, audit.KindDuplicateCreate)
		if got.findings[0].Document != "doc_c" {
			t.Fatalf("document = %q", got.findings[0].Document)
		}
	})
	t.Run("one_client_without_sessions", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "", "run", code(createJS("01a-1", "Report")), created("doc_a", "Report"))
		s.call(time.Minute, on, "", "run", code(createJS("01a-2", "Report")), created("doc_b", "Report"))
		for _, l := range s.lines {
			delete(l, "session")
			l["client"] = "agent/1.0"
		}
		s.want(t, audit.KindDuplicateCreate)
	})
	t.Run("other_title", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "Report")), created("doc_a", "Report"))
		s.call(time.Minute, on, "s1", "run", code(createJS("01a-2", "Budget")), created("doc_b", "Budget"))
		s.want(t)
	})
	t.Run("keyless_create_resent_after_in_flight", func(t *testing.T) {
		js := `async () => await documents.createDocument({ title: "Omega", type: "note" })`
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), runFail("Execution timed out", []obj{ledger(create, "in_flight_unknown")},
			outcomeOf(1, create, "write", "in_flight_unknown", nil)))
		s.call(20*sec, on, "s1", "run", code(js), created("doc_o2", "Omega"))
		s.want(t, audit.KindUnsafeRetry, audit.KindUnverifiedWrite)
	})
	t.Run("in_flight_then_new_key", func(t *testing.T) {
		// The first outcome is unknown: not provably a duplicate, but a
		// blind re-create under a new key.
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "Report")), runFail("Execution timed out", []obj{ledger(create, "in_flight_unknown")},
			outcomeOf(1, create, "write", "in_flight_unknown", nil)))
		s.call(time.Minute, on, "s1", "run", code(createJS("01a-2", "Report")), created("doc_b", "Report"))
		s.want(t, audit.KindUnsafeRetry, audit.KindUnverifiedWrite)
	})
}

func TestDetector_UnverifiedWrite(t *testing.T) {
	reason := func(t *testing.T, got *sink, want audit.Reason) {
		t.Helper()
		for _, f := range got.findings {
			if f.Kind == audit.KindUnverifiedWrite && f.Reason != want {
				t.Fatalf("reason = %q, want %q", f.Reason, want)
			}
		}
	}
	t.Run("commit_unknown_abandoned", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: disk"))
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonCommitUnknown)
	})
	t.Run("no_response", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), nil)
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonNoResponse)
	})
	t.Run("storage_error", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("E_STORAGE", "Storage commit failed"))
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonStorageError)
	})
	t.Run("sync_not_confirmed", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "pending"))
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonSyncNotConfirmed)
	})
	t.Run("sync_confirmed_by_any_read", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "pending"))
		s.call(time.Minute, tg, "s9", "gram_read", read("a.gram"), okDoc("a.gram", 3, "synced"))
		got := s.want(t)
		if st := got.states(); st[audit.StateDurable] != 1 {
			t.Fatalf("states = %v", st)
		}
	})
	t.Run("sync_read_at_older_revision", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "pending"))
		s.call(time.Minute, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 1, "synced"))
		s.want(t, audit.KindUnverifiedWrite)
	})
	t.Run("in_flight_unknown", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(editJS("doc_1", "wb", "x")), runFail("Execution timed out", []obj{ledger(edit, "in_flight_unknown")},
			outcomeOf(1, edit, "write", "in_flight_unknown", nil)))
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonInFlightUnknown)
	})
	t.Run("not_write_confirmed", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(editJS("doc_1", "wb", "x")), runOK(obj{"documentId": "doc_1", "writeConfirmed": false}, ledger(edit, "succeeded")))
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonNotWriteConfirmed)
	})
	t.Run("save_blocked", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(editJS("doc_1", "wb", "x")), runOK(obj{"documentId": "doc_1", "writeConfirmed": true, "saveState": "blocked", "saveBlockedReason": "document_size_limit"}, ledger(edit, "succeeded")))
		reason(t, s.want(t, audit.KindUnverifiedWrite), audit.ReasonSaveBlocked)
	})
	t.Run("commit_unknown_then_read", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "Marker observed but durability not confirmed: x"))
		s.call(30*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 2, "synced"))
		got := s.want(t)
		if st := got.states(); st[audit.StateResolved] != 1 {
			t.Fatalf("states = %v", st)
		}
	})
	t.Run("commit_unknown_then_replay", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(30*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("replayed_and_still_unknown", func(t *testing.T) {
		// One logical write, replayed under its key, never settled: one finding.
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(30*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		got := s.want(t, audit.KindUnverifiedWrite)
		if st := got.states(); st[audit.StateUnverified] != 2 {
			t.Fatalf("states = %v", st)
		}
	})
	t.Run("apply_in_flight_then_receipt_read", func(t *testing.T) {
		apply := code(`async () => await organizations.applyDocumentCopy({ operationId: "op_1", planToken: "pt_1" })`)
		inFlight := runFail("Execution timed out", []obj{ledger("organizations.applyDocumentCopy", "in_flight_unknown")},
			outcomeOf(1, "organizations.applyDocumentCopy", "write", "in_flight_unknown", nil))
		s := &scenario{}
		s.call(0, on, "s1", "run", apply, inFlight)
		s.call(10*sec, on, "s1", "run", code(`async () => await organizations.getDocumentCopyReceipt({ operationId: "op_1" })`),
			runOK(obj{"operationId": "op_1", "state": "completed", "nextAction": "done"}, ledger("organizations.getDocumentCopyReceipt", "succeeded")))
		s.want(t)
		// Re-sent while still unknown, then abandoned: one logical write.
		s2 := &scenario{}
		s2.call(0, on, "s1", "run", apply, inFlight)
		s2.call(10*sec, on, "s1", "run", apply, inFlight)
		s2.want(t, audit.KindUnverifiedWrite)
	})
	t.Run("read_by_another_session_does_not_resolve", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(30*sec, tg, "s2", "gram_read", read("a.gram"), okDoc("a.gram", 2, "synced"))
		s.want(t, audit.KindUnverifiedWrite)
	})
	t.Run("read_after_window", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(6*time.Minute, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 2, "synced"))
		s.want(t, audit.KindUnverifiedWrite)
	})
	t.Run("pending_at_end_of_input", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(time.Minute, tg, "s1", "gram_projects", obj{}, obj{"isError": false})
		got := run(t, s.ndjson(false))
		checkKinds(t, got.findings, nil)
		if st := got.states(); st[audit.StatePending] != 1 {
			t.Fatalf("states = %v", st)
		}
	})
	t.Run("create_replayed_after_in_flight", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "R")), runFail("Execution timed out", []obj{ledger(create, "in_flight_unknown")},
			outcomeOf(1, create, "write", "in_flight_unknown", nil)))
		s.call(30*sec, on, "s1", "run", code(createJS("01a-1", "R")), runOK(obj{"documentId": "doc_a", "action": "alreadyBootstrapped"}, ledger(create, "succeeded")))
		s.want(t)
	})
	t.Run("archive_resent_after_no_response", func(t *testing.T) {
		js := `async () => await documents.archiveDocument({ documentId: "doc_1" })`
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), "timeout")
		s.call(30*sec, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1", "archived": true}, ledger("documents.archiveDocument", "succeeded")))
		s.want(t)
	})
}

func TestDetector_UnsafeRetry(t *testing.T) {
	t.Run("thegram_new_id_after_timeout", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), "timeout")
		s.call(10*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r2", "x"), toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call(20*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 2, "synced"))
		s.want(t, audit.KindUnsafeRetry)
	})
	t.Run("oddlynew_edit_after_in_flight", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(editJS("doc_1", "wb", "a")), runFail("Execution timed out", []obj{ledger(edit, "in_flight_unknown")}, outcomeOf(1, edit, "write", "in_flight_unknown", nil)))
		s.call(5*sec, on, "s1", "run", code(editJS("doc_1", "wb", "b")), runOK(obj{"documentId": "doc_1", "writeConfirmed": true}, ledger(edit, "succeeded")))
		s.call(10*sec, on, "s1", "run", code(`async () => await documents.getDocument({ documentId: "doc_1" })`), runOK(obj{"documentId": "doc_1", "writeBasis": "w"}, ledger(getDoc, "succeeded")))
		s.want(t, audit.KindUnsafeRetry)
	})
	t.Run("read_in_between", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), "timeout")
		s.call(5*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 1, "synced"))
		s.call(10*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r2", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("read_inside_the_retrying_run", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(editJS("doc_1", "wb", "a")), runFail("Execution timed out", []obj{ledger(edit, "in_flight_unknown")}, outcomeOf(1, edit, "write", "in_flight_unknown", nil)))
		js := `async () => { const d = await documents.getDocument({ documentId: "doc_1" }); return await documents.editDocument({ documentId: "doc_1", writeBasis: d.writeBasis, edits: [] }) }`
		s.call(5*sec, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1", "writeConfirmed": true}, ledger(getDoc, "succeeded"), ledger(edit, "succeeded")))
		s.want(t)
	})
	t.Run("replay_under_same_key", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), "timeout")
		s.call(5*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("read_after_the_write_in_one_run", func(t *testing.T) {
		// The ledger lists the read first; the code wrote first.
		s := &scenario{}
		s.call(0, on, "s1", "run", code(editJS("doc_1", "wb", "a")), runFail("Execution timed out", []obj{ledger(edit, "in_flight_unknown")}, outcomeOf(1, edit, "write", "in_flight_unknown", nil)))
		js := `async () => { await documents.editDocument({ documentId: "doc_1", writeBasis: "wb", edits: [] }); return await documents.getDocument({ documentId: "doc_1" }) }`
		s.call(5*sec, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1", "writeBasis": "w2"}, ledger(getDoc, "succeeded"), ledger(edit, "succeeded")))
		s.want(t, audit.KindUnsafeRetry)
	})
	t.Run("another_session", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(5*sec, tg, "s2", "gram_patch", patch("a.gram", 1, "r2", "y"), toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call(9*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("idempotent_archive_resent", func(t *testing.T) {
		js := `async () => await documents.archiveDocument({ documentId: "doc_1" })`
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), runFail("Execution timed out", []obj{ledger("documents.archiveDocument", "in_flight_unknown")}))
		s.call(5*sec, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1"}, ledger("documents.archiveDocument", "succeeded")))
		s.want(t)
	})
}

func TestDetector_RequestIDReuse(t *testing.T) {
	t.Run("server_reported", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call(10*sec, tg, "s1", "gram_patch", patch("a.gram", 2, "r1", "y"), toolErr("E_REQUEST_REUSE", "request_id belongs to another intent"))
		got := s.want(t, audit.KindRequestIDReuse)
		if f := got.findings[0]; f.Key != "r1" || len(f.Calls) != 2 {
			t.Fatalf("finding = %+v", f)
		}
	})
	t.Run("collector_observed", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.call(10*sec, tg, "s1", "gram_patch", patch("b.gram", 4, "r1", "y"), okDoc("b.gram", 5, "synced"))
		s.want(t, audit.KindRequestIDReuse)
	})
	t.Run("oddlynew_incompatible_creation", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", code(createJS("01a-1", "A")), runOK(obj{"documentId": "doc_a", "action": "created"}, ledger(create, "succeeded")))
		s.call(10*sec, on, "s1", "run", code(createJS("01a-1", "B")), runFail("Existing document creation identity has incompatible input. Use a new UUIDv7 creationId.", []obj{ledger(create, "failed_but_handled")}))
		s.want(t, audit.KindRequestIDReuse)
	})
	t.Run("identical_replay", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("COMMIT_UNKNOWN", "x"))
		s.call(10*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("key_reused_after_invalid_input", func(t *testing.T) {
		s := &scenario{}
		bad := patch("a.gram", 1, "r1", "x")
		bad["mode"] = "fast"
		s.call(0, tg, "s1", "gram_patch", bad, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.call(10*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "y"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
}

func TestDetector_WastedRetry(t *testing.T) {
	t.Run("identical_after_fix_input", func(t *testing.T) {
		bad := patch("a.gram", 1, "r1", "x")
		bad["mode"] = "fast"
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", bad, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.call(5*sec, tg, "s1", "gram_patch", bad, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.call(9*sec, tg, "s1", "gram_patch", bad, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.want(t, audit.KindWastedRetry)
	})
	t.Run("identical_after_read_only", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("E_READ_ONLY", "This mounted folder is read-only to agents"))
		s.call(5*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("E_READ_ONLY", "This mounted folder is read-only to agents"))
		s.want(t, audit.KindWastedRetry)
	})
	t.Run("oddlynew_invalid_write_basis", func(t *testing.T) {
		js := editJS("doc_1", "invented", "x")
		fail := runFail(`Invalid document writeBasis. Call getDocument without a version and pass the returned writeBasis unchanged.`, []obj{ledger(edit, "failed_but_handled")})
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), fail)
		s.call(5*sec, on, "s1", "run", code(js), fail)
		s.want(t, audit.KindWastedRetry)
	})
	t.Run("blocked_copy_plan_replayed", func(t *testing.T) {
		js := `async () => await organizations.planDocumentCopy({ copyId: "c1", sourceDocumentId: "doc_1", destinationOrganizationId: "org" })`
		blocked := runOK(obj{"copyId": "c1", "state": "blocked", "nextAction": "create_new_plan", "blockers": []any{obj{"code": "source_archived"}}}, ledger("organizations.planDocumentCopy", "succeeded"))
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), blocked)
		s.call(5*sec, on, "s1", "run", code(js), blocked)
		got := s.want(t, audit.KindWastedRetry)
		if got.findings[0].Key != "c1" || got.findings[0].RetryAction != audit.ActionNewPlan {
			t.Fatalf("finding = %+v", got.findings[0])
		}
	})
	t.Run("corrected_request", func(t *testing.T) {
		bad := patch("a.gram", 1, "r1", "x")
		bad["mode"] = "fast"
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", bad, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.call(5*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("retry_after_reauthorization_succeeds", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("PROVIDER_AUTH_REQUIRED", "Google Drive must be reconnected"))
		s.call(5*time.Minute, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
		s.want(t)
	})
	t.Run("new_plan_with_fresh_copy_id", func(t *testing.T) {
		blocked := runOK(obj{"copyId": "c1", "state": "blocked", "nextAction": "create_new_plan"}, ledger("organizations.planDocumentCopy", "succeeded"))
		s := &scenario{}
		s.call(0, on, "s1", "run", code(`async () => await organizations.planDocumentCopy({ copyId: "c1", sourceDocumentId: "doc_1", destinationOrganizationId: "org" })`), blocked)
		s.call(5*sec, on, "s1", "run", code(`async () => await organizations.planDocumentCopy({ copyId: "c2", sourceDocumentId: "doc_1", destinationOrganizationId: "org" })`),
			runOK(obj{"copyId": "c2", "state": "ready", "nextAction": "apply"}, ledger("organizations.planDocumentCopy", "succeeded")))
		s.want(t)
	})
}

func TestDetector_PrematureRetry(t *testing.T) {
	apply := code(`async () => await organizations.applyDocumentCopy({ operationId: "op1", planToken: "pt1" })`)
	applying := func(after time.Duration) obj {
		return runOK(obj{"operationId": "op1", "state": "applying", "nextAction": "wait_then_retry_apply", "retryAfter": t0.Add(after).Format(time.RFC3339Nano)}, ledger("organizations.applyDocumentCopy", "succeeded"))
	}
	done := runOK(obj{"operationId": "op1", "state": "completed", "nextAction": "done", "destinationDocumentId": "doc_9"}, ledger("organizations.applyDocumentCopy", "succeeded"))
	t.Run("before_retry_after", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", apply, applying(time.Minute))
		s.call(10*sec, on, "s1", "run", apply, applying(time.Minute))
		s.call(20*sec, on, "s1", "run", apply, applying(time.Minute))
		s.call(70*sec, on, "s1", "run", apply, done)
		s.want(t, audit.KindPrematureRetry)
	})
	t.Run("after_retry_after", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", apply, applying(time.Minute))
		s.call(61*sec, on, "s1", "run", apply, done)
		got := s.want(t)
		if st := got.states(); st[audit.StateDurable] != 1 || st[audit.StateRejected] != 1 {
			t.Fatalf("states = %v", st)
		}
	})
}

func TestDetector_IntegrityFailure(t *testing.T) {
	corrupt := runOK(obj{"documentId": "doc_1", "journalStatus": "journal_corrupt", "writeBasis": "w"}, ledger(getDoc, "succeeded"))
	get := code(`async () => await documents.getDocument({ documentId: "doc_1" })`)
	t.Run("e_integrity", func(t *testing.T) {
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), toolErr("E_INTEGRITY", "History sequence audit failed at r1"))
		s.want(t, audit.KindIntegrityFailure)
	})
	t.Run("journal_corrupt_read_twice", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", get, corrupt)
		s.call(time.Minute, on, "s2", "run", get, corrupt)
		s.want(t, audit.KindIntegrityFailure)
	})
	t.Run("healthy_journal", func(t *testing.T) {
		s := &scenario{}
		s.call(0, on, "s1", "run", get, runOK(obj{"documentId": "doc_1", "journalStatus": "healthy"}, ledger(getDoc, "succeeded")))
		s.want(t)
	})
}

// TestDetector_OutOfOrder shuffles every scenario's calls within the
// lateness bound and expects the findings of the ordered capture.
func TestDetector_OutOfOrder(t *testing.T) {
	s := &scenario{}
	s.call(0, tg, "s1", "gram_patch", patch("a.gram", 5, "r1", "x"), "timeout")
	s.call(2*sec, tg, "s1", "gram_read", read("a.gram"), okDoc("a.gram", 6, "synced"))
	s.call(4*sec, tg, "s1", "gram_patch", patch("a.gram", 6, "r2", "x"), okDoc("a.gram", 7, "synced"))
	s.call(6*sec, tg, "s2", "gram_patch", patch("b.gram", 1, "r3", "y"), toolErr("COMMIT_UNKNOWN", "x"))
	s.call(8*sec, tg, "s2", "gram_patch", patch("b.gram", 1, "r4", "y"), toolErr("STALE_REVISION", "Accepted revision or hash changed"))
	ordered := run(t, s.ndjson(true))
	checkKinds(t, ordered.findings, []audit.Kind{audit.KindDoubleAppliedWrite, audit.KindUnsafeRetry, audit.KindUnverifiedWrite})
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		lines := append([]map[string]any(nil), s.lines...)
		rng.Shuffle(len(lines), func(a, b int) { lines[a], lines[b] = lines[b], lines[a] })
		shuffled := &scenario{lines: lines}
		got := run(t, shuffled.ndjson(true))
		if fmt.Sprint(got.findings) != fmt.Sprint(ordered.findings) {
			t.Fatalf("shuffle %d: findings differ:\n%v\nwant\n%v", i, got.findings, ordered.findings)
		}
	}
}

// TestDetector_DuplicateObservation feeds every call twice (a client-side
// and a server-side observer) and expects the findings and counts of one.
func TestDetector_DuplicateObservation(t *testing.T) {
	s := &scenario{}
	s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
	s.call(time.Minute, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), okDoc("a.gram", 2, "synced"))
	once := s.ndjson(true)
	var twice []byte
	for _, l := range bytes.SplitAfter(once, []byte("\n")) {
		twice = append(twice, l...)
		var m map[string]any
		if json.Unmarshal(l, &m) == nil {
			// The second observer's clock is 300 ms off.
			tm, _ := time.Parse(time.RFC3339Nano, m["time"].(string))
			m["time"] = tm.Add(300 * time.Millisecond).Format(time.RFC3339Nano)
			j, _ := json.Marshal(m)
			twice = append(append(twice, j...), '\n')
		}
	}
	got := run(t, twice)
	checkKinds(t, got.findings, nil)
	if len(got.calls) != 3 {
		t.Fatalf("calls = %d, want 3", len(got.calls))
	}
}

// TestDetector_DuplicateObservationKeepsResponse: a client that timed out
// and the server that answered observe one exchange; the answer counts.
func TestDetector_DuplicateObservationKeepsResponse(t *testing.T) {
	s := &scenario{}
	s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), "timeout")
	s.lines = append(s.lines, map[string]any{})
	for k, v := range s.lines[0] {
		s.lines[1][k] = v
	}
	delete(s.lines[1], "transport_error")
	s.lines[1]["response"] = obj{"jsonrpc": "2.0", "id": 1, "result": okDoc("a.gram", 2, "synced")}
	got := run(t, s.ndjson(true))
	checkKinds(t, got.findings, nil)
	if st := got.states(); st[audit.StateDurable] != 1 {
		t.Fatalf("states = %v", st)
	}
}

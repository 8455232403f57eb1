package demo

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect returns a go-sdk client session on s over in-memory transports.
func connect(t *testing.T, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := s.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// result is a tool answer as a map: the structured content, with "isError".
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	m := map[string]any{}
	json.Unmarshal(b, &m)
	m["isError"] = res.IsError
	return m
}

func code(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		return e["code"].(string)
	}
	if s, ok := m["error"].(string); ok {
		return s
	}
	return ""
}

func TestThegram(t *testing.T) {
	cs := connect(t, NewThegram(nil).Server())
	f := func(tool string, args map[string]any, wantCode string) map[string]any {
		t.Helper()
		m := call(t, cs, tool, args)
		if got := code(m); got != wantCode || (wantCode != "") != m["isError"].(bool) {
			t.Fatalf("%s %v: code %q (%v), want %q", tool, args, got, m, wantCode)
		}
		return m
	}
	f("gram_create", map[string]any{"path": "team/a.gram", "content": "x"}, "")
	f("gram_create", map[string]any{"path": "team/a.gram", "content": "x"}, "STALE_REVISION")
	f("gram_create", map[string]any{"path": "team/b.gram", "request_id": "r"}, "E_ARGUMENT")
	f("gram_create", map[string]any{"path": "nowhere/b.gram"}, "E_PATH")
	f("gram_create", map[string]any{"path": "/etc/b.gram"}, "E_PATH")
	f("gram_create", map[string]any{"path": "team/sub/b.gram"}, "E_PATH")
	f("gram_create", map[string]any{"path": "archive/b.gram"}, "E_READ_ONLY")
	id := f("gram_read", map[string]any{"path": "team/a.gram"}, "")
	if id["rev"] != 1.0 || len(id["hash"].(string)) != 12 || id["sync"].(map[string]any)["state"] != "synced" || id["path"] != "team/a.gram" {
		t.Fatalf("read %v", id)
	}
	ops := []any{map[string]any{"op": "append_block", "target": "h0-1", "text": "t"}}
	patch := map[string]any{"path": "team/a.gram", "base_revision": 1, "expected_hash": id["hash"], "request_id": "req-1", "operations": ops}
	r := f("gram_patch", patch, "")
	if r["rev"] != 2.0 || r["replayed"] != false || r["request_id"] != "req-1" {
		t.Fatalf("patch %v", r)
	}
	// The same request again is a replay of the receipt.
	if r2 := f("gram_patch", patch, ""); r2["replayed"] != true || r2["rev"] != 2.0 || r2["hash"] != r["hash"] {
		t.Fatalf("replay %v", r2)
	}
	// Another intent under the same id.
	other := clonePatch(patch, 2, r["hash"], "req-1")
	f("gram_patch", other, "E_REQUEST_REUSE")
	// The old base under a new id: CAS.
	f("gram_patch", clonePatch(patch, 1, id["hash"], "req-2"), "STALE_REVISION")
	f("gram_patch", clonePatch(patch, 2, r["hash"], ""), "E_REQUEST_ID")
	noBase := clonePatch(patch, 2, r["hash"], "req-3")
	delete(noBase, "base_revision")
	f("gram_patch", noBase, "E_CAS_REQUIRED")
	bad := clonePatch(patch, 2, r["hash"], "req-4")
	bad["operations"] = []any{map[string]any{"op": "append_block", "target": "section-1", "text": "t"}}
	f("gram_patch", bad, "E_ARGUMENT")
	bad["operations"] = []any{}
	f("gram_patch", bad, "E_ARGUMENT")
	if p := f("gram_projects", map[string]any{}, ""); len(p["projects"].([]any)) != len(thegramMounts) {
		t.Fatalf("projects %v", p)
	}
}

func TestThegram_SyncAndFaults(t *testing.T) {
	inj := NewInjector(0, 1)
	inj.Plan(FaultNone, FaultUncertain)
	g := NewThegram(inj)
	g.syncDelay = 100 * time.Millisecond
	cs := connect(t, g.Server())
	c := call(t, cs, "gram_create", map[string]any{"path": "gdrive-shared/a.gram", "content": "x"})
	if c["sync"].(map[string]any)["state"] != "pending" {
		t.Fatalf("create on a pending-sync mount: %v", c)
	}
	time.Sleep(150 * time.Millisecond)
	id := call(t, cs, "gram_read", map[string]any{"path": "gdrive-shared/a.gram"})
	if id["sync"].(map[string]any)["state"] != "synced" {
		t.Fatalf("read after the sync delay: %v", id)
	}
	patch := map[string]any{"path": "gdrive-shared/a.gram", "base_revision": 1, "expected_hash": id["hash"], "request_id": "r",
		"operations": []any{map[string]any{"op": "set_field", "target": "h1-2", "text": "v"}}}
	if got := code(call(t, cs, "gram_patch", patch)); got != "COMMIT_UNKNOWN" {
		t.Fatalf("planned COMMIT_UNKNOWN: %q", got)
	}
	// It was published: the replay returns its receipt.
	if r := call(t, cs, "gram_patch", patch); r["replayed"] != true || r["rev"] != 2.0 {
		t.Fatalf("replay after COMMIT_UNKNOWN: %v", r)
	}
	if j := inj.Journal(); len(j) != 1 || j[0].Fault != FaultUncertain || !j[0].Applied || j[0].Target != "gdrive-shared/a.gram" {
		t.Fatalf("journal %+v", j)
	}
}

func run(t *testing.T, cs *mcp.ClientSession, code string) map[string]any {
	t.Helper()
	return call(t, cs, "run", map[string]any{"code": code})
}

func TestOddlynew(t *testing.T) {
	o := NewOddlynew(nil)
	// A lease no run of this test outlasts, ended below by the test: with
	// 100 ms, a loaded machine let it pass before the premature apply
	// (dm22).
	o.lease = time.Hour
	cs := connect(t, o.Server())
	cid := NewUUIDv7()
	create := `async () => await documents.createDocument({ creationId: "` + cid + `", title: "Plan", type: "note" })`
	r := run(t, cs, create)
	res := r["result"].(map[string]any)
	if res["action"] != "created" || !strings.HasPrefix(res["documentId"].(string), "doc_") {
		t.Fatalf("create %v", r)
	}
	id := res["documentId"].(string)
	if r2 := run(t, cs, create); r2["result"].(map[string]any)["action"] != "alreadyBootstrapped" || r2["result"].(map[string]any)["documentId"] != id {
		t.Fatalf("replay %v", r2)
	}
	if r3 := run(t, cs, strings.Replace(create, `"Plan"`, `"Other"`, 1)); !strings.HasPrefix(code(r3), "Existing document creation identity has incompatible input.") {
		t.Fatalf("incompatible replay %v", r3)
	}
	v4 := `async () => await documents.createDocument({ creationId: "6f1c2f8e-8f5e-4c1e-9a7b-2d0c1e3f4a5b", title: "x", type: "note" })`
	if r4 := run(t, cs, v4); !strings.Contains(code(r4), "UUID version 7") {
		t.Fatalf("v4 creationId %v", r4)
	}
	get := `async () => await documents.getDocument({ documentId: "` + id + `" })`
	d := run(t, cs, get)["result"].(map[string]any)
	wb := d["writeBasis"].(string)
	edit := `async () => await documents.editDocument({ documentId: "` + id + `", writeBasis: "` + wb + `", edits: [{ op: "appendParagraph", text: "x" }] })`
	e := run(t, cs, edit)
	if e["result"].(map[string]any)["writeConfirmed"] != true || e["result"].(map[string]any)["revision"] != 2.0 {
		t.Fatalf("edit %v", e)
	}
	calls := e["calls"].([]any)
	if len(calls) != 1 || calls[0].(map[string]any)["tool"] != "documents.editDocument" || calls[0].(map[string]any)["outcome"] != "succeeded" {
		t.Fatalf("ledger %v", calls)
	}
	// Not idempotent: the same writeBasis again is stale.
	if s := run(t, cs, edit); code(s) != "stale_live_revision" || s["outcomes"] == nil {
		t.Fatalf("stale edit %v", s)
	}
	if s := run(t, cs, strings.Replace(edit, wb, "made-up", 1)); !strings.HasPrefix(code(s), "invalid_write_basis") {
		t.Fatalf("invented basis %v", s)
	}
	// A handled rejection does not fail the run.
	handled := `async () => { try { await documents.editDocument({ documentId: "` + id + `", writeBasis: "wb_00000000000000000000", edits: [] }) } catch (e) { return { caught: e.message } } }`
	if h := run(t, cs, handled); h["isError"] != false || h["calls"].([]any)[0].(map[string]any)["outcome"] != "failed_but_handled" {
		t.Fatalf("handled %v", h)
	}
	if s := run(t, cs, `async () => { await sleep(40000); return 1 }`); !strings.HasPrefix(code(s), "Execution timed out") {
		t.Fatalf("sleep past the budget %v", s)
	}
	if s := run(t, cs, `async () => { for (let i = 0; i < 70; i++) await ids.mintOperationIds({ count: 1 }) }`); !strings.HasPrefix(code(s), "Codemode provider call budget exceeded: 65 calls") {
		t.Fatalf("budget %v", s)
	}
	if s := call(t, cs, "run", map[string]any{"code": "async () => 1", "timeout": 5}); !strings.HasPrefix(code(s), "Unknown parameter timeout") {
		t.Fatalf("unknown parameter %v", s)
	}
	// Journal corruption and its repair.
	o.CorruptJournal(id)
	d = run(t, cs, get)["result"].(map[string]any)
	if d["journalStatus"] != "journal_corrupt" {
		t.Fatalf("corrupt read %v", d)
	}
	repair := `async () => await documents.repairDocumentJournal({ documentId: "` + id + `", writeBasis: "` + d["writeBasis"].(string) + `", acceptDiscardingUnpersistedState: true })`
	if rp := run(t, cs, repair); rp["result"].(map[string]any)["journalStatus"] != "repaired" {
		t.Fatalf("repair %v", rp)
	}
	if rp := run(t, cs, repair); !strings.Contains(code(rp), "stale_live_revision") {
		t.Fatalf("repair with the old basis %v", rp)
	}
	// A copy: plan, apply (applying until retryAfter), apply again.
	copyID := NewUUIDv7()
	plan := run(t, cs, `async () => await organizations.planDocumentCopy({ copyId: "`+copyID+`", sourceDocumentId: "`+id+`", destinationOrganizationId: "org_b" })`)["result"].(map[string]any)
	if plan["state"] != "ready" || plan["nextAction"] != "apply" {
		t.Fatalf("plan %v", plan)
	}
	apply := `async () => await organizations.applyDocumentCopy({ operationId: "` + plan["operationId"].(string) + `", planToken: "` + plan["planToken"].(string) + `" })`
	a1 := run(t, cs, apply)["result"].(map[string]any)
	if a1["state"] != "applying" || a1["retryAfter"] == nil || a1["nextAction"] != "wait_then_retry_apply" {
		t.Fatalf("apply %v", a1)
	}
	if a2 := run(t, cs, apply)["result"].(map[string]any); a2["state"] != "applying" || a2["retryAfter"] != a1["retryAfter"] {
		t.Fatalf("premature apply %v", a2)
	}
	o.mu.Lock()
	o.ops[plan["operationId"].(string)].retryAfter = time.Now().Add(-time.Millisecond)
	o.mu.Unlock()
	if a3 := run(t, cs, apply)["result"].(map[string]any); a3["state"] != "completed" || a3["destinationDocumentId"] == nil {
		t.Fatalf("apply after retryAfter %v", a3)
	}
	if s := run(t, cs, strings.Replace(apply, plan["planToken"].(string), "pt_0000", 1)); !strings.HasPrefix(code(s), "planToken does not match") {
		t.Fatalf("wrong token %v", s)
	}
}

func TestOddlynew_Faults(t *testing.T) {
	inj := NewInjector(0, 1)
	o := NewOddlynew(inj)
	cs := connect(t, o.Server())
	inj.Plan(FaultNone, FaultTimeoutAfter, FaultUncertain)
	r := run(t, cs, `async () => await documents.createDocument({ title: "T", type: "note" })`)
	id := r["result"].(map[string]any)["documentId"].(string)
	edit := "async () => {\n const d = await documents.getDocument({ documentId: \"" + id + "\" });\n return await documents.editDocument({ documentId: \"" + id + "\", writeBasis: d.writeBasis, edits: [] });\n}"
	// Timed out after the write: the ledger keeps it as succeeded, with its value.
	s := run(t, cs, edit)
	outs := s["outcomes"].([]any)
	if !strings.HasPrefix(code(s), "Execution timed out") || outs[0].(map[string]any)["tool"] != "documents.editDocument" ||
		outs[0].(map[string]any)["outcome"] != "succeeded" || outs[0].(map[string]any)["value"] == nil {
		t.Fatalf("timeout after the write %v", s)
	}
	// in_flight_unknown: no outcome, no value.
	s = run(t, cs, edit)
	outs = s["outcomes"].([]any)
	if outs[0].(map[string]any)["outcome"] != "in_flight_unknown" || outs[0].(map[string]any)["value"] != nil {
		t.Fatalf("in flight %v", s)
	}
	d := run(t, cs, `async () => await documents.getDocument({ documentId: "`+id+`" })`)["result"].(map[string]any)
	if d["revision"] != 3.0 {
		t.Fatalf("both faulted edits were applied (plan applies uncertain writes): revision %v", d["revision"])
	}
}

func TestLoseLines(t *testing.T) {
	var out strings.Builder
	l := &loseLines{w: &out}
	l.Write([]byte(`{"a":1}` + "\n" + `{"_meta":{"` + LoseMarker + `":true}}`))
	l.Write([]byte("\n{\"b\":"))
	l.Write([]byte("2}\n"))
	if out.String() != "{\"a\":1}\n{\"b\":2}\n" {
		t.Fatalf("%q", out.String())
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sent is one tools/call the agent made, as the agent saw it.
type sent struct {
	Path    string `json:"path"` // otel, proxy, wrap
	Server  string `json:"server"`
	Session string `json:"session"`
	Tool    string `json:"tool"`
	Outcome string `json:"outcome"` // ok, tool_error, rpc_error, timeout
}

// caller makes one session's tool calls with a deadline each.
type caller struct {
	cs       *mcp.ClientSession
	server   string
	session  string
	path     string
	deadline time.Duration
	pause    time.Duration
	log      func(sent)
}

// call makes one tools/call; sc is the structured content (nil on an
// error or no answer).
func (c *caller) call(tool string, args map[string]any) (sc map[string]any, isErr bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
	defer cancel()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	out := "ok"
	switch {
	case err != nil && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline")):
		out = "timeout"
	case err != nil:
		out = "rpc_error"
	case res.IsError:
		out = "tool_error"
	}
	c.log(sent{Path: c.path, Server: c.server, Session: c.session, Tool: tool, Outcome: out})
	time.Sleep(c.pause)
	if err != nil {
		return nil, false, err
	}
	if m, ok := res.StructuredContent.(map[string]any); ok {
		sc = m
	} else if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &sc)
	}
	return sc, res.IsError, nil
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

// thegramScenarios are the sessions of one Thegram round, each making one of
// the documented failures (or none), named for the finding it should give.
var thegramScenarios = []struct {
	name string
	run  func(c *caller, u string)
}{
	{"normal", func(c *caller, u string) {
		p := "team/ok-" + u + ".gram"
		c.call("gram_projects", map[string]any{})
		c.call("gram_create", map[string]any{"path": p, "content": "# notes"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-ok-"+u, "note "+u))
		c.call("gram_read", map[string]any{"path": p})
	}},
	{"commit_unknown_replayed", func(c *caller, u string) {
		p := "team/cu-r" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# cu"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		a := patch(p, d, "rq-cur-"+u, "cu "+u)
		c.call("gram_patch", a)
		c.call("gram_patch", a)
	}},
	{"commit_unknown_abandoned", func(c *caller, u string) {
		p := "team/cu-a" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# cu"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-cua-"+u, "cu "+u))
	}},
	{"timeout_reread_new_id", func(c *caller, u string) { // double_applied_write
		p := "team/to-d" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# to"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-tod1-"+u, "to "+u))
		d2, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d2, "rq-tod2-"+u, "to "+u))
	}},
	{"timeout_replayed", func(c *caller, u string) { // resolved
		p := "team/to-r" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# to"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		a := patch(p, d, "rq-tor-"+u, "to "+u)
		c.call("gram_patch", a)
		c.call("gram_patch", a)
	}},
	{"timeout_blind_new_id", func(c *caller, u string) { // unsafe_retry
		p := "team/to-b" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# to"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-tob1-"+u, "to "+u))
		c.call("gram_patch", patch(p, d, "rq-tob2-"+u, "to "+u))
	}},
	{"request_id_reuse", func(c *caller, u string) {
		p := "team/ok-q" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# q"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-reuse-"+u, "first "+u))
		d2, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d2, "rq-reuse-"+u, "second "+u))
	}},
	{"sync_pending_never", func(c *caller, u string) { // unverified sync_not_confirmed
		p := "gdrive/ok-s" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# s"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-sync-"+u, "sync "+u))
	}},
	{"sync_pending_read", func(c *caller, u string) { // durable
		p := "gdrive/ok-t" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# t"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-synt-"+u, "sync "+u))
		c.call("gram_read", map[string]any{"path": p})
	}},
	{"argument_wasted", func(c *caller, u string) {
		p := "team/ok-w" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# w"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		a := patch(p, d, "rq-arg-"+u, "w "+u)
		a["mode"] = "fast"
		c.call("gram_patch", a)
		c.call("gram_patch", a)
	}},
	{"auth_wasted", func(c *caller, u string) {
		p := "gdrive/au-" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# au"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		a := patch(p, d, "rq-au-"+u, "au "+u)
		c.call("gram_patch", a)
		c.call("gram_patch", a)
	}},
	{"integrity", func(c *caller, u string) {
		p := "team/ig-" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# ig"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-ig-"+u, "ig "+u))
	}},
	{"storage_error_read", func(c *caller, u string) { // resolved, then a new patch
		p := "team/st-r" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# st"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-str1-"+u, "st "+u))
		d2, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d2, "rq-str2-"+u, "st "+u))
	}},
	{"storage_error_abandoned", func(c *caller, u string) { // unverified storage_error
		p := "team/st-a" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# st"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-sta-"+u, "st "+u))
	}},
	{"conflict_rebased", func(c *caller, u string) {
		p := "team/cx-" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# cx"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-cx1-"+u, "cx "+u))
		d2, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d2, "rq-cx2-"+u, "cx "+u))
	}},
	{"rpc_internal_then_read", func(c *caller, u string) { // -32603, resolved by a read
		p := "team/ie-" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# ie"})
		d, _, _ := c.call("gram_read", map[string]any{"path": p})
		c.call("gram_patch", patch(p, d, "rq-ie-"+u, "ie "+u))
		c.call("gram_read", map[string]any{"path": p})
	}},
	{"app_not_running", func(c *caller, u string) { // -32000 E_APP_NOT_RUNNING, waited, retried
		p := "team/an-" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# an"})
		c.call("gram_read", map[string]any{"path": p})
		time.Sleep(time.Second)
		c.call("gram_read", map[string]any{"path": p})
	}},
	{"stale_cursor_refreshed", func(c *caller, u string) { // refresh_and_retry
		p := "team/ok-c" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# c"})
		c.call("gram_read", map[string]any{"path": p, "cursor": "cur-0"})
		c.call("gram_read", map[string]any{"path": p})
	}},
	{"create_timeout_recreate", func(c *caller, u string) { // uncertain create, re-created blind
		p := "team/tc-" + u + ".gram"
		c.call("gram_create", map[string]any{"path": p, "content": "# tc"})
		c.call("gram_create", map[string]any{"path": p, "content": "# tc"})
		c.call("gram_read", map[string]any{"path": p})
	}},
}

func patch(path string, doc map[string]any, rid, text string) map[string]any {
	return map[string]any{"path": path, "base_revision": num(doc, "rev"), "expected_hash": doc["hash"], "request_id": rid,
		"operations": []any{map[string]any{"op": "append_block", "target": "h0-1", "text": text}}}
}

func uuid7(u string, n int) string {
	h := shortHash(u, fmt.Sprint(n))
	return fmt.Sprintf("019af3c2-%s-7%s-8%s-%s000000", h[:4], h[4:7], h[7:10], h[:6])
}

func run(c *caller, code string) map[string]any {
	sc, _, _ := c.call("run", map[string]any{"code": code})
	return sc
}

func result(sc map[string]any) map[string]any {
	m, _ := sc["result"].(map[string]any)
	return m
}

func create(title, cid string) string {
	if cid == "" {
		return fmt.Sprintf(`async () => await documents.createDocument({ title: "%s", type: "note" })`, title)
	}
	return fmt.Sprintf(`async () => await documents.createDocument({ creationId: "%s", title: "%s", type: "note" })`, cid, title)
}

func getDoc(id string) string {
	return fmt.Sprintf(`async () => await documents.getDocument({ documentId: "%s" })`, id)
}

func edit(id, wb, text string) string {
	return fmt.Sprintf(`async () => await documents.editDocument({ documentId: "%s", writeBasis: "%s", edits: [{ op: "appendParagraph", text: "%s" }] })`, id, wb, text)
}

// editLive reads the document and edits it in one run, as the reference's
// double-apply example does: re-sent unchanged it applies again.
func editLive(id, text string) string {
	return fmt.Sprintf("async () => {\n  const d = await documents.getDocument({ documentId: \"%s\" });\n  return await documents.editDocument({ documentId: \"%s\", writeBasis: d.writeBasis,\n    edits: [{ op: \"appendParagraph\", text: \"%s\" }] });\n}", id, id, text)
}

// newDoc creates a document titled title with a fresh creationId and
// returns its id and write basis.
func newDoc(c *caller, u, title string) (id, wb string) {
	r := result(run(c, create(title, uuid7(u+title, 0))))
	id, _ = r["documentId"].(string)
	g := result(run(c, getDoc(id)))
	wb, _ = g["writeBasis"].(string)
	return id, wb
}

var oddlynewScenarios = []struct {
	name string
	run  func(c *caller, u string)
}{
	{"normal", func(c *caller, u string) {
		c.call("guide", map[string]any{"question": "how do I edit a document?"})
		id, wb := newDoc(c, u, "ok-n"+u)
		run(c, edit(id, wb, "hello "+u))
		run(c, getDoc(id))
	}},
	{"create_replayed", func(c *caller, u string) { // alreadyBootstrapped
		cid := uuid7(u, 1)
		run(c, create("ok-c"+u, cid))
		run(c, create("ok-c"+u, cid))
	}},
	{"create_timeout_new_key", func(c *caller, u string) { // duplicate_create
		run(c, create("tc-c"+u, uuid7(u, 2)))
		run(c, create("tc-c"+u, uuid7(u, 3)))
	}},
	{"create_hang_no_key", func(c *caller, u string) { // no answer, re-created without a key
		run(c, create("hc-c"+u, ""))
		run(c, create("hc-c"+u, ""))
	}},
	{"creation_reuse", func(c *caller, u string) { // request_id_reuse
		cid := uuid7(u, 4)
		run(c, create("ok-r"+u, cid))
		run(c, create("ok-r2"+u, cid))
	}},
	{"edit_timeout_double", func(c *caller, u string) { // double_applied_write
		id, _ := newDoc(c, u, "to-e"+u)
		code := editLive(id, "approved "+u)
		run(c, code)
		run(c, code)
	}},
	{"edit_in_flight_never", func(c *caller, u string) { // unverified in_flight_unknown
		id, wb := newDoc(c, u, "if-"+u)
		run(c, edit(id, wb, "if "+u))
	}},
	{"edit_in_flight_blind", func(c *caller, u string) { // unsafe_retry
		id, wb := newDoc(c, u, "if-b"+u)
		run(c, edit(id, wb, "if "+u))
		run(c, edit(id, wb, "if "+u))
	}},
	{"edit_hang_reread", func(c *caller, u string) { // no response, resolved by a read
		id, wb := newDoc(c, u, "hg-e"+u)
		run(c, edit(id, wb, "hg "+u))
		run(c, getDoc(id))
	}},
	{"stale_rebased", func(c *caller, u string) {
		id, wb := newDoc(c, u, "ok-s"+u)
		run(c, edit(id, wb, "one "+u))
		run(c, edit(id, wb, "two "+u)) // stale_live_revision
		g := result(run(c, getDoc(id)))
		wb2, _ := g["writeBasis"].(string)
		run(c, edit(id, wb2, "two "+u))
	}},
	{"invalid_basis_wasted", func(c *caller, u string) {
		id, _ := newDoc(c, u, "ok-i"+u)
		run(c, edit(id, "made-up", "x "+u))
		run(c, edit(id, "made-up", "x "+u))
	}},
	{"journal_corrupt", func(c *caller, u string) { // integrity_failure
		id, _ := newDoc(c, u, "jc-"+u)
		run(c, getDoc(id))
	}},
	{"save_blocked", func(c *caller, u string) { // unverified save_blocked
		id, wb := newDoc(c, u, "sb-"+u)
		run(c, edit(id, wb, "big "+u))
	}},
	{"copy_blocked_replay", func(c *caller, u string) { // wasted_retry
		id, _ := newDoc(c, u, "ar-"+u)
		code := fmt.Sprintf(`async () => await organizations.planDocumentCopy({ copyId: "%s", sourceDocumentId: "%s", destinationOrganizationId: "org_o48" })`, uuid7(u, 5), id)
		run(c, code)
		run(c, code)
	}},
	{"copy_premature", func(c *caller, u string) { // premature_retry
		id, _ := newDoc(c, u, "ok-p"+u)
		r := result(run(c, fmt.Sprintf(`async () => await organizations.planDocumentCopy({ copyId: "%s", sourceDocumentId: "%s", destinationOrganizationId: "org_o48" })`, uuid7(u, 6), id)))
		apply := fmt.Sprintf(`async () => await organizations.applyDocumentCopy({ operationId: "%v", planToken: "%v" })`, r["operationId"], r["planToken"])
		run(c, apply)
		run(c, apply)
	}},
	{"unknown_method_wasted", func(c *caller, u string) {
		code := fmt.Sprintf(`async () => await documents.frobnicate({ documentId: "doc_%s" })`, u)
		run(c, code)
		run(c, code)
	}},
	{"budget_exceeded", func(c *caller, u string) {
		id, _ := newDoc(c, u, "ok-b"+u)
		var b strings.Builder
		b.WriteString("async () => {\n")
		for i := 0; i < 65; i++ {
			fmt.Fprintf(&b, "  await documents.getDocument({ documentId: \"%s\" });\n", id)
		}
		b.WriteString("}")
		run(c, b.String())
	}},
}

// sentLog collects what the agents sent, safe for concurrent use.
type sentLog struct {
	mu  sync.Mutex
	all []sent
}

func (l *sentLog) add(s sent) {
	l.mu.Lock()
	l.all = append(l.all, s)
	l.mu.Unlock()
}

package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Run limits of the reference document.
const (
	oddMaxCalls    = 64
	oddBudget      = 30 * time.Second
	oddMaxCode     = 32 << 10
	oddMaxLogs     = 50
	oddMaxLogBytes = 4 << 10
	// oddCPU bounds a run's real time: a busy loop ends as a timeout.
	oddCPU = 2 * time.Second
)

// oddDoc is one Oddlynew document.
type oddDoc struct {
	id, title, typ, creator string
	revision                int
	writeBasis              string
	blocks                  []string
	archived                bool
	archivedAt              string
	archivedBy              string
	journalCorrupt          bool
	creationID              string
}

// oddCopy is one copy operation: its plan and, once applied, its progress.
type oddCopy struct {
	copyID, operationID, planToken string
	source, sourceOrg, destOrg     string
	state                          string // blocked, ready, applying, completed
	blockers                       []map[string]any
	retryAfter                     time.Time
	destination                    string
}

// Oddlynew is the state of a simulated Oddlynew workspace. It is safe for
// concurrent use.
type Oddlynew struct {
	faults *Injector
	// lease is how long an applying copy asks the caller to wait.
	lease time.Duration

	mu        sync.Mutex
	docs      map[string]*oddDoc
	creations map[string]string // creationId to documentId
	copies    map[string]*oddCopy
	ops       map[string]*oddCopy
}

// NewOddlynew returns an empty workspace; faults may be nil.
func NewOddlynew(faults *Injector) *Oddlynew {
	return &Oddlynew{faults: faults, lease: 3 * time.Second, docs: map[string]*oddDoc{},
		creations: map[string]string{}, copies: map[string]*oddCopy{}, ops: map[string]*oddCopy{}}
}

func newID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// NewUUIDv7 returns a UUID version 7, as ids.mintOperationIds does.
func NewUUIDv7() string {
	var b [16]byte
	rand.Read(b[:])
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = 0x70 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Server returns an MCP server over the workspace, with the tools guide
// and run.
func (o *Oddlynew) Server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "oddlynew-demo", Version: "1.0.0"}, nil)
	s.AddTool(&mcp.Tool{Name: "guide", Description: "Ask how to use the namespaces; read-only.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}}}`)}, o.guide)
	s.AddTool(&mcp.Tool{Name: "run", Description: "Run JavaScript (an async arrow function) against documents.*, organizations.* and ids.*.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`)}, o.run)
	return s
}

func (o *Oddlynew) guide(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Read current state, decide, write once with the right key, and verify. " +
		"createDocument takes a creationId (UUIDv7) to replay safely; editDocument needs the writeBasis of a live getDocument and is not idempotent; " +
		"applyDocumentCopy is retried with its operationId and planToken, never before retryAfter."}}}, nil
}

// runErr is a failed run: the message an envelope carries.
func runFailure(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"error": msg, "logs": []any{}},
		Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// ledgerRow is one provider call of a run.
type ledgerRow struct {
	seq     int
	tool    string
	access  string
	outcome string
	value   any
	hasVal  bool
}

// execution is one run in progress.
type execution struct {
	o       *Oddlynew
	ctx     context.Context
	vm      *goja.Runtime
	calls   []*ledgerRow
	logs    []string
	virtual time.Duration
	// fault of the run's first write, drawn when it is called.
	faultDrawn bool
	fault      Fault
	// stop is set when the run must end now: budget, timeout, fault.
	stop string
}

func (o *Oddlynew) run(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
		return runFailure("Arguments must be an object. Accepted parameters: code"), nil
	}
	for k := range args {
		if k != "code" {
			return runFailure(fmt.Sprintf("Unknown parameter %s. Accepted parameters: code", k)), nil
		}
	}
	var code string
	if json.Unmarshal(args["code"], &code) != nil || strings.TrimSpace(code) == "" {
		return runFailure("Missing parameter code. Accepted parameters: code"), nil
	}
	if len(code) > oddMaxCode {
		return runFailure(fmt.Sprintf("Code is %d bytes, over the 32 KiB limit of a run: split the work", len(code))), nil
	}
	ex := &execution{o: o, ctx: ctx, vm: goja.New()}
	res := ex.execute(code)
	switch ex.fault {
	case FaultTimeoutBefore:
		o.faults.hold(ctx)
		res = runFailure("Codemode executor timed out after 30000 ms")
		res.Meta = mcp.Meta{LoseMarker: true}
		return res, nil
	case FaultLoseResponse:
		res.Meta = mcp.Meta{LoseMarker: true}
	}
	return res, nil
}

// execute runs the code and builds the envelope.
func (ex *execution) execute(code string) *mcp.CallToolResult {
	vm := ex.vm
	vm.SetFieldNameMapper(goja.TagFieldNameMapper("json", true))
	ex.install()
	timer := time.AfterFunc(oddCPU, func() { vm.Interrupt("Execution timed out") })
	defer timer.Stop()
	v, err := vm.RunString("(" + code + "\n)")
	if err == nil {
		if fn, ok := goja.AssertFunction(v); ok {
			v, err = fn(goja.Undefined())
		}
	}
	var result any
	msg := ""
	switch {
	case ex.stop != "":
		msg = ex.stop
	case err != nil:
		var ie *goja.InterruptedError
		if errors.As(err, &ie) {
			msg = "Execution timed out"
		} else {
			msg = jsMessage(err)
		}
	default:
		if p, ok := v.Export().(*goja.Promise); ok {
			switch p.State() {
			case goja.PromiseStateFulfilled:
				result = exportValue(p.Result())
			case goja.PromiseStateRejected:
				msg = reasonMessage(p.Result())
			default:
				msg = "Execution timed out"
			}
		} else {
			result = exportValue(v)
		}
		if ex.stop != "" {
			msg = ex.stop
		}
	}
	if msg == "Execution timed out" {
		for _, c := range ex.calls {
			if c.outcome == "" {
				c.outcome = "in_flight_unknown"
			}
		}
		msg = "Execution timed out. The provider-call ledger lists what ran; read current state before retrying a write."
	}
	env := map[string]any{"logs": ex.logsOut(), "calls": ex.ledger()}
	if msg != "" {
		env["error"] = msg
		env["outcomes"] = ex.outcomes()
		return &mcp.CallToolResult{IsError: true, StructuredContent: env, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
	}
	env["result"] = result
	text, _ := json.Marshal(result)
	return &mcp.CallToolResult{StructuredContent: env, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
}

func exportValue(v goja.Value) any {
	if v == nil || goja.IsUndefined(v) {
		return nil
	}
	return v.Export()
}

func jsMessage(err error) string {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return reasonMessage(ex.Value())
	}
	return err.Error()
}

// reasonMessage is the message of a rejection reason or thrown value.
func reasonMessage(v goja.Value) string {
	if obj, ok := v.(*goja.Object); ok {
		if m := obj.Get("message"); m != nil && !goja.IsUndefined(m) {
			return m.String()
		}
	}
	return v.String()
}

func (ex *execution) logsOut() []any {
	out := []any{}
	for _, l := range ex.logs {
		out = append(out, l)
	}
	return out
}

// ledger aggregates the calls by tool and outcome, in order of appearance.
func (ex *execution) ledger() []any {
	type key struct{ tool, outcome string }
	var order []key
	counts := map[key]int{}
	for _, c := range ex.calls {
		k := key{c.tool, c.outcome}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	out := []any{}
	for _, k := range order {
		out = append(out, map[string]any{"tool": k.tool, "outcome": k.outcome, "count": counts[k]})
	}
	return out
}

// outcomes lists every call of a failed run, write-capable calls first.
func (ex *execution) outcomes() []any {
	rows := append([]*ledgerRow(nil), ex.calls...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].access == "write" && rows[j].access != "write" })
	out := []any{}
	for _, c := range rows {
		m := map[string]any{"seq": c.seq, "tool": c.tool, "access": c.access, "outcome": c.outcome}
		if c.hasVal {
			m["value"] = c.value
		}
		out = append(out, m)
	}
	return out
}

// provider is one provider method.
type provider struct {
	access string
	fn     func(ex *execution, args map[string]any) (any, error)
	sig    string
}

// namespaces are the provider namespaces of a run, set in init because
// their methods quote them in errors.
var namespaces map[string]map[string]provider

func init() {
	namespaces = map[string]map[string]provider{
		"documents": {
			"getDocument":           {"read", (*execution).getDocument, "getDocument({ documentId, version? })"},
			"createDocument":        {"write", (*execution).createDocument, "createDocument({ title, type, creationId?, draft? })"},
			"editDocument":          {"write", (*execution).editDocument, "editDocument({ documentId, writeBasis, edits })"},
			"patchSettings":         {"write", (*execution).editDocument, "patchSettings({ documentId, writeBasis, settings })"},
			"patchDocumentEnvelope": {"write", (*execution).editDocument, "patchDocumentEnvelope({ documentId, writeBasis, envelope })"},
			"archiveDocument":       {"write", (*execution).archiveDocument, "archiveDocument({ documentId })"},
			"restoreDocument":       {"write", (*execution).restoreDocument, "restoreDocument({ documentId })"},
			"repairDocumentJournal": {"write", (*execution).repairJournal, "repairDocumentJournal({ documentId, writeBasis, acceptDiscardingUnpersistedState })"},
		},
		"organizations": {
			"planDocumentCopy":       {"write", (*execution).planCopy, "planDocumentCopy({ copyId, sourceDocumentId, destinationOrganizationId, sourceOrganizationId? })"},
			"applyDocumentCopy":      {"write", (*execution).applyCopy, "applyDocumentCopy({ operationId, planToken })"},
			"getDocumentCopyReceipt": {"read", (*execution).copyReceipt, "getDocumentCopyReceipt({ operationId })"},
		},
		"ids": {
			"mintOperationIds": {"read", (*execution).mintIDs, "mintOperationIds({ count })"},
		},
	}
}

// install sets the namespaces, console.log and sleep on the runtime.
func (ex *execution) install() {
	vm := ex.vm
	for ns, methods := range namespaces {
		obj := vm.NewObject()
		for name, p := range methods {
			obj.Set(name, ex.method(ns+"."+name, p))
		}
		vm.Set(ns, obj)
	}
	console := vm.NewObject()
	console.Set("log", func(c goja.FunctionCall) goja.Value {
		if len(ex.logs) < oddMaxLogs {
			var parts []string
			for _, a := range c.Arguments {
				parts = append(parts, a.String())
			}
			l := strings.Join(parts, " ")
			if len(l) > oddMaxLogBytes {
				l = l[:oddMaxLogBytes]
			}
			ex.logs = append(ex.logs, l)
		}
		return goja.Undefined()
	})
	vm.Set("console", console)
	vm.Set("sleep", func(c goja.FunctionCall) goja.Value {
		p, resolve, _ := vm.NewPromise()
		ex.virtual += time.Duration(c.Argument(0).ToInteger()) * time.Millisecond
		if ex.virtual <= oddBudget {
			resolve(goja.Undefined())
		}
		// Past the budget the run is over: the promise never settles.
		return vm.ToValue(p)
	})
}

// method wraps a provider method: the ledger, the call budget and faults.
func (ex *execution) method(tool string, p provider) func(goja.FunctionCall) goja.Value {
	return func(c goja.FunctionCall) goja.Value {
		vm := ex.vm
		promise, resolve, reject := vm.NewPromise()
		if ex.stop != "" {
			return vm.ToValue(promise)
		}
		if len(ex.calls) >= oddMaxCalls {
			ex.stop = fmt.Sprintf("Codemode provider call budget exceeded: %d calls, limit %d calls per run.", len(ex.calls)+1, oddMaxCalls)
			vm.Interrupt(ex.stop)
			return vm.ToValue(promise)
		}
		row := &ledgerRow{seq: len(ex.calls) + 1, tool: tool, access: p.access}
		ex.calls = append(ex.calls, row)
		args := map[string]any{}
		if a := c.Argument(0); !goja.IsUndefined(a) && !goja.IsNull(a) {
			if m, ok := a.Export().(map[string]any); ok {
				args = m
			}
		}
		fault := FaultNone
		if p.access == "write" && !ex.faultDrawn {
			ex.faultDrawn = true
			fault = ex.o.faults.next(Faults)
			ex.fault = fault
		}
		target := firstString(args, "documentId", "creationId", "operationId", "copyId")
		switch fault {
		case FaultTimeoutBefore:
			// The host never answers: the client gives up first.
			ex.o.faults.record(Injected{Time: time.Now(), Server: "oddlynew", Tool: tool, Target: target, Fault: fault})
			ex.stop = "Execution timed out"
			return vm.ToValue(promise)
		case FaultUncertain:
			applied := ex.o.faults.coin()
			if applied {
				p.fn(ex, args)
			}
			ex.o.faults.record(Injected{Time: time.Now(), Server: "oddlynew", Tool: tool, Target: target, Fault: fault, Applied: applied})
			ex.stop = "Execution timed out"
			return vm.ToValue(promise)
		}
		v, err := p.fn(ex, args)
		if fault != FaultNone {
			ex.o.faults.record(Injected{Time: time.Now(), Server: "oddlynew", Tool: tool, Target: target, Fault: fault, Applied: err == nil})
		}
		if fault == FaultTimeoutAfter {
			// The write completed; then the run's budget ran out. The
			// ledger keeps the call as succeeded, with its value.
			ex.stop = "Execution timed out"
		}
		if err != nil {
			row.outcome = "failed_but_handled"
			reject(vm.NewGoError(err))
			return vm.ToValue(promise)
		}
		row.outcome, row.value, row.hasVal = "succeeded", v, true
		resolve(vm.ToValue(v))
		return vm.ToValue(promise)
	}
}

func firstString(args map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := args[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

func argString(args map[string]any, k string) string {
	s, _ := args[k].(string)
	return s
}

// signatureError is a parameter error that quotes the method's signature.
func signatureError(tool, format string, args ...any) error {
	sig := ""
	ns, name, _ := strings.Cut(tool, ".")
	if p, ok := namespaces[ns][name]; ok {
		sig = " Signature: " + ns + "." + p.sig
	}
	return fmt.Errorf(format+sig, args...)
}

func (ex *execution) getDocument(args map[string]any) (any, error) {
	id := argString(args, "documentId")
	if id == "" {
		return nil, signatureError("documents.getDocument", "Missing required parameter documentId.")
	}
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.docs[id]
	if d == nil {
		return map[string]any{"error": "not_found", "documentId": id, "message": "No document with this id is visible to you."}, nil
	}
	res := map[string]any{"documentId": d.id, "title": d.title, "type": d.typ, "revision": d.revision, "blocks": len(d.blocks),
		"archived": d.archived}
	if _, historical := args["version"]; !historical {
		res["writeBasis"] = d.writeBasis
	}
	if d.journalCorrupt {
		res["journalStatus"] = "journal_corrupt"
	}
	return res, nil
}

func (ex *execution) createDocument(args map[string]any) (any, error) {
	title, typ := argString(args, "title"), argString(args, "type")
	if title == "" || typ == "" {
		return nil, signatureError("documents.createDocument", "Missing required parameter %s.", map[bool]string{true: "title", false: "type"}[title == ""])
	}
	cid := argString(args, "creationId")
	if cid != "" {
		m := uuidRE.FindStringSubmatch(strings.ToLower(cid))
		if m == nil || m[1] != "7" {
			return nil, signatureError("documents.createDocument", "Invalid creationId: a UUID version 7 is required (call ids.mintOperationIds or generate a UUIDv7).")
		}
	}
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if cid != "" {
		if id, ok := o.creations[cid]; ok {
			d := o.docs[id]
			if d.title != title || d.typ != typ {
				return nil, errors.New("Existing document creation identity has incompatible input. Reuse a creationId only to retry the same create; mint a new UUIDv7 for a new document.")
			}
			return map[string]any{"documentId": d.id, "action": "alreadyBootstrapped", "title": d.title, "type": d.typ}, nil
		}
	}
	d := &oddDoc{id: newID("doc_", 8), title: title, typ: typ, revision: 1, writeBasis: newID("wb_", 10), creationID: cid}
	o.docs[d.id] = d
	if cid != "" {
		o.creations[cid] = d.id
	}
	return map[string]any{"documentId": d.id, "action": "created", "title": title, "type": typ}, nil
}

var writeBasisRE = regexp.MustCompile(`^wb_[0-9a-f]{20}$`)

// basis checks a write's documentId and writeBasis. o.mu must be held.
func (o *Oddlynew) basis(tool string, args map[string]any) (*oddDoc, error) {
	id, wb := argString(args, "documentId"), argString(args, "writeBasis")
	if id == "" {
		return nil, signatureError(tool, "Missing required parameter documentId.")
	}
	if !writeBasisRE.MatchString(wb) {
		return nil, errors.New("invalid_write_basis: Invalid document writeBasis. Call getDocument without a version and pass the returned writeBasis unchanged.")
	}
	d := o.docs[id]
	if d == nil {
		return nil, fmt.Errorf("document_not_found: no document %s", id)
	}
	if wb != d.writeBasis {
		return nil, errors.New("stale_live_revision")
	}
	return d, nil
}

func (ex *execution) editDocument(args map[string]any) (any, error) {
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.basis("documents.editDocument", args)
	if err != nil {
		return nil, err
	}
	if d.journalCorrupt {
		return nil, errors.New("journal_corrupt: the live journal is corrupt; read the document and call documents.repairDocumentJournal")
	}
	edits, _ := args["edits"].([]any)
	b, _ := json.Marshal(edits)
	d.blocks = append(d.blocks, string(b))
	d.revision++
	d.writeBasis = newID("wb_", 10)
	return map[string]any{"documentId": d.id, "writeConfirmed": true, "revision": d.revision, "saveState": "pending",
		"pendingProjections": []any{"search_projection"}}, nil
}

func (ex *execution) archiveDocument(args map[string]any) (any, error) {
	return ex.setArchived(args, true)
}

func (ex *execution) restoreDocument(args map[string]any) (any, error) {
	return ex.setArchived(args, false)
}

func (ex *execution) setArchived(args map[string]any, archived bool) (any, error) {
	id := argString(args, "documentId")
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.docs[id]
	if d == nil {
		return nil, fmt.Errorf("document_not_found: no document %s", id)
	}
	if archived && !d.archived {
		d.archived, d.archivedAt, d.archivedBy = true, time.Now().UTC().Format(time.RFC3339), "agent"
	}
	if !archived {
		d.archived = false
	}
	return map[string]any{"documentId": d.id, "archived": d.archived, "archivedAt": d.archivedAt, "archivedBy": d.archivedBy}, nil
}

func (ex *execution) repairJournal(args map[string]any) (any, error) {
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.basis("documents.repairDocumentJournal", args)
	if err != nil {
		return nil, err
	}
	if ok, _ := args["acceptDiscardingUnpersistedState"].(bool); !ok {
		return nil, signatureError("documents.repairDocumentJournal", "acceptDiscardingUnpersistedState must be true.")
	}
	if !d.journalCorrupt {
		return nil, errors.New("journal_healthy: the journal is not corrupt; repair refuses a healthy journal")
	}
	d.journalCorrupt = false
	d.writeBasis = newID("wb_", 10)
	return map[string]any{"documentId": d.id, "journalStatus": "repaired", "writeBasis": d.writeBasis, "revision": d.revision}, nil
}

func (ex *execution) mintIDs(args map[string]any) (any, error) {
	n := 1
	if c, ok := args["count"].(int64); ok && c > 0 && c <= 100 {
		n = int(c)
	}
	ids := []any{}
	for range n {
		ids = append(ids, NewUUIDv7())
	}
	return map[string]any{"operationIds": ids}, nil
}

func (c *oddCopy) receipt(now time.Time) map[string]any {
	r := map[string]any{"operationId": c.operationID, "copyId": c.copyID, "state": c.state, "failure": nil,
		"planToken": c.planToken, "blockers": c.blockers, "retryAfter": nil, "sourceDocumentId": c.source,
		"destinationOrganizationId": c.destOrg}
	switch c.state {
	case "blocked":
		r["nextAction"] = "create_new_plan"
	case "ready":
		r["nextAction"] = "apply"
	case "applying":
		r["nextAction"] = "wait_then_retry_apply"
		r["retryAfter"] = c.retryAfter.UTC().Format(time.RFC3339Nano)
	case "completed":
		r["nextAction"] = "done"
		r["destinationDocumentId"] = c.destination
	}
	return r
}

func (ex *execution) planCopy(args map[string]any) (any, error) {
	cid := argString(args, "copyId")
	m := uuidRE.FindStringSubmatch(strings.ToLower(cid))
	if m == nil || m[1] != "7" {
		return nil, signatureError("organizations.planDocumentCopy", "Invalid copyId: a UUID version 7 is required.")
	}
	src, dest := argString(args, "sourceDocumentId"), argString(args, "destinationOrganizationId")
	if src == "" || dest == "" {
		return nil, signatureError("organizations.planDocumentCopy", "Missing required parameter sourceDocumentId or destinationOrganizationId.")
	}
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if c := o.copies[cid]; c != nil {
		if c.source != src || c.destOrg != dest || c.sourceOrg != argString(args, "sourceOrganizationId") {
			return nil, errors.New("copyId was already used for another copy: plan a new copy with a fresh copyId")
		}
		return c.receipt(now), nil
	}
	c := &oddCopy{copyID: cid, operationID: newID("op_", 6), planToken: newID("pt_", 8), source: src, destOrg: dest,
		sourceOrg: argString(args, "sourceOrganizationId"), state: "ready", blockers: []map[string]any{}}
	d := o.docs[src]
	switch {
	case d == nil:
		return nil, fmt.Errorf("document_not_found: no document %s", src)
	case d.archived:
		c.state = "blocked"
		c.blockers = append(c.blockers, map[string]any{"code": "source_archived", "message": "The source document is archived.",
			"resolution": "Restore the source document, then plan again with a fresh copyId."})
	}
	o.copies[cid], o.ops[c.operationID] = c, c
	return c.receipt(now), nil
}

func (ex *execution) applyCopy(args map[string]any) (any, error) {
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.ops[argString(args, "operationId")]
	if c == nil {
		return nil, signatureError("organizations.applyDocumentCopy", "Unknown operationId: pass the operationId the plan returned.")
	}
	if argString(args, "planToken") != c.planToken {
		return nil, errors.New("planToken does not match the operation: read the receipt with getDocumentCopyReceipt and retry with the recorded token")
	}
	now := time.Now()
	switch c.state {
	case "blocked":
		return c.receipt(now), nil
	case "ready":
		c.state, c.retryAfter = "applying", now.Add(o.lease)
	case "applying":
		if !now.Before(c.retryAfter) {
			src := o.docs[c.source]
			d := &oddDoc{id: newID("doc_", 8), title: src.title, typ: src.typ, revision: 1, writeBasis: newID("wb_", 10)}
			o.docs[d.id] = d
			c.state, c.destination = "completed", d.id
		}
	}
	return c.receipt(now), nil
}

func (ex *execution) copyReceipt(args map[string]any) (any, error) {
	o := ex.o
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.ops[argString(args, "operationId")]
	if c == nil {
		return nil, signatureError("organizations.getDocumentCopyReceipt", "Unknown operationId.")
	}
	return c.receipt(time.Now()), nil
}

// CorruptJournal marks a document's live journal corrupt.
func (o *Oddlynew) CorruptJournal(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d := o.docs[id]; d != nil {
		d.journalCorrupt = true
	}
}

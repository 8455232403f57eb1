package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The harness's MCP servers behave as /work/shared/reference describes the
// Thegram and Oddlynew servers, with real state (revisions, receipts,
// creation ids, copy receipts). Faults are chosen by the name the agent
// gives a document: the part of its base name before the first '-' (a
// Thegram path "team/cu-3f2a.gram", an Oddlynew title "to-3f2a"). A fault
// fires once per document (the first write), so a correct retry succeeds.
//
//	ok  none
//	cu  gram_patch applied, answered COMMIT_UNKNOWN
//	to  applied, then no answer within the client's deadline (Thegram); an
//	    Oddlynew run answered "Execution timed out" after the write landed
//	hg  Oddlynew: applied, then no answer within the client's deadline
//	tc  gram_create applied, then no answer within the client's deadline;
//	    an Oddlynew createDocument landed, the run "Execution timed out"
//	hc  Oddlynew createDocument landed, then no answer within the deadline
//	st  E_STORAGE, nothing applied
//	cx  STORAGE_CONFLICT, nothing applied
//	ie  applied, answered JSON-RPC -32603 without a body
//	an  gram_read answered JSON-RPC -32000 E_APP_NOT_RUNNING
//	ig  E_INTEGRITY on every patch
//	au  PROVIDER_AUTH_REQUIRED on every patch
//	if  Oddlynew edit: "Execution timed out", its call in_flight_unknown
//	jc  Oddlynew getDocument: journalStatus journal_corrupt
//	sb  Oddlynew edit: writeConfirmed, saveState blocked (document_size_limit)
//	ar  Oddlynew copy source archived: the plan is blocked
//
// A gram_read with a cursor other than "cur-<rev>" is answered STALE_CURSOR.
// Paths under "gdrive/" answer sync.state pending to a patch and synced to a
// later read.

func faultOf(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.IndexByte(name, '-'); i > 0 {
		return name[:i]
	}
	return "ok"
}

func shortHash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:6])
}

func textResult(isErr bool, sc any, text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: isErr, StructuredContent: sc, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func gramError(code, msg string) *mcp.CallToolResult {
	return textResult(true, map[string]any{"error": map[string]any{"code": code, "message": msg}}, code+": "+msg)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// fakeServer holds one dialect's state; one value serves every session.
type fakeServer struct {
	dialect string
	slow    time.Duration // how long a "no answer" fault holds its answer
	mu      sync.Mutex
	fired   map[string]bool
	seq     int
	// thegram
	gdocs    map[string]*gdoc
	receipts map[string]gramReceipt
	// oddlynew
	odocs     map[string]*odoc
	creations map[string]*odoc
	copies    map[string]map[string]any
	ops       map[string]*copyOp
}

type gdoc struct {
	rev  int
	hash string
	sync string
}

type gramReceipt struct {
	intent string
	sc     map[string]any
}

type odoc struct {
	id, title, typ, fault string
	rev                   int
	wb                    string
}

type copyOp struct {
	id, token, copyID string
	applies           int
	retryAfter        time.Time
	done              bool
}

func newFakeServer(dialect string, slow time.Duration) *fakeServer {
	return &fakeServer{dialect: dialect, slow: slow, fired: map[string]bool{},
		gdocs: map[string]*gdoc{}, receipts: map[string]gramReceipt{},
		odocs: map[string]*odoc{}, creations: map[string]*odoc{}, copies: map[string]map[string]any{}, ops: map[string]*copyOp{}}
}

// fire reports whether the fault of key has not fired yet, and marks it.
func (f *fakeServer) fire(key string) bool {
	if f.fired[key] {
		return false
	}
	f.fired[key] = true
	return true
}

// mcpServer returns a go-sdk server with the dialect's tools.
func (f *fakeServer) mcpServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: f.dialect + "-outside", Version: "0.1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	add := func(name string, h func(context.Context, map[string]any) (*mcp.CallToolResult, error)) {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			args := map[string]any{}
			if len(req.Params.Arguments) > 0 {
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return gramError("E_ARGUMENT", "arguments are not an object"), nil
				}
			}
			return h(ctx, args)
		})
	}
	if f.dialect == "thegram" {
		add("gram_projects", func(context.Context, map[string]any) (*mcp.CallToolResult, error) {
			return textResult(false, map[string]any{"projects": []any{map[string]any{"key": "team"}, map[string]any{"key": "gdrive"}}}, "2 projects"), nil
		})
		add("gram_read", f.gramRead)
		add("gram_create", f.gramCreate)
		add("gram_patch", f.gramPatch)
	} else {
		add("guide", func(context.Context, map[string]any) (*mcp.CallToolResult, error) {
			return textResult(false, map[string]any{"guidance": "read, decide, write once with the right key, verify"}, "guide"), nil
		})
		add("run", f.run)
	}
	return s
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func (f *fakeServer) gramRead(ctx context.Context, a map[string]any) (*mcp.CallToolResult, error) {
	path := str(a, "path")
	f.mu.Lock()
	defer f.mu.Unlock()
	if faultOf(path) == "an" && f.fire("read:"+path) {
		return nil, &jsonrpc.Error{Code: -32000, Message: "Thegram is not running. Open the Thegram app, then retry.", Data: json.RawMessage(`{"code":"E_APP_NOT_RUNNING"}`)}
	}
	d := f.gdocs[path]
	if d == nil {
		return gramError("E_ARGUMENT", "No document at "+path), nil
	}
	if c, ok := a["cursor"]; ok && c != fmt.Sprintf("cur-%d", d.rev) {
		return gramError("STALE_CURSOR", "Cursor belongs to another document or revision"), nil
	}
	d.sync = "synced"
	return textResult(false, map[string]any{"path": path, "rev": d.rev, "hash": d.hash, "sync": map[string]any{"state": "synced"}, "text": "..."}, fmt.Sprintf("%s at r%d", path, d.rev)), nil
}

func (f *fakeServer) gramCreate(ctx context.Context, a map[string]any) (*mcp.CallToolResult, error) {
	path := str(a, "path")
	f.mu.Lock()
	if path == "" {
		f.mu.Unlock()
		return gramError("E_ARGUMENT", "path required"), nil
	}
	if f.gdocs[path] != nil {
		f.mu.Unlock()
		return gramError("STALE_REVISION", "Create target already exists"), nil
	}
	d := &gdoc{rev: 1, hash: shortHash(path, "1"), sync: "synced"}
	f.gdocs[path] = d
	hang := faultOf(path) == "tc" && f.fire("create:"+path)
	f.mu.Unlock()
	if hang {
		sleepCtx(ctx, f.slow)
	}
	return textResult(false, map[string]any{"path": path, "rev": 1, "hash": d.hash, "sync": map[string]any{"state": "synced"}}, path+" created at r1"), nil
}

var patchKeys = map[string]bool{"path": true, "base_revision": true, "expected_hash": true, "request_id": true, "operations": true, "effective_at": true, "context": true}

func (f *fakeServer) gramPatch(ctx context.Context, a map[string]any) (*mcp.CallToolResult, error) {
	var unknown []string
	for k := range a {
		if !patchKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return gramError("E_ARGUMENT", "Unknown argument "+unknown[0]), nil
	}
	path, rid := str(a, "path"), str(a, "request_id")
	fault := faultOf(path)
	switch fault {
	case "au":
		return gramError("PROVIDER_AUTH_REQUIRED", "Google Drive must be reconnected"), nil
	case "ig":
		return gramError("E_INTEGRITY", "History sequence/hash audit failed"), nil
	}
	if rid == "" {
		return gramError("E_REQUEST_ID", "Nonempty request_id required"), nil
	}
	base, ok := a["base_revision"].(float64)
	if !ok {
		return gramError("E_CAS_REQUIRED", "base_revision required"), nil
	}
	intentJSON, _ := json.Marshal([]any{path, a["base_revision"], a["expected_hash"], a["operations"], a["effective_at"], a["context"]})
	intent := string(intentJSON)
	f.mu.Lock()
	if r, ok := f.receipts[rid]; ok {
		f.mu.Unlock()
		if r.intent != intent {
			return gramError("E_REQUEST_REUSE", "request_id belongs to another intent"), nil
		}
		sc := map[string]any{}
		for k, v := range r.sc {
			sc[k] = v
		}
		sc["replayed"] = true
		return textResult(false, sc, fmt.Sprintf("%s at r%v", path, sc["rev"])), nil
	}
	d := f.gdocs[path]
	if d == nil {
		f.mu.Unlock()
		return gramError("E_ARGUMENT", "No document at "+path), nil
	}
	if int(base) != d.rev || (str(a, "expected_hash") != "" && str(a, "expected_hash") != d.hash) {
		f.mu.Unlock()
		return gramError("STALE_REVISION", "Accepted revision or hash changed"), nil
	}
	first := f.fire("patch:" + path)
	if first {
		switch fault {
		case "st":
			f.mu.Unlock()
			return gramError("E_STORAGE", "Storage commit failed"), nil
		case "cx":
			f.mu.Unlock()
			return gramError("STORAGE_CONFLICT", "remote file changed since it was read"), nil
		}
	}
	d.rev++
	d.hash = shortHash(path, fmt.Sprint(d.rev))
	d.sync = "synced"
	if strings.HasPrefix(path, "gdrive/") {
		d.sync = "pending"
	}
	sc := map[string]any{"path": path, "rev": d.rev, "hash": d.hash, "request_id": rid, "replayed": false, "sync": map[string]any{"state": d.sync}}
	f.receipts[rid] = gramReceipt{intent: intent, sc: sc}
	f.mu.Unlock()
	if first {
		switch fault {
		case "cu":
			return gramError("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: fsync: input/output error"), nil
		case "to":
			sleepCtx(ctx, f.slow)
		case "ie":
			return nil, &jsonrpc.Error{Code: -32603, Message: "Thegram answered HTTP 502 with no body"}
		}
	}
	return textResult(false, sc, fmt.Sprintf("%s at r%d", path, sc["rev"])), nil
}

var (
	callRE    = regexp.MustCompile(`\b(documents|organizations|ids)\.(\w+)\(`)
	literalRE = regexp.MustCompile(`(\w+):\s*"([^"]*)"`)
)

var writeMethods = map[string]bool{"documents.createDocument": true, "documents.editDocument": true, "documents.patchSettings": true,
	"documents.patchDocumentEnvelope": true, "documents.archiveDocument": true, "documents.restoreDocument": true,
	"documents.repairDocumentJournal": true, "organizations.planDocumentCopy": true, "organizations.applyDocumentCopy": true}

type pcall struct {
	tool string
	lit  map[string]string
}

func parseRun(code string) []pcall {
	locs := callRE.FindAllStringSubmatchIndex(code, -1)
	var out []pcall
	for i, l := range locs {
		end := len(code)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		lit := map[string]string{}
		for _, m := range literalRE.FindAllStringSubmatch(code[l[1]:end], -1) {
			lit[m[1]] = m[2]
		}
		out = append(out, pcall{tool: code[l[2]:l[3]] + "." + code[l[4]:l[5]], lit: lit})
	}
	return out
}

// runFailure ends a run: its message, and whether the call that ended it
// ran (its value known), never answered (in_flight_unknown) or threw.
type runFailure struct {
	msg     string
	outcome string // outcome of the failing call: succeeded, in_flight_unknown, failed_but_handled
	value   any
	hang    bool // answer nothing within the client's deadline
}

func (f *fakeServer) run(ctx context.Context, a map[string]any) (*mcp.CallToolResult, error) {
	for k := range a {
		if k != "code" {
			msg := "Unknown parameter " + k + ". Accepted parameters: code"
			return textResult(true, map[string]any{"error": msg, "logs": []any{}}, msg), nil
		}
	}
	calls := parseRun(str(a, "code"))
	type row struct {
		tool, outcome string
		value         any
		write         bool
	}
	var rows []row
	var fail *runFailure
	hang := false
	f.mu.Lock()
	if len(calls) > 64 {
		for _, c := range calls[:64] {
			rows = append(rows, row{tool: c.tool, outcome: "succeeded", write: writeMethods[c.tool]})
		}
		fail = &runFailure{msg: fmt.Sprintf("Codemode provider call budget exceeded: %d calls, limit 64 calls per run.", len(calls))}
	} else {
		for _, c := range calls {
			v, rf := f.provider(c)
			if rf != nil && rf.hang {
				rows = append(rows, row{tool: c.tool, outcome: "succeeded", value: v, write: writeMethods[c.tool]})
				hang = true
				continue
			}
			if rf != nil {
				if rf.outcome != "" {
					rows = append(rows, row{tool: c.tool, outcome: rf.outcome, value: rf.value, write: writeMethods[c.tool]})
				}
				fail = rf
				break
			}
			rows = append(rows, row{tool: c.tool, outcome: "succeeded", value: v, write: writeMethods[c.tool]})
		}
	}
	f.mu.Unlock()
	var ledger []any
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].tool == rows[i].tool && rows[j].outcome == rows[i].outcome {
			j++
		}
		ledger = append(ledger, map[string]any{"tool": rows[i].tool, "outcome": rows[i].outcome, "count": j - i})
		i = j
	}
	if hang {
		sleepCtx(ctx, f.slow) // the run finishes, after the client gave up
	}
	if fail == nil {
		var last any
		if len(rows) > 0 {
			last = rows[len(rows)-1].value
		}
		b, _ := json.Marshal(last)
		return textResult(false, map[string]any{"result": last, "logs": []any{}, "calls": ledger}, string(b)), nil
	}
	var outcomes []any
	for pass := 0; pass < 2; pass++ { // write-capable calls first
		for i, r := range rows {
			if r.write != (pass == 0) {
				continue
			}
			o := map[string]any{"seq": i + 1, "tool": r.tool, "access": map[bool]string{true: "write", false: "read"}[r.write], "outcome": r.outcome}
			if r.outcome == "succeeded" && r.value != nil {
				o["value"] = r.value
			}
			outcomes = append(outcomes, o)
		}
	}
	sc := map[string]any{"error": fail.msg, "logs": []any{}}
	if ledger != nil {
		sc["calls"] = ledger
		sc["outcomes"] = outcomes
	}
	return textResult(true, sc, fail.msg), nil
}

// provider runs one provider call with f.mu held.
func (f *fakeServer) provider(c pcall) (any, *runFailure) {
	f.seq++
	l := c.lit
	switch c.tool {
	case "ids.mintOperationIds":
		return map[string]any{"ids": []string{fmt.Sprintf("01a19b7c-%04x-7%03x-8000-000000000000", f.seq&0xffff, f.seq&0xfff)}}, nil
	case "documents.createDocument":
		title, typ, cid := l["title"], l["type"], l["creationId"]
		if cid != "" {
			if d := f.creations[cid]; d != nil {
				if d.title != title || d.typ != typ {
					return nil, &runFailure{msg: "Existing document creation identity has incompatible input. Mint a fresh UUIDv7 creationId with ids.mintOperationIds for a new document.", outcome: "failed_but_handled"}
				}
				return map[string]any{"documentId": d.id, "action": "alreadyBootstrapped", "title": d.title, "type": d.typ}, nil
			}
		}
		d := &odoc{id: "doc_" + shortHash(title, fmt.Sprint(f.seq)), title: title, typ: typ, fault: faultOf(title), rev: 1}
		d.wb = "wb_" + shortHash(d.id, "1")
		f.odocs[d.id] = d
		if cid != "" {
			f.creations[cid] = d
		}
		v := map[string]any{"documentId": d.id, "action": "created", "title": title, "type": typ}
		if f.fire("create:" + title) {
			switch d.fault {
			case "tc":
				return nil, &runFailure{msg: "Execution timed out", outcome: "succeeded", value: v}
			case "hc":
				return v, &runFailure{hang: true}
			}
		}
		return v, nil
	case "documents.getDocument":
		d := f.odocs[l["documentId"]]
		if d == nil {
			return map[string]any{"error": "not_found", "documentId": l["documentId"]}, nil
		}
		v := map[string]any{"documentId": d.id, "revision": d.rev, "writeBasis": d.wb, "saveState": "saved"}
		if d.fault == "jc" {
			v["journalStatus"] = "journal_corrupt"
		}
		return v, nil
	case "documents.editDocument":
		d := f.odocs[l["documentId"]]
		if d == nil {
			return nil, &runFailure{msg: "Unknown documentId " + l["documentId"], outcome: "failed_but_handled"}
		}
		if wb, ok := l["writeBasis"]; ok && wb != d.wb {
			if !strings.HasPrefix(wb, "wb_") {
				return nil, &runFailure{msg: "invalid_write_basis: Invalid document writeBasis. Call getDocument without a version and pass the returned writeBasis unchanged.", outcome: "failed_but_handled"}
			}
			return nil, &runFailure{msg: "stale_live_revision", outcome: "failed_but_handled"}
		}
		first := f.fire("edit:" + d.id)
		if first && d.fault == "if" {
			return nil, &runFailure{msg: "Execution timed out", outcome: "in_flight_unknown"}
		}
		d.rev++
		d.wb = "wb_" + shortHash(d.id, fmt.Sprint(d.rev))
		v := map[string]any{"documentId": d.id, "writeConfirmed": true, "revision": d.rev}
		if first {
			switch d.fault {
			case "to":
				return nil, &runFailure{msg: "Execution timed out", outcome: "succeeded", value: v}
			case "hg":
				return v, &runFailure{hang: true}
			case "sb":
				v["saveState"] = "blocked"
				v["saveBlockedReason"] = "document_size_limit"
			}
		}
		return v, nil
	case "organizations.planDocumentCopy":
		cid, src, dst := l["copyId"], l["sourceDocumentId"], l["destinationOrganizationId"]
		if r := f.copies[cid]; r != nil {
			if r["source"] != src || r["destination"] != dst {
				return nil, &runFailure{msg: "copyId " + cid + " is already used for another copy; plan again with a fresh copyId", outcome: "failed_but_handled"}
			}
			return r["receipt"], nil
		}
		var rec map[string]any
		if d := f.odocs[src]; d != nil && d.fault == "ar" {
			rec = map[string]any{"copyId": cid, "state": "blocked", "nextAction": "create_new_plan", "failure": nil,
				"blockers": []any{map[string]any{"code": "source_archived", "message": "The source document is archived", "resolution": "Restore the source document"}}}
		} else {
			op := &copyOp{id: "op_" + shortHash(cid), token: "pt_" + shortHash(cid, "token"), copyID: cid}
			f.ops[op.id] = op
			rec = map[string]any{"copyId": cid, "operationId": op.id, "planToken": op.token, "state": "ready", "nextAction": "apply", "failure": nil, "retryAfter": nil}
		}
		f.copies[cid] = map[string]any{"source": src, "destination": dst, "receipt": rec}
		return rec, nil
	case "organizations.applyDocumentCopy", "organizations.getDocumentCopyReceipt":
		op := f.ops[l["operationId"]]
		if op == nil {
			return nil, &runFailure{msg: "Unknown operationId " + l["operationId"], outcome: "failed_but_handled"}
		}
		now := time.Now().UTC()
		if c.tool == "organizations.applyDocumentCopy" {
			if l["planToken"] != op.token {
				return nil, &runFailure{msg: "planToken does not match the operation: read the receipt and retry with the recorded token", outcome: "failed_but_handled"}
			}
			op.applies++
			if op.applies == 1 {
				op.retryAfter = now.Add(40 * time.Second)
			} else if !now.Before(op.retryAfter) {
				op.done = true
			}
		}
		if op.done {
			return map[string]any{"operationId": op.id, "state": "completed", "failure": nil, "nextAction": "done", "retryAfter": nil, "destinationDocumentId": "doc_" + shortHash(op.id, "dest")}, nil
		}
		if op.applies == 0 {
			return map[string]any{"operationId": op.id, "state": "ready", "failure": nil, "nextAction": "apply", "retryAfter": nil}, nil
		}
		return map[string]any{"operationId": op.id, "state": "applying", "failure": nil, "nextAction": "wait_then_retry_apply", "retryAfter": op.retryAfter.Format("2006-01-02T15:04:05.000Z")}, nil
	}
	return nil, &runFailure{msg: c.tool + " is not a function. Unknown method; available: documents.getDocument, documents.createDocument, documents.editDocument, organizations.planDocumentCopy, organizations.applyDocumentCopy, organizations.getDocumentCopyReceipt, ids.mintOperationIds"}
}

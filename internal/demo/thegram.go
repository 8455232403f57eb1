package demo

import (
	"bytes"
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

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// thegramMount is one mounted collection of the simulated vault.
type thegramMount struct {
	key      string
	name     string
	writable bool
	// pendingSync: writes answer sync.state pending and reach synced after
	// the vault's sync delay, as a local mount of a cloud folder does.
	pendingSync bool
}

var thegramMounts = []thegramMount{
	{key: "team", name: "Team notes", writable: true},
	{key: "eng", name: "Engineering", writable: true},
	{key: "ops", name: "Operations", writable: true},
	{key: "research", name: "Research", writable: true},
	{key: "gdrive-shared", name: "Shared Drive", writable: true, pendingSync: true},
	{key: "archive", name: "Archive", writable: false},
}

// gramDoc is one document of the vault.
type gramDoc struct {
	rev     int
	hash    string
	blocks  []string
	syncAt  time.Time // when a pending sync completes; zero when synced
	mount   *thegramMount
	corrupt bool
}

// gramReceipt is what a request_id is bound to.
type gramReceipt struct {
	intent string
	result map[string]any
}

// Thegram is the state of a simulated Thegram vault. It is safe for
// concurrent use.
type Thegram struct {
	faults    *Injector
	syncDelay time.Duration

	mu       sync.Mutex
	docs     map[string]*gramDoc
	receipts map[string]*gramReceipt
}

// NewThegram returns an empty vault; faults may be nil.
func NewThegram(faults *Injector) *Thegram {
	return &Thegram{faults: faults, syncDelay: 2 * time.Second, docs: map[string]*gramDoc{}, receipts: map[string]*gramReceipt{}}
}

// Server returns an MCP server over the vault, with the tools gram_projects,
// gram_read, gram_create and gram_patch.
func (g *Thegram) Server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "thegram-demo", Version: "1.0.0"}, nil)
	obj := func(props string, required ...string) json.RawMessage {
		r, _ := json.Marshal(required)
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(r) + `}`)
	}
	s.AddTool(&mcp.Tool{Name: "gram_projects", Description: "List the mounted collections and whether agents may write to them.",
		InputSchema: obj(``)}, g.tool(g.projects, nil))
	s.AddTool(&mcp.Tool{Name: "gram_read", Description: "Read a document's identity {path, rev, hash, sync}.",
		InputSchema: obj(`"path":{"type":"string"}`, "path")}, g.tool(g.read, []string{"path"}))
	s.AddTool(&mcp.Tool{Name: "gram_create", Description: "Create a document. There is no request_id: if the answer is uncertain, read the path.",
		InputSchema: obj(`"path":{"type":"string"},"content":{"type":"string"}`, "path")}, g.tool(g.create, []string{"path", "content"}))
	s.AddTool(&mcp.Tool{Name: "gram_patch", Description: "Patch a document with CAS (base_revision, expected_hash) under a request_id; an uncertain patch is replayed with the same request_id.",
		InputSchema: obj(`"path":{"type":"string"},"base_revision":{"type":"integer"},"expected_hash":{"type":"string"},"request_id":{"type":"string"},"operations":{"type":"array"},"effective_at":{"type":"string"},"context":{}`,
			"path", "base_revision", "expected_hash", "request_id", "operations")},
		g.tool(g.patch, []string{"path", "base_revision", "expected_hash", "request_id", "operations", "effective_at", "context"}))
	return s
}

// gramError is a structured tool error {code, message}.
type gramError struct{ code, message string }

func (e *gramError) Error() string { return e.code + ": " + e.message }

func gramErr(code, format string, args ...any) *gramError {
	return &gramError{code: code, message: fmt.Sprintf(format, args...)}
}

// gramOutcome is what a tool handler produced: a result, an error, or a
// fault to act out.
type gramOutcome struct {
	result map[string]any
	text   string
	err    *gramError
	lose   bool
}

type gramHandler func(ctx context.Context, args map[string]json.RawMessage) gramOutcome

// tool adapts a handler: it checks for unknown arguments, as the real
// gateway does, and shapes the result.
func (g *Thegram) tool(h gramHandler, known []string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := map[string]json.RawMessage{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &args); err != nil {
				return gramResult(gramOutcome{err: gramErr("E_ARGUMENT", "arguments must be an object")}), nil
			}
		}
		names := make([]string, 0, len(args))
		for k := range args {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if !contains(known, k) {
				return gramResult(gramOutcome{err: gramErr("E_ARGUMENT", "Unknown argument %s", k)}), nil
			}
		}
		return gramResult(h(ctx, args)), nil
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func gramResult(o gramOutcome) *mcp.CallToolResult {
	if o.err != nil {
		return &mcp.CallToolResult{IsError: true,
			StructuredContent: map[string]any{"error": map[string]any{"code": o.err.code, "message": o.err.message}},
			Content:           []mcp.Content{&mcp.TextContent{Text: o.err.code + ": " + o.err.message}}}
	}
	r := &mcp.CallToolResult{StructuredContent: o.result}
	if o.text != "" {
		r.Content = []mcp.Content{&mcp.TextContent{Text: o.text}}
	} else {
		b, _ := json.Marshal(o.result)
		r.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
	}
	if o.lose {
		r.Meta = mcp.Meta{LoseMarker: true}
	}
	return r
}

func (g *Thegram) projects(ctx context.Context, _ map[string]json.RawMessage) gramOutcome {
	var ps []any
	for _, m := range thegramMounts {
		ps = append(ps, map[string]any{"key": m.key, "name": m.name, "writable": m.writable})
	}
	return gramOutcome{result: map[string]any{"projects": ps}}
}

// resolve checks a path: a known mount and a top-level document for writes.
func resolve(path string, write bool) (*thegramMount, *gramError) {
	if path == "" {
		return nil, gramErr("E_ARGUMENT", "path required")
	}
	if strings.HasPrefix(path, "/") {
		return nil, gramErr("E_PATH", "Absolute paths are outside the approved folder")
	}
	key, rest, ok := strings.Cut(path, "/")
	var m *thegramMount
	for i := range thegramMounts {
		if thegramMounts[i].key == key {
			m = &thegramMounts[i]
		}
	}
	if !ok || m == nil || rest == "" {
		return nil, gramErr("E_PATH", "Path does not start with a mounted collection")
	}
	if strings.HasPrefix(rest, ".") || strings.Contains(rest, "/.") {
		return nil, gramErr("E_PATH", "Path is outside an approved folder or hidden")
	}
	if write && strings.Contains(rest, "/") {
		return nil, gramErr("E_PATH", "Vault mounts support writes only to top-level documents")
	}
	if write && !m.writable {
		return nil, gramErr("E_READ_ONLY", "This mounted folder is read-only to agents")
	}
	return m, nil
}

func str(args map[string]json.RawMessage, k string) (string, bool) {
	var s string
	raw, ok := args[k]
	if !ok {
		return "", false
	}
	return s, json.Unmarshal(raw, &s) == nil
}

// identity is the {path, rev, hash, sync} of a document. g.mu must be held.
func (g *Thegram) identity(path string, d *gramDoc, now time.Time) map[string]any {
	state := "synced"
	if !d.syncAt.IsZero() {
		if now.Before(d.syncAt) {
			state = "pending"
		} else {
			d.syncAt = time.Time{}
		}
	}
	return map[string]any{"path": path, "rev": d.rev, "hash": d.hash, "sync": map[string]any{"state": state}}
}

func (g *Thegram) read(ctx context.Context, args map[string]json.RawMessage) gramOutcome {
	path, _ := str(args, "path")
	if _, e := resolve(path, false); e != nil {
		return gramOutcome{err: e}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.docs[path]
	if d == nil {
		return gramOutcome{err: gramErr("E_ARGUMENT", "No document at %s", path)}
	}
	if d.corrupt {
		return gramOutcome{err: gramErr("E_INTEGRITY", "History sequence audit failed at r%d", d.rev)}
	}
	return gramOutcome{result: g.identity(path, d, time.Now())}
}

func hashOf(blocks []string) string {
	h := sha256.New()
	for _, b := range blocks {
		h.Write([]byte(b))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func (g *Thegram) create(ctx context.Context, args map[string]json.RawMessage) gramOutcome {
	path, _ := str(args, "path")
	m, e := resolve(path, true)
	if e != nil {
		return gramOutcome{err: e}
	}
	content, _ := str(args, "content")
	fault := g.faults.next([]Fault{FaultTimeoutBefore, FaultTimeoutAfter, FaultLoseResponse})
	if fault == FaultTimeoutBefore {
		g.faults.record(Injected{Time: time.Now(), Server: "thegram", Tool: "gram_create", Target: path, Fault: fault})
		g.faults.hold(ctx)
		return gramOutcome{err: gramErr("E_TIMEOUT", "Create did not complete in time"), lose: true}
	}
	g.mu.Lock()
	if g.docs[path] != nil {
		g.mu.Unlock()
		return gramOutcome{err: gramErr("STALE_REVISION", "Create target already exists")}
	}
	d := &gramDoc{rev: 1, blocks: []string{content}, mount: m}
	d.hash = hashOf(d.blocks)
	if m.pendingSync {
		d.syncAt = time.Now().Add(g.syncDelay)
	}
	g.docs[path] = d
	res := g.identity(path, d, time.Now())
	g.mu.Unlock()
	g.faults.record(Injected{Time: time.Now(), Server: "thegram", Tool: "gram_create", Target: path, Fault: fault, Applied: true})
	switch fault {
	case FaultTimeoutAfter:
		g.faults.hold(ctx)
		return gramOutcome{result: res, text: fmt.Sprintf("%s created at r1", path), lose: true}
	case FaultLoseResponse:
		return gramOutcome{result: res, text: fmt.Sprintf("%s created at r1", path), lose: true}
	}
	return gramOutcome{result: res, text: fmt.Sprintf("%s created at r1", path)}
}

var sectionTarget = regexp.MustCompile(`^h[0-9]+-[0-9]+$`)

// gramOp is one patch operation.
type gramOp struct {
	Op     string `json:"op"`
	Target string `json:"target"`
	Text   string `json:"text"`
	Field  string `json:"field,omitempty"`
	Value  any    `json:"value,omitempty"`
}

// canonical returns the canonical JSON (sorted keys) of v.
func canonical(v json.RawMessage) string {
	if len(v) == 0 {
		return "null"
	}
	var x any
	if json.Unmarshal(v, &x) != nil {
		return string(v)
	}
	b, _ := json.Marshal(x) // maps marshal with sorted keys
	return string(b)
}

func (g *Thegram) patch(ctx context.Context, args map[string]json.RawMessage) gramOutcome {
	path, _ := str(args, "path")
	if _, e := resolve(path, true); e != nil {
		return gramOutcome{err: e}
	}
	reqID, ok := str(args, "request_id")
	if !ok || reqID == "" || len(reqID) > 128 {
		return gramOutcome{err: gramErr("E_REQUEST_ID", "Nonempty request_id required")}
	}
	var base int
	rawBase, ok := args["base_revision"]
	if !ok || json.Unmarshal(rawBase, &base) != nil {
		return gramOutcome{err: gramErr("E_CAS_REQUIRED", "base_revision required")}
	}
	expected, _ := str(args, "expected_hash")
	var ops []gramOp
	if err := json.Unmarshal(args["operations"], &ops); err != nil || len(ops) == 0 {
		return gramOutcome{err: gramErr("E_ARGUMENT", "operations must be a nonempty array")}
	}
	for i, op := range ops {
		switch op.Op {
		case "append_block", "replace_section", "insert_after", "set_field":
		default:
			return gramOutcome{err: gramErr("E_ARGUMENT", "operations[%d]: unknown op %q", i, op.Op)}
		}
		if !sectionTarget.MatchString(op.Target) {
			return gramOutcome{err: gramErr("E_ARGUMENT", "operations[%d]: target %q is not a section (h<level>-<n>)", i, op.Target)}
		}
	}
	// The request_id binds the canonical intent, CAS base included.
	intent := canonical(mustJSON(map[string]json.RawMessage{
		"path": args["path"], "operations": args["operations"], "effective_at": args["effective_at"],
		"context": args["context"], "base_revision": rawBase, "expected_hash": args["expected_hash"]}))

	g.mu.Lock()
	if r := g.receipts[reqID]; r != nil {
		g.mu.Unlock()
		if r.intent != intent {
			return gramOutcome{err: gramErr("E_REQUEST_REUSE", "request_id belongs to another intent")}
		}
		res := cloneMap(r.result)
		res["replayed"] = true
		return gramOutcome{result: res, text: fmt.Sprintf("%s at r%v (replayed)", path, res["rev"])}
	}
	d := g.docs[path]
	if d == nil {
		g.mu.Unlock()
		return gramOutcome{err: gramErr("E_ARGUMENT", "No document at %s", path)}
	}
	if d.corrupt {
		g.mu.Unlock()
		return gramOutcome{err: gramErr("E_INTEGRITY", "History sequence audit failed at r%d", d.rev)}
	}
	if base != d.rev || expected != d.hash {
		g.mu.Unlock()
		return gramOutcome{err: gramErr("STALE_REVISION", "Accepted revision or hash changed")}
	}
	g.mu.Unlock()

	fault := g.faults.next(Faults)
	if fault == FaultTimeoutBefore {
		g.faults.record(Injected{Time: time.Now(), Server: "thegram", Tool: "gram_patch", Target: path, Fault: fault})
		g.faults.hold(ctx)
		return gramOutcome{err: gramErr("E_TIMEOUT", "Patch did not complete in time"), lose: true}
	}
	g.mu.Lock()
	if d.rev != base || g.receipts[reqID] != nil {
		// Another call got there while this one was deciding.
		g.mu.Unlock()
		return gramOutcome{err: gramErr("STALE_REVISION", "Artifact changed during transaction")}
	}
	for _, op := range ops {
		d.blocks = append(d.blocks, op.Op+" "+op.Target+" "+op.Text)
	}
	d.rev++
	d.hash = hashOf(d.blocks)
	if d.mount.pendingSync {
		d.syncAt = time.Now().Add(g.syncDelay)
	}
	res := g.identity(path, d, time.Now())
	res["request_id"] = reqID
	res["replayed"] = false
	g.receipts[reqID] = &gramReceipt{intent: intent, result: cloneMap(res)}
	g.mu.Unlock()
	g.faults.record(Injected{Time: time.Now(), Server: "thegram", Tool: "gram_patch", Target: path, Fault: fault, Applied: true})
	text := fmt.Sprintf("%s at r%d", path, d.rev)
	switch fault {
	case FaultTimeoutAfter:
		g.faults.hold(ctx)
		return gramOutcome{err: gramErr("E_TIMEOUT", "Patch did not answer in time"), lose: true}
	case FaultLoseResponse:
		return gramOutcome{result: res, text: text, lose: true}
	case FaultUncertain:
		return gramOutcome{err: gramErr("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: fsync: input/output error")}
	}
	return gramOutcome{result: res, text: text}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return bytes.TrimSpace(b)
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Corrupt marks a document's history as failing its audit (E_INTEGRITY on
// every later read and patch).
func (g *Thegram) Corrupt(path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := g.docs[path]; d != nil {
		d.corrupt = true
	}
}

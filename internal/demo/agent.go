package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Behavior is how an agent handles an uncertain or refused write.
type Behavior string

// Behaviors: one correct, and one per documented mistake.
const (
	// Correct follows the documents: replay under the same key, read
	// before deciding, wait for retryAfter, fix refused input.
	Correct Behavior = "correct"
	// BlindRetry re-sends a write after an uncertain outcome without
	// reading first (Thegram: a new request_id on the old base; Oddlynew:
	// the same run, its writeBasis literal included).
	BlindRetry Behavior = "blind_retry"
	// NewKeyReplay re-reads and re-sends the same edit as a new one
	// instead of replaying it (Thegram: a new request_id on the new base;
	// Oddlynew: an edit on the fresh writeBasis).
	NewKeyReplay Behavior = "new_key_for_replay"
	// RetryFixInput re-sends, unchanged, a request refused as bad input.
	RetryFixInput Behavior = "retry_fix_input"
	// Recreate creates again under a new creationId after an uncertain
	// create.
	Recreate Behavior = "recreate_after_uncertain"
	// IgnoreRetryAfter re-applies a copy before the receipt's retryAfter.
	IgnoreRetryAfter Behavior = "ignore_retry_after"
)

// Behaviors lists every behavior.
var Behaviors = []Behavior{Correct, BlindRetry, NewKeyReplay, RetryFixInput, Recreate, IgnoreRetryAfter}

// Event is one thing an agent did, for the demo's account.
type Event struct {
	Time     time.Time
	Agent    string
	Behavior Behavior
	Server   string
	Target   string
	// What the agent did, in a sentence.
	What string
	// Mistake names the documented mistake this step made, or "".
	Mistake Behavior
	// Uncertain is set when the agent met an uncertain outcome.
	Uncertain bool
}

// Agent drives one MCP client session against one simulated server.
type Agent struct {
	Name     string
	Server   string // "thegram" or "oddlynew"
	Behavior Behavior
	Session  *mcp.ClientSession
	// CallTimeout is how long the agent waits for one tools/call: a
	// safety net, not how faults end (the server drops a faulted call's
	// answer itself), so that an ordinary call slowed by a busy machine is
	// never taken for a timeout. Default 30s.
	CallTimeout time.Duration
	// Sleep waits between steps; default time.Sleep honouring ctx.
	Sleep func(ctx context.Context, d time.Duration)
	// Rand picks names; default seeded from the name.
	Rand *rand.Rand

	mu     sync.Mutex
	events []Event
	docs   []string // targets created so far
	n      int
}

// Events returns what the agent did.
func (a *Agent) Events() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Event(nil), a.events...)
}

func (a *Agent) log(target, what string, mistake Behavior, uncertain bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, Event{Time: time.Now(), Agent: a.Name, Behavior: a.Behavior, Server: a.Server,
		Target: target, What: what, Mistake: mistake, Uncertain: uncertain})
}

func (a *Agent) timeout() time.Duration {
	if a.CallTimeout > 0 {
		return a.CallTimeout
	}
	return 30 * time.Second
}

func (a *Agent) sleep(ctx context.Context, d time.Duration) {
	if a.Sleep != nil {
		a.Sleep(ctx, d)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (a *Agent) rand() *rand.Rand {
	if a.Rand == nil {
		var seed uint64
		for _, c := range a.Name {
			seed = seed*131 + uint64(c)
		}
		a.Rand = rand.New(rand.NewPCG(seed, 7))
	}
	return a.Rand
}

// answer is what one tools/call gave the agent.
type answer struct {
	structured map[string]any
	isError    bool
	code       string // Thegram error code, or the Oddlynew run error
	// uncertain: no answer (timeout, lost), or one saying the outcome is unknown.
	uncertain bool
}

// call makes one tools/call with the agent's timeout.
func (a *Agent) call(ctx context.Context, tool string, args any) answer {
	cctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	res, err := a.Session.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return answer{uncertain: true, code: "no_response"}
	}
	var an answer
	an.isError = res.IsError
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &an.structured)
	if e, ok := an.structured["error"].(map[string]any); ok {
		an.code, _ = e["code"].(string)
	} else if s, ok := an.structured["error"].(string); ok {
		an.code = s
	}
	switch {
	case an.code == "COMMIT_UNKNOWN" || an.code == "E_TIMEOUT" || an.code == "E_STORAGE":
		an.uncertain = true
	case strings.HasPrefix(an.code, "Execution timed out") || strings.HasPrefix(an.code, "Codemode executor timed out"):
		an.uncertain = true
	}
	return an
}

// Step does one task. The task depends on the agent's behavior and on how
// many steps it took; it returns an error only when the session broke.
func (a *Agent) Step(ctx context.Context) error {
	a.n++
	if a.Server == "thegram" {
		return a.thegramStep(ctx)
	}
	return a.oddlynewStep(ctx)
}

// Create creates a document the agent's way and returns its target (path
// or documentId).
func (a *Agent) Create(ctx context.Context) (string, bool) {
	if a.Server == "thegram" {
		return a.gramCreate(ctx)
	}
	return a.oddCreate(ctx)
}

// Edit edits a document the agent's way.
func (a *Agent) Edit(ctx context.Context, target string) {
	if a.Server == "thegram" {
		a.gramEdit(ctx, target)
		return
	}
	a.oddEdit(ctx, target)
}

// Copy plans and applies an Oddlynew copy the agent's way.
func (a *Agent) Copy(ctx context.Context) { a.oddCopy(ctx) }

// RefusedRetry sends a request the server refuses as bad input, then sends
// it again unchanged: the RetryFixInput mistake. Each time it invents a
// new bad input, so that each mistake is a refused request of its own: the
// detector reports an identical refused request once however often it is
// re-sent (docs/detection.md), and the demo's closing table counts
// mistakes (out47: 12 mistakes against 5 wasted_retry findings, when the
// same refused request was made again on a document used before).
func (a *Agent) RefusedRetry(ctx context.Context, target string) {
	if a.Server == "thegram" {
		args := map[string]any{"path": target, "mode": "fast-" + a.hex(6)}
		a.call(ctx, "gram_read", args)
		a.call(ctx, "gram_read", args)
		a.log(target, "read "+target+" with an unknown argument, was refused E_ARGUMENT, and sent it again unchanged", RetryFixInput, false)
		return
	}
	code := fmt.Sprintf("async () => await documents.editDocument({ documentId: %q, writeBasis: \"basis-from-memory-%s\", edits: [] })", target, a.hex(6))
	a.runCode(ctx, code)
	a.runCode(ctx, code)
	a.log(target, "edited with an invented writeBasis, was refused invalid_write_basis, and sent it again unchanged", RetryFixInput, false)
}

func (a *Agent) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[a.rand().IntN(16)]
	}
	return string(b)
}

// --- Thegram ---------------------------------------------------------------

func (a *Agent) gramRead(ctx context.Context, path string) (rev float64, hash string, ok bool) {
	an := a.call(ctx, "gram_read", map[string]any{"path": path})
	if an.isError || an.uncertain {
		return 0, "", false
	}
	rev, _ = an.structured["rev"].(float64)
	hash, _ = an.structured["hash"].(string)
	return rev, hash, true
}

// gramCreate creates a document and settles an uncertain create by reading
// its path, as the document says.
func (a *Agent) gramCreate(ctx context.Context) (string, bool) {
	path := fmt.Sprintf("team/%s-%s.gram", strings.ToLower(a.Name), a.hex(6))
	for try := 0; try < 3; try++ {
		an := a.call(ctx, "gram_create", map[string]any{"path": path, "content": "# " + a.Name})
		if !an.uncertain && !an.isError {
			a.log(path, "created "+path, "", false)
			a.docs = append(a.docs, path)
			return path, true
		}
		if an.code == "STALE_REVISION" {
			break // exists: read below
		}
		if !an.uncertain {
			return "", false
		}
		a.log(path, "create of "+path+" uncertain ("+an.code+"): reading the path before anything else", "", true)
		if _, _, ok := a.gramRead(ctx, path); ok {
			a.docs = append(a.docs, path)
			return path, true
		}
	}
	if _, _, ok := a.gramRead(ctx, path); ok {
		a.docs = append(a.docs, path)
		return path, true
	}
	return "", false
}

func (a *Agent) thegramStep(ctx context.Context) error {
	if len(a.docs) == 0 || a.n%4 == 1 {
		if _, ok := a.gramCreate(ctx); !ok {
			return nil
		}
	}
	path := a.docs[a.rand().IntN(len(a.docs))]
	if a.Behavior == RetryFixInput && a.n%3 == 0 {
		a.RefusedRetry(ctx, path)
		return nil
	}
	return a.gramEdit(ctx, path)
}

// gramEdit runs the safe CAS sequence, or the behavior's mistake.
func (a *Agent) gramEdit(ctx context.Context, path string) error {
	rev, hash, ok := a.gramRead(ctx, path)
	if !ok {
		return nil
	}
	ops := []map[string]any{{"op": []string{"append_block", "replace_section", "insert_after", "set_field"}[a.rand().IntN(4)],
		"target": fmt.Sprintf("h%d-%d", a.rand().IntN(4), 1+a.rand().IntN(30)), "text": "note " + a.hex(6)}}
	patch := map[string]any{"path": path, "base_revision": rev, "expected_hash": hash, "request_id": "req-" + a.hex(12), "operations": ops}
	for attempt := 0; attempt < 4; attempt++ {
		an := a.call(ctx, "gram_patch", patch)
		switch {
		case !an.isError && !an.uncertain:
			if sync, _ := an.structured["sync"].(map[string]any); sync != nil && sync["state"] != "synced" {
				a.verifySync(ctx, path)
			}
			a.log(path, fmt.Sprintf("patched %s under %s", path, patch["request_id"]), "", false)
			return nil
		case an.code == "STALE_REVISION":
			// Reread and rebase with a new request id.
			rev, hash, ok = a.gramRead(ctx, path)
			if !ok {
				return nil
			}
			patch = clonePatch(patch, rev, hash, "req-"+a.hex(12))
			continue
		case an.uncertain:
		default:
			return nil // refused for good
		}
		switch a.Behavior {
		case BlindRetry:
			a.log(path, fmt.Sprintf("patch of %s uncertain (%s): sent it again at once under a new request_id, without reading", path, an.code), BlindRetry, true)
			blind := clonePatch(patch, patch["base_revision"], patch["expected_hash"], "req-"+a.hex(12))
			a.call(ctx, "gram_patch", blind)
			a.gramRead(ctx, path)
			return nil
		case NewKeyReplay:
			a.log(path, fmt.Sprintf("patch of %s uncertain (%s): re-read it and sent the same operations as a new patch under a new request_id", path, an.code), NewKeyReplay, true)
			rev, hash, ok = a.gramRead(ctx, path)
			if !ok {
				return nil
			}
			a.call(ctx, "gram_patch", clonePatch(patch, rev, hash, "req-"+a.hex(12)))
			return nil
		default:
			a.log(path, fmt.Sprintf("patch of %s uncertain (%s): replayed it unchanged under the same request_id", path, an.code), "", true)
		}
	}
	// Still unknown after the replays: read before claiming anything.
	a.gramRead(ctx, path)
	return nil
}

func clonePatch(p map[string]any, rev, hash any, rid string) map[string]any {
	q := map[string]any{}
	for k, v := range p {
		q[k] = v
	}
	q["base_revision"], q["expected_hash"], q["request_id"] = rev, hash, rid
	return q
}

// verifySync re-reads a document until it reports synced.
func (a *Agent) verifySync(ctx context.Context, path string) {
	for i := 0; i < 10; i++ {
		an := a.call(ctx, "gram_read", map[string]any{"path": path})
		if s, _ := an.structured["sync"].(map[string]any); s != nil && s["state"] == "synced" {
			return
		}
		a.sleep(ctx, 500*time.Millisecond)
	}
}

// --- Oddlynew --------------------------------------------------------------

// runCode sends one run.
func (a *Agent) runCode(ctx context.Context, code string) answer {
	return a.call(ctx, "run", map[string]any{"code": code})
}

func resultOf(an answer) map[string]any {
	r, _ := an.structured["result"].(map[string]any)
	return r
}

func (a *Agent) oddGet(ctx context.Context, id string) (map[string]any, bool) {
	an := a.runCode(ctx, fmt.Sprintf("async () => await documents.getDocument({ documentId: %q })", id))
	r := resultOf(an)
	return r, !an.isError && !an.uncertain && r != nil && r["writeBasis"] != nil
}

func createCode(cid, title string) string {
	return fmt.Sprintf("async () => await documents.createDocument({ creationId: %q, title: %q, type: \"note\" })", cid, title)
}

// oddCreate creates a document under a creationId; an uncertain create is
// replayed with the same key, or, for Recreate, redone under a new one.
func (a *Agent) oddCreate(ctx context.Context) (string, bool) {
	title := fmt.Sprintf("%s notes %s", a.Name, a.hex(4))
	cid := NewUUIDv7()
	for try := 0; try < 4; try++ {
		an := a.runCode(ctx, createCode(cid, title))
		if r := resultOf(an); r != nil && !an.isError {
			id, _ := r["documentId"].(string)
			a.log(id, fmt.Sprintf("created %q (%s) under creationId %s", title, r["action"], cid), "", false)
			a.docs = append(a.docs, id)
			return id, true
		}
		if !an.uncertain {
			return "", false
		}
		if a.Behavior == Recreate {
			a.log(cid, fmt.Sprintf("create of %q uncertain: created it again under a new creationId", title), Recreate, true)
			cid = NewUUIDv7()
			continue
		}
		a.log(cid, fmt.Sprintf("create of %q uncertain: replayed it with the same creationId", title), "", true)
	}
	return "", false
}

// editCode is the documented edit: read the live writeBasis and edit with
// it, in one run.
func editCode(id, text string) string {
	return fmt.Sprintf("async () => {\n  const d = await documents.getDocument({ documentId: %q });\n"+
		"  return await documents.editDocument({ documentId: %q, writeBasis: d.writeBasis,\n    edits: [{ op: \"appendParagraph\", text: %q }] });\n}", id, id, text)
}

func (a *Agent) oddlynewStep(ctx context.Context) error {
	switch {
	case a.Behavior == IgnoreRetryAfter && a.n%2 == 0 || a.Behavior == Correct && a.n%5 == 0:
		return a.oddCopy(ctx)
	case a.Behavior == RetryFixInput && a.n%3 == 0 && len(a.docs) > 0:
		a.RefusedRetry(ctx, a.docs[0])
		return nil
	}
	if len(a.docs) == 0 || a.n%4 == 1 || a.Behavior == Recreate && a.n%2 == 1 {
		if _, ok := a.oddCreate(ctx); !ok {
			return nil
		}
	}
	return a.oddEdit(ctx, a.docs[a.rand().IntN(len(a.docs))])
}

// editSucceeded reports whether a failed run's outcomes say its edit
// completed.
func editSucceeded(an answer) bool {
	outs, _ := an.structured["outcomes"].([]any)
	for _, o := range outs {
		m, _ := o.(map[string]any)
		if m["tool"] == "documents.editDocument" && m["outcome"] == "succeeded" {
			return true
		}
	}
	return false
}

// oddEdit edits a document as the documents prescribe, or with the
// behavior's mistake after an uncertain outcome.
func (a *Agent) oddEdit(ctx context.Context, id string) error {
	doc, ok := a.oddGet(ctx, id)
	if !ok {
		return nil
	}
	if doc["journalStatus"] == "journal_corrupt" {
		code := fmt.Sprintf("async () => await documents.repairDocumentJournal({ documentId: %q, writeBasis: %q, acceptDiscardingUnpersistedState: true })", id, doc["writeBasis"])
		a.runCode(ctx, code)
		a.log(id, "found the journal corrupt and repaired it", "", false)
		return nil
	}
	code := editCode(id, "line "+a.hex(6))
	for try := 0; try < 3; try++ {
		an := a.runCode(ctx, code)
		if !an.uncertain {
			if !an.isError {
				a.log(id, "edited "+id, "", false)
			}
			return nil
		}
		if a.Behavior == BlindRetry {
			a.log(id, "edit of "+id+" uncertain ("+shortCode(an.code)+"): sent the same run again at once", BlindRetry, true)
			a.runCode(ctx, code)
			return nil
		}
		if editSucceeded(an) {
			a.log(id, "edit of "+id+" timed out, but its ledger says the edit succeeded: not repeating it", "", true)
			a.oddGet(ctx, id)
			return nil
		}
		a.log(id, "edit of "+id+" uncertain ("+shortCode(an.code)+"): read the document before deciding", "", true)
		d, ok := a.oddGet(ctx, id)
		if !ok || d["revision"].(float64) > doc["revision"].(float64) {
			return nil // it landed, or the document cannot be read now
		}
		doc = d
	}
	return nil
}

func shortCode(s string) string {
	s, _, _ = strings.Cut(s, ".")
	return s
}

// oddCopy plans and applies a copy of a new document to another
// organization, waiting for retryAfter or not.
func (a *Agent) oddCopy(ctx context.Context) error {
	src, ok := a.oddCreate(ctx)
	if !ok {
		return nil
	}
	cid := NewUUIDv7()
	an := a.runCode(ctx, fmt.Sprintf("async () => await organizations.planDocumentCopy({ copyId: %q, sourceDocumentId: %q, destinationOrganizationId: \"org_partner\" })", cid, src))
	plan := resultOf(an)
	if plan == nil || plan["state"] != "ready" {
		return nil
	}
	apply := fmt.Sprintf("async () => await organizations.applyDocumentCopy({ operationId: %q, planToken: %q })", plan["operationId"], plan["planToken"])
	receipt := fmt.Sprintf("async () => await organizations.getDocumentCopyReceipt({ operationId: %q })", plan["operationId"])
	for i := 0; i < 6; i++ {
		an = a.runCode(ctx, apply)
		r := resultOf(an)
		if r == nil && an.uncertain {
			// The receipt is the durable record: read it before applying
			// again, and honour its retryAfter.
			a.log(src, "copy of "+src+" uncertain: read its receipt", "", true)
			r = resultOf(a.runCode(ctx, receipt))
		}
		if r == nil {
			return nil
		}
		switch r["state"] {
		case "ready":
			continue
		case "applying":
		default:
			a.log(src, fmt.Sprintf("copied %s: %s", src, r["state"]), "", false)
			return nil
		}
		if a.Behavior == IgnoreRetryAfter && i == 0 {
			a.log(src, "copy of "+src+" applying: applied again at once, before retryAfter", IgnoreRetryAfter, false)
			continue
		}
		until, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(r["retryAfter"]))
		a.sleep(ctx, time.Until(until)+50*time.Millisecond)
	}
	return nil
}

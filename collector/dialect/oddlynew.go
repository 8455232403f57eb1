package dialect

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/valyala/fastjson"
)

// Oddlynew provider calls that write. planDocumentCopy is tracked apart: it
// writes nothing to the destination.
const (
	toolCreate   = "documents.createDocument"
	toolEdit     = "documents.editDocument"
	toolSettings = "documents.patchSettings"
	toolEnvelope = "documents.patchDocumentEnvelope"
	toolArchive  = "documents.archiveDocument"
	toolRestore  = "documents.restoreDocument"
	toolRepair   = "documents.repairDocumentJournal"
	toolPlan     = "organizations.planDocumentCopy"
	toolApply    = "organizations.applyDocumentCopy"
	toolGet      = "documents.getDocument"
	toolReceipt  = "organizations.getDocumentCopyReceipt"
)

// Ledger outcomes of a provider call.
const (
	outcomeSucceeded = "succeeded"
	outcomeHandled   = "failed_but_handled"
	outcomeInFlight  = "in_flight_unknown"
)

func oddlynewKind(tool string) audit.OpKind {
	switch tool {
	case toolCreate, toolEdit, toolSettings, toolEnvelope, toolArchive, toolRestore, toolRepair, toolApply:
		return audit.OpWrite
	case toolPlan:
		return audit.OpCopyPlan
	}
	return audit.OpRead
}

// providerCall is one ledger entry before it becomes an Op.
type providerCall struct {
	seq     int
	tool    string
	outcome string
	value   *fastjson.Value
	code    *codeCall
	taken   bool // the run's result was given to this call
}

func (r *Reader) oddlynew(a *audit.Record, c *audit.Call, p *Payload) *audit.Record {
	*a = audit.Record{Dialect: Oddlynew, Tool: label(KnownTool(Oddlynew, c.Tool), c.Tool)}
	args, res := p.Args, p.Result
	sc := res.Get("structuredContent")
	isError := isError(p)
	a.Outcome = outcome(c, isError)

	// The code is read in place: what the reading keeps of it (targets,
	// keys, tool names) is copied apart (oddlynewOp), so that a record does
	// not hold a run's code.
	code := view(args, "code")
	r.p.calls = appendCalls(r.p.calls[:0], code)
	calls := r.p.calls
	hasWrite := false
	for _, cc := range calls {
		if oddlynewKind(cc.Tool) == audit.OpWrite {
			hasWrite = true
		}
	}

	switch {
	case !c.Responded:
		code := classify.Transport(c.TransportError)
		action := audit.ActionWaitThenRetry
		switch {
		case classify.NotApplied(code):
			action = classify.Action(code)
		case hasWrite:
			action = audit.ActionVerifyThenDecide
		}
		a.Failure = &audit.Failure{Code: code, Action: action, Message: c.TransportError}
	case c.Error != nil:
		a.Failure = r.rpcFailure(c, p)
	case isError:
		msg := runError(sc, res)
		if p.ToolError != nil {
			msg = p.ToolError.Message
		}
		rc := classify.Oddlynew(msg)
		a.Failure = &audit.Failure{Code: rc, Action: classify.Action(rc), Message: msg}
	}
	if c.Tool != "run" {
		return a
	}

	pcs, reported := r.ledger(sc, calls)
	if !reported {
		// No ledger: the run never answered, was refused before it ran, or
		// its envelope was not recorded. The code says what it would call.
		out := outcomeSucceeded
		if a.Failure != nil {
			out = outcomeHandled
			if classify.Uncertain(a.Failure.Code) {
				out = outcomeInFlight
			}
		}
		pcs = r.p.pcs[:0]
		for i := range calls {
			pcs = append(pcs, providerCall{seq: i + 1, tool: calls[i].Tool, outcome: out, code: &calls[i]})
		}
		r.p.pcs = pcs
		if len(pcs) == 1 && a.Failure == nil {
			pcs[0].value = sc.Get("result")
		}
	} else if sc.Get("outcomes") == nil {
		r.assignResult(pcs, sc.Get("result"))
	}

	// What a run intends is its code, formatting and CAS tokens aside.
	r.p.strip = appendStripped(r.p.strip[:0], code, "writeBasis", true)
	r.p.code = canon.AppendCollapsed(r.p.code[:0], r.p.strip)
	collapsed := r.p.code
	// The run's failure belongs to the call that failed last; a timeout
	// belongs to the run and leaves each call its own outcome.
	failedAt := -1
	if a.Failure != nil && !classify.Uncertain(a.Failure.Code) {
		for i := range pcs {
			if pcs[i].outcome == outcomeHandled {
				failedAt = i
			}
		}
	}
	for i := range pcs {
		op := r.oddlynewOp(&pcs[i], collapsed)
		switch pcs[i].outcome {
		case outcomeSucceeded:
			op.Status = audit.OpSucceeded
			r.readValue(&op, pcs[i].value)
		case outcomeInFlight:
			op.Status = audit.OpUncertain
			reason := audit.ReasonInFlightUnknown
			fcode := classify.CodeInFlightUnknown
			if a.Failure != nil && !c.Responded || a.Failure != nil && a.Failure.Code == classify.CodeExecutorTimedOut {
				reason, fcode = audit.ReasonNoResponse, a.Failure.Code
			}
			// findings.md §1: a timeout of createDocument with a creationId
			// is replayed; any other Oddlynew write is verified first.
			action := audit.ActionVerifyThenDecide
			if op.Tool == toolCreate && op.Key != "" {
				action = audit.ActionReplaySameRequest
			}
			op.Failure = &audit.Failure{Code: fcode, Action: action}
			if op.Kind == audit.OpWrite {
				op.Reason = reason
			}
		default:
			op.Status = audit.OpFailed
			if i == failedAt || failedAt < 0 && a.Failure != nil && len(pcs) == 1 {
				op.Failure = a.Failure
			} else {
				op.Failure = &audit.Failure{Code: "failed_but_handled", Action: audit.ActionUnknown}
			}
		}
		if a.Ops == nil {
			if cap(r.p.spareOps) >= len(pcs) {
				a.Ops, r.p.spareOps = r.p.spareOps[:0], nil
			} else {
				a.Ops = make([]audit.Op, 0, len(pcs))
			}
		}
		a.Ops = append(a.Ops, op)
	}
	return a
}

// runError returns the public error message of a failed run.
func runError(sc, res *fastjson.Value) string {
	if e := sc.Get("error"); e != nil {
		if e.Type() == fastjson.TypeString {
			return string(e.GetStringBytes())
		}
		if m := str(e, "message"); m != "" {
			return m
		}
	}
	for _, c := range res.GetArray("content") {
		if t := str(c, "text"); t != "" {
			return t
		}
	}
	return ""
}

// ledger returns the provider calls a run reported: outcomes (failed runs,
// with values, write-capable calls first, so sorted back by seq), else the
// calls ledger. It matches each to the code call of the same tool in text
// order. reported is false when the run reported neither. The calls live
// in the reader's scratch space until the next Analyze.
func (r *Reader) ledger(sc *fastjson.Value, calls []codeCall) (pcs []providerCall, reported bool) {
	pcs = r.p.pcs[:0]
	if outs := sc.GetArray("outcomes"); outs != nil {
		for i, o := range outs {
			seq := o.GetInt("seq")
			if seq == 0 {
				seq = i + 1
			}
			pc := providerCall{seq: seq, tool: str(o, "tool"), outcome: str(o, "outcome")}
			if !o.GetBool("omitted") {
				pc.value = o.Get("value")
			}
			pcs = append(pcs, pc)
		}
		slices.SortStableFunc(pcs, func(a, b providerCall) int { return cmp.Compare(a.seq, b.seq) })
	} else if rows := sc.GetArray("calls"); rows != nil {
		for _, row := range rows {
			n := row.GetInt("count")
			if n < 1 {
				n = 1
			}
			tool, outcome := str(row, "tool"), str(row, "outcome")
			for k := 0; k < n; k++ {
				pcs = append(pcs, providerCall{seq: len(pcs) + 1, tool: tool, outcome: outcome})
			}
		}
	} else {
		return nil, false
	}
	r.p.pcs = pcs
	for i := range pcs {
		// The n-th call of a tool is the n-th in the code, or the last
		// there when the code has fewer.
		n := 0
		for j := range i {
			if pcs[j].tool == pcs[i].tool {
				n++
			}
		}
		var last *codeCall
		for j, k := 0, 0; j < len(calls); j++ {
			if calls[j].Tool != pcs[i].tool {
				continue
			}
			last = &calls[j]
			if k == n {
				break
			}
			k++
		}
		pcs[i].code = last
	}
	if sc.GetArray("outcomes") == nil {
		// The ledger aggregates by tool and outcome, so its rows need not
		// be in execution order; the code's order is: a read written before
		// a write happened before it.
		all := true
		for i := range pcs {
			all = all && pcs[i].code != nil
		}
		if all {
			slices.SortStableFunc(pcs, func(a, b providerCall) int { return cmp.Compare(a.code.Pos, b.code.Pos) })
			for i := range pcs {
				pcs[i].seq = i + 1
			}
		}
	}
	return pcs, true
}

// assignResult gives the run's return value to the provider call it came
// from: the last call whose document, operation or copy it names, else the
// last call of the run. Arrays and objects of such values are split.
func (r *Reader) assignResult(pcs []providerCall, result *fastjson.Value) {
	if result == nil || len(pcs) == 0 {
		return
	}
	cands := r.p.cands[:0]
	switch result.Type() {
	case fastjson.TypeArray:
		for _, v := range result.GetArray() {
			if v.Type() == fastjson.TypeObject {
				cands = append(cands, v)
			}
		}
	case fastjson.TypeObject:
		if isProviderValue(result) {
			cands = append(cands, result)
		} else {
			o, _ := result.Object()
			o.Visit(func(_ []byte, v *fastjson.Value) {
				if v.Type() == fastjson.TypeObject && isProviderValue(v) {
					cands = append(cands, v)
				}
			})
		}
	}
	r.p.cands = cands
	for _, v := range cands {
		best := -1
		ids := [...][]byte{v.GetStringBytes("documentId"), v.GetStringBytes("operationId"), v.GetStringBytes("copyId"), v.GetStringBytes("creationId")}
		for i := len(pcs) - 1; i >= 0 && best < 0; i-- {
			if pcs[i].taken || pcs[i].outcome != outcomeSucceeded || pcs[i].code == nil {
				continue
			}
			cc := pcs[i].code
			for _, id := range ids {
				if len(id) > 0 && (cc.literal("documentId") == string(id) || cc.literal("operationId") == string(id) ||
					cc.literal("copyId") == string(id) || cc.literal("creationId") == string(id)) {
					best = i
					break
				}
			}
		}
		// A create's value names no id its code holds: its title does. The
		// first call still without a value takes it, so that equal titles
		// keep their order.
		if title := v.GetStringBytes("title"); best < 0 && len(title) > 0 {
			for i := 0; i < len(pcs); i++ {
				if !pcs[i].taken && pcs[i].outcome == outcomeSucceeded && pcs[i].code != nil && pcs[i].code.literal("title") == string(title) {
					best = i
					break
				}
			}
		}
		if best < 0 && len(cands) == 1 {
			for i := len(pcs) - 1; i >= 0; i-- {
				if !pcs[i].taken && pcs[i].outcome == outcomeSucceeded {
					best = i
					break
				}
			}
		}
		if best >= 0 {
			pcs[best].taken = true
			pcs[best].value = v
		}
	}
	// Values still unplaced go, in order, to the succeeded calls still
	// without one, when they are as many: a run returning [a, b] for its
	// two calls.
	var free []int
	for i := range pcs {
		if !pcs[i].taken && pcs[i].outcome == outcomeSucceeded {
			free = append(free, i)
		}
	}
	var left []*fastjson.Value
	for _, v := range cands {
		placed := false
		for i := range pcs {
			if pcs[i].value == v {
				placed = true
				break
			}
		}
		if !placed {
			left = append(left, v)
		}
	}
	if len(left) > 0 && len(left) == len(free) {
		for j, i := range free {
			pcs[i].taken, pcs[i].value = true, left[j]
		}
	}
}

func isProviderValue(v *fastjson.Value) bool {
	for _, k := range []string{"documentId", "writeConfirmed", "action", "state", "operationId", "copyId", "journalStatus", "saveState"} {
		if v.Exists(k) {
			return true
		}
	}
	return false
}

// oddlynewOp builds an Op from a provider call: targets and keys come from
// its structured value first, then from the literals of its code.
func (r *Reader) oddlynewOp(pc *providerCall, collapsed []byte) audit.Op {
	op := audit.Op{Seq: pc.seq, Tool: word(pc.tool), Kind: oddlynewKind(pc.tool)}
	cc := pc.code
	if cc == nil {
		cc = &codeCall{read: true}
	}
	// pick returns a copy: a literal is a view of the code.
	pick := func(k string) string {
		lit := cc.literal(k)
		if b := pc.value.GetStringBytes(k); len(b) > 0 && string(b) != lit {
			return string(b)
		}
		return strings.Clone(lit)
	}
	// withoutKey is the call's argument text without its key, collapsed:
	// what a re-send under a new key leaves unchanged.
	withoutKey := func(key string) []byte {
		r.p.strip = appendStripped(r.p.strip[:0], cc.Args, key, false)
		r.p.text = canon.AppendCollapsed(r.p.text[:0], r.p.strip)
		return r.p.text
	}
	tool := []byte(pc.tool)
	op.Target = pick("documentId")
	switch pc.tool {
	case toolCreate:
		op.Key, op.KeyKind = pick("creationId"), "creationId"
		op.KeyProtected = op.Key != ""
		title, typ := cc.literal("title"), cc.literal("type")
		if title == "" && typ == "" {
			title, typ = str(pc.value, "title"), str(pc.value, "type")
		}
		args := withoutKey("creationId")
		if title != "" || typ != "" {
			op.Identity = canon.Hash([]byte(title), []byte(typ))
		} else {
			op.Identity = canon.Hash(args)
		}
		var hs [2 * canon.HashLen]byte
		h := canon.AppendHash(canon.AppendHash(hs[:0], tool, args), tool, []byte(op.Key), collapsed)
		// The two fingerprints share one string.
		s := string(h)
		op.Binding, op.Intent = s[:canon.HashLen], s[canon.HashLen:]
	case toolPlan:
		op.Key, op.KeyKind = pick("copyId"), "copyId"
		op.Target = pick("sourceDocumentId")
		op.Binding = canon.Hash(tool, withoutKey("copyId"))
	case toolApply:
		op.Key, op.KeyKind = pick("operationId"), "operationId"
		op.KeyProtected = op.Key != ""
		// A replay carries the same operationId and planToken.
		op.Binding = canon.Hash(tool, []byte(op.Key), []byte(pick("planToken")))
		if d := str(pc.value, "destinationDocumentId"); d != "" {
			op.Target = d
		}
	case toolReceipt:
		op.Key, op.KeyKind = pick("operationId"), "operationId"
		if op.Key == "" {
			op.Key, op.KeyKind = pick("copyId"), "copyId"
		}
	case toolArchive, toolRestore:
		op.Protected = true
		op.Intent = canon.Hash(tool, []byte(op.Target), collapsed)
	case toolEdit, toolSettings, toolEnvelope, toolRepair:
		op.Intent = canon.Hash(tool, []byte(op.Target), collapsed)
	}
	return op
}

// readValue reads what a succeeded provider call returned.
func (r *Reader) readValue(op *audit.Op, v *fastjson.Value) {
	if v == nil || v.Type() != fastjson.TypeObject {
		return
	}
	op.Rev = v.GetInt64("revision")
	op.SaveState = str(v, "saveState")
	if str(v, "journalStatus") == "journal_corrupt" {
		op.JournalCorrupt = true
	}
	switch op.Tool {
	case toolCreate:
		op.Action = str(v, "action")
		op.DocumentID = str(v, "documentId")
	case toolEdit, toolSettings, toolEnvelope, toolRepair:
		if wc := v.Get("writeConfirmed"); wc == nil || wc.Type() != fastjson.TypeTrue {
			op.Status = audit.OpUncertain
			op.Reason = audit.ReasonNotWriteConfirmed
			op.Failure = &audit.Failure{Code: "write_not_confirmed", Action: audit.ActionVerifyThenDecide}
		}
	case toolPlan, toolApply, toolReceipt:
		r.readReceipt(op, v)
	}
	if op.Kind == audit.OpWrite && op.Status == audit.OpSucceeded && op.SaveState == "blocked" {
		op.Pending, op.Reason = true, audit.ReasonSaveBlocked
		code := classify.CodeSaveBlocked
		if str(v, "saveBlockedReason") == "document_size_limit" {
			code = classify.CodeDocumentSizeLimit
		}
		op.Failure = &audit.Failure{Code: code, Action: classify.Action(code), Message: str(v, "saveBlockedReason")}
	}
}

// readReceipt reads a copy receipt: its state, next action and lease.
func (r *Reader) readReceipt(op *audit.Op, v *fastjson.Value) {
	op.CopyState = str(v, "state")
	op.NextAction = str(v, "nextAction")
	if ra := str(v, "retryAfter"); ra != "" {
		if t, err := time.Parse(time.RFC3339Nano, ra); err == nil {
			op.RetryAfter = t.UTC()
		}
	}
	var code string
	switch {
	case op.CopyState == "completed" || op.NextAction == "done":
		return
	case op.CopyState == "blocked":
		code = classify.CodeCopyBlocked
	case op.CopyState == "expired":
		code = classify.CodeCopyExpired
	case op.NextAction == "create_new_plan":
		code = classify.CodeCopyCreateNewPlan
	case op.NextAction == "retry_apply":
		code = classify.CodeCopyRetryApply
	case op.NextAction == "wait_then_retry_apply" || op.CopyState == "applying":
		code = classify.CodeCopyWaitThenRetryApply
	case op.CopyState == "failed":
		code = classify.CodeCopyFailed
	default:
		return // ready, apply: nothing failed
	}
	var msgs []string
	for _, b := range v.GetArray("blockers") {
		if c := str(b, "code"); c != "" {
			msgs = append(msgs, c)
		}
	}
	op.Failure = &audit.Failure{Code: code, Action: classify.Action(code), Message: strings.Join(msgs, ",")}
	if op.Tool == toolApply {
		// The receipt is the durable record: the apply did not complete.
		op.Status = audit.OpFailed
	}
}

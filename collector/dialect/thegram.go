package dialect

import (
	"strings"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/valyala/fastjson"
)

// parsers holds reusable JSON parsers, one per document kept alive at once,
// and scratch space that lives for one Analyze.
type parsers struct {
	args, result, data fastjson.Parser
	buf                []byte
	// canon holds canonical arguments for a request hash.
	canon []byte
	// Oddlynew runs: the code's calls, the run's provider calls, the
	// candidates for its result, and the code with and without keys.
	calls      []codeCall
	pcs        []providerCall
	cands      []*fastjson.Value
	code, text []byte
	// members holds a gram_patch's member texts (patchMembers).
	members [len(patchKeys)][]byte
	// own gathers what a reading keeps of one call, for one string.
	own   []byte
	strip []byte
	// spareOps is a recycled record's operations (Recycle), for the next
	// run to fill; nil when there is none.
	spareOps []audit.Op
}

// parse returns the parsed value of raw, or nil when raw is empty or not
// JSON (the capture layer already rejected invalid JSON).
func parse(p *fastjson.Parser, raw []byte) *fastjson.Value {
	if len(raw) == 0 {
		return nil
	}
	v, err := p.ParseBytes(raw)
	if err != nil {
		return nil
	}
	return v
}

// str returns the string at keys, or "" when absent or not a string.
// The words the dialects know (tool names, states, outcomes) come back as
// constants rather than copies.
func str(v *fastjson.Value, keys ...string) string {
	if v == nil {
		return ""
	}
	b := v.GetStringBytes(keys...)
	if len(b) == 0 {
		return ""
	}
	if w, ok := words[string(b)]; ok {
		return w
	}
	return string(b)
}

// view returns the string at keys as a view of v's parser, or "": it is
// valid until the parser parses again, and must be copied to be kept.
func view(v *fastjson.Value, keys ...string) string {
	if v == nil {
		return ""
	}
	b := v.GetStringBytes(keys...)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// word returns s, as the constant when it is one of the words, else as a
// copy.
func word(s string) string {
	if w, ok := words[s]; ok {
		return w
	}
	return strings.Clone(s)
}

// words are the values that recur in every response; str returns them
// without allocating.
var words = func() map[string]string {
	m := map[string]string{}
	for _, w := range []string{
		toolCreate, toolEdit, toolSettings, toolEnvelope, toolArchive, toolRestore, toolRepair,
		toolPlan, toolApply, toolGet, toolReceipt,
		outcomeSucceeded, outcomeHandled, outcomeInFlight,
		"synced", "pending", "blocked", "saved", "created", "alreadyBootstrapped",
		"ready", "applying", "completed", "expired", "failed", "done",
		"create_new_plan", "retry_apply", "wait_then_retry_apply", "apply",
		"ok", "journal_corrupt", "document_size_limit",
	} {
		m[w] = w
	}
	return m
}()

// rpcFailure classifies a JSON-RPC error response.
func (r *Reader) rpcFailure(c *audit.Call, p *Payload) *audit.Failure {
	dataCode := str(p.ErrorData, "code")
	if dataCode == "" {
		dataCode = p.ErrorDataCode
	}
	if dataCode == "" && c.Error.Code == -32000 && strings.Contains(strings.ToLower(c.Error.Message), "is not running") {
		// The desktop helper's message, where data.code was not carried
		// (an OTLP span records the code and the message only).
		dataCode = "E_APP_NOT_RUNNING"
	}
	code := classify.RPC(c.Error.Code, dataCode)
	return &audit.Failure{Code: code, Action: classify.Action(code), Message: c.Error.Message}
}

// patchKeys are the members of a gram_patch's arguments that its intent
// (the first four) and binding (all) hash, in that order.
var patchKeys = [...]string{"path", "operations", "effective_at", "context", "base_revision", "expected_hash"}

// patchMembers returns the canonical text of the members patchKeys name
// (nil for one absent), cut from canonical, the canonical text of args;
// nil when it cannot stand for canon.Append of args.Get(key): args is not
// an object, or has a repeated key (Get takes the first, the canonical
// form the last), which the count of members shows.
func (r *Reader) patchMembers(args *fastjson.Value, canonical []byte) [][]byte {
	if args == nil || len(canonical) == 0 {
		return nil
	}
	o, err := args.Object()
	if err != nil {
		return nil
	}
	vals := r.p.members[:]
	if canon.Members(canonical, patchKeys[:], vals) != o.Len() {
		return nil
	}
	return vals
}

func (r *Reader) thegram(a *audit.Record, one *[1]audit.Op, c *audit.Call, p *Payload) *audit.Record {
	*a = audit.Record{Dialect: Thegram, Tool: label(KnownTool(Thegram, c.Tool), c.Tool)}
	args, res := p.Args, p.Result
	sc := res.Get("structuredContent")
	isError := isError(p)
	a.Outcome = outcome(c, isError)

	op := audit.Op{Tool: c.Tool}
	switch c.Tool {
	case "gram_patch":
		op.Kind = audit.OpWrite
		op.KeyKind = "request_id"
		// The canonical text of each member, taken from the arguments'
		// canonical text when that holds them all, else made again.
		vals := r.patchMembers(args, p.CanonicalArgs)
		var hs [2 * canon.HashLen]byte
		h := hs[:0]
		b := r.p.buf[:0]
		b = append(b, "gram_patch\x00"...)
		for i, k := range patchKeys {
			if i == 4 {
				h = canon.AppendHash(h, b)
			}
			switch {
			case vals == nil:
				b = canon.Append(b, args.Get(k))
			case vals[i] == nil:
				b = append(b, "null"...)
			default:
				b = append(b, vals[i]...)
			}
			b = append(b, 0)
		}
		h = canon.AppendHash(h, b)
		r.p.buf = b
		// The target, the key and the two fingerprints share one string.
		path, key := view(args, "path"), view(args, "request_id")
		t := append(append(append(r.p.own[:0], path...), key...), h...)
		r.p.own = t
		s := string(t)
		op.Target, s = s[:len(path)], s[len(path):]
		op.Key, s = s[:len(key)], s[len(key):]
		op.Intent, op.Binding = s[:canon.HashLen], s[canon.HashLen:]
		op.KeyProtected = op.Key != ""
		if br := args.Get("base_revision"); br != nil && br.Type() == fastjson.TypeNumber {
			op.HasBaseRev, op.BaseRev = true, br.GetInt64()
		}
	case "gram_create":
		op.Kind = audit.OpWrite
		op.Protected = true
		op.Target = str(args, "path")
	default:
		if strings.HasPrefix(c.Tool, "gram_") || a.Tool == "other" {
			op.Kind = audit.OpRead
		}
		op.Target = str(args, "path")
	}
	if op.Target == "" {
		op.Target = str(sc, "path")
	}

	switch {
	case !c.Responded:
		code := classify.Transport(c.TransportError)
		action := audit.ActionWaitThenRetry
		switch op.Kind {
		case audit.OpWrite:
			action = audit.ActionVerifyThenDecide
			if c.Tool == "gram_patch" && op.KeyProtected {
				action = audit.ActionReplaySameRequest
			}
		}
		if classify.NotApplied(code) {
			action = classify.Action(code)
		}
		a.Failure = &audit.Failure{Code: code, Action: action, Message: c.TransportError}
	case c.Error != nil:
		a.Failure = r.rpcFailure(c, p)
	case isError:
		code, msg := toolError(p, sc.Get("error"))
		if code == "" {
			code, msg = codeFromText(res)
		}
		code = classify.Thegram(code, msg)
		a.Failure = &audit.Failure{Code: code, Action: classify.Action(code), Message: msg}
	}

	if a.Failure != nil {
		op.Failure = a.Failure
		if op.Kind == audit.OpWrite && classify.Uncertain(a.Failure.Code) {
			op.Status = audit.OpUncertain
			op.Reason = classify.Reason(a.Failure.Code)
		} else {
			op.Status = audit.OpFailed
		}
	} else {
		op.Status = audit.OpSucceeded
		op.Rev = sc.GetInt64("rev")
		op.Sync = str(sc, "sync", "state")
		op.Replayed = sc.GetBool("replayed")
		if op.Kind == audit.OpWrite && op.Sync != "" && op.Sync != "synced" {
			op.Pending, op.Reason = true, audit.ReasonSyncNotConfirmed
		}
	}
	one[0] = op
	a.Ops = one[:]
	return a
}

// toolError returns the code and message of a tool error: those of its
// error object e, or those its decoder knew without a result.
func toolError(p *Payload, e *fastjson.Value) (code, msg string) {
	if te := p.ToolError; te != nil {
		return te.Code, te.Message
	}
	return str(e, "code"), str(e, "message")
}

// codeFromText reads "CODE: message" from the first text content, for tool
// errors that carry no structured content.
func codeFromText(res *fastjson.Value) (code, msg string) {
	for _, c := range res.GetArray("content") {
		t := str(c, "text")
		if t == "" {
			continue
		}
		if i := strings.Index(t, ":"); i > 0 && isCode(t[:i]) {
			return t[:i], strings.TrimSpace(t[i+1:])
		}
		return "", t
	}
	return "", ""
}

func isCode(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c == '_' || c >= '0' && c <= '9') {
			return false
		}
	}
	return len(s) > 0
}

// generic reads a call of a server without a dialect: failures are
// classified where a code is recognizable, and writes are recognized only
// where configuration names the tool.
func (r *Reader) generic(a *audit.Record, one *[1]audit.Op, c *audit.Call, p *Payload, writes map[string]WriteTool) *audit.Record {
	*a = audit.Record{Dialect: Generic}
	args, res := p.Args, p.Result
	isError := isError(p)
	a.Outcome = outcome(c, isError)
	wt, isWrite := writes[c.Tool]
	a.Tool = label(isWrite, c.Tool)
	switch {
	case !c.Responded:
		code := classify.Transport(c.TransportError)
		action := audit.ActionUnknown
		switch {
		case classify.NotApplied(code):
			action = classify.Action(code)
		case isWrite:
			action = audit.ActionVerifyThenDecide
		}
		a.Failure = &audit.Failure{Code: code, Action: action, Message: c.TransportError}
	case c.Error != nil:
		a.Failure = r.rpcFailure(c, p)
	case isError:
		code, msg := toolError(p, res.Get("structuredContent", "error"))
		if code == "" {
			code, msg = codeFromText(res)
		}
		a.Failure = &audit.Failure{Code: code, Action: classify.Action(code), Message: msg}
		if code == "" {
			a.Failure.Code = "tool_error"
		}
	}
	if !isWrite {
		return a
	}
	op := audit.Op{Tool: c.Tool, Kind: audit.OpWrite, Target: argString(args, wt.TargetArg)}
	if wt.KeyArg != "" {
		op.Key, op.KeyKind = argString(args, wt.KeyArg), wt.KeyArg
		op.KeyProtected = op.Key != ""
		b := canon.Append(r.p.buf[:0], args)
		op.Binding = canon.Hash([]byte(c.Tool), b)
		r.p.buf = b
	}
	switch {
	case a.Failure == nil:
		op.Status = audit.OpSucceeded
	case classify.Uncertain(a.Failure.Code):
		op.Status, op.Failure, op.Reason = audit.OpUncertain, a.Failure, classify.Reason(a.Failure.Code)
	default:
		op.Status, op.Failure = audit.OpFailed, a.Failure
	}
	one[0] = op
	a.Ops = one[:]
	return a
}

// argString returns a top-level argument rendered as text.
func argString(args *fastjson.Value, key string) string {
	v := args.Get(key)
	if v == nil {
		return ""
	}
	if v.Type() == fastjson.TypeString {
		return string(v.GetStringBytes())
	}
	return string(v.MarshalTo(nil))
}

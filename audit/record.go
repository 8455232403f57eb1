package audit

import (
	"slices"
	"strings"
	"time"
)

// OpKind separates reads, writes and the other operations the detector tracks.
type OpKind uint8

// Operation kinds.
const (
	OpOther OpKind = iota
	OpRead
	OpWrite
	// OpCopyPlan is organizations.planDocumentCopy: it writes nothing to the
	// destination but its receipts are tracked.
	OpCopyPlan
)

// OpStatus is what the response says about one operation.
type OpStatus uint8

// Operation statuses.
const (
	// OpSucceeded: the server answered and accepted the operation.
	OpSucceeded OpStatus = iota + 1
	// OpFailed: the server refused it; nothing was applied.
	OpFailed
	// OpUncertain: nobody knows whether it was applied.
	OpUncertain
)

// Op is one audited operation: a Thegram tool call, or one provider call
// inside an Oddlynew run. Its dialect reads it once, when the call arrives;
// the store keeps it beside the call and the detector correlates it.
type Op struct {
	// The fields are ordered by size, the flags last, so that no padding
	// sits between them: a call waiting for its watermark holds its
	// operations.

	Seq  int
	Tool string
	// Target is the document: a Thegram path or an Oddlynew documentId.
	Target string
	// Key is the idempotency key and KeyKind its name (request_id,
	// creationId, copyId, operationId).
	Key     string
	KeyKind string
	// Intent fingerprints what the operation does, for double-apply checks:
	// equal intents are "the same edit". Empty when not comparable.
	Intent string
	// Binding fingerprints everything the idempotency key binds; two
	// bindings under one key are a key reuse.
	Binding string
	// Identity fingerprints a create's identity (title and type) regardless
	// of its key, for duplicate creates and blind re-creates.
	Identity string
	// Failure classifies a failed or uncertain operation.
	Failure *Failure
	// Reason is why an accepted or uncertain write is not yet durable.
	Reason Reason

	// What the response tells.
	BaseRev   int64
	Rev       int64 // revision reported by the response, 0 if none
	Sync      string
	SaveState string
	// Create results (Oddlynew).
	Action     string // created | alreadyBootstrapped
	DocumentID string
	// Copy receipts.
	CopyState  string
	NextAction string
	RetryAfter time.Time

	Kind   OpKind
	Status OpStatus
	// KeyProtected: re-sending with the same key is a replay, never a
	// second application (gram_patch, createDocument with creationId,
	// applyDocumentCopy).
	KeyProtected bool
	// Protected: re-sending can never apply twice, whatever the key
	// (gram_create, archiveDocument, restoreDocument).
	Protected bool
	// Pending is set on accepted writes whose durability still needs proof
	// (sync not confirmed, save blocked).
	Pending    bool
	HasBaseRev bool
	Replayed   bool
	// Reads that find corruption.
	JournalCorrupt bool
}

// Document returns the document the operation is on: the id a create
// answered with, else its target.
func (o *Op) Document() string {
	if o.DocumentID != "" {
		return o.DocumentID
	}
	return o.Target
}

// Record is one call and what its dialect read in it: its outcome, the
// classification of its failure and the operations inside it. The reading
// needs no correlation state, so it is made once, where the call arrives,
// and travels with the call through the store to the detector and the
// sinks.
type Record struct {
	Call    *Call
	Dialect string
	Outcome Outcome
	// Tool is the bounded tool label: Call.Tool when the dialect knows the
	// tool, else "other".
	Tool string
	// Failure classifies the call as a whole; nil on success.
	Failure *Failure
	// Ops are the audited operations, in the order they ran.
	Ops []Op
	// RequestHash fingerprints the request (tool and canonical arguments)
	// of a call refused for bad input or missing authority, so that an
	// identical re-send is recognized as a wasted retry; empty otherwise.
	RequestHash string
}

// Documents returns the documents the call touched, read or written, each
// once, in the order its operations name them.
func (r *Record) Documents() []string {
	var docs []string
	for i := range r.Ops {
		for _, d := range [...]string{r.Ops[i].Target, r.Ops[i].DocumentID} {
			if d != "" && !slices.Contains(docs, d) {
				docs = append(docs, d)
			}
		}
	}
	return docs
}

// OpFailures returns the failures of the operations that are not the
// call's own failure (the same *Failure): the failed provider calls inside
// an Oddlynew run.
func (r *Record) OpFailures() []Failure {
	var fs []Failure
	for i := range r.Ops {
		if f := r.Ops[i].Failure; f != nil && f != r.Failure {
			fs = append(fs, *f)
		}
	}
	return fs
}

// Writes counts the write attempts in the call.
func (r *Record) Writes() int {
	n := 0
	for i := range r.Ops {
		if r.Ops[i].Kind == OpWrite {
			n++
		}
	}
	return n
}

// Batch is records delivered by one source: the stream they came on (an
// exporter's resource, a poster). A source's calls hold back the event
// time of the partitions they are for.
type Batch struct {
	Source  string
	Records []*Record
}

// Lean returns the record as correlation keeps it: the call without its
// payloads (arguments, result, error), every text copied apart from the
// decoded request it was cut from, so that the request's memory is freed
// (the reading's texts and failures too: a failure's message, the bounded
// tool are views of the request). The record and its call are one
// allocation, and all the texts another: a call waiting for its watermark
// was a dozen small objects, each rounded up to its size class and each
// for the collector to visit. Whoever keeps one of the texts past the
// record keeps them all: copy it instead.
func (r *Record) Lean() *Record {
	c := r.Call
	callTexts := [...]string{c.ID, c.Fingerprint, c.Server, c.Session, c.Client, c.Tenant, c.TraceID, c.SpanID, c.RPCID, c.Method, c.Tool}
	// The failures, each once: an operation may share the call's.
	var fails [4]*Failure
	failures := fails[:0]
	addFailure := func(f *Failure) {
		if f != nil && !slices.Contains(failures, f) {
			failures = append(failures, f)
		}
	}
	addFailure(r.Failure)
	n := len(r.RequestHash)
	if r.Tool != c.Tool {
		n += len(r.Tool)
	}
	for _, s := range callTexts {
		n += len(s)
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		n += len(op.Target) + len(op.Key) + len(op.Intent) + len(op.Binding) + len(op.Identity)
		if op.DocumentID != op.Target {
			n += len(op.DocumentID)
		}
		if op.Tool != c.Tool {
			n += len(op.Tool)
		}
		addFailure(op.Failure)
	}
	for _, f := range failures {
		n += len(f.Code) + len(f.Message)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range callTexts {
		b.WriteString(s)
	}
	if r.Tool != c.Tool {
		b.WriteString(r.Tool)
	}
	b.WriteString(r.RequestHash)
	for _, f := range failures {
		b.WriteString(f.Code)
		b.WriteString(f.Message)
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		b.WriteString(op.Target)
		b.WriteString(op.Key)
		if op.DocumentID != op.Target {
			b.WriteString(op.DocumentID)
		}
		if op.Tool != c.Tool {
			b.WriteString(op.Tool)
		}
		b.WriteString(op.Intent)
		b.WriteString(op.Binding)
		b.WriteString(op.Identity)
	}
	// Cut back in the order written.
	texts := b.String()
	cut := func(s string) string {
		if s == "" {
			return ""
		}
		t := texts[:len(s)]
		texts = texts[len(s):]
		return t
	}
	l := &struct {
		r Record
		c Call
	}{r: *r}
	l.c = Call{
		ID: cut(c.ID), Fingerprint: cut(c.Fingerprint), Time: c.Time, Duration: c.Duration,
		Server: cut(c.Server), Session: cut(c.Session), Client: cut(c.Client),
		Tenant: cut(c.Tenant), TraceID: cut(c.TraceID), SpanID: cut(c.SpanID),
		RPCID: cut(c.RPCID), Method: cut(c.Method), Tool: cut(c.Tool),
		Responded: c.Responded, Received: c.Received, RespSum: c.RespSum,
	}
	l.r.Call = &l.c
	if r.Tool == c.Tool {
		l.r.Tool = l.c.Tool
	} else {
		l.r.Tool = cut(r.Tool)
	}
	l.r.RequestHash = cut(r.RequestHash)
	var copies [4]*Failure
	copied := copies[:0]
	if len(failures) > 0 {
		fs := make([]Failure, len(failures))
		for i, f := range failures {
			fs[i] = Failure{Code: cut(f.Code), Action: f.Action, Message: cut(f.Message)}
			copied = append(copied, &fs[i])
		}
	}
	copyOf := func(f *Failure) *Failure {
		if f == nil {
			return nil
		}
		return copied[slices.Index(failures, f)]
	}
	l.r.Failure = copyOf(r.Failure)
	if len(r.Ops) > 0 {
		l.r.Ops = make([]Op, len(r.Ops))
		for i, op := range r.Ops {
			target := cut(op.Target)
			op.Key = cut(op.Key)
			if op.DocumentID == op.Target {
				op.DocumentID = target
			} else {
				op.DocumentID = cut(op.DocumentID)
			}
			op.Target = target
			// The tool is most often the call's own (a run's provider
			// calls name theirs): share the call's copy.
			if op.Tool == c.Tool {
				op.Tool = l.c.Tool
			} else {
				op.Tool = cut(op.Tool)
			}
			op.Intent, op.Binding, op.Identity = cut(op.Intent), cut(op.Binding), cut(op.Identity)
			op.Failure = copyOf(op.Failure)
			l.r.Ops[i] = op
		}
	}
	return &l.r
}

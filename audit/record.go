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
// decoded request it was cut from, so that the request's memory is freed.
func (r *Record) Lean() *Record {
	c := r.Call
	lc := &Call{
		ID: strings.Clone(c.ID), Fingerprint: strings.Clone(c.Fingerprint), Time: c.Time, Duration: c.Duration,
		Server: strings.Clone(c.Server), Session: strings.Clone(c.Session), Client: strings.Clone(c.Client),
		Tenant: strings.Clone(c.Tenant), TraceID: strings.Clone(c.TraceID), SpanID: strings.Clone(c.SpanID),
		RPCID: strings.Clone(c.RPCID), Method: strings.Clone(c.Method), Tool: strings.Clone(c.Tool),
		Responded: c.Responded, Received: c.Received,
	}
	l := *r
	l.Call = lc
	if len(r.Ops) > 0 {
		// The reading's fingerprints and words are its own; targets and
		// keys may be cut from a run's code.
		l.Ops = make([]Op, len(r.Ops))
		for i, op := range r.Ops {
			op.Target, op.Key, op.DocumentID = strings.Clone(op.Target), strings.Clone(op.Key), strings.Clone(op.DocumentID)
			// The tool is most often the call's own (a run's provider
			// calls name theirs): share the call's copy.
			if op.Tool == c.Tool {
				op.Tool = lc.Tool
			} else {
				op.Tool = strings.Clone(op.Tool)
			}
			l.Ops[i] = op
		}
	}
	return &l
}

// Package detect is the write ledger and the detector: it puts calls in
// event-time order, drops duplicate observations, follows every write
// attempt to a state and reports findings (findings.md §2–§4).
package detect

import (
	"container/heap"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// Detector consumes calls and reports to its sinks. It is not safe for
// concurrent use: one goroutine feeds it.
type Detector struct {
	cfg    Config
	reader *dialect.Reader
	sinks  []audit.Sink

	// Reorder buffer and event-time clock.
	buf     callHeap
	arrival uint64
	maxSeen time.Time
	clock   time.Time // time of the last processed call (the watermark)
	now     time.Time // the event time of what is being processed
	current *audit.Call
	dedupe  dedupe

	// Correlation state.
	docs      map[docKey]*docState
	keys      map[keyKey]*keyState
	creates   map[createKey]*createList
	failed    map[string]*failedReq
	deadlines writeHeap
	lastSweep time.Time
	scope     struct{ server, tenant, scope string } // the last scopeOf
	// The correlation maps' keys in the order their entries age, for sweep.
	docQ    expiry[docItem]
	keyQ    expiry[keyItem]
	createQ expiry[createItem]
	failedQ expiry[string]

	ids recentIDs

	// Stats summarizes what was processed.
	Stats Stats
	// DropPayloads makes the detector forget a call's raw arguments and
	// result once its dialect has read them, as the live service does
	// (its store keeps them); sinks then see calls without payloads.
	DropPayloads bool
	// OnDuplicate, if set, is told of every call dropped as a second
	// observation of an exchange already taken.
	OnDuplicate func(c *audit.Call)
}

// New returns a detector. Sinks receive every call report, write state
// change and finding in processing order.
func New(cfg Config, dc dialect.Config, sinks ...audit.Sink) *Detector {
	return &Detector{
		cfg:     cfg,
		reader:  dialect.NewReader(dc),
		sinks:   sinks,
		dedupe:  newDedupe(),
		docs:    map[docKey]*docState{},
		keys:    map[keyKey]*keyState{},
		creates: map[createKey]*createList{},
		failed:  map[string]*failedReq{},
		Stats:   newStats(),
		ids:     newRecentIDs(recentIDsKept),
	}
}

// Add takes one call. It is processed once the watermark passes its time
// (the latest time seen minus the lateness bound); duplicates of a call
// already taken are counted and dropped.
func (d *Detector) Add(c *audit.Call) {
	seen, merged := d.dedupe.seen(c)
	if merged != nil {
		// A second observer saw the response the first one missed.
		d.readCall(merged)
	}
	// The same call again (a re-sent request, a file given twice) is
	// dropped however late it comes, within the last recentIDsKept calls.
	if seen == nil || !d.ids.add(c.ID) {
		d.Stats.Duplicates++
		if d.OnDuplicate != nil {
			d.OnDuplicate(c)
		}
		return
	}
	d.readCall(seen)
	if c.Time.After(d.maxSeen) {
		d.maxSeen = c.Time
	}
	d.arrival++
	d.buf.push(bufCall{c, d.arrival, seen})
	d.release(d.maxSeen.Add(-d.lateness()))
}

func (d *Detector) lateness() time.Duration { return d.cfg.Lateness }

// readCall has the dialect read a call as it arrives. With DropPayloads the
// call's raw arguments and result are then forgotten: the reorder buffer
// holds only what the detector needs.
func (d *Detector) readCall(s *seenCall) {
	c := s.c
	s.a = d.reader.Analyze(c)
	if f := s.a.Failure; f != nil && (f.Action == audit.ActionFixInput || f.Action == audit.ActionReauthorize) {
		s.reqHash = canon.Hash([]byte(c.Tool), canon.Bytes(c.Arguments))
	}
	if d.DropPayloads {
		c.Arguments, c.Result = nil, nil
	}
}

// Now returns the event time of what the detector is processing: the call
// in hand, or the watermark it is advancing to. Sinks use it to tell output
// caused by replayed calls from new output.
func (d *Detector) Now() time.Time { return d.now }

// Current returns the call being processed, or nil while windows close on
// their own (AdvanceTo).
func (d *Detector) Current() *audit.Call { return d.current }

// Watermark returns the event time up to which calls have been processed.
func (d *Detector) Watermark() time.Time { return d.clock }

// MaxSeen returns the latest event time taken.
func (d *Detector) MaxSeen() time.Time { return d.maxSeen }

// Buffered returns how many calls wait in the reorder buffer.
func (d *Detector) Buffered() int { return d.buf.Len() }

// AdvanceTo moves the watermark to t: buffered calls up to t are processed
// and verification windows that ended before t close. The live service
// calls it as wall-clock time passes without traffic.
func (d *Detector) AdvanceTo(t time.Time) {
	d.release(t)
	if t.After(d.clock) {
		d.now, d.current = t, nil
		d.expire(t)
		d.clock = t
	}
}

// Flush processes every buffered call, as at the end of a finite input.
// Windows still open at the last call's time stay open: their writes remain
// pending and produce nothing.
func (d *Detector) Flush() {
	for d.buf.Len() > 0 {
		d.process(d.buf.pop())
	}
}

func (d *Detector) release(watermark time.Time) {
	for d.buf.Len() > 0 && !d.buf[0].c.Time.After(watermark) {
		d.process(d.buf.pop())
	}
}

// process handles one call in event-time order.
func (d *Detector) process(b bufCall) {
	c := b.c
	b.seen.processed = true
	d.now, d.current = c.Time, c
	if c.Time.Before(d.clock) {
		d.Stats.Late++
	} else {
		d.expire(c.Time)
		d.clock = c.Time
	}
	d.sweep()

	a := b.seen.a
	b.seen.a = dialect.Analysis{} // the buffer entry may outlive the call
	rep := &audit.CallReport{Call: c, Outcome: a.Outcome, Dialect: a.Dialect, Failure: a.Failure, ToolLabel: "other"}
	if a.Known {
		rep.ToolLabel = c.Tool
	}
	for i := range a.Ops {
		op := &a.Ops[i]
		if op.Failure != nil && op.Failure != a.Failure {
			rep.OpFailures = append(rep.OpFailures, *op.Failure)
		}
		if op.Kind == audit.OpWrite {
			rep.Writes++
		}
	}
	d.Stats.call(rep)
	for _, s := range d.sinks {
		s.Call(rep)
	}

	ev := &event{call: c, actor: actorOf(c), scope: d.scopeOf(c)}
	d.checkWasted(ev, &a, b.seen.reqHash)
	for i := range a.Ops {
		op := &a.Ops[i]
		switch op.Kind {
		case audit.OpRead:
			d.read(ev, op)
		case audit.OpWrite:
			d.write(ev, op)
		case audit.OpCopyPlan:
			d.plan(ev, op)
		}
		d.checkIntegrity(ev, op)
	}
	if len(a.Ops) == 0 && a.Failure != nil && a.Failure.Code == "E_INTEGRITY" {
		d.integrity(ev, "", a.Failure)
	}
}

// event is the context of the call being processed.
type event struct {
	call  *audit.Call
	actor actor
	scope string
}

// actor identifies who sent a call: its session ('s'), else its client
// ('c'). Calls with neither share one anonymous actor, the zero value.
type actor struct {
	kind byte
	id   string
}

// actorOf returns the actor of a call.
func actorOf(c *audit.Call) actor {
	if c.Session != "" {
		return actor{'s', c.Session}
	}
	if c.Client != "" {
		return actor{'c', c.Client}
	}
	return actor{}
}

// scopeOf separates servers and tenants: nothing correlates across them.
// Calls of one server and tenant come in runs, so the last scope is kept
// rather than built again.
func (d *Detector) scopeOf(c *audit.Call) string {
	if c.Server != d.scope.server || c.Tenant != d.scope.tenant || d.scope.scope == "" {
		d.scope.server, d.scope.tenant = c.Server, c.Tenant
		d.scope.scope = c.Server + "\x00" + c.Tenant
	}
	return d.scope.scope
}

type docKey struct{ scope, doc string }

// The items of the expiry queues: a map key and its entry.
type (
	docItem struct {
		key docKey
		s   *docState
	}
	keyItem struct {
		key keyKey
		s   *keyState
	}
	createItem struct {
		key createKey
		l   *createList
	}
)

type keyKey struct{ scope, kind, key string }

type createKey struct {
	scope    string
	actor    actor
	identity string
}

// docState is what is remembered about one document.
type docState struct {
	// accepted holds the first accepted non-idempotent write of each intent.
	accepted map[string]*writeRec
	// uncertain holds writes whose outcome was unknown, in time order, for
	// the correlation window, whether or not they were resolved since.
	uncertain []*writeRec
	// proof holds accepted writes awaiting a read that proves durability.
	proof     []*writeRec
	integrity time.Time // when integrity was last reported
	last      time.Time
	queue     stamp // in Detector.docQ
}

// keyState is what is remembered about one idempotency key.
type keyState struct {
	binding     string
	bindingCall string
	bindingTime time.Time
	reused      map[string]bool // bindings already reported as reuse
	uncertain   []*writeRec
	lease       lease
	blocked     *blockedPlan
	last        time.Time
	queue       stamp // in Detector.keyQ
}

type lease struct {
	until    time.Time
	callID   string
	callTime time.Time
	reported bool
}

type blockedPlan struct {
	callID   string
	time     time.Time
	binding  string
	action   audit.RetryAction
	reported bool
}

// createList holds the creates of one actor and identity.
type createList struct {
	recs  []*createRec
	queue stamp // in Detector.createQ
}

// createRec remembers a create for duplicate and blind re-create checks.
type createRec struct {
	w       *writeRec
	created bool
}

// failedReq remembers a request refused with fix_input or reauthorize.
type failedReq struct {
	callID   string
	time     time.Time
	code     string
	action   audit.RetryAction
	reported bool
}

// writeRec is one write attempt in the ledger.
type writeRec struct {
	audit.Write
	op       dialect.Op
	actor    actor
	deadline time.Time
	// readSince is set once the writer read the target after the write.
	readSince bool
	unsafe    bool
	index     int // in the deadline heap, -1 when not there
	// follows is the earlier attempt this one replays under the same key
	// while both are uncertain: one logical write, one unverified finding.
	follows *writeRec
}

func (d *Detector) doc(scope, target string, t time.Time) *docState {
	k := docKey{scope, target}
	s := d.docs[k]
	if s == nil {
		s = &docState{accepted: map[string]*writeRec{}}
		d.docs[k] = s
	}
	s.last = t
	if s.queue.needs(t) {
		d.docQ.push(docItem{k, s}, s.queue.set(t))
	}
	return s
}

func (d *Detector) key(scope, kind, key string, t time.Time) *keyState {
	k := keyKey{scope, kind, key}
	s := d.keys[k]
	if s == nil {
		s = &keyState{}
		d.keys[k] = s
	}
	s.last = t
	if s.queue.needs(t) {
		d.keyQ.push(keyItem{k, s}, s.queue.set(t))
	}
	return s
}

// within reports whether later is at most w after earlier.
func within(earlier, later time.Time, w time.Duration) bool {
	return !later.Before(earlier) && later.Sub(earlier) <= w
}

// read handles a read: it resolves the reader's uncertain writes on the
// target, proves pending syncs and saves, and renews copy leases.
func (d *Detector) read(ev *event, op *dialect.Op) {
	if op.Status != audit.OpSucceeded {
		return
	}
	t := ev.call.Time
	if op.Tool == "organizations.getDocumentCopyReceipt" && op.Key != "" {
		ks := d.key(ev.scope, op.KeyKind, op.Key, t)
		d.renewLease(ks, ev, op)
		// The receipt is the copy's durable record: reading it establishes
		// what became of the reader's uncertain applies (findings.md §2).
		for _, u := range ks.uncertain {
			if u.actor == ev.actor && !u.readSince {
				u.readSince = true
				if u.State == audit.StatePending && u.op.Status == audit.OpUncertain {
					d.setState(u, audit.StateResolved, t)
				}
			}
		}
	}
	if op.Target == "" {
		return
	}
	dk := docKey{ev.scope, op.Target}
	ds, ok := d.docs[dk]
	if !ok {
		return
	}
	ds.last = t
	if ds.queue.needs(t) {
		d.docQ.push(docItem{dk, ds}, ds.queue.set(t))
	}
	for _, w := range ds.uncertain {
		if w.actor == ev.actor && !w.readSince {
			w.readSince = true
			if w.State == audit.StatePending && w.op.Status == audit.OpUncertain {
				d.setState(w, audit.StateResolved, t)
			}
		}
	}
	kept := ds.proof[:0]
	for _, w := range ds.proof {
		if w.State == audit.StatePending && proves(op, w) {
			d.setState(w, audit.StateDurable, t)
			continue
		}
		if w.State == audit.StatePending {
			kept = append(kept, w)
		}
	}
	ds.proof = kept
}

// proves reports whether a read shows a pending write durable: synced at its
// revision or later, or a save no longer blocked.
func proves(read *dialect.Op, w *writeRec) bool {
	switch w.Reason {
	case audit.ReasonSyncNotConfirmed:
		return read.Sync == "synced" && read.Rev >= w.op.Rev
	case audit.ReasonSaveBlocked:
		return read.SaveState != "" && read.SaveState != "blocked" && (read.Rev == 0 || read.Rev >= w.op.Rev)
	}
	return false
}

// write follows one write attempt.
func (d *Detector) write(ev *event, op *dialect.Op) {
	c, t := ev.call, ev.call.Time
	w := &writeRec{
		Write: audit.Write{
			CallID: c.ID, Seq: op.Seq, Time: t, Server: c.Server, Tenant: c.Tenant, Session: c.Session,
			Tool: op.Tool, Document: op.Target, Key: op.Key,
		},
		op:    *op,
		actor: ev.actor,
		index: -1,
	}
	if op.Failure != nil {
		w.Action = op.Failure.Action
	}
	if op.DocumentID != "" {
		w.Document = op.DocumentID
	}

	// A re-send under the same key with the same binding is a replay: it
	// cannot apply twice, and if it succeeds it settles earlier attempts.
	var ks *keyState
	replay := false
	if op.Key != "" {
		ks = d.key(ev.scope, op.KeyKind, op.Key, t)
		replay = op.KeyProtected && ks.binding != "" && ks.binding == op.Binding
		if replay && op.Status == audit.OpUncertain {
			for _, u := range ks.uncertain {
				if u.State == audit.StatePending && u.op.Binding == op.Binding {
					w.follows = u
					break
				}
			}
		}
		if op.KeyProtected && op.Status == audit.OpSucceeded && (ks.binding == "" || ks.binding == op.Binding) {
			for _, u := range ks.uncertain {
				if u.State == audit.StatePending {
					d.setState(u, audit.StateResolved, t)
				}
				u.readSince = true
			}
			ks.uncertain = nil
		}
		if op.KeyKind == "operationId" {
			// The platform mints operationIds; a wrong planToken under one
			// is refused with replay_same_request, not a second intent.
			if ks.binding == "" {
				ks.binding, ks.bindingCall, ks.bindingTime = op.Binding, c.ID, t
			}
		} else {
			d.checkReuse(ev, op, ks)
		}
	}

	var ds *docState
	if w.Document != "" {
		ds = d.doc(ev.scope, w.Document, t)
	}
	doubled := false
	if !replay && !op.Protected && op.Intent != "" && op.Tool != "documents.createDocument" && ds != nil {
		doubled = d.checkDoubleApply(ev, op, w, ds)
	}
	// An idempotent write re-sent and accepted settles earlier attempts of
	// the same intent: it is the identical replay of findings.md §2.
	if op.Protected && op.Intent != "" && op.Status == audit.OpSucceeded && ds != nil {
		for _, u := range ds.uncertain {
			if u.op.Intent == op.Intent && u.State == audit.StatePending {
				d.setState(u, audit.StateResolved, t)
			}
		}
	}
	created := false
	if op.Tool == "documents.createDocument" {
		created = d.checkCreate(ev, op, w, replay)
	}
	if !replay && !op.Protected && !doubled && !created {
		d.checkUnsafe(ev, op, w, ds)
	}

	switch {
	case op.Status == audit.OpFailed:
		w.State = audit.StateRejected
	case op.Status == audit.OpUncertain:
		w.State, w.Reason = audit.StatePending, op.Reason
		if ds != nil {
			ds.uncertain = append(ds.uncertain, w)
		}
		if ks != nil && op.KeyProtected {
			ks.uncertain = append(ks.uncertain, w)
		}
	case doubled:
		w.State = audit.StateDoubleApplied
	case op.Pending:
		w.State, w.Reason = audit.StatePending, op.Reason
		if ds != nil {
			ds.proof = append(ds.proof, w)
		}
	default:
		w.State = audit.StateDurable
	}
	w.StateTime = t
	if w.State == audit.StatePending {
		w.deadline = t.Add(d.cfg.VerifyWindow)
		heap.Push(&d.deadlines, w)
	}
	d.emitWrite(w, "")

	if op.Tool == "organizations.applyDocumentCopy" && ks != nil {
		d.checkPremature(ev, op, ks)
		d.renewLease(ks, ev, op)
	}
}

// checkDoubleApply applies the two double-apply rules of findings.md §4 to
// an accepted non-idempotent write.
func (d *Detector) checkDoubleApply(ev *event, op *dialect.Op, w *writeRec, ds *docState) bool {
	accepted := op.Status == audit.OpSucceeded || op.Status == audit.OpUncertain && op.Reason == audit.ReasonNotWriteConfirmed
	if !accepted {
		return false
	}
	t := ev.call.Time
	// Rule 1: an earlier accepted write of equal intent, not a replay of
	// this one (a different key, or no key at all).
	if first, ok := ds.accepted[op.Intent]; ok && within(first.Time, t, d.cfg.CorrelationWindow) &&
		first.CallID != w.CallID && (op.Key == "" || first.Key != op.Key) {
		d.emit(&audit.Finding{
			Kind: audit.KindDoubleAppliedWrite, Server: ev.call.Server, Tenant: ev.call.Tenant,
			Document: w.Document, Key: op.Key, Session: ev.call.Session, Time: first.Time,
			Calls:   callIDs(first.CallID, w.CallID),
			Summary: sprintf("The same edit landed twice on %s: it was accepted at %s and again at %s under %s.", w.Document, hhmmss(first.Time), hhmmss(t), keyPhrase(op.Key)),
		})
		return true
	}
	// Rule 2: an uncertain write of equal intent, re-sent under a new key on
	// a later base revision, which already held the first.
	if op.HasBaseRev && op.Status == audit.OpSucceeded {
		for _, u := range ds.uncertain {
			if u.op.Intent == op.Intent && u.Key != op.Key && u.op.HasBaseRev && op.BaseRev > u.op.BaseRev &&
				within(u.Time, t, d.cfg.CorrelationWindow) {
				d.emit(&audit.Finding{
					Kind: audit.KindDoubleAppliedWrite, Server: ev.call.Server, Tenant: ev.call.Tenant,
					Document: w.Document, Key: op.Key, Session: ev.call.Session, Time: u.Time,
					Calls: callIDs(u.CallID, w.CallID), RetryAction: u.Action,
					Summary: sprintf("An edit to %s whose outcome was uncertain at %s was sent again under a new key on revision %d, after it had already landed: it is now applied twice.", w.Document, hhmmss(u.Time), op.BaseRev),
				})
				u.unsafe = true
				return true
			}
		}
	}
	if first, ok := ds.accepted[op.Intent]; !ok || !within(first.Time, t, d.cfg.CorrelationWindow) {
		ds.accepted[op.Intent] = w
	}
	return false
}

// checkCreate looks for a duplicate create: two creates of one identity by
// one session or client, both answered created, under different keys.
func (d *Detector) checkCreate(ev *event, op *dialect.Op, w *writeRec, replay bool) bool {
	t := ev.call.Time
	// "In one session or one client" (findings.md §4): creates are indexed
	// by both, so that an agent that came back in a new session and created
	// the same document again is seen.
	var keys []createKey
	if ev.call.Session != "" {
		keys = append(keys, createKey{ev.scope, actor{'s', ev.call.Session}, op.Identity})
	}
	if ev.call.Client != "" {
		keys = append(keys, createKey{ev.scope, actor{'c', ev.call.Client}, op.Identity})
	}
	if len(keys) == 0 {
		keys = append(keys, createKey{ev.scope, actor{}, op.Identity})
	}
	isCreated := op.Status == audit.OpSucceeded && op.Action == "created"
	found := false
	if isCreated && !replay {
		for _, k := range keys {
			for _, r := range d.creates[k].list() {
				// Two creates in one run count as well: only the same
				// provider call is skipped.
				if found || !r.created || r.w.CallID == w.CallID && r.w.Seq == w.Seq || !within(r.w.Time, t, d.cfg.CorrelationWindow) {
					continue
				}
				if op.Key != "" && r.w.Key == op.Key {
					continue
				}
				d.emit(&audit.Finding{
					Kind: audit.KindDuplicateCreate, Server: ev.call.Server, Tenant: ev.call.Tenant,
					Document: w.Document, Key: op.Key, Session: ev.call.Session, Time: r.w.Time,
					Calls:   callIDs(r.w.CallID, w.CallID),
					Summary: sprintf("One intended document was created twice: %s (at %s) and %s (at %s), under %s.", r.w.Document, hhmmss(r.w.Time), w.Document, hhmmss(t), keyPhrase(op.Key)),
				})
				found = true
			}
		}
	}
	for _, k := range keys {
		l := d.creates[k]
		if l == nil {
			l = &createList{}
			d.creates[k] = l
		}
		l.recs = append(l.recs, &createRec{w: w, created: isCreated})
		if l.queue.needs(t) {
			d.createQ.push(createItem{k, l}, l.queue.set(t))
		}
	}
	return found
}

// checkUnsafe reports a blind re-send: after an uncertain write, the same
// actor writes the target again (or re-creates the same identity under a
// new key) without reading it first.
func (d *Detector) checkUnsafe(ev *event, op *dialect.Op, w *writeRec, ds *docState) {
	t := ev.call.Time
	var prior *writeRec
	if op.Tool == "documents.createDocument" {
		for _, k := range []createKey{{ev.scope, ev.actor, op.Identity}} {
			for _, r := range d.creates[k].list() {
				u := r.w
				// A missing creationId protects nothing: only the same key
				// makes a re-create a replay.
				if u != w && u.op.Status == audit.OpUncertain && !u.readSince && !u.unsafe && (u.Key == "" || u.Key != op.Key) &&
					within(u.Time, t, d.cfg.CorrelationWindow) {
					prior = u
					break
				}
			}
		}
	} else if ds != nil {
		for _, u := range ds.uncertain {
			if u.actor == ev.actor && !u.readSince && !u.unsafe && u.CallID != w.CallID &&
				within(u.Time, t, d.cfg.CorrelationWindow) && (u.Key == "" || u.Key != op.Key) {
				prior = u
				break
			}
		}
	}
	if prior == nil {
		return
	}
	prior.unsafe = true
	d.emit(&audit.Finding{
		Kind: audit.KindUnsafeRetry, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: firstNonEmpty(w.Document, prior.Document), Key: firstNonEmpty(op.Key, prior.Key), Session: ev.call.Session,
		Time: prior.Time, Calls: callIDs(prior.CallID, w.CallID), RetryAction: prior.Action,
		Summary: sprintf("After a write to %s with an uncertain outcome at %s (%s), the client wrote again at %s under %s without reading the target first; the safe step was %s.",
			firstNonEmpty(w.Document, prior.Document, "a new document"), hhmmss(prior.Time), prior.Reason, hhmmss(t), keyPhrase(op.Key), prior.Action),
	})
}

// checkReuse reports one idempotency key carrying two intents, whether the
// server said so or the collector saw it.
func (d *Detector) checkReuse(ev *event, op *dialect.Op, ks *keyState) {
	t := ev.call.Time
	serverSaid := op.Failure != nil && (op.Failure.Code == "E_REQUEST_REUSE" || op.Failure.Code == classify.CodeIncompatibleCreation || op.Failure.Code == classify.CodeCopyIDReused)
	if serverSaid {
		if ks.reused == nil {
			ks.reused = map[string]bool{}
		}
		if ks.reused[op.Binding] && op.Binding != "" {
			return
		}
		ks.reused[op.Binding] = true
		calls := []string{ev.call.ID}
		first := t
		if ks.bindingCall != "" && ks.bindingCall != ev.call.ID {
			calls = callIDs(ks.bindingCall, ev.call.ID)
			first = ks.bindingTime
		}
		d.emitReuse(ev, op, calls, first, op.Failure.Action)
		return
	}
	if op.Binding == "" {
		return
	}
	// A key is bound by an attempt that reached the server's intent check:
	// refusals for bad input or missing authority bind nothing.
	if op.Failure != nil && op.Status == audit.OpFailed &&
		(op.Failure.Action == audit.ActionFixInput || op.Failure.Action == audit.ActionReauthorize) {
		return
	}
	if ks.binding == "" || !within(ks.bindingTime, t, d.cfg.CorrelationWindow) && ks.binding != op.Binding {
		ks.binding, ks.bindingCall, ks.bindingTime = op.Binding, ev.call.ID, t
		return
	}
	if ks.binding == op.Binding {
		return
	}
	if ks.reused == nil {
		ks.reused = map[string]bool{}
	}
	if ks.reused[op.Binding] {
		return
	}
	ks.reused[op.Binding] = true
	d.emitReuse(ev, op, callIDs(ks.bindingCall, ev.call.ID), ks.bindingTime, "")
}

func (d *Detector) emitReuse(ev *event, op *dialect.Op, calls []string, first time.Time, action audit.RetryAction) {
	doc := op.Target
	if op.DocumentID != "" {
		doc = op.DocumentID
	}
	d.emit(&audit.Finding{
		Kind: audit.KindRequestIDReuse, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: doc, Key: op.Key, Session: ev.call.Session, Time: first, Calls: calls, RetryAction: action,
		Summary: sprintf("The %s %s was used at %s for a different intent than the one it was first bound to; a new intent needs a new key.", op.KeyKind, op.Key, hhmmss(ev.call.Time)),
	})
}

// plan follows a copy plan: a blocked plan replayed under its copyId is a
// wasted retry, and the copyId binds the plan's source and destination.
func (d *Detector) plan(ev *event, op *dialect.Op) {
	if op.Key == "" {
		return
	}
	t := ev.call.Time
	ks := d.key(ev.scope, op.KeyKind, op.Key, t)
	if b := ks.blocked; b != nil && !b.reported && b.binding == op.Binding && within(b.time, t, d.cfg.CorrelationWindow) {
		b.reported = true
		d.emit(&audit.Finding{
			Kind: audit.KindWastedRetry, Server: ev.call.Server, Tenant: ev.call.Tenant,
			Document: op.Target, Key: op.Key, Session: ev.call.Session, Time: b.time,
			Calls: callIDs(b.callID, ev.call.ID), RetryAction: b.action,
			Summary: sprintf("The copy plan %s was blocked at %s and replayed unchanged at %s; a replay returns the same blocked receipt, so fix the blockers and plan again with a fresh copyId.", op.Key, hhmmss(b.time), hhmmss(t)),
		})
	}
	d.checkReuse(ev, op, ks)
	if op.Status == audit.OpSucceeded && op.Failure != nil && op.Failure.Action == audit.ActionNewPlan && ks.blocked == nil {
		ks.blocked = &blockedPlan{callID: ev.call.ID, time: t, binding: op.Binding, action: op.Failure.Action}
	}
}

// checkPremature reports an apply re-sent before the lease of the receipt
// it follows ran out.
func (d *Detector) checkPremature(ev *event, op *dialect.Op, ks *keyState) {
	l := &ks.lease
	t := ev.call.Time
	if l.until.IsZero() || l.reported || l.callID == ev.call.ID || !t.Before(l.until) || t.Before(l.callTime) {
		return
	}
	l.reported = true
	d.emit(&audit.Finding{
		Kind: audit.KindPrematureRetry, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: op.Target, Key: op.Key, Session: ev.call.Session, Time: l.callTime,
		Calls: callIDs(l.callID, ev.call.ID), RetryAction: audit.ActionWaitThenRetry,
		Summary: sprintf("The copy %s was applied again at %s, before the receipt's retryAfter of %s.", op.Key, hhmmss(t), hhmmss(l.until)),
	})
}

// renewLease records the retryAfter lease of an applying copy receipt.
func (d *Detector) renewLease(ks *keyState, ev *event, op *dialect.Op) {
	if op.RetryAfter.IsZero() {
		if op.CopyState != "" && op.CopyState != "applying" {
			ks.lease = lease{}
		}
		return
	}
	if ks.lease.until.Equal(op.RetryAfter) {
		return
	}
	ks.lease = lease{until: op.RetryAfter, callID: ev.call.ID, callTime: ev.call.Time}
}

// checkWasted reports an identical request re-sent after an error that a
// retry cannot help (fix_input, reauthorize), and remembers such errors.
func (d *Detector) checkWasted(ev *event, a *dialect.Analysis, reqHash string) {
	f := a.Failure
	if f == nil || f.Action != audit.ActionFixInput && f.Action != audit.ActionReauthorize {
		return
	}
	c := ev.call
	h := ev.scope + "\x00" + reqHash
	t := c.Time
	if prev, ok := d.failed[h]; ok && within(prev.time, t, d.cfg.CorrelationWindow) && prev.code == f.Code {
		if !prev.reported {
			prev.reported = true
			var doc, key string
			for _, op := range a.Ops {
				doc = firstNonEmpty(doc, op.DocumentID, op.Target)
				key = firstNonEmpty(key, op.Key)
			}
			d.emit(&audit.Finding{
				Kind: audit.KindWastedRetry, Server: c.Server, Tenant: c.Tenant,
				Document: doc, Key: key, Session: c.Session, Time: prev.time,
				Calls: callIDs(prev.callID, c.ID), RetryAction: f.Action,
				Summary: sprintf("An identical %s request refused at %s with %s was sent again at %s; an unchanged retry cannot help (%s).", c.Tool, hhmmss(prev.time), f.Code, hhmmss(t), f.Action),
			})
		}
		return
	}
	d.failed[h] = &failedReq{callID: c.ID, time: t, code: f.Code, action: f.Action}
	d.failedQ.push(h, t)
}

// checkIntegrity reports corruption the server reported.
func (d *Detector) checkIntegrity(ev *event, op *dialect.Op) {
	switch {
	case op.JournalCorrupt:
		d.integrity(ev, op.Target, &audit.Failure{Code: classify.CodeJournalCorrupt, Action: audit.ActionEscalate})
	case op.Failure != nil && (op.Failure.Code == "E_INTEGRITY" || op.Failure.Code == classify.CodeJournalCorrupt):
		d.integrity(ev, firstNonEmpty(op.DocumentID, op.Target), op.Failure)
	}
}

func (d *Detector) integrity(ev *event, doc string, f *audit.Failure) {
	t := ev.call.Time
	if doc != "" {
		ds := d.doc(ev.scope, doc, t)
		if !ds.integrity.IsZero() && within(ds.integrity, t, d.cfg.CorrelationWindow) {
			return
		}
		ds.integrity = t
	}
	what := "E_INTEGRITY (history sequence or hash audit failed)"
	if f.Code == classify.CodeJournalCorrupt {
		what = "journalStatus journal_corrupt (the live journal is corrupt)"
	}
	d.emit(&audit.Finding{
		Kind: audit.KindIntegrityFailure, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: doc, Session: ev.call.Session, Time: t, Calls: []string{ev.call.ID}, RetryAction: audit.ActionEscalate,
		Summary: sprintf("The server reported %s for %s at %s; a person must look before anything else is written to it.", what, firstNonEmpty(doc, "a document"), hhmmss(t)),
	})
}

// expire closes the verification windows that ended before t.
func (d *Detector) expire(t time.Time) {
	for d.deadlines.Len() > 0 && d.deadlines[0].deadline.Before(t) {
		w := heap.Pop(&d.deadlines).(*writeRec)
		if w.State != audit.StatePending {
			continue
		}
		d.setState(w, audit.StateUnverified, w.deadline)
		if w.follows != nil && w.follows.State == audit.StateUnverified {
			continue // the attempt it replays was reported
		}
		d.emit(&audit.Finding{
			Kind: audit.KindUnverifiedWrite, Server: w.Server, Tenant: w.Tenant,
			Document: w.Document, Key: w.Key, Session: w.Session, Time: w.Time,
			Calls: []string{w.CallID}, Reason: w.Reason, RetryAction: w.Action,
			Summary: sprintf("Nobody established whether the %s write to %s at %s is durable (%s) within %s.", w.Tool, firstNonEmpty(w.Document, "a new document"), hhmmss(w.Time), w.Reason, d.cfg.VerifyWindow),
		})
	}
}

// setState moves a write to a new state and tells the sinks.
func (d *Detector) setState(w *writeRec, s audit.WriteState, t time.Time) {
	prev := w.State
	if prev == s {
		return
	}
	w.State, w.StateTime = s, t
	if s != audit.StateUnverified && s != audit.StatePending {
		w.Reason = ""
	}
	if w.index >= 0 && s.Terminal() {
		heap.Remove(&d.deadlines, w.index)
	}
	d.emitWrite(w, prev)
}

func (d *Detector) emitWrite(w *writeRec, prev audit.WriteState) {
	d.Stats.write(w.State, prev)
	for _, s := range d.sinks {
		s.Write(&w.Write, prev)
	}
}

func (d *Detector) emit(f *audit.Finding) {
	f.Severity = f.Kind.Severity()
	d.Stats.Findings[f.Kind]++
	for _, s := range d.sinks {
		s.Finding(f)
	}
}

// sweep forgets correlation state older than the correlation window, so
// that memory follows the open state, not the input. It visits only the
// entries that hold a time older than the horizon (see expiry): the others
// would be left as they are.
func (d *Detector) sweep() {
	if d.clock.Sub(d.lastSweep) < d.cfg.CorrelationWindow/4 {
		return
	}
	d.lastSweep = d.clock
	horizon := d.clock.Add(-d.cfg.CorrelationWindow)
	// Entries that stay are queued again after the loop, at their earliest
	// time, which may still be before the horizon: a pending write keeps
	// its document's entry visited at every sweep. Until then they count as
	// not queued, so that a second place in the queue is skipped.
	type left struct {
		docItem
		at time.Time
	}
	var docsLeft []left
	for {
		it, at, ok := d.docQ.popBefore(horizon)
		if !ok {
			break
		}
		s := it.s
		if !s.queue.is(at) {
			continue // the entry was dropped or queued again since
		}
		s.queue.queued = false
		if s.last.Before(horizon) && len(s.proof) == 0 {
			delete(d.docs, it.key)
			continue
		}
		first := s.last
		for i, w := range s.accepted {
			if w.Time.Before(horizon) {
				delete(s.accepted, i)
			} else if w.Time.Before(first) {
				first = w.Time
			}
		}
		s.uncertain = dropOld(s.uncertain, horizon)
		docsLeft = append(docsLeft, left{it, earliest(first, s.uncertain)})
	}
	for _, l := range docsLeft {
		d.docQ.push(l.docItem, l.s.queue.set(l.at))
	}
	for {
		it, at, ok := d.keyQ.popBefore(horizon)
		if !ok {
			break
		}
		// Queued again at its last use, which is after the horizon, a key
		// stays out of this sweep.
		if s := it.s; s.queue.is(at) {
			if s.last.Before(horizon) {
				s.queue.queued = false
				delete(d.keys, it.key)
			} else {
				d.keyQ.push(it, s.queue.set(s.last))
			}
		}
	}
	for {
		// Queued again at its earliest create, which is after the horizon,
		// a list stays out of this sweep.
		it, at, ok := d.createQ.popBefore(horizon)
		if !ok {
			break
		}
		l := it.l
		if !l.queue.is(at) {
			continue
		}
		kept, first := keepSince(l.recs, horizon, func(r *createRec) time.Time { return r.w.Time })
		l.recs = kept
		if len(kept) == 0 {
			l.queue.queued = false
			delete(d.creates, it.key)
		} else {
			d.createQ.push(it, l.queue.set(first))
		}
	}
	for {
		k, at, ok := d.failedQ.popBefore(horizon)
		if !ok {
			break
		}
		// A failed request's time never changes: a newer one under the same
		// hash is queued at its own time.
		if f := d.failed[k]; f != nil && f.time.Equal(at) {
			delete(d.failed, k)
		}
	}
	d.dedupe.sweep(d.clock.Add(-2*d.lateness() - 2*time.Second))
}

func dropOld(ws []*writeRec, horizon time.Time) []*writeRec {
	kept := ws[:0]
	for _, w := range ws {
		if !w.Time.Before(horizon) || w.State == audit.StatePending {
			kept = append(kept, w)
		}
	}
	return kept
}

func callIDs(ids ...string) []string { return ids }

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

package detect

import (
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/classify"
)

// detector is the correlation state of one partition (one tenant and one
// server: nothing correlates across them) and the rules that run over it.
// Calls come to it in event-time order up to its partition's watermark;
// a late call (one with operations after it already processed) is judged
// against the same state, and each rule then also looks forward, at what
// the late call changes for the calls that followed it.
type detector struct {
	cfg Config
	out *emitter

	// clock is the watermark: every call up to it was processed and every
	// verification window that ended before it closed.
	clock time.Time
	// last is the position of the latest operation processed.
	last pos

	docs    expMap[string, docState]
	reads   expMap[string, []readRec]
	keys    expMap[keyID, keyState]
	creates expMap[createKey, []*createRec]
	failed  expMap[uint64, []*failedReq]

	deadlines writeHeap
	// deferred holds writes whose window ended while their source was
	// still delivering what came before the end (a late backlog): they
	// close once it has caught up or gone idle (closeDeferred).
	deferred  []*writeRec
	lastSweep time.Time
	// behind reports whether a source has not yet delivered past t;
	// set by the engine.
	behind func(s *source, t time.Time) bool
}

func newDetector(cfg Config, out *emitter) *detector {
	return &detector{
		cfg: cfg, out: out,
		docs: newExpMap[string, docState](), reads: newExpMap[string, []readRec](),
		keys: newExpMap[keyID, keyState](), creates: newExpMap[createKey, []*createRec](),
		failed: newExpMap[uint64, []*failedReq](),
	}
}

// advance moves the watermark to t: verification windows that ended before
// t close.
func (d *detector) advance(t time.Time) {
	if t.After(d.clock) {
		d.expire(t)
		d.clock = t
		d.sweep()
	}
}

// process judges one call, delivered by src, at its place in event time.
func (d *detector) process(r *audit.Record, at pos, src *source) {
	c := r.Call
	ev := &event{rec: r, call: c, actor: actorOf(c), at: at, late: at.before(d.last), src: src}
	if !ev.late {
		d.last = at
	}
	d.out.call(r)
	d.checkWasted(ev)
	for i := range r.Ops {
		op := &r.Ops[i]
		ev.at.seq = op.Seq
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
	if len(r.Ops) == 0 && r.Failure != nil && r.Failure.Code == "E_INTEGRITY" {
		d.integrity(ev, "", r.Failure)
	}
	if ev.late {
		// A late write whose window already ended is judged now.
		d.expire(d.clock)
	}
}

func (d *detector) doc(target string, t time.Time) *docState {
	s := d.docs.at(target, t)
	if t.After(s.last) {
		s.last = t
	}
	return s
}

func (d *detector) key(k keyID, t time.Time) *keyState {
	s := d.keys.at(k, t)
	if t.After(s.last) {
		s.last = t
	}
	return s
}

// write follows one write attempt through the rules.
func (d *detector) write(ev *event, op *audit.Op) {
	c, t := ev.call, ev.at.t
	w := &writeRec{
		Write: audit.Write{
			CallID: c.ID, Seq: op.Seq, Time: t, Server: c.Server, Tenant: c.Tenant, Session: c.Session,
			Tool: op.Tool, Document: op.Document(), Key: op.Key,
		},
		at:    ev.at,
		op:    wopOf(op),
		actor: ev.actor,
		index: -1,
		src:   ev.src,
	}
	if op.Failure != nil {
		w.Action = op.Failure.Action
	}

	var ks *keyState
	if op.Key != "" {
		ks = d.key(keyID{op.KeyKind, op.Key}, t)
		d.keyed(ev, op, w, ks)
	}
	var ds *docState
	if w.Document != "" {
		ds = d.doc(w.Document, t)
		ds.writes = insertAt(ds.writes, w, writeAt)
	}
	doubled := false
	if !w.replay && !op.Protected && op.Intent != "" && op.Tool != toolCreate && ds != nil {
		doubled = d.checkDoubleApply(ev, op, w, ds)
	}
	if op.Protected && op.Intent != "" && op.Status == audit.OpSucceeded && ds != nil {
		d.settleByIdempotent(w, ds)
	}
	created := false
	if op.Tool == toolCreate {
		created = d.checkCreate(ev, op, w)
	}
	if !w.replay && !op.Protected && !doubled && !created {
		d.checkUnsafe(ev, op, w, ds)
	}

	switch {
	case op.Status == audit.OpFailed:
		w.State = audit.StateRejected
	case op.Status == audit.OpUncertain:
		w.State, w.Reason = audit.StatePending, op.Reason
		if ds != nil {
			ds.uncertain = insertAt(ds.uncertain, w, writeAt)
		}
		if ks != nil && op.KeyProtected {
			ks.uncertain = insertAt(ks.uncertain, w, writeAt)
		}
	case doubled:
		w.State = audit.StateDoubleApplied
	case op.Pending:
		w.State, w.Reason = audit.StatePending, op.Reason
		if ds != nil {
			ds.proof = insertAt(ds.proof, w, writeAt)
		}
	default:
		w.State = audit.StateDurable
	}
	w.StateTime = t
	if w.State == audit.StatePending {
		w.deadline = t.Add(d.cfg.VerifyWindow)
		d.deadlines.push(w)
	}
	d.out.write(w, "")

	if ev.late {
		d.lookForward(ev, op, w, ks, ds)
	}
	if op.Tool == toolApply && ks != nil {
		d.checkPremature(ev, op, ks)
		d.renewLease(ks, ev, op)
	}
}

// lookForward applies to a late write what the calls after it, already
// judged, say about it, and what it changes for them.
func (d *detector) lookForward(ev *event, op *audit.Op, w *writeRec, ks *keyState, ds *docState) {
	if w.State == audit.StatePending {
		d.settleLate(w, ks, ds)
	}
	if ds != nil && w.op.intent != 0 {
		d.rejudgeAccepted(ev, ds, w.op.intent, w.at)
	}
	if op.Status == audit.OpUncertain {
		d.unsafeAfter(ev, op, w, ds)
	}
	if op.Tool == toolCreate {
		d.createsAfter(ev, op, w)
	}
}

// read handles a read: it resolves the reader's uncertain writes on the
// target, proves pending syncs and saves, and renews copy leases.
func (d *detector) read(ev *event, op *audit.Op) {
	if op.Status != audit.OpSucceeded {
		return
	}
	t := ev.at.t
	if op.Tool == toolReceipt && op.Key != "" {
		ks := d.key(keyID{op.KeyKind, op.Key}, t)
		d.renewLease(ks, ev, op)
		// The receipt is the copy's durable record: reading it establishes
		// what became of the reader's uncertain applies (findings.md §2).
		for _, u := range ks.uncertain {
			if u.actor == ev.actor && u.at.before(ev.at) {
				d.settleByRead(u, ev.at)
			}
		}
	}
	if op.Target == "" {
		return
	}
	rs := d.reads.at(op.Target, t)
	*rs = insertAt(*rs, readRec{at: ev.at, actor: actorKey(ev.actor), rev: op.Rev, flags: readFlags(op.Sync, op.SaveState)}, readAt)
	ds := d.docs.get(op.Target)
	if ds == nil {
		return
	}
	d.docs.holds(op.Target, t)
	for _, w := range ds.uncertain {
		if w.actor == ev.actor && w.at.before(ev.at) {
			d.settleByRead(w, ev.at)
		}
	}
	kept := ds.proof[:0]
	for _, w := range ds.proof {
		if w.State == audit.StatePending && w.at.before(ev.at) && !t.After(w.deadline) && proves(op.Rev, readFlags(op.Sync, op.SaveState), w) {
			d.setState(w, audit.StateDurable, t)
			continue
		}
		if w.State == audit.StatePending {
			kept = append(kept, w)
		}
	}
	clear(ds.proof[len(kept):])
	ds.proof = kept
}

// settleByRead records the writer's read of an uncertain write's target
// at p, which resolves the write while its window is open.
func (d *detector) settleByRead(w *writeRec, p pos) {
	w.noteRead(p)
	if w.State == audit.StatePending && w.op.status == audit.OpUncertain && !p.t.After(w.deadline) {
		d.setState(w, audit.StateResolved, p.t)
	}
}

// proves reports whether a read (its revision, and what it said of sync
// and save states) shows a pending write durable: synced at its revision
// or later, or a save no longer blocked.
func proves(rev int64, flags uint8, w *writeRec) bool {
	switch w.Reason {
	case audit.ReasonSyncNotConfirmed:
		return flags&readSynced != 0 && rev >= w.op.rev
	case audit.ReasonSaveBlocked:
		return flags&readSaved != 0 && (rev == 0 || rev >= w.op.rev)
	}
	return false
}

// settleByIdempotent resolves the pending uncertain writes of the same
// intent before w, an idempotent write re-sent and accepted: it is the
// identical replay of findings.md §2.
func (d *detector) settleByIdempotent(w *writeRec, ds *docState) {
	for _, u := range ds.uncertain {
		if u.op.intent == w.op.intent && u.State == audit.StatePending && u.at.before(w.at) && !w.Time.After(u.deadline) {
			d.setState(u, audit.StateResolved, w.Time)
		}
	}
}

// settleLate gives a late pending write what the calls after it already
// established: the writer's read of the target, a replay under its key
// that was accepted, an idempotent re-send, or a read proving its sync.
func (d *detector) settleLate(w *writeRec, ks *keyState, ds *docState) {
	if rs := d.reads.get(w.Document); rs != nil && w.Document != "" {
		writer := actorKey(w.actor)
		for _, r := range *rs {
			if !w.at.before(r.at) {
				continue
			}
			if r.actor == writer && w.op.status == audit.OpUncertain {
				d.settleByRead(w, r.at)
			}
			if w.State == audit.StatePending && w.op.status != audit.OpUncertain && !r.at.t.After(w.deadline) && proves(r.rev, r.flags, w) {
				d.setState(w, audit.StateDurable, r.at.t)
			}
		}
	}
	if w.State != audit.StatePending || w.op.status != audit.OpUncertain {
		return
	}
	if ks != nil && w.op.keyProtected {
		for _, e := range ks.events {
			s := e.w
			if s == nil || !w.at.before(s.at) || s.op.status != audit.OpSucceeded || !s.op.keyProtected {
				continue
			}
			if b := d.binderBefore(ks, s.at); b == nil || b.binding == s.op.binding {
				w.noteRead(s.at)
				if !s.Time.After(w.deadline) {
					d.setState(w, audit.StateResolved, s.Time)
				}
				break
			}
		}
	}
	if w.State == audit.StatePending && ds != nil && w.op.intent != 0 {
		for _, s := range ds.writes {
			if w.at.before(s.at) && s.op.protected && s.op.intent == w.op.intent && s.op.status == audit.OpSucceeded && !s.Time.After(w.deadline) {
				d.setState(w, audit.StateResolved, s.Time)
				break
			}
		}
	}
}

// checkIntegrity reports corruption the server reported.
func (d *detector) checkIntegrity(ev *event, op *audit.Op) {
	switch {
	case op.JournalCorrupt:
		d.integrity(ev, op.Target, &audit.Failure{Code: classify.CodeJournalCorrupt, Action: audit.ActionEscalate})
	case op.Failure != nil && (op.Failure.Code == "E_INTEGRITY" || op.Failure.Code == classify.CodeJournalCorrupt):
		d.integrity(ev, op.Document(), op.Failure)
	}
}

func (d *detector) integrity(ev *event, doc string, f *audit.Failure) {
	t := ev.at.t
	if doc != "" {
		ds := d.doc(doc, t)
		if !ds.integrity.IsZero() && within(ds.integrity, t, d.cfg.CorrelationWindow) {
			return
		}
		ds.integrity = t
	}
	what := "E_INTEGRITY (history sequence or hash audit failed)"
	if f.Code == classify.CodeJournalCorrupt {
		what = "journalStatus journal_corrupt (the live journal is corrupt)"
	}
	d.out.finding(&audit.Finding{
		Kind: audit.KindIntegrityFailure, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: doc, Session: ev.call.Session, Time: t, Calls: []string{ev.call.ID}, RetryAction: audit.ActionEscalate,
		Summary: sprintf("The server reported %s for %s at %s; a person must look before anything else is written to it.", what, firstNonEmpty(doc, "a document"), hhmmss(t)),
	})
}

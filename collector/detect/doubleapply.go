package detect

import (
	"slices"

	"github.com/mcpaudit/mcpaudit/audit"
)

// checkDoubleApply applies the two double-apply rules of findings.md §4 to
// an accepted non-idempotent write w, against the writes before it.
//
// Rule 1: an earlier accepted write of equal intent within the correlation
// window, not a replay of this one (a different key, or no key at all).
// Rule 2: an uncertain write of equal intent, re-sent under a new key on a
// later base revision, which already held the first.
func (d *detector) checkDoubleApply(ev *event, op *audit.Op, w *writeRec, ds *docState) bool {
	if !(op.Status == audit.OpSucceeded || op.Status == audit.OpUncertain && op.Reason == audit.ReasonNotWriteConfirmed) {
		return false
	}
	w.accepted = true
	return d.doubleApplied(ev.call, ds, w)
}

// doubleApplied reports w, an accepted write, if a rule holds for it.
func (d *detector) doubleApplied(c *audit.Call, ds *docState, w *writeRec) bool {
	with, rebased := d.doublePair(ds, w)
	if with == nil {
		return false
	}
	d.markDoubled(w, with, rebased)
	d.out.finding(doubleFinding(c, w, with, rebased))
	return true
}

// doublePair returns the write that judging in order pairs w, an accepted
// write, with: the first application it repeats (rule 1), or the
// uncertain write it re-sent on a later base revision (rule 2, rebased);
// nil when no rule holds. It depends on the writes before w alone.
//
// It also marks whether w is itself a first application (wop.first).
func (d *detector) doublePair(ds *docState, w *writeRec) (with *writeRec, rebased bool) {
	op := &w.op
	t := w.at.t
	first := d.storedFirst(ds, op.intent, w.at)
	w.op.first = first == nil || !within(first.at.t, t, d.cfg.CorrelationWindow)
	if first != nil && !w.op.first && first.callID() != w.callID() && (w.key() == "" || first.key() != w.key()) {
		return first, false
	}
	if op.hasBaseRev && op.status == audit.OpSucceeded {
		for _, u := range ds.uncertainWrites() {
			if !u.at.before(w.at) {
				break
			}
			if u.op.intent == op.intent && u.key() != w.key() && u.op.hasBaseRev && op.baseRev > u.op.baseRev &&
				within(u.at.t, t, d.cfg.CorrelationWindow) {
				// Applied twice: never a first.
				w.op.first = false
				return u, true
			}
		}
	}
	return nil, false
}

// markDoubled records that w was reported applied twice with with (the
// uncertain write it re-sent, when rebased: that one is reported once).
func (d *detector) markDoubled(w, with *writeRec, rebased bool) {
	if w.more == nil {
		w.more = &uncertainMore{}
	}
	w.more.doubles, w.more.rebased = with, rebased
	if rebased {
		with.unsafe = true
	}
}

// doubledWith returns the write w was reported applied twice with, nil
// when none.
func (w *writeRec) doubledWith() (with *writeRec, rebased bool) {
	if w.more == nil {
		return nil, false
	}
	return w.more.doubles, w.more.rebased
}

// doubleFinding returns the double_applied_write of w, applied twice with
// with (rebased: the uncertain write w re-sent on a later revision); c is
// the call being judged (it names the partition).
func doubleFinding(c *audit.Call, w, with *writeRec, rebased bool) *audit.Finding {
	if rebased {
		return &audit.Finding{
			Kind: audit.KindDoubleAppliedWrite, Server: c.Server, Tenant: c.Tenant,
			Document: w.doc(), Key: w.key(), Session: w.session(), Time: with.at.t.Time(),
			Calls: callIDs(with.callID(), w.callID()), RetryAction: actionWords.word(with.action),
			Summary: sprintf("An edit to %s whose outcome was uncertain at %s was sent again under a new key on revision %d, after it had already landed: it is now applied twice.", w.doc(), hhmmss(with.at.t), w.op.baseRev),
		}
	}
	return &audit.Finding{
		Kind: audit.KindDoubleAppliedWrite, Server: c.Server, Tenant: c.Tenant,
		Document: w.doc(), Key: w.key(), Session: w.session(), Time: with.at.t.Time(),
		Calls:   callIDs(with.callID(), w.callID()),
		Summary: sprintf("The same edit landed twice on %s: it was accepted at %s and again at %s under %s.", w.doc(), hhmmss(with.at.t), hhmmss(w.at.t), keyPhrase(w.key())),
	}
}

// storedFirst returns the write that the first double-apply rule compares
// a write of intent at p with: the first accepted write of the intent,
// replaced by the next one once the correlation window since it has
// passed; nil when none is kept. Writes that were themselves applied twice
// are never the first. Each write says whether it is a first
// (wop.first, doublePair): until rnd24 the list was walked from the
// first write kept, so that the first a write was compared with depended
// on which writes the sweep had dropped, which followed the partition's
// traffic and, live, how far the watermark lagged (a pod ahead kept more).
func (d *detector) storedFirst(ds *docState, intent uint64, p pos) *writeRec {
	var first *writeRec
	for _, e := range ds.writes {
		if !e.at.before(p) {
			break
		}
		if e.op.first && e.op.intent == intent {
			first = e
		}
	}
	return first
}

// rejudgeDoubles judges again, in time order, the writes of intent from p
// on (p: a late call's write, or a write whose replay changed), as judging
// in order judges them. The late write may be the first application, or
// the uncertain write, that they repeat: a write reported as a first is
// then the second, and one reported with it is a write of its own (a
// first, or nothing). A pair that judging in order does not make is
// withdrawn, and its write goes back to the state it has alone; a pair it
// makes is made. Only the writes still kept are judged: a late call lies
// within allowed_lateness behind the watermark, and a rule pairs writes
// within the correlation window (rnd24: until then only writes not paired
// yet were judged again, and nothing was withdrawn, so that the pair a
// late first displaced stood beside the one it made).
func (d *detector) rejudgeDoubles(ev *event, ds *docState, intent uint64, p pos) {
	for _, s := range ds.writes {
		if s.at.before(p) || s.op.intent != intent {
			continue
		}
		var with *writeRec
		rebased := false
		s.op.first = false
		if s.accepted {
			with, rebased = d.doublePair(ds, s)
		}
		old, oldRebased := s.doubledWith()
		if with == old && rebased == oldRebased {
			continue
		}
		if old != nil {
			d.out.withdraw(doubleFinding(ev.call, s, old, oldRebased), d.judging, ev.at.t)
			s.more.doubles, s.more.rebased = nil, false
			if oldRebased {
				// Re-sent blindly, or not, as the unsafe_retry rule
				// judges it again after the late call (rejudgeUnsafe,
				// rnd25: it stayed reported, and no later write paired
				// with it).
				old.unsafe = false
			}
			if with == nil {
				d.undouble(ds, s)
			}
		}
		if with == nil {
			continue
		}
		d.markDoubled(s, with, rebased)
		d.out.finding(doubleFinding(ev.call, s, with, rebased))
		if s.op.status != audit.OpUncertain && s.state != wDoubleApplied {
			// An accepted uncertain write keeps its state, as judging in
			// order leaves it (write).
			s.more.alone, s.more.aloneReason = s.state, s.reason
			d.settle(s, wDoubleApplied, s.at.t)
		}
	}
}

// undouble gives w, reported applied twice and found not to be, the state
// it has alone: durable, or pending with its window open (closed at once
// if it has ended: judge expires the windows after a late call).
func (d *detector) undouble(ds *docState, w *writeRec) {
	if w.state != wDoubleApplied {
		return
	}
	prev := w.state
	switch w.more.alone {
	case wPending, wUnverified:
		w.state, w.reason = wPending, w.more.aloneReason
		if !slices.Contains(ds.m().proof, w) {
			ds.more.proof = insertAt(ds.proofWrites(), w, writeAt)
		}
		d.deadlines.push(w)
		d.pendingIn(w)
	default:
		w.state = wDurable
	}
	d.emitWrite(w, stateWords.word(prev), w.at.t)
}

// acceptedWrite reports whether w, not a replay, is a candidate for the
// double-apply rules, as write and checkDoubleApply judge it: a
// non-idempotent write of an intent, accepted.
func (d *detector) acceptedWrite(w *writeRec) bool {
	if w.replay || w.op.protected || w.op.intent == 0 || w.doc() == "" || d.toolOf(w) == toolCreate {
		return false
	}
	return w.op.status == audit.OpSucceeded || w.op.status == audit.OpUncertain && w.uncertain == rNotConfirmed
}

// unaccept takes w out of the double-apply candidates: a write found to be
// a replay after all (a late first attempt under its key).
func (d *detector) unaccept(w *writeRec) { w.accepted, w.op.first = false, false }

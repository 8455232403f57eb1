package detect

import "github.com/mcpaudit/mcpaudit/audit"

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
	op := &w.op
	t := w.at.t
	if first := d.storedFirst(ds, op.intent, w.at); first != nil && within(first.at.t, t, d.cfg.CorrelationWindow) &&
		first.callID() != w.callID() && (w.key() == "" || first.key() != w.key()) {
		d.out.finding(&audit.Finding{
			Kind: audit.KindDoubleAppliedWrite, Server: c.Server, Tenant: c.Tenant,
			Document: w.doc(), Key: w.key(), Session: w.session(), Time: first.at.t.Time(),
			Calls:   callIDs(first.callID(), w.callID()),
			Summary: sprintf("The same edit landed twice on %s: it was accepted at %s and again at %s under %s.", w.doc(), hhmmss(first.at.t), hhmmss(t), keyPhrase(w.key())),
		})
		return true
	}
	if op.hasBaseRev && op.status == audit.OpSucceeded {
		for _, u := range ds.uncertainWrites() {
			if !u.at.before(w.at) {
				break
			}
			if u.op.intent == op.intent && u.key() != w.key() && u.op.hasBaseRev && op.baseRev > u.op.baseRev &&
				within(u.at.t, t, d.cfg.CorrelationWindow) {
				d.out.finding(&audit.Finding{
					Kind: audit.KindDoubleAppliedWrite, Server: c.Server, Tenant: c.Tenant,
					Document: w.doc(), Key: w.key(), Session: w.session(), Time: u.at.t.Time(),
					Calls: callIDs(u.callID(), w.callID()), RetryAction: actionWords.word(u.action),
					Summary: sprintf("An edit to %s whose outcome was uncertain at %s was sent again under a new key on revision %d, after it had already landed: it is now applied twice.", w.doc(), hhmmss(u.at.t), op.baseRev),
				})
				u.unsafe = true
				return true
			}
		}
	}
	return false
}

// storedFirst returns the write that the first double-apply rule compares
// a write of intent at p with: the first accepted write of the intent,
// replaced by the next one once the correlation window since it has
// passed. Writes that were themselves applied twice are never the first.
func (d *detector) storedFirst(ds *docState, intent uint64, p pos) *writeRec {
	var first *writeRec
	for _, e := range ds.writes {
		if !e.at.before(p) {
			break
		}
		if !e.accepted || e.op.intent != intent || e.doubled() {
			continue
		}
		if first == nil || !within(first.at.t, e.at.t, d.cfg.CorrelationWindow) {
			first = e
		}
	}
	return first
}

// rejudgeAccepted applies the double-apply rules again to the accepted
// writes of intent after a late call at p: the late call may be the first
// application, or the uncertain write, that they repeat.
func (d *detector) rejudgeAccepted(ev *event, ds *docState, intent uint64, p pos) {
	for _, s := range ds.writes {
		if !s.accepted || s.op.intent != intent || !p.before(s.at) || s.doubled() {
			continue
		}
		if d.doubleApplied(ev.call, ds, s) {
			d.setState(s, wDoubleApplied, s.at.t)
		}
	}
}

// unaccept takes w out of the double-apply candidates: a write found to be
// a replay after all (a late first attempt under its key).
func (d *detector) unaccept(w *writeRec) { w.accepted = false }

package detect

import "github.com/mcpaudit/mcpaudit/audit"

// checkUnsafe reports a blind re-send: after an uncertain write, the same
// actor writes the target again (or re-creates the same identity under a
// new key) without reading it first.
func (d *detector) checkUnsafe(ev *event, op *audit.Op, w *writeRec, ds *docState) {
	var prior *writeRec
	if op.Tool == toolCreate {
		if l := d.creates.get(createKey{actorKey(ev.actor), fp(op.Identity)}); l != nil {
			for _, r := range *l {
				u := r.w
				if !u.at.before(w.at) {
					break
				}
				// A missing creationId protects nothing: only the same key
				// makes a re-create a replay.
				if d.blindAfter(u, w) {
					prior = u
					break
				}
			}
		}
	} else if ds != nil {
		for _, u := range ds.uncertainWrites() {
			if !u.at.before(w.at) {
				break
			}
			if u.who() == ev.actor && u.callID() != w.callID() && d.blindAfter(u, w) {
				prior = u
				break
			}
		}
	}
	if prior != nil {
		// Not prior.reason: a read after w (judged before w, which came
		// late) may have settled prior and cleared it.
		d.emitUnsafe(ev.call, prior, w, prior.uncertain)
	}
}

// blindAfter reports whether w, by u's writer, would re-send u blindly:
// u is uncertain, not yet reported, unread by its writer before w, within
// the correlation window, and w is not under u's key.
func (d *detector) blindAfter(u, w *writeRec) bool {
	return u != w && u.op.status == audit.OpUncertain && !u.readBefore(w.at) && !u.unsafe &&
		(u.key() == "" || u.key() != w.key()) && within(u.at.t, w.at.t, d.cfg.CorrelationWindow)
}

// emitUnsafe reports w as a blind re-send of prior, whose outcome was
// uncertain for reason.
func (d *detector) emitUnsafe(c *audit.Call, prior, w *writeRec, reason word) {
	prior.unsafe, w.retried = true, true
	if w.op.status == audit.OpUncertain {
		// Its answer may come late, before prior's: the pair is then
		// judged again from it (rejudge).
		w.setResends(prior)
	}
	d.out.finding(&audit.Finding{
		Kind: audit.KindUnsafeRetry, Server: c.Server, Tenant: c.Tenant,
		Document: firstNonEmpty(w.doc(), prior.doc()), Key: firstNonEmpty(w.key(), prior.key()), Session: w.session(),
		Time: prior.at.t.Time(), Calls: callIDs(prior.callID(), w.callID()), RetryAction: actionWords.word(prior.action),
		Summary: sprintf("After a write to %s with an uncertain outcome at %s (%s), the client wrote again at %s under %s without reading the target first; the safe step was %s.",
			firstNonEmpty(w.doc(), prior.doc(), "a new document"), hhmmss(prior.at.t), reasonWords.word(reason), hhmmss(w.at.t), keyPhrase(w.key()), actionWords.word(prior.action)),
	})
}

// unsafeAfter looks, for a late uncertain write u, at the writes its
// writer sent after it: the first blind re-send is an unsafe retry. reason
// is why u's outcome was uncertain: a later read may have settled u, and
// cleared its own, before u came.
func (d *detector) unsafeAfter(ev *event, op *audit.Op, u *writeRec, ds *docState, reason word) {
	var after []*writeRec
	if op.Tool == toolCreate {
		if l := d.creates.get(createKey{actorKey(u.who()), fp(op.Identity)}); l != nil {
			for _, r := range *l {
				after = append(after, r.w)
			}
		}
	} else if ds != nil {
		after = ds.writes
	}
	for _, s := range after {
		if !u.at.before(s.at) || s.who() != u.who() || s.callID() == u.callID() {
			continue
		}
		if s.replay || s.op.protected || s.doubled() || s.duplicate || s.retried {
			continue
		}
		if d.blindAfter(u, s) {
			d.emitUnsafe(ev.call, u, s, reason)
			return
		}
	}
}

package detect

import (
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// answerLate judges r, an observation that saw the response of a call the
// detector already judged without one (the same call id: a client
// observer that timed out, then the server's observer delivered late), as
// judging the two in time order with the answer from the start would have
// (capture-format.md §1: the answer completes the unanswered observation).
// Each write of the call still uncertain for want of a response
// (no_response) takes the outcome the answer gives it: durable, rejected,
// pending a proof of its sync or save, or uncertain for the answer's own
// reason (COMMIT_UNKNOWN); an unverified_write made when
// its window closed is withdrawn (unless another write of the call under
// its id stays unverified: withdrawUnverified), and so is an unsafe_retry that named it
// as the uncertain write re-sent blindly; a later acceptance of the same
// edit is then judged again under the double-apply rules. It reports
// whether it took the answer (some write of the call changed): the caller
// tells the store, which keeps the answer in the call's place.
//
// What the unanswered reading made beyond that stands (docs/detection.md,
// "Responses under one call id"): a create (whose identity the ledger
// keeps apart, not by document), and the reason of an unverified_write
// whose answer says the write is pending a sync proof that never came.
func (d *detector) answerLate(r *audit.Record) bool {
	c := r.Call
	took := false
	for i := range r.Ops {
		op := &r.Ops[i]
		if op.Kind != audit.OpWrite || op.Tool == toolCreate {
			continue
		}
		ds := d.docs.get(docKey(op.Document()))
		if ds == nil {
			continue
		}
		var w *writeRec
		ct, who, intent := etimeOf(c.Time), actorOf(c), fp(op.Intent)
		for _, u := range ds.writes {
			if int(u.at.seq) != op.Seq || u.op.status != audit.OpUncertain || u.uncertain != rNoResponse {
				continue
			}
			// The same call id; or, observed by two carriers whose start
			// times differ (a client span and the server's: two call ids),
			// the same writer's same edit within the second that made the
			// engine drop r as a second observation of the exchange.
			dt := u.at.t.Sub(ct)
			if u.callID() == c.ID || u.who() == who && u.op.intent == intent && u.op.binding == fp(op.Binding) && dt <= time.Second && dt >= -time.Second {
				w = u
				break
			}
		}
		if w == nil {
			continue
		}
		took = true
		// The call answered names the withdrawals: its own id, which the
		// findings name, whatever the answer's (two carriers' ids).
		d.judging = w.callID()
		d.answerWrite(&event{rec: r, call: c, actor: actorOf(c), at: w.at, late: true, src: w.src}, op, w, ds)
	}
	return took
}

// answerWrite gives w, the uncertain write of an unanswered call, the
// outcome op of its answer.
func (d *detector) answerWrite(ev *event, op *audit.Op, w *writeRec, ds *docState) {
	if op.Status == audit.OpUncertain {
		// An answer that leaves the write uncertain all the same
		// (COMMIT_UNKNOWN, E_STORAGE) gives it its own reason and retry
		// class, as in order: an unverified_write made from here on says
		// commit_unknown, not no_response (rev20a). One its window made
		// already keeps no_response (docs/detection.md).
		w.op = wopOf(op)
		w.reason = reasonWords.of(op.Reason)
		w.uncertain = w.reason
		if op.Failure != nil {
			w.action = actionWords.of(op.Failure.Action)
		}
		return
	}
	if ds.more != nil {
		ds.more.uncertain = slices.DeleteFunc(ds.more.uncertain, func(u *writeRec) bool { return u == w })
	}
	if op.Key != "" {
		if ks := d.keys.get(keyHash(keyID{op.KeyKind, op.Key})); ks != nil && ks.more != nil {
			ks.more.uncertain = slices.DeleteFunc(ks.more.uncertain, func(u *writeRec) bool { return u == w })
		}
	}
	if w.unsafe {
		d.withdrawUnsafe(ev, w, ds)
	}
	// The finding made when its window closed, with the reason it had:
	// withdrawn unless the answer leaves the write unverified all the same.
	var made *audit.Finding
	if reported(w) {
		made = d.unverifiedFinding(w)
	}
	w.op = wopOf(op)
	w.uncertain = 0
	if op.Failure != nil {
		w.action = actionWords.of(op.Failure.Action)
	}
	switch {
	case op.Status == audit.OpFailed:
		d.setState(w, wRejected, w.at.t)
	case op.Pending:
		w.reason = reasonWords.of(op.Reason)
		ds.m().proof = insertAt(ds.proofWrites(), w, writeAt)
		if rs := d.reads.get(docKey(w.doc())); rs != nil {
			for _, rd := range rs.l {
				if w.at.before(rd.at) && !rd.at.t.After(d.deadline(w)) && proves(rd.rev, rd.flags, w) {
					d.setState(w, wDurable, rd.at.t)
					break
				}
			}
		}
	default:
		if !w.replay && !op.Protected && op.Intent != "" {
			w.accepted = true
			if d.doubleApplied(ev.call, ds, w) {
				d.setState(w, wDoubleApplied, w.at.t)
			}
		}
		if w.state == wPending || w.state == wUnverified {
			d.setState(w, wDurable, w.at.t)
		}
		if w.accepted {
			d.rejudgeAccepted(ev, ds, w.op.intent, w.at)
		}
	}
	if made != nil && w.state != wUnverified {
		d.withdrawUnverified(made, w, w.at.t)
	}
}

// withdrawUnsafe takes back the unsafe_retry that reported w, uncertain
// then, as the write its writer re-sent blindly: with its answer it was
// not uncertain.
func (d *detector) withdrawUnsafe(ev *event, w *writeRec, ds *docState) {
	w.unsafe = false
	for _, s := range ds.writes {
		if !w.at.before(s.at) || !s.retried || s.who() != w.who() || s.callID() == w.callID() {
			continue
		}
		s.retried = false
		c := ev.call
		d.out.withdraw(&audit.Finding{
			Kind: audit.KindUnsafeRetry, Server: c.Server, Tenant: c.Tenant,
			Document: firstNonEmpty(s.doc(), w.doc()), Key: firstNonEmpty(s.key(), w.key()), Session: s.session(),
			Time: w.at.t.Time(), Calls: callIDs(w.callID(), s.callID()), RetryAction: actionWords.word(w.action),
		}, d.judging, w.at.t)
		return
	}
}

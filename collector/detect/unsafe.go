package detect

import (
	"slices"

	"github.com/mcpaudit/mcpaudit/audit"
)

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
	return !u.unsafe && d.blindResend(u, w)
}

// emitUnsafe reports w as a blind re-send of prior, whose outcome was
// uncertain for reason.
func (d *detector) emitUnsafe(c *audit.Call, prior, w *writeRec, reason word) {
	prior.unsafe, w.retried = true, true
	// Its answer may come late, before prior's, or a late call may pair
	// them otherwise: the pair is then judged again from it (rejudge,
	// rejudgeUnsafe).
	w.setResends(prior)
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

// unsafePair is an unsafe_retry: s re-sent u blindly.
type unsafePair struct{ u, s *writeRec }

// rejudgeUnsafe judges again, in time order, which write of ds's writes
// from p on re-sent which uncertain write blindly (p: a late call's place
// on the document), as judging in order pairs them (checkUnsafe), from the
// state before p: an uncertain write paired (or re-sent rebased, a double
// application) by a write before p is taken. A pair judging in order does
// not make is withdrawn, one it makes is made; the pairs that stand are
// left as made. A late call may be the uncertain write, the re-send, a read
// of the target between them, or a write that makes the re-send a double
// application or a replay (rnd25: until then a late uncertain write paired
// with the first blind re-send not paired yet, which may have been paired
// with a later write that judging in order leaves unpaired, and a late
// read, double application or replay withdrew nothing). Only the writes
// still kept are judged: a late call lies within allowed_lateness behind
// the watermark, and a pair lies within the correlation window.
func (d *detector) rejudgeUnsafe(ev *event, ds *docState, p pos) {
	us := ds.uncertainWrites()
	var old []unsafePair
	for _, s := range ds.writes {
		if u := s.resends(); u != nil && s.retried && !s.at.before(p) {
			old = append(old, unsafePair{u, s})
		}
	}
	if len(us) == 0 && len(old) == 0 {
		return
	}
	// taken: the uncertain writes reported before p, by a pair or a
	// rebased double of a write before p. One marked unsafe that no
	// write names was reported by a write no longer kept (or by a
	// create: not judged here).
	taken, named := map[*writeRec]bool{}, map[*writeRec]bool{}
	for _, s := range ds.writes {
		u := s.resends()
		if u == nil || !s.retried {
			u = nil
		}
		if d, rebased := s.doubledWith(); rebased {
			u = d
		}
		if u != nil {
			if s.at.before(p) {
				taken[u] = true
			}
			named[u] = true
		}
	}
	for _, u := range us {
		taken[u] = taken[u] || u.unsafe && !named[u]
	}
	var made []unsafePair
	for _, s := range ds.writes {
		if s.at.before(p) {
			continue
		}
		if u, rebased := s.doubledWith(); rebased {
			taken[u] = true
			continue
		}
		if !d.resendCandidate(s) {
			continue
		}
		for _, u := range us {
			if !u.at.before(s.at) {
				break
			}
			if !taken[u] && u.who() == s.who() && u.callID() != s.callID() && d.blindResend(u, s) {
				taken[u] = true
				made = append(made, unsafePair{u, s})
				break
			}
		}
	}
	for _, o := range old {
		if slices.Contains(made, o) {
			continue
		}
		o.s.retried = false
		o.s.setResends(nil)
		d.out.withdraw(unsafeFinding(ev.call, o.u, o.s), d.judging, ev.at.t)
	}
	for _, u := range us {
		u.unsafe = taken[u]
	}
	for _, m := range made {
		if !slices.Contains(old, m) {
			d.emitUnsafe(ev.call, m.u, m.s, m.u.uncertain)
		}
	}
}

// resendCandidate reports whether s, a write on a document, is judged for
// an unsafe_retry as write judges it: not a replay under its key, not
// idempotent, not applied twice (the stronger finding wins), not a create.
func (d *detector) resendCandidate(s *writeRec) bool {
	with, _ := s.doubledWith()
	return !s.replay && !s.op.protected && with == nil && d.toolOf(s) != toolCreate
}

// blindResend reports whether s re-sent u, an uncertain write by its
// writer, blindly: blindAfter, u's being reported aside (rejudgeUnsafe
// decides that from the writes before s).
func (d *detector) blindResend(u, s *writeRec) bool {
	return u != s && u.op.status == audit.OpUncertain && !u.readBefore(s.at) &&
		(u.key() == "" || u.key() != s.key()) && within(u.at.t, s.at.t, d.cfg.CorrelationWindow)
}

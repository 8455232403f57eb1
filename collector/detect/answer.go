package detect

import (
	"container/heap"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// answerLate judges r, an observation that saw the response of a call the
// detector already judged without one (kept: the observation judged, under
// its call id, at its place at; the same call id, or, observed by two
// carriers whose start times differ, a client span and the server's, the
// call id kept within the second that made the engine drop r as a second
// observation of the exchange), as judging the two in time order with the
// answer from the start would have (capture-format.md §1: the answer
// completes the unanswered observation). It reports whether it took the
// answer: the caller tells the store, which keeps the answer in the
// call's place.
//
// The unanswered reading is taken back whole and the answered one judged
// as a late call is (lf21; live21's D1 and D2): each write of the call
// still uncertain for want of a response (no_response) leaves the
// detector's lists (its document's, its key's, the creates', the deadline
// heap), the answer is judged at the call's place by the rules that judge
// any late call (process: what it changes for the calls after it is
// applied too), and what the unanswered reading made that the answered
// one does not make again is withdrawn: the unverified_write made when a
// write's window closed, an unsafe_retry that named it as the uncertain
// write re-sent blindly (rejudge). What both readings make stands as made.
// So every rule judges the answer: an integrity_failure or a wasted_retry
// its rejection is evidence of, a copy apply's lease, a create, a read.
// An answer is not taken when the call's writes were judged from an
// answer already (a write of it no longer uncertain for want of one).
func (d *detector) answerLate(r *audit.Record, kept keptCall, at pos, src *source) bool {
	var gone []*writeRec
	for i := range r.Ops {
		op := &r.Ops[i]
		if op.Kind != audit.OpWrite {
			continue
		}
		for _, u := range d.writesOf(kept.ID, r.Call, op) {
			if u.op.status != audit.OpUncertain || u.uncertain != rNoResponse {
				// Taken already (an answer judged), or uncertain for the
				// answer's own reason: nothing to take back.
				return false
			}
			if !slices.Contains(gone, u) {
				gone = append(gone, u)
			}
		}
	}
	rr := r
	if r.Call.ID != kept.ID || !r.Call.Time.Equal(kept.Time) {
		// Two carriers' call ids: judged under the one kept, which the
		// findings and the store name.
		c := *r.Call
		c.ID, c.Time = kept.ID, kept.Time
		cp := *r
		cp.Call = &c
		rr = &cp
	}
	d.rejudge(rr, at, src, gone)
	return true
}

// keptCall names the observation judged for a call: its id and time.
type keptCall struct {
	ID   string
	Time time.Time
}

// answerJudged judges r, an answer of the call the engine judged from an
// observation without one, dated t, at at, delivered by src (answerLate).
// Dated otherwise (two carriers' start times), the call kept is found by
// its writes (unansweredWrite); one without a write is not taken then.
func (d *detector) answerJudged(r *audit.Record, t etime, at pos, src *source) bool {
	kept := keptCall{r.Call.ID, r.Call.Time}
	if t != etimeOf(r.Call.Time) {
		w := d.unansweredWrite(r)
		if w == nil {
			return false
		}
		kept = keptCall{w.callID(), w.at.t.Time()}
	}
	return d.answerLate(r, kept, at, src)
}

// answerFound judges r, an answer of a call judged a while ago (the
// engine holds no entry of it), when a write of it is found unanswered.
func (d *detector) answerFound(r *audit.Record) bool {
	w := d.unansweredWrite(r)
	if w == nil {
		return false
	}
	return d.answerLate(r, keptCall{w.callID(), w.at.t.Time()}, pos{t: w.at.t, ord: w.at.ord}, w.src)
}

// unansweredWrite returns a write uncertain for want of a response of r's
// call: the same call id; or, observed by two carriers whose start times
// differ (a client span and the server's: two call ids), the same
// writer's same edit within the second that made the engine drop r as a
// second observation of the exchange.
func (d *detector) unansweredWrite(r *audit.Record) *writeRec {
	c := r.Call
	ct, who := etimeOf(c.Time), actorOf(c)
	for i := range r.Ops {
		op := &r.Ops[i]
		if op.Kind != audit.OpWrite {
			continue
		}
		var cands []*writeRec
		if ds := d.docs.get(docKey(op.Document())); ds != nil {
			cands = ds.writes
		}
		if op.Key != "" {
			if ks := d.keys.get(keyHash(keyID{op.KeyKind, op.Key})); ks != nil {
				cands = append(slices.Clip(cands), ks.uncertainWrites()...)
			}
		}
		intent := fp(op.Intent)
		for _, u := range cands {
			if int(u.at.seq) != op.Seq || u.op.status != audit.OpUncertain || u.uncertain != rNoResponse {
				continue
			}
			dt := u.at.t.Sub(ct)
			if u.callID() == c.ID || u.who() == who && u.op.intent == intent && u.op.binding == fp(op.Binding) && dt <= time.Second && dt >= -time.Second {
				return u
			}
		}
	}
	return nil
}

// writesOf returns the writes the detector holds of call id's operation
// op (its sequence number): in its document's list, its key's uses and
// uncertain writes, and the creates' of c's session or client.
func (d *detector) writesOf(id string, c *audit.Call, op *audit.Op) []*writeRec {
	var out []*writeRec
	add := func(u *writeRec) {
		if u != nil && int(u.at.seq) == op.Seq && u.callID() == id && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	if doc := op.Document(); doc != "" {
		if ds := d.docs.get(docKey(doc)); ds != nil {
			for _, u := range ds.writes {
				add(u)
			}
		}
	}
	if op.Key != "" {
		if ks := d.keys.get(keyHash(keyID{op.KeyKind, op.Key})); ks != nil {
			for _, e := range ks.events {
				add(e.w)
			}
			for _, u := range ks.uncertainWrites() {
				add(u)
			}
		}
	}
	if op.Tool == toolCreate {
		for _, k := range createKeys(c, fp(op.Identity)) {
			if l := d.creates.get(k); l != nil {
				for _, cr := range *l {
					add(cr.w)
				}
			}
		}
	}
	return out
}

// rejudge takes back the unanswered writes gone of r's call and judges r,
// its answer, as a late call at at; the findings the first reading made
// and the second does not are withdrawn, those both make stand.
func (d *detector) rejudge(r *audit.Record, at pos, src *source, gone []*writeRec) {
	c := r.Call
	d.judging = c.ID
	d.out.hold = &heldOut{}
	prev := map[int32]word{}
	// freed are the uncertain writes of other calls that an unsafe_retry
	// paired with a write of this call as its blind re-send: taken back
	// with it, and judged again below.
	type freedPrior struct {
		p  *writeRec
		op *audit.Op
	}
	var freed []freedPrior
	for _, u := range gone {
		if u.state == wPending && d.deadline(u).Before(d.clock) {
			// Its window ended, the closing held for its source (a
			// replay's, after a restart): judged in order it closed, and
			// the run before may have stored its unverified_write.
			d.closeWindow(u)
		}
		prev[u.at.seq] = u.state
		if reported(u) {
			d.out.withdraw(d.unverifiedFinding(u), c.ID, u.at.t)
		}
		if u.unsafe {
			d.withdrawUnsafe(&event{rec: r, call: c, actor: actorOf(c), at: u.at, late: true, src: u.src}, u, d.sentAfter(u, r))
		}
		if p := u.resends(); p != nil && u.retried {
			// u was reported the blind re-send of p, both unanswered
			// (vf21's D1): the pair is taken back as the rest of u's
			// reading is, and judged again from the answer, which may
			// re-send p blindly all the same (the finding then stands
			// as made) or not. Left standing, the answer judged against
			// p already reported would pair with nothing, and p's own
			// answer, coming after, would find no re-send to withdraw
			// the finding with: it stayed open when the answers came in
			// reverse order.
			d.out.withdraw(unsafeFinding(c, p, u), c.ID, p.at.t)
			p.unsafe = false
			u.retried = false
			u.setResends(nil)
			freed = append(freed, freedPrior{p, opAt(r, u.at.seq)})
		}
		d.detach(u, r)
	}
	d.prevState = prev
	d.processAnswer(r, at, src)
	d.prevState = nil
	for _, f := range freed {
		// Not re-sent by the answer: the first blind re-send of p judged
		// after it, if any, is its unsafe_retry, as judging in order
		// pairs them.
		if p := f.p; !p.unsafe && f.op != nil && p.op.status == audit.OpUncertain && p.state != wRejected {
			var ds *docState
			if p.doc() != "" {
				ds = d.docs.get(docKey(p.doc()))
			}
			ev := &event{rec: r, call: c, actor: actorOf(c), at: p.at, late: true, src: p.src}
			if d.unsafeLater(ev, f.op, ds) {
				// The pairs from p on, as judging in order makes them.
				d.rejudgeUnsafe(ev, ds, p.at)
				continue
			}
			d.unsafeAfter(ev, f.op, p, ds, p.uncertain)
		}
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		if op.Kind != audit.OpWrite {
			continue
		}
		for _, w := range d.writesOf(c.ID, c, op) {
			// Its window ended before the answer came, as the first
			// reading's did: it closes now, whatever its source still
			// delivers (that reading waited for it already), its
			// unverified_write made again standing as made.
			if w.state == wPending && d.deadline(w).Before(d.clock) {
				d.closeWindow(w)
			}
		}
	}
	h := d.out.hold
	d.out.hold = nil
	d.out.flushHeld(h)
}

// detach takes w, the write of an unanswered reading, out of every list
// the detector judges later calls against (its document's, the keys' and
// the creates' of r's operations, the deadline heap), silently: r, its
// call's answer, stands for it (rejudge), told as the same write's next
// state.
func (d *detector) detach(w *writeRec, r *audit.Record) {
	drop := func(l []*writeRec) []*writeRec {
		return slices.DeleteFunc(l, func(u *writeRec) bool { return u == w })
	}
	if ds := d.docs.get(docKey(w.doc())); ds != nil && w.doc() != "" {
		ds.writes = drop(ds.writes)
		if ds.more != nil {
			ds.more.uncertain = drop(ds.more.uncertain)
			ds.more.proof = drop(ds.more.proof)
		}
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		if op.Key != "" {
			if ks := d.keys.get(keyHash(keyID{op.KeyKind, op.Key})); ks != nil {
				ks.events = slices.DeleteFunc(ks.events, func(e keyEvent) bool { return e.w == w })
				// The reuse rule's state after the key's items, without
				// it; the findings it made stand until the answer is
				// judged (judgeReuse).
				d.refoldReuses(ks)
				if ks.more != nil {
					ks.more.uncertain = drop(ks.more.uncertain)
					// A copy apply's use of the lease, unanswered: the
					// answer's stands for it.
					ks.more.leases = slices.DeleteFunc(ks.more.leases, func(e leaseEvent) bool {
						return e.apply && e.callID == w.callID() && e.at.t == w.at.t
					})
				}
			}
		}
		if op.Tool == toolCreate {
			for _, k := range createKeys(r.Call, fp(op.Identity)) {
				if l := d.creates.get(k); l != nil {
					*l = slices.DeleteFunc(*l, func(cr *createRec) bool { return cr.w == w })
				}
			}
		}
	}
	if w.state == wPending {
		d.pendingOut(w)
	}
	if w.index >= 0 {
		heap.Remove(&d.deadlines, int(w.index))
	}
	w.state = wRejected
	w.unsafe = false
}

// withdrawUnsafe takes back the unsafe_retry that reported w, uncertain
// then, as the write its writer re-sent blindly (one of after): with its
// answer it was not uncertain, or is judged again (rejudge).
func (d *detector) withdrawUnsafe(ev *event, w *writeRec, after []*writeRec) {
	w.unsafe = false
	for _, s := range after {
		if !w.at.before(s.at) || !s.retried || s.who() != w.who() || s.callID() == w.callID() {
			continue
		}
		if p := s.resends(); p != nil && p != w {
			// Reported the blind re-send of another write.
			continue
		}
		s.retried = false
		s.setResends(nil)
		d.out.withdraw(unsafeFinding(ev.call, w, s), d.judging, w.at.t)
		return
	}
}

// unsafeFinding returns the unsafe_retry that reported s as the blind
// re-send of w (emitUnsafe), as withdrawn: its id and what a store
// matches it by.
func unsafeFinding(c *audit.Call, w, s *writeRec) *audit.Finding {
	return &audit.Finding{
		Kind: audit.KindUnsafeRetry, Server: c.Server, Tenant: c.Tenant,
		Document: firstNonEmpty(s.doc(), w.doc()), Key: firstNonEmpty(s.key(), w.key()), Session: s.session(),
		Time: w.at.t.Time(), Calls: callIDs(w.callID(), s.callID()), RetryAction: actionWords.word(w.action),
	}
}

// opAt returns r's operation of sequence number seq, nil when none.
func opAt(r *audit.Record, seq int32) *audit.Op {
	for i := range r.Ops {
		if int32(r.Ops[i].Seq) == seq {
			return &r.Ops[i]
		}
	}
	return nil
}

// sentAfter returns the writes a blind re-send of w, a write of r's call,
// is looked for among (checkUnsafe): its document's, and for a create the
// creates of its identity by its writer.
func (d *detector) sentAfter(w *writeRec, r *audit.Record) []*writeRec {
	var out []*writeRec
	if ds := d.docs.get(docKey(w.doc())); ds != nil && w.doc() != "" {
		out = append(out, ds.writes...)
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		if op.Tool != toolCreate || int(w.at.seq) != op.Seq {
			continue
		}
		if l := d.creates.get(createKey{actorKey(w.who()), fp(op.Identity)}); l != nil {
			for _, cr := range *l {
				out = append(out, cr.w)
			}
		}
	}
	return out
}

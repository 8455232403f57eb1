package detect

import (
	"container/heap"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// expire closes the verification windows that ended before t: their
// pending writes become unverified. A write whose source has not yet
// delivered past the end of its window (it came late, in a backlog that
// is still arriving) waits until it has: what settles it may be on its way.
func (d *detector) expire(t etime) {
	for d.deadlines.Len() > 0 && d.deadline(d.deadlines[0]).Before(t) {
		w := heap.Pop(&d.deadlines).(*writeRec)
		if w.state != wPending {
			continue
		}
		if w.src != nil && d.behind != nil && d.behind(w.src, d.deadline(w)) {
			d.deferred = append(d.deferred, w)
			continue
		}
		d.closeWindow(w)
	}
}

// closeDeferred closes the windows held for their sources once those have
// caught up or gone idle.
func (d *detector) closeDeferred() {
	kept := d.deferred[:0]
	for _, w := range d.deferred {
		switch {
		case w.state != wPending:
		case d.behind(w.src, d.deadline(w)):
			kept = append(kept, w)
		default:
			d.closeWindow(w)
		}
	}
	clear(d.deferred[len(kept):])
	d.deferred = kept
}

// closeWindow makes a pending write whose window ended unverified.
func (d *detector) closeWindow(w *writeRec) {
	d.setState(w, wUnverified, d.deadline(w))
	if f := w.follows(); f != nil && f.state == wUnverified {
		w.more.unreported = true
		return // the attempt it replays was reported
	}
	if d.unverifiedSibling(w) {
		// Another write under the finding's id stands unverified, its
		// finding made: the id is one finding, told and counted once, as
		// the store keeps one row of it (review rev20w).
		return
	}
	d.out.finding(d.unverifiedFinding(w))
}

// unverifiedFinding returns the unverified_write of w, whose window ended
// with it pending (its reason still set).
func (d *detector) unverifiedFinding(w *writeRec) *audit.Finding {
	return &audit.Finding{
		Kind: audit.KindUnverifiedWrite, Server: d.server, Tenant: d.tenant,
		Document: w.doc(), Key: w.key(), Session: w.session(), Time: w.at.t.Time(),
		Calls: []string{w.callID()}, Reason: reasonWords.word(w.reason), RetryAction: actionWords.word(w.action),
		Summary: sprintf("Nobody established whether the %s write to %s at %s is durable (%s) within %s.", d.toolOf(w), firstNonEmpty(w.doc(), "a new document"), hhmmss(w.at.t), reasonWords.word(w.reason), d.cfg.VerifyWindow),
	}
}

// openAt reports whether w's verification window was open at t with w
// pending: it is pending, or its window closed unverified before a call
// dated within it arrived (a call judged late, or behind the watermark).
func (d *detector) openAt(w *writeRec, t etime) bool {
	return (w.state == wPending || w.state == wUnverified) && !t.After(d.deadline(w))
}

// settle moves w, open at t (openAt), to s at t. A write whose window
// already closed unverified is settled as judging in order would have
// settled it, and its unverified_write is withdrawn: the sinks that keep
// findings mark it resolved (audit.FindingWithdrawer). Not while another
// write under the finding's id stands unverified (unverifiedSibling): the
// finding, made and counted once (closeWindow), stands, and is withdrawn
// when the last of them is settled.
func (d *detector) settle(w *writeRec, s word, t etime) {
	if reported(w) {
		d.withdrawUnverified(d.unverifiedFinding(w), w, t)
	}
	d.setState(w, s, t)
}

// reported reports whether w stands unverified with its unverified_write
// made (closeWindow): not a replay whose attempt's finding was reported.
func reported(w *writeRec) bool {
	return w.state == wUnverified && (w.more == nil || !w.more.unreported)
}

// withdrawUnverified takes back f, the unverified_write made when w's
// window closed, now that w is settled at t (by a call judged late,
// settle, or by its call's late answer, answerWrite): the one withdrawal
// path of an unverified_write. Not while another write under the
// finding's id stands unverified (unverifiedSibling): the finding, made
// and counted once (closeWindow), stands, as judged in time order, and
// is withdrawn when the last of them is settled (fx21: answerWrite
// withdrew it at the first).
func (d *detector) withdrawUnverified(f *audit.Finding, w *writeRec, t etime) {
	if d.unverifiedSibling(w) {
		return
	}
	d.out.withdraw(f, d.judging, t)
}

// unverifiedSibling reports whether another write of w's call to its
// document under its key stands unverified with its unverified_write
// made: the finding's id names the call, the document and the key, not
// the write (audit.Finding.ID), so two writes of one oddlynew run to one
// document share it, and judged in time order it stands while one of
// them is unverified (review rev19w, D3). A write without a document is
// kept in no document's list; two of one call under one key are a replay
// and its attempt, whose finding is the attempt's alone.
func (d *detector) unverifiedSibling(w *writeRec) bool {
	if w.doc() == "" {
		return false
	}
	ds := d.docs.get(docKey(w.doc()))
	if ds == nil {
		return false
	}
	for _, o := range ds.writes {
		if o != w && o.at.t == w.at.t && o.at.ord == w.at.ord && o.state == wUnverified &&
			(o.more == nil || !o.more.unreported) && o.callID() == w.callID() && o.doc() == w.doc() && o.key() == w.key() {
			return true
		}
	}
	return false
}

// setState moves a write to a new state and tells the sinks.
func (d *detector) setState(w *writeRec, s word, t etime) {
	prev := w.state
	if prev == s {
		return
	}
	w.state = s
	if prev == wPending {
		d.pendingOut(w)
	}
	if s != wUnverified && s != wPending {
		w.reason = 0
	}
	if w.index >= 0 && s != wPending {
		heap.Remove(&d.deadlines, int(w.index))
	}
	d.emitWrite(w, stateWords.word(prev), t)
}

// pending counts the writes whose verification window is open, or ended
// while their source was behind (deferred), and returns the latest end of
// those windows. The count is kept as writes enter and leave pending
// (pendingIn, pendingOut); the latest end is found again by a walk only
// after the write that had it left pending.
func (d *detector) pending() (n int, until time.Time) {
	n = d.npending
	if n > 0 {
		if d.latestGone {
			d.latest, d.latestGone = d.latestPending(), false
		}
		until = d.latest.Add(d.cfg.VerifyWindow).Time()
	}
	if pendingCheck != nil {
		wn, wu := d.pendingWalk()
		pendingCheck(n, wn, until, wu)
	}
	return n, until
}

// pendingCheck, when set (by the package's tests), is given what every
// pending returns beside what a walk of the windows counts.
var pendingCheck func(n, walkN int, until, walkUntil time.Time)

// pendingIn counts w, a write just made pending and put in the deadline
// heap.
func (d *detector) pendingIn(w *writeRec) {
	d.npending++
	if d.npending == 1 || !w.at.t.Before(d.latest) {
		d.latest, d.latestGone = w.at.t, false
	}
}

// pendingOut uncounts w, a write leaving pending.
func (d *detector) pendingOut(w *writeRec) {
	d.npending--
	switch {
	case d.npending == 0:
		d.latest, d.latestGone = 0, false
	case w.at.t == d.latest:
		d.latestGone = true
	}
}

// latestPending returns the latest place of the pending writes in
// deadlines and deferred.
func (d *detector) latestPending() etime {
	var latest etime
	found := false
	for _, ws := range [][]*writeRec{d.deadlines, d.deferred} {
		for _, w := range ws {
			if w.state == wPending && (!found || w.at.t.After(latest)) {
				latest, found = w.at.t, true
			}
		}
	}
	return latest
}

// pendingWalk is pending counted by a walk of the windows.
func (d *detector) pendingWalk() (n int, until time.Time) {
	for _, ws := range [][]*writeRec{d.deadlines, d.deferred} {
		for _, w := range ws {
			if w.state != wPending {
				continue
			}
			n++
			if t := d.deadline(w).Time(); t.After(until) {
				until = t
			}
		}
	}
	return n, until
}

// deadline returns the end of w's verification window.
func (d *detector) deadline(w *writeRec) etime { return w.at.t.Add(d.cfg.VerifyWindow) }

// writeHeap orders pending writes by the end of their verification window:
// by their time, as every window is as long.
type writeHeap []*writeRec

func (h writeHeap) Len() int           { return len(h) }
func (h writeHeap) Less(i, j int) bool { return h[i].at.t < h[j].at.t }
func (h writeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = int32(i), int32(j)
}

// Push and Pop are container/heap's; push is the detector's.
func (h *writeHeap) Push(x any) {
	w := x.(*writeRec)
	w.index = int32(len(*h))
	*h = append(*h, w)
}
func (h *writeHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
func (h *writeHeap) push(w *writeRec) { heap.Push(h, w) }

// emitter hands the detectors' output to the sinks and counts it.
type emitter struct {
	sinks []audit.Sink
	stats *Stats
	// w is the write handed to the sinks, filled again for each state
	// change: a sink keeps a copy of what it keeps (audit.Sink).
	w audit.Write
	// hold, while a late answer is judged again (rejudge), keeps the
	// findings made and withdrawn until flushHeld weighs them.
	hold *heldOut
}

// heldOut is what one late answer's judging made and withdrew, in order.
type heldOut struct {
	l []heldFinding
}

type heldFinding struct {
	f *audit.Finding
	// withdrawn by call at at; else made.
	withdrawn bool
	call      string
	at        etime
}

// flushHeld tells the sinks what h holds, in order, but for a finding
// withdrawn (made by the unanswered reading) then made again (by the
// answered one): it stands as it was made, and neither is told. A finding
// withdrawn twice (two writes of one call under one finding's id) is
// withdrawn once; one made then withdrawn (a window the first reading
// closed, closed again before its answer was judged) is told both.
func (o *emitter) flushHeld(h *heldOut) {
	gone := map[string]bool{}
	remade := map[string]bool{}
	for _, e := range h.l {
		id := e.f.ID()
		if e.withdrawn {
			gone[id] = true
		} else if gone[id] {
			remade[id] = true
		}
	}
	told := map[string]bool{}
	for _, e := range h.l {
		id := e.f.ID()
		if remade[id] {
			continue
		}
		if e.withdrawn {
			if !told["-"+id] {
				told["-"+id] = true
				o.withdraw(e.f, e.call, e.at)
			}
			continue
		}
		if !told[id] {
			told[id] = true
			o.finding(e.f)
		}
	}
}

func (o *emitter) call(r *audit.Record) {
	o.stats.call(r)
	for _, s := range o.sinks {
		s.Call(r)
	}
}

// emitWrite tells the sinks of a write's new state, reached at at (prev
// is "" when the write is new).
func (d *detector) emitWrite(w *writeRec, prev audit.WriteState, at etime) {
	o := d.out
	state := stateWords.word(w.state)
	o.stats.write(state, prev)
	if len(o.sinks) == 0 {
		return
	}
	aw := &o.w
	*aw = audit.Write{
		CallID: w.callID(), Seq: int(w.at.seq), Time: w.at.t.Time(), Server: d.server, Tenant: d.tenant,
		Session: w.session(), Tool: d.toolOf(w), Document: w.doc(), Key: w.key(),
		State: state, Reason: reasonWords.word(w.reason), Action: actionWords.word(w.action), StateTime: at.Time(),
	}
	for _, s := range o.sinks {
		s.Write(aw, prev)
	}
}

// withdraw takes back an unverified_write made when its window closed,
// which a call within the window, judged after it closed, settles; at is
// that call's time.
func (o *emitter) withdraw(f *audit.Finding, call string, at etime) {
	if o.hold != nil {
		o.hold.l = append(o.hold.l, heldFinding{f: f, withdrawn: true, call: call, at: at})
		return
	}
	f.Severity = f.Kind.Severity()
	o.stats.Findings[f.Kind]--
	o.stats.Withdrawn++
	for _, s := range o.sinks {
		if w, ok := s.(audit.FindingWithdrawer); ok {
			w.WithdrawFinding(f, call, at.Time())
		}
	}
}

func (o *emitter) finding(f *audit.Finding) {
	if o.hold != nil {
		o.hold.l = append(o.hold.l, heldFinding{f: f})
		return
	}
	f.Severity = f.Kind.Severity()
	o.stats.Findings[f.Kind]++
	for _, s := range o.sinks {
		s.Finding(f)
	}
}

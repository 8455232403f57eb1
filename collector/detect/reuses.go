package detect

import (
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The request_id_reuse rule, judged as time order judges it whatever the
// order the uses of a key come in (rid23).
//
// Each use of a key that binds it, and each refusal of it by the server
// (E_REQUEST_REUSE and the like), is an item; the rule is a fold over a
// key's items in time order (reuseFold.step). A use or a refusal judged
// after items dated after it (a late call, or one of a right clock behind
// a pod whose clock runs ahead) has the key's items after it judged again
// from the fold's state before it: the findings that judging in order no
// longer makes are withdrawn, those it makes now are made. Until rid23 only
// some of this was applied (ck22's rebindReuses and bindHeld, rebind's new
// reuses): the binder that changes once a window has passed, "once per new
// intent", and the refusals already paired were not judged again, and 28
// of 30 random orders of four keys named other calls than time order.
//
// The fold depends on the items alone, not on when the key was swept: a key
// whose last item lies more than correlation_window before the next is
// forgotten there (judged in order, the sweep forgot it at some point
// between correlation_window and its horizon, which depended on the
// partition's other traffic).

// reuseState is what the reuse rule keeps of a key with more than one
// item: the fold's state before the items still kept and after all of
// them, the refusals still kept, and the pairs reported for the kept items.
type reuseState struct {
	// base is the fold over the items folded, those at or before upTo
	// (none, when folded is false): no call judged from now on comes
	// before them (foldReuses).
	base   reuseFold
	upTo   pos
	folded bool
	// tail is the fold over every item.
	tail reuseFold
	// refusals are the server's refusals of the key not folded, in order.
	refusals []keyEvent
	// actions are the refusals' retry actions, by refusal.
	actions []audit.RetryAction
	// made holds the request_id_reuse findings made that name two calls,
	// for the items not folded.
	made []reuseMade
}

// reuseFold is the reuse rule's state after a key's items up to some
// place in time.
type reuseFold struct {
	// binder is the use that binds the key (ok: there is one); its intent
	// was last used at binderLast.
	binder     keyEvent
	ok         bool
	binderLast etime
	// last is the time of the last item (any: there is one).
	last etime
	any  bool
	// reported holds the intents reported as a reuse within the
	// correlation window before last, in order.
	reported []reportedIntent
}

// reportedIntent is an intent reported as a reuse of the key, and when.
type reportedIntent struct {
	binding uint64
	at      etime
}

// reuseWant is what judging in order makes of one item: nothing, a pair
// with the binder, or (a refusal whose key's use is not seen) the refusal
// alone, held until no call can bind it (holdReuse).
type reuseWant struct {
	pair, alone bool
	binder      keyEvent
}

// clone returns f with a reported list of its own.
func (f reuseFold) clone() reuseFold {
	f.reported = append([]reportedIntent(nil), f.reported...)
	return f
}

// wasReported reports whether binding was reported within w before t, and
// drops the intents reported earlier than that.
func (f *reuseFold) wasReported(binding uint64, t etime, d *detector) bool {
	n := 0
	for n < len(f.reported) && !within(f.reported[n].at, t, d.cfg.horizon()) {
		n++
	}
	if n > 0 {
		f.reported = append(f.reported[:0], f.reported[n:]...)
	}
	for _, r := range f.reported {
		if r.binding == binding {
			return true
		}
	}
	return false
}

// step judges the item e (refusal: the server refused it) after the items
// folded into f, and folds it in.
//
// A key is bound by its first use, and bound anew by a use of another
// intent once the correlation window since its binder has passed; a key
// unused for the correlation window is forgotten. A use of another intent
// than the binder's within the window is a reuse, once per intent within
// a window. A refusal names the binder when the binder's intent was used
// within the window before it (boundWithin until rid23), and is otherwise
// named alone; it counts as its intent reported.
func (f *reuseFold) step(d *detector, e keyEvent, refusal bool) reuseWant {
	w := d.cfg.CorrelationWindow
	t := e.pos().t
	if f.any && !within(f.last, t, w) {
		f.ok = false
	}
	f.last, f.any = t, true
	var want reuseWant
	if refusal {
		if e.binding != 0 && f.wasReported(e.binding, t, d) {
			return want
		}
		f.reported = append(f.reported, reportedIntent{e.binding, t})
		if !f.ok || f.binder.callID() == e.callID() || !within(f.binderLast, t, w) {
			want.alone = true
			return want
		}
		want.pair, want.binder = true, f.binder
		return want
	}
	switch {
	case !f.ok:
		f.binder, f.binderLast, f.ok = e, t, true
		return want
	case f.binder.binding == e.binding:
		f.binderLast = t
		return want
	case !within(f.binder.pos().t, t, w):
		f.binder, f.binderLast = e, t
		return want
	}
	if !f.wasReported(e.binding, t, d) {
		f.reported = append(f.reported, reportedIntent{e.binding, t})
		want.pair, want.binder = true, f.binder
	}
	return want
}

// judgeReuse judges the item e of key k (a use that binds it, or the
// server's refusal of it, already added to the key's items) and, when it
// comes before items already judged, judges those again: the findings
// made change to those judging in order makes.
func (d *detector) judgeReuse(ev *event, k keyID, ks *keyState, e keyEvent, refusal bool, action audit.RetryAction) {
	if ks.ru == nil {
		if !refusal && len(ks.events) == 1 {
			// A key's first item: it binds the key, and the fold over
			// ks.events alone says so (no state is kept for it).
			return
		}
		ks.ru = &reuseState{}
		for _, u := range ks.events {
			if u.pos() != e.pos() {
				ks.ru.tail.step(d, u, false)
			}
		}
	}
	rs := ks.ru
	if refusal {
		rs.refusals, rs.actions = insertRefusal(rs.refusals, rs.actions, e, action)
	}
	defer d.foldReuses(ks, d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness))
	if !rs.tail.any || !e.pos().before(ks.lastItem()) {
		// In order: the item is the last; only it is judged.
		d.settleReuse(ev, k, ks, e, refusal, action, rs.tail.step(d, e, refusal))
		return
	}
	// Judged after items dated after it: those are judged again from the
	// state before the items kept.
	f := rs.base.clone()
	ks.eachReuseItem(func(u keyEvent, refused bool, act audit.RetryAction) {
		want := f.step(d, u, refused)
		if !u.pos().before(e.pos()) {
			d.settleReuse(ev, k, ks, u, refused, act, want)
		}
	})
	rs.tail = f
}

// refoldReuses sets the key's fold after its items again, from the base:
// an item left its lists (detach).
func (d *detector) refoldReuses(ks *keyState) {
	rs := ks.ru
	if rs == nil {
		return
	}
	f := rs.base.clone()
	ks.eachReuseItem(func(u keyEvent, refused bool, _ audit.RetryAction) { f.step(d, u, refused) })
	rs.tail = f
}

// lastItem returns the place of the key's last item (ks.ru is set).
func (ks *keyState) lastItem() pos {
	var p pos
	if n := len(ks.events); n > 0 {
		p = ks.events[n-1].pos()
	}
	if n := len(ks.ru.refusals); n > 0 && p.before(ks.ru.refusals[n-1].pos()) {
		p = ks.ru.refusals[n-1].pos()
	}
	return p
}

// eachReuseItem calls f for each item of the key not folded, in order.
func (ks *keyState) eachReuseItem(f func(e keyEvent, refusal bool, action audit.RetryAction)) {
	rs := ks.ru
	i, j := 0, 0
	for i < len(ks.events) && rs.folded && !rs.upTo.before(ks.events[i].pos()) {
		i++
	}
	for i < len(ks.events) || j < len(rs.refusals) {
		if j == len(rs.refusals) || i < len(ks.events) && ks.events[i].pos().before(rs.refusals[j].pos()) {
			f(ks.events[i], false, "")
			i++
			continue
		}
		f(rs.refusals[j], true, rs.actions[j])
		j++
	}
}

// foldReuses folds into the base the key's items dated before cut, which
// no call judged from now on comes before, and forgets the refusals and
// pairs made among them: they stand as made.
func (d *detector) foldReuses(ks *keyState, cut etime) {
	rs := ks.ru
	if rs == nil {
		return
	}
	var last pos
	n, stop := 0, false
	ks.eachReuseItem(func(u keyEvent, refused bool, _ audit.RetryAction) {
		if stop || !u.pos().t.Before(cut) {
			stop = true
			return
		}
		rs.base.step(d, u, refused)
		last = u.pos()
		n++
	})
	if n == 0 {
		return
	}
	rs.upTo, rs.folded = last, true
	r := 0
	for r < len(rs.refusals) && !rs.upTo.before(rs.refusals[r].pos()) {
		r++
	}
	if r > 0 {
		clear(rs.refusals[:r])
		rs.refusals = append(rs.refusals[:0], rs.refusals[r:]...)
		rs.actions = append(rs.actions[:0], rs.actions[r:]...)
	}
	m := 0
	for _, x := range rs.made {
		if rs.upTo.before(x.at) {
			rs.made[m] = x
			m++
		}
	}
	clear(rs.made[m:])
	rs.made = rs.made[:m]
}

// insertRefusal inserts the refusal e, with its retry action, at its place.
func insertRefusal(l []keyEvent, actions []audit.RetryAction, e keyEvent, action audit.RetryAction) ([]keyEvent, []audit.RetryAction) {
	i := len(l)
	for i > 0 && e.pos().before(l[i-1].pos()) {
		i--
	}
	l = append(l, keyEvent{})
	copy(l[i+1:], l[i:])
	l[i] = e
	actions = append(actions, "")
	copy(actions[i+1:], actions[i:])
	actions[i] = action
	return l, actions
}

// settleReuse makes the findings of the item e of key k what judging in
// order makes (want): a pair made with another binder, or that judging in
// order does not make, is withdrawn; a refusal held that now has a binder
// is reported with it; a refusal reported with a binder that judging in
// order does not name is held again, to be named alone (or bound by a use
// judged late) as an unseen use's is.
func (d *detector) settleReuse(ev *event, k keyID, ks *keyState, e keyEvent, refusal bool, action audit.RetryAction, want reuseWant) {
	rs := ks.ru
	p := e.pos()
	var made *reuseMade
	mi := -1
	for i := range rs.made {
		if rs.made[i].at == p {
			made, mi = &rs.made[i], i
			break
		}
	}
	var held *heldReuse
	if refusal && d.heldKeys[k] > 0 {
		for _, h := range d.held {
			if !h.done && h.k == k && h.use.pos() == p {
				held = h
				break
			}
		}
	}
	if want.pair && made != nil && made.f.Calls[0] == want.binder.callID() {
		return
	}
	if want.alone && made == nil && held != nil {
		return
	}
	if made != nil {
		old := made.f
		rs.made = append(rs.made[:mi], rs.made[mi+1:]...)
		d.out.withdraw(&old, d.judging, ev.at.t)
	}
	if held != nil {
		d.heldDone(held)
	}
	switch {
	case want.pair:
		d.emitReuse(ev.call, k, ks, e, callIDs(want.binder.callID(), e.callID()), want.binder.pos().t, action)
	case want.alone:
		d.holdReuse(e.callID(), k, e, action)
	}
}

// heldReuse is a request_id_reuse the server reported for a key with no
// use within the correlation window before the refusal when it was
// judged.
type heldReuse struct {
	k      keyID
	use    keyEvent
	callID string
	action audit.RetryAction
	done   bool
}

// holdReuse holds the request_id_reuse the server reported for use of k
// when no use of the key binds it: its first use, dated before it, may
// still be judged late (within the allowed lateness), and judged in order
// the finding names both calls. It is reported with the use once that is
// judged (judgeReuse), or alone once the watermark is past it by the
// allowed lateness (releaseHeld).
func (d *detector) holdReuse(callID string, k keyID, use keyEvent, action audit.RetryAction) {
	h := &heldReuse{k: keyID{strings.Clone(k.kind), strings.Clone(k.key)}, use: use, callID: strings.Clone(callID), action: action}
	// In time order: releaseHeld takes the ones the watermark passed from
	// the front, and a call judged costs nothing for the ones still held.
	d.held = insertAt(d.held, h, func(h *heldReuse) pos { return h.use.pos() })
	if d.heldKeys == nil {
		d.heldKeys = map[keyID]int{}
	}
	d.heldKeys[h.k]++
}

// releaseHeld reports alone the held reuses that no call judged from now
// on can bind: the watermark t is past them by the allowed lateness (all,
// when all is set: the end of a finite input).
func (d *detector) releaseHeld(t etime, all bool) {
	n := 0
	for _, h := range d.held {
		if !all && !t.Add(-d.cfg.AllowedLateness).After(h.use.pos().t) {
			break
		}
		n++
		if !h.done {
			d.heldDone(h)
			d.emitReuse(&audit.Call{Server: d.server, Tenant: d.tenant}, h.k, nil, h.use, []string{h.callID}, h.use.pos().t, h.action)
		}
	}
	if n == 0 {
		return
	}
	clear(d.held[:n])
	d.held = d.held[n:]
	if len(d.held) == 0 {
		d.held = nil
	}
}

// heldDone marks h reported.
func (d *detector) heldDone(h *heldReuse) {
	h.done = true
	if d.heldKeys[h.k]--; d.heldKeys[h.k] <= 0 {
		delete(d.heldKeys, h.k)
	}
}

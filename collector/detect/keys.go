package detect

import (
	"slices"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/classify"
)

// keyed follows a write under an idempotency key: a re-send with the same
// binding is a replay (it cannot apply twice, and if it is accepted it
// settles the earlier attempts), another binding within the correlation
// window is a key reuse.
func (d *detector) keyed(ev *event, op *audit.Op, w *writeRec, ks *keyState) {
	t := ev.at.t
	b := d.binderBefore(ks, w.at)
	w.replay = op.KeyProtected && b != nil && b.binding == w.op.binding
	if w.replay && op.Status == audit.OpUncertain {
		for _, u := range ks.uncertainWrites() {
			// Its window may have closed before this replay, dated
			// within it, came (late): it joins the attempt all the same.
			if d.openAt(u, w.at.t) && u.op.binding == w.op.binding && u.at.before(w.at) {
				w.setFollows(u)
				break
			}
		}
	}
	if op.KeyProtected && op.Status == audit.OpSucceeded && (b == nil || b.binding == w.op.binding) {
		for _, u := range ks.uncertainWrites() {
			if !u.at.before(w.at) {
				continue
			}
			if d.openAt(u, t) {
				d.settle(u, wResolved, t)
			}
			u.noteRead(w.at)
		}
	}
	d.checkReuse(ev, op, keyID{op.KeyKind, op.Key}, ks, w)
}

// binderBefore returns the use of the key that binds it at p, nil when
// none: the first binding use, replaced by a use of another binding once
// the correlation window since the binder has passed. A key unused for
// the correlation window and the allowed lateness is forgotten: its next
// use binds it anew (rnd24, on the calls' own times: until then the key
// was forgotten at the sweep after its horizon, which depended on the
// partition's other traffic and, live, on how far the watermark lagged, so
// that a re-send after such a gap was a replay of the old binder or not,
// and so a double application or not). An operationId is minted by the
// platform and bound by its first use for good.
func (d *detector) binderBefore(ks *keyState, p pos) *keyEvent {
	var b *keyEvent
	var last etime
	for i := range ks.events {
		e := &ks.events[i]
		if !e.pos().before(p) {
			break
		}
		t := e.pos().t
		if b == nil {
			// After a sweep the first use kept is the binder, and the
			// last use before it was dropped (keyState.dropped).
			b, last = e, max(t, ks.dropped)
			continue
		}
		if e.operationID {
			continue
		}
		if !within(last, t, d.cfg.horizon()) || !within(b.pos().t, t, d.cfg.CorrelationWindow) && b.binding != e.binding {
			b = e
		}
		last = t
	}
	if b != nil && !within(last, p.t, d.cfg.horizon()) && !b.operationID {
		return nil
	}
	return b
}

// checkReuse reports one idempotency key carrying two intents, whether the
// server said so or the collector saw it, and records the use of the key.
func (d *detector) checkReuse(ev *event, op *audit.Op, k keyID, ks *keyState, w *writeRec) {
	binding := fp(op.Binding)
	use := keyEvent{binding: binding, w: w, operationID: k.kind == "operationId"}
	if w == nil {
		// Copies: the call's texts are one allocation (audit.Record.Lean).
		use.plan = &planUse{at: ev.at, callID: strings.Clone(ev.call.ID), session: strings.Clone(ev.call.Session), doc: strings.Clone(op.Document()), target: strings.Clone(op.Target)}
	}
	if k.kind == "operationId" {
		// The platform mints operationIds; a wrong planToken under one is
		// refused with replay_same_request, not a second intent.
		if op.Binding != "" {
			d.addUse(ev, k, ks, use)
		}
		return
	}
	serverSaid := op.Failure != nil && (op.Failure.Code == "E_REQUEST_REUSE" || op.Failure.Code == classify.CodeIncompatibleCreation || op.Failure.Code == classify.CodeCopyIDReused)
	if serverSaid {
		d.judgeReuse(ev, k, ks, use, true, op.Failure.Action)
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
	d.addUse(ev, k, ks, use)
	d.judgeReuse(ev, k, ks, use, false, "")
}

// addUse records a binding use of a key; a late one is applied to the uses
// after it.
func (d *detector) addUse(ev *event, k keyID, ks *keyState, use keyEvent) {
	if ks.events == nil {
		ks.events = ks.one[:0]
	}
	ks.events = insertAt(ks.events, use, func(e keyEvent) pos { return e.pos() })
	if ev.late {
		d.rebind(ev, k, ks)
	}
}

// rebind applies a late use of a key to the uses after it: one that now
// has an earlier binder of its binding is a replay of it (the reuses it
// makes are judgeReuse's).
func (d *detector) rebind(ev *event, k keyID, ks *keyState) {
	for i := range ks.events {
		e := ks.events[i]
		if !ev.at.before(e.pos()) {
			continue
		}
		if k.kind == "operationId" && (e.w == nil || !e.w.op.keyProtected || e.w.replay) {
			// Nothing a binder can change: an operationId binds no
			// reuse, and this use is no write to make a replay. Looking
			// for its binder went over the key's uses before it, for each
			// use after a late one (a pod whose clock runs ahead polls a
			// copy ahead of every call of a right clock: clk21).
			continue
		}
		b := d.binderBefore(ks, e.pos())
		if b == nil {
			continue
		}
		s := e.w
		if s == nil || !s.op.keyProtected {
			continue
		}
		switch replay := b.binding == e.binding; {
		case replay && !s.replay:
			s.replay = true
			d.unaccept(s)
			if s.op.status == audit.OpUncertain && s.follows() == nil && b.w != nil && b.w.op.status == audit.OpUncertain {
				s.setFollows(b.w)
			}
			if s.op.status == audit.OpSucceeded {
				// Accepted under its binder's binding, it settles the
				// key's uncertain writes before it, as keyed does in
				// order (rnd25: judged before the late use that binds
				// the key to it, it settled nothing, and a blind
				// re-send after it stood as an unsafe_retry).
				for _, u := range ks.uncertainWrites() {
					if !u.at.before(s.at) {
						continue
					}
					if d.openAt(u, s.at.t) {
						d.settle(u, wResolved, s.at.t)
					}
					u.noteRead(s.at)
				}
			}
		case !replay && s.replay:
			// Its binder now binds another intent (a use of it judged
			// late, the window since the earlier binder passed): judged
			// in order it is no replay, and a candidate for the
			// double-apply rules (rnd24).
			s.replay = false
			s.accepted = d.acceptedWrite(s)
		default:
			continue
		}
		if ds := d.docs.get(docKey(s.doc())); ds != nil && s.doc() != "" && s.op.intent != 0 {
			// What it was paired with, or the writes after it were,
			// changes with it.
			d.rejudgeDoubles(ev, ds, s.op.intent, s.at)
		}
	}
}

// emitReuse reports the key k used by use for another intent than its
// binder's; c is the call being processed (it names the partition). A
// finding that names the binder is kept with the key (ks, nil for one
// named alone): a use judged late may change it (judgeReuse).
func (d *detector) emitReuse(c *audit.Call, k keyID, ks *keyState, use keyEvent, calls []string, first etime, action audit.RetryAction) {
	f := &audit.Finding{
		Kind: audit.KindRequestIDReuse, Server: c.Server, Tenant: c.Tenant,
		Document: use.doc(), Key: k.key, Session: use.session(), Time: first.Time(), Calls: calls, RetryAction: action,
		Summary: sprintf("The %s %s was used at %s for a different intent than the one it was first bound to; a new intent needs a new key.", k.kind, k.key, hhmmss(use.pos().t)),
	}
	if ks != nil && len(calls) == 2 {
		ks.ru.made = append(ks.ru.made, reuseMade{f: *f, at: use.pos(), binding: use.binding})
	}
	d.out.finding(f)
}

// plan follows a copy plan: a blocked plan replayed under its copyId is a
// wasted retry, and the copyId binds the plan's source and destination.
// The first blocked plan of the key is the one its replays repeat; one
// judged late, before the plan kept as the first (its own replay, judged
// before it), takes its place, and the replay after it is reported then.
func (d *detector) plan(ev *event, op *audit.Op) {
	if op.Key == "" {
		return
	}
	t := ev.at.t
	ks := d.key(keyID{op.KeyKind, op.Key}, t)
	if b := ks.blocked(); b != nil && b.binding == fp(op.Binding) && within(b.time, t, d.cfg.CorrelationWindow) && b.callID != ev.call.ID &&
		(!b.reported || ev.late && ev.at.before(b.with.at)) {
		// A replay judged late before the one reported with the plan is
		// the plan's first replay in order: the finding made is replaced.
		if b.reported {
			d.out.withdraw(d.wastedPlanFinding(b, op.Key), d.judging, t)
		}
		d.wastedPlan(b, op.Key, planReplay{at: ev.at, callID: strings.Clone(ev.call.ID), target: strings.Clone(op.Target), session: strings.Clone(ev.call.Session)})
	}
	d.checkReuse(ev, op, keyID{op.KeyKind, op.Key}, ks, nil)
	if !(op.Status == audit.OpSucceeded && op.Failure != nil && op.Failure.Action == audit.ActionNewPlan) {
		return
	}
	b := ks.blocked()
	if b != nil && !(ev.late && ev.at.before(b.at)) {
		return
	}
	if b != nil && b.reported {
		// The plan judged late is the first in order: the wasted_retry
		// made with the plan it replaces is withdrawn (lo21; until then
		// it stood, and a late plan took no reported plan's place).
		d.out.withdraw(d.wastedPlanFinding(b, op.Key), d.judging, t)
	}
	nb := &blockedPlan{callID: strings.Clone(ev.call.ID), at: ev.at, time: t, binding: fp(op.Binding), action: op.Failure.Action}
	ks.m().blocked = nb
	if !ev.late {
		return
	}
	// Judged late: the plans after it, already judged, are its replays.
	for i := range ks.events {
		e := &ks.events[i]
		if e.plan == nil || e.binding != nb.binding || !nb.at.before(e.plan.at) || !within(nb.time, e.plan.at.t, d.cfg.CorrelationWindow) {
			continue
		}
		d.wastedPlan(nb, op.Key, planReplay{at: e.plan.at, callID: e.plan.callID, target: e.plan.target, session: e.plan.session})
		break
	}
}

// wastedPlan reports the blocked plan b replayed unchanged by r.
func (d *detector) wastedPlan(b *blockedPlan, key string, r planReplay) {
	b.reported, b.with = true, r
	d.out.finding(d.wastedPlanFinding(b, key))
}

// wastedPlanFinding returns the wasted_retry of the blocked plan b
// replayed by b.with.
func (d *detector) wastedPlanFinding(b *blockedPlan, key string) *audit.Finding {
	r := b.with
	return &audit.Finding{
		Kind: audit.KindWastedRetry, Server: d.server, Tenant: d.tenant,
		Document: r.target, Key: key, Session: r.session, Time: b.time.Time(),
		Calls: callIDs(b.callID, r.callID), RetryAction: b.action,
		Summary: sprintf("The copy plan %s was blocked at %s and replayed unchanged at %s; a replay returns the same blocked receipt, so fix the blockers and plan again with a fresh copyId.", key, hhmmss(b.time), hhmmss(r.at.t)),
	}
}

// checkPremature reports an apply re-sent before the lease of the receipt
// it follows ran out.
func (d *detector) checkPremature(ev *event, op *audit.Op, ks *keyState) {
	l := ks.lease()
	t := ev.at.t
	if l == nil || l.reported || l.callID == ev.call.ID || !t.Before(l.until) || t.Before(l.callTime) {
		return
	}
	d.emitPremature(ev.call, ks, l, op.Key, ev.call.ID, op.Target, ev.call.Session, t)
}

// emitPremature reports the apply call, at t, re-sent within lease l; c is
// the call being processed (it names the partition).
func (d *detector) emitPremature(c *audit.Call, ks *keyState, l *lease, key, call, target, session string, t etime) {
	l.reported = true
	m := ks.m()
	m.leasesReported = append(m.leasesReported, l.callID)
	m.appliesReported = append(m.appliesReported, call)
	p := prematureMade{lease: *l, apply: call, target: target, session: session, at: t}
	m.premature = append(m.premature, p)
	d.out.finding(d.prematureFinding(&p, key))
}

// prematureFinding returns the premature_retry of p.
func (d *detector) prematureFinding(p *prematureMade, key string) *audit.Finding {
	return &audit.Finding{
		Kind: audit.KindPrematureRetry, Server: d.server, Tenant: d.tenant,
		Document: p.target, Key: key, Session: p.session, Time: p.lease.callTime.Time(),
		Calls: callIDs(p.lease.callID, p.apply), RetryAction: audit.ActionWaitThenRetry,
		Summary: sprintf("The copy %s was applied again at %s, before the receipt's retryAfter of %s.", key, hhmmss(p.at), hhmmss(p.lease.until)),
	}
}

// renewLease records the retryAfter lease of an applying copy receipt, and
// notes the receipt (or apply) in the key's leases: one judged late has
// the applies and receipts of the key judged again in time order.
func (d *detector) renewLease(ks *keyState, ev *event, op *audit.Op, apply bool) {
	e := leaseEvent{at: ev.at, apply: apply, clears: op.CopyState != "" && op.CopyState != "applying"}
	if !op.RetryAfter.IsZero() {
		e.until = etimeOf(op.RetryAfter)
	}
	if apply {
		e.callID, e.session, e.target = strings.Clone(ev.call.ID), strings.Clone(ev.call.Session), strings.Clone(op.Target)
	} else {
		e.callID = strings.Clone(ev.call.ID)
	}
	m := ks.m()
	at := len(m.leases)
	for at > 0 && e.at.before(m.leases[at-1].at) {
		at--
	}
	m.leases = slices.Insert(m.leases, at, e)
	defer d.foldLeases(m)
	if ev.late {
		d.rejudgeLeases(ev, ks, op.Key, at)
		return
	}
	if op.RetryAfter.IsZero() {
		if e.clears {
			m.lease = nil
		}
		return
	}
	if l := ks.lease(); l != nil && l.until == e.until {
		return
	}
	m.lease = &lease{until: e.until, callID: e.callID, callTime: ev.at.t, reported: slices.Contains(m.leasesReported, e.callID)}
}

// foldLeases folds into m.base the applies and receipts at the front of
// m.leases that no call judged from now on can come before: dated more
// than the allowed lateness before the watermark (a call later than that
// is too late, never judged). rejudgeLeases would judge them again for
// nothing: in order, they report what the calls judged in order reported
// (checkPremature and renewLease are the same rule, and each pass after
// a late one reported what it found), so all that a later pass needs of
// them is the lease in effect after them. Without it the list held every
// apply and receipt of the key for as long as the key lived, and each
// late one judged them all again (rev19d's D3: one key applied 16,000
// times, ×4–7 the cost per call). With it the list holds the uses of
// the last allowed_lateness, plus those of the calls being judged.
func (d *detector) foldLeases(m *keyMore) {
	if d.cfg.keepLeases {
		return
	}
	cut := d.clock.Add(-d.cfg.AllowedLateness)
	n := 0
	for n < len(m.leases) && m.leases[n].at.t.Before(cut) {
		n++
	}
	if n == 0 {
		return
	}
	l := m.baseLease()
	for _, e := range m.leases[:n] {
		l = nextLease(l, e, m.leasesReported)
	}
	m.base = nil
	if l != nil {
		b := *l
		m.base = &b
	}
	clear(m.leases[:n])
	m.leases = m.leases[n:]
	if len(m.leases) == 0 {
		m.leases = nil
	}
	// The reports are looked up only for the uses still in the list and
	// the base's receipt; the others are dropped once they are as many
	// again as the list (amortized: each report is looked at a bounded
	// number of times).
	if len(m.leasesReported)+len(m.appliesReported) > 2*len(m.leases)+8 {
		// A set of the list's calls: going over the list for each report
		// cost the list's length squared where it is long (a pod whose
		// clock runs ahead: clk21).
		kept := make(map[string]bool, len(m.leases))
		for _, e := range m.leases {
			kept[e.callID] = kept[e.callID] || e.apply
		}
		m.leasesReported = slices.DeleteFunc(m.leasesReported, func(id string) bool {
			_, ok := kept[id]
			return (m.base == nil || m.base.callID != id) && !ok
		})
		m.appliesReported = slices.DeleteFunc(m.appliesReported, func(id string) bool {
			return !kept[id]
		})
		m.premature = slices.DeleteFunc(m.premature, func(p prematureMade) bool {
			_, lease := kept[p.lease.callID]
			_, apply := kept[p.apply]
			return (m.base == nil || m.base.callID != p.lease.callID) && !lease && !apply
		})
	}
}

// baseLease returns, as a new lease, the lease in effect after the uses
// folded out of m.leases (foldLeases); nil when none.
func (m *keyMore) baseLease() *lease {
	if m.base == nil {
		return nil
	}
	l := *m.base
	l.reported = slices.Contains(m.leasesReported, l.callID)
	return &l
}

// nextLease returns the lease in effect after e, l the one before it:
// reported, the receipts whose lease a premature_retry was reported for.
func nextLease(l *lease, e leaseEvent, reported []string) *lease {
	if e.until == 0 {
		if e.clears {
			return nil
		}
		return l
	}
	if l != nil && l.until == e.until {
		return l
	}
	return &lease{until: e.until, callID: e.callID, callTime: e.at.t, reported: slices.Contains(reported, e.callID)}
}

// rejudgeLeases judges the applies and receipts of the key again in time
// order, from the lease in effect after those folded (foldLeases), after
// the one at m.leases[at], judged late: it may hold the lease that an
// apply judged before it re-sent too early, or be that apply. It makes the
// premature_retry findings judging in order makes, withdraws those made
// before that judging in order does not make (an apply reported re-sent
// within another receipt's lease, or an apply that in order is not the
// first re-sent within its lease; lo21: until then they stood, and the
// apply was not reported again), and leaves the key with the lease in
// order. A finding whose apply was folded stands: no call judged from now
// on comes before it.
//
// Only the uses around the late one can go otherwise than they went
// (leaseSpan): it starts at the last use before it after which the lease
// depends on none before, and stops at the second use after it that sets
// a lease of its own (or ends it), from which on the lease is what it
// was. Going over every use from the base, a pod whose clock runs ahead
// (its calls judged at once, ahead of the watermark, and not folded
// until the wall clock catches up) had each call of a pod with a right
// clock, late behind them, judge them all again: 7-8 ms a call after
// 2,000 calls (rev20m's D1). Those uses are still kept: a call of a
// right clock comes among them once the wall clock has caught up, and
// only they can tell what it finds there.
//
// The findings of the applies outside the span are those judging in
// order makes (cl21b): before it the leases are as they were; the lease
// in effect at its start is set by the use before it, and no apply
// before the span was judged within it; the lease after its end is set
// by its last use whatever came before, and no apply in the span is
// judged within it. So the span is judged as lo21 judges the whole list,
// its lease reported only by an apply outside the span (the base's by a
// folded one, as in lo21), and only the findings of its applies are
// withdrawn or made.
func (d *detector) rejudgeLeases(ev *event, ks *keyState, key string, at int) {
	m := ks.m()
	from, to := 0, len(m.leases)
	if !d.cfg.keepLeases {
		from, to = leaseSpan(m, at)
	}
	d.leasesJudged += uint64(to - from)
	span := m.leases[from:to]
	// The span's applies: each is judged within one lease, so a finding
	// names it at most once (the wanted one, below).
	inSpan := make(map[string]bool, len(span))
	for _, e := range span {
		if e.apply {
			inSpan[e.callID] = true
		}
	}
	l := m.baseLease()
	if from > 0 {
		// The lease after m.leases[from-1] depends on none before it.
		l = nextLease(nil, m.leases[from-1], nil)
	}
	if l != nil {
		// Reported in order only by an apply before the span (folded, for
		// the base's lease); one in the span is judged again below.
		l.reported = slices.ContainsFunc(m.premature, func(p prematureMade) bool { return p.lease.callID == l.callID && !inSpan[p.apply] })
	}
	var want []prematureMade
	for _, e := range span {
		if e.apply && l != nil && !l.reported && l.callID != e.callID && e.at.t.Before(l.until) && !e.at.t.Before(l.callTime) {
			l.reported = true
			want = append(want, prematureMade{lease: *l, apply: e.callID, target: e.target, session: e.session, at: e.at.t})
		}
		l = nextLease(l, e, nil)
	}
	if to == len(m.leases) {
		m.lease = l
	}
	// wantLease is the receipt each wanted apply is re-sent within.
	wantLease := make(map[string]string, len(want))
	for _, w := range want {
		wantLease[w.apply] = w.lease.callID
	}
	made := make(map[string]bool, len(want))
	kept := m.premature[:0]
	var gone []prematureMade
	for _, p := range m.premature {
		if inSpan[p.apply] {
			if lc, ok := wantLease[p.apply]; !ok || lc != p.lease.callID {
				gone = append(gone, p)
				continue
			}
			made[p.apply] = true
		}
		kept = append(kept, p)
	}
	clear(m.premature[len(kept):])
	m.premature = kept
	for i := range gone {
		p := &gone[i]
		m.leasesReported = deleteOne(m.leasesReported, p.lease.callID)
		m.appliesReported = deleteOne(m.appliesReported, p.apply)
		d.out.withdraw(d.prematureFinding(p, key), d.judging, ev.at.t)
	}
	for _, w := range want {
		if made[w.apply] {
			continue
		}
		wl := w.lease
		d.emitPremature(ev.call, ks, &wl, key, w.apply, w.target, w.session, w.at)
	}
}

// deleteOne removes the first id from ids.
func deleteOne(ids []string, id string) []string {
	if i := slices.Index(ids, id); i >= 0 {
		return slices.Delete(ids, i, i+1)
	}
	return ids
}

// leaseSpan returns the uses m.leases[from:to] that judging again after
// the one at m.leases[at], judged late, goes over. Before it, the uses go
// as they went, and so do they after the second use after it that sets a
// lease other than the first's (or ends the lease): the lease after a use
// with a retryAfter other than the lease before it does not depend on
// that lease. from is the use after the last before at that sets such a
// lease (0: the base's lease may still reach at); to is len(m.leases)
// when the late use's lease may reach the end.
func leaseSpan(m *keyMore, at int) (from, to int) {
	// Back from at: a use with a retryAfter sets its own lease unless the
	// lease before it has the same retryAfter, which is the previous
	// use's with one (or the base's).
	for i := at - 1; i >= 0; i-- {
		e := m.leases[i]
		if e.until == 0 {
			if e.clears {
				from = i + 1
				break
			}
			continue
		}
		prev := m.base
		var before *leaseEvent
		for j := i - 1; j >= 0; j-- {
			if m.leases[j].until != 0 || m.leases[j].clears {
				before = &m.leases[j]
				break
			}
		}
		if before != nil && before.until != e.until || before == nil && (prev == nil || prev.until != e.until) {
			from = i + 1
			break
		}
	}
	// On from at: the first use with a retryAfter may take the lease
	// before it or set its own; the next with another (or ending it) sets
	// its own whatever came before.
	first := etime(0)
	for i := at + 1; i < len(m.leases); i++ {
		e := m.leases[i]
		switch {
		case e.until == 0 && e.clears:
			return from, i + 1
		case e.until == 0:
		case first == 0:
			first = e.until
		case e.until != first:
			return from, i + 1
		}
	}
	return from, len(m.leases)
}

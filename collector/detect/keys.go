package detect

import (
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

// binderBefore returns the use of the key that binds it at p: the first
// binding use, replaced by a use of another binding once the correlation
// window since the binder has passed. An operationId is minted by the
// platform and bound by its first use for good.
func (d *detector) binderBefore(ks *keyState, p pos) *keyEvent {
	var b *keyEvent
	for i := range ks.events {
		e := &ks.events[i]
		if !e.pos().before(p) {
			break
		}
		if b == nil {
			b = e
			continue
		}
		if e.operationID {
			continue
		}
		if !within(b.pos().t, e.pos().t, d.cfg.CorrelationWindow) && b.binding != e.binding {
			b = e
		}
	}
	return b
}

// checkReuse reports one idempotency key carrying two intents, whether the
// server said so or the collector saw it, and records the use of the key.
func (d *detector) checkReuse(ev *event, op *audit.Op, k keyID, ks *keyState, w *writeRec) {
	t := ev.at.t
	binding := fp(op.Binding)
	use := keyEvent{binding: binding, w: w, operationID: k.kind == "operationId"}
	if w == nil {
		// Copies: the call's texts are one allocation (audit.Record.Lean).
		use.plan = &planUse{at: ev.at, callID: strings.Clone(ev.call.ID), session: strings.Clone(ev.call.Session), doc: strings.Clone(op.Document())}
	}
	if k.kind == "operationId" {
		// The platform mints operationIds; a wrong planToken under one is
		// refused with replay_same_request, not a second intent.
		if op.Binding != "" {
			d.addUse(ev, k, ks, use)
		}
		return
	}
	b := d.binderBefore(ks, ev.at)
	serverSaid := op.Failure != nil && (op.Failure.Code == "E_REQUEST_REUSE" || op.Failure.Code == classify.CodeIncompatibleCreation || op.Failure.Code == classify.CodeCopyIDReused)
	if serverSaid {
		if ks.reuseReported(binding) && binding != 0 {
			return
		}
		calls := []string{ev.call.ID}
		first := t
		if b != nil && b.callID() != ev.call.ID {
			calls = callIDs(b.callID(), ev.call.ID)
			first = b.pos().t
		}
		d.emitReuse(ev.call, k, use, calls, first, op.Failure.Action)
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
	if b == nil || !within(b.pos().t, t, d.cfg.CorrelationWindow) && b.binding != binding || b.binding == binding {
		return
	}
	if ks.reuseReported(binding) {
		return
	}
	d.emitReuse(ev.call, k, use, callIDs(b.callID(), ev.call.ID), b.pos().t, "")
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
// has an earlier binder of its binding is a replay of it, and one that
// now has an earlier binder of another binding is a reuse.
func (d *detector) rebind(ev *event, k keyID, ks *keyState) {
	for i := range ks.events {
		e := ks.events[i]
		if !ev.at.before(e.pos()) {
			continue
		}
		b := d.binderBefore(ks, e.pos())
		if b == nil {
			continue
		}
		if b.binding == e.binding {
			if s := e.w; s != nil && s.op.keyProtected && !s.replay {
				s.replay = true
				d.unaccept(s)
				if s.op.status == audit.OpUncertain && s.follows() == nil && b.w != nil && b.w.op.status == audit.OpUncertain {
					s.setFollows(b.w)
				}
			}
			continue
		}
		if k.kind == "operationId" || !within(b.pos().t, e.pos().t, d.cfg.CorrelationWindow) {
			continue
		}
		if ks.reuseReported(e.binding) {
			continue
		}
		d.emitReuse(ev.call, k, e, callIDs(b.callID(), e.callID()), b.pos().t, "")
	}
}

// emitReuse reports the key k used by use for another intent than its
// binder's; c is the call being processed (it names the partition).
func (d *detector) emitReuse(c *audit.Call, k keyID, use keyEvent, calls []string, first etime, action audit.RetryAction) {
	d.out.finding(&audit.Finding{
		Kind: audit.KindRequestIDReuse, Server: c.Server, Tenant: c.Tenant,
		Document: use.doc(), Key: k.key, Session: use.session(), Time: first.Time(), Calls: calls, RetryAction: action,
		Summary: sprintf("The %s %s was used at %s for a different intent than the one it was first bound to; a new intent needs a new key.", k.kind, k.key, hhmmss(use.pos().t)),
	})
}

// plan follows a copy plan: a blocked plan replayed under its copyId is a
// wasted retry, and the copyId binds the plan's source and destination.
func (d *detector) plan(ev *event, op *audit.Op) {
	if op.Key == "" {
		return
	}
	t := ev.at.t
	ks := d.key(keyID{op.KeyKind, op.Key}, t)
	if b := ks.blocked(); b != nil && !b.reported && b.binding == fp(op.Binding) && within(b.time, t, d.cfg.CorrelationWindow) {
		b.reported = true
		d.out.finding(&audit.Finding{
			Kind: audit.KindWastedRetry, Server: ev.call.Server, Tenant: ev.call.Tenant,
			Document: op.Target, Key: op.Key, Session: ev.call.Session, Time: b.time.Time(),
			Calls: callIDs(b.callID, ev.call.ID), RetryAction: b.action,
			Summary: sprintf("The copy plan %s was blocked at %s and replayed unchanged at %s; a replay returns the same blocked receipt, so fix the blockers and plan again with a fresh copyId.", op.Key, hhmmss(b.time), hhmmss(t)),
		})
	}
	d.checkReuse(ev, op, keyID{op.KeyKind, op.Key}, ks, nil)
	if op.Status == audit.OpSucceeded && op.Failure != nil && op.Failure.Action == audit.ActionNewPlan && ks.blocked() == nil {
		ks.m().blocked = &blockedPlan{callID: strings.Clone(ev.call.ID), time: t, binding: fp(op.Binding), action: op.Failure.Action}
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
	l.reported = true
	d.out.finding(&audit.Finding{
		Kind: audit.KindPrematureRetry, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: op.Target, Key: op.Key, Session: ev.call.Session, Time: l.callTime.Time(),
		Calls: callIDs(l.callID, ev.call.ID), RetryAction: audit.ActionWaitThenRetry,
		Summary: sprintf("The copy %s was applied again at %s, before the receipt's retryAfter of %s.", op.Key, hhmmss(t), hhmmss(l.until)),
	})
}

// renewLease records the retryAfter lease of an applying copy receipt.
func (d *detector) renewLease(ks *keyState, ev *event, op *audit.Op) {
	if op.RetryAfter.IsZero() {
		if op.CopyState != "" && op.CopyState != "applying" {
			if ks.more != nil {
				ks.more.lease = nil
			}
		}
		return
	}
	until := etimeOf(op.RetryAfter)
	if l := ks.lease(); l != nil && l.until == until {
		return
	}
	ks.m().lease = &lease{until: until, callID: strings.Clone(ev.call.ID), callTime: ev.at.t}
}

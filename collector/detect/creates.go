package detect

import "github.com/mcpaudit/mcpaudit/audit"

// createKeys returns the lists a create of c is kept in: "in one session or
// one client" (findings.md §4), so creates are indexed by both, and an
// agent that came back in a new session and created the same document
// again is seen.
func createKeys(c *audit.Call, identity uint64) []createKey {
	var keys []createKey
	if c.Session != "" {
		keys = append(keys, createKey{actorKey(actor{'s', c.Session}), identity})
	}
	if c.Client != "" {
		keys = append(keys, createKey{actorKey(actor{'c', c.Client}), identity})
	}
	if len(keys) == 0 {
		keys = append(keys, createKey{0, identity})
	}
	return keys
}

// checkCreate looks for a duplicate create: two creates of one identity by
// one session or client, both answered created, under different keys.
func (d *detector) checkCreate(ev *event, op *audit.Op, w *writeRec) bool {
	rec := &createRec{w: w, created: op.Status == audit.OpSucceeded && op.Action == "created", keys: createKeys(ev.call, fp(op.Identity))}
	if rec.created && !w.replay {
		if first := d.firstCreate(rec); first != nil {
			rec.first = first
			d.out.finding(d.duplicateFinding(first, w))
		}
	}
	for _, k := range rec.keys {
		l := d.creates.at(k, ev.at.t)
		*l = insertAt(*l, rec, createAt)
	}
	return w.duplicate
}

// firstCreate returns the create that r's duplicates, judging in order:
// the first of its session's creates of the identity answered created
// within the correlation window before it under another key, else the
// first of its client's; nil when none.
func (d *detector) firstCreate(r *createRec) *writeRec {
	for _, k := range r.keys {
		l := d.creates.get(k)
		if l == nil {
			continue
		}
		for _, o := range *l {
			if !o.w.at.before(r.w.at) {
				break
			}
			// Two creates in one run count as well: only the same
			// provider call is skipped.
			if !o.created || !within(o.w.at.t, r.w.at.t, d.cfg.CorrelationWindow) || r.w.key() != "" && o.w.key() == r.w.key() {
				continue
			}
			return o.w
		}
	}
	return nil
}

// duplicateFinding returns the duplicate_create of w, a duplicate of
// first, and marks w reported.
func (d *detector) duplicateFinding(first, w *writeRec) *audit.Finding {
	w.duplicate = true
	return &audit.Finding{
		Kind: audit.KindDuplicateCreate, Server: d.server, Tenant: d.tenant,
		Document: w.doc(), Key: w.key(), Session: w.session(), Time: first.at.t.Time(),
		Calls:   callIDs(first.callID(), w.callID()),
		Summary: sprintf("One intended document was created twice: %s (at %s) and %s (at %s), under %s.", first.doc(), hhmmss(first.at.t), w.doc(), hhmmss(w.at.t), keyPhrase(w.key())),
	}
}

// createsAfter applies a late create w to the creates after it, already
// judged: each is paired again as judging in order pairs it. One that had
// no earlier twin is now w's duplicate; one reported with a later create
// than w (a pod whose clock runs ahead delivered both before w) has that
// finding withdrawn and is reported with w (ck22; until then the pair
// made first stood, live22's D2).
func (d *detector) createsAfter(ev *event, op *audit.Op, w *writeRec) {
	if !(op.Status == audit.OpSucceeded && op.Action == "created") || w.replay {
		return
	}
	for _, k := range createKeys(ev.call, fp(op.Identity)) {
		l := d.creates.get(k)
		if l == nil {
			continue
		}
		for _, r := range *l {
			s := r.w
			if !w.at.before(s.at) || !r.created || s.replay {
				continue
			}
			first := d.firstCreate(r)
			if first == nil || first == r.first {
				// Also where r is in both lists: the second visit finds
				// it paired.
				continue
			}
			if r.first != nil {
				d.out.withdraw(d.duplicateFinding(r.first, s), d.judging, ev.at.t)
			}
			r.first = first
			d.out.finding(d.duplicateFinding(first, s))
		}
	}
}

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
	t := ev.at.t
	keys := createKeys(ev.call, fp(op.Identity))
	isCreated := op.Status == audit.OpSucceeded && op.Action == "created"
	if isCreated && !w.replay {
	search:
		for _, k := range keys {
			l := d.creates.get(k)
			if l == nil {
				continue
			}
			for _, r := range *l {
				if !r.w.at.before(w.at) {
					break
				}
				// Two creates in one run count as well: only the same
				// provider call is skipped.
				if !r.created || !within(r.w.at.t, t, d.cfg.CorrelationWindow) || op.Key != "" && r.w.key() == op.Key {
					continue
				}
				d.emitDuplicate(ev.call, r.w, w)
				break search
			}
		}
	}
	for _, k := range keys {
		l := d.creates.at(k, t)
		*l = insertAt(*l, &createRec{w: w, created: isCreated}, createAt)
	}
	return w.duplicate
}

func (d *detector) emitDuplicate(c *audit.Call, first, w *writeRec) {
	w.duplicate = true
	d.out.finding(&audit.Finding{
		Kind: audit.KindDuplicateCreate, Server: c.Server, Tenant: c.Tenant,
		Document: w.doc(), Key: w.key(), Session: w.session(), Time: first.at.t.Time(),
		Calls:   callIDs(first.callID(), w.callID()),
		Summary: sprintf("One intended document was created twice: %s (at %s) and %s (at %s), under %s.", first.doc(), hhmmss(first.at.t), w.doc(), hhmmss(w.at.t), keyPhrase(w.key())),
	})
}

// createsAfter applies a late create to the creates after it: one that was
// created under another key and had no earlier twin is its duplicate.
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
			if !w.at.before(s.at) || !r.created || s.duplicate || s.replay || !within(w.at.t, s.at.t, d.cfg.CorrelationWindow) || s.key() != "" && w.key() == s.key() {
				continue
			}
			d.emitDuplicate(ev.call, w, s)
		}
	}
}

package detect

import (
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
)

// checkWasted reports an identical request re-sent after an error that a
// retry cannot help (fix_input, reauthorize), and remembers such errors.
// The refusals of one request are kept in order; each is either the first
// of a run of identical refusals within the correlation window, or a
// wasted retry of that first one (reported once per first).
func (d *detector) checkWasted(ev *event) {
	r := ev.rec
	f := r.Failure
	if f == nil || f.Action != audit.ActionFixInput && f.Action != audit.ActionReauthorize || r.RequestHash == "" {
		return
	}
	c := ev.call
	fr := &failedReq{callID: c.ID, at: ev.at, code: f.Code, action: f.Action}
	for _, op := range r.Ops {
		fr.doc = firstNonEmpty(fr.doc, op.Document())
		fr.key = firstNonEmpty(fr.key, op.Key)
	}
	fr.session, fr.tool = c.Session, c.Tool
	// Copies: the call's texts are one allocation (audit.Record.Lean),
	// which the request kept for the correlation window would keep.
	fr.callID, fr.doc, fr.key = strings.Clone(fr.callID), strings.Clone(fr.doc), strings.Clone(fr.key)
	fr.session, fr.tool = strings.Clone(fr.session), strings.Clone(fr.tool)
	l := d.failed.at(fp(r.RequestHash), ev.at.t)
	*l = insertAt(*l, fr, failedAt)
	// Each first is reported with its first retry, as judging in order
	// reports it; a refusal judged late can change which refusal is a
	// first and which retry follows it: the finding made for a pair that
	// no longer is one is withdrawn, and the pair in order reported
	// (lo21).
	var first *failedReq
	found := false
	if f0 := (*l)[0]; f0.run != nil && f0.run != f0 {
		// The first kept is a retry of a first the sweep forgot: its run
		// goes on, its first retry reported. No call judged from now on
		// lies within its window (rnd25: the walk began at the first
		// kept, which then became a first, and the next refusal its
		// retry, so that what was reported followed what the sweep had
		// dropped, and live, how far the watermark lagged).
		first, found = f0.run, true
	}
	end := func() {
		if first != nil && !found && first.with != nil {
			d.out.withdraw(d.wastedFinding(first, first.with), d.judging, ev.at.t)
			first.with = nil
		}
	}
	for _, e := range *l {
		if first != nil && within(first.at.t, e.at.t, d.cfg.CorrelationWindow) && first.code == e.code {
			e.run = first
			if e.with != nil {
				// Reported as a first, it is now a retry.
				d.out.withdraw(d.wastedFinding(e, e.with), d.judging, ev.at.t)
				e.with = nil
			}
			if !found {
				found = true
				if first.with != e {
					if first.with != nil {
						d.out.withdraw(d.wastedFinding(first, first.with), d.judging, ev.at.t)
					}
					first.with = e
					d.out.finding(d.wastedFinding(first, e))
				}
			}
			continue
		}
		end()
		first, found = e, false
		e.run = e
	}
	end()
}

// wastedFinding returns the wasted_retry of the refusal first retried
// unchanged by e.
func (d *detector) wastedFinding(first, e *failedReq) *audit.Finding {
	return &audit.Finding{
		Kind: audit.KindWastedRetry, Server: d.server, Tenant: d.tenant,
		Document: e.doc, Key: e.key, Session: e.session, Time: first.at.t.Time(),
		Calls: callIDs(first.callID, e.callID), RetryAction: e.action,
		Summary: sprintf("An identical %s request refused at %s with %s was sent again at %s; an unchanged retry cannot help (%s).", e.tool, hhmmss(first.at.t), e.code, hhmmss(e.at.t), e.action),
	}
}

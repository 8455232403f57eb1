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
	var first *failedReq
	for _, e := range *l {
		if first != nil && within(first.at.t, e.at.t, d.cfg.CorrelationWindow) && first.code == e.code {
			if !first.reported {
				first.reported = true
				d.out.finding(&audit.Finding{
					Kind: audit.KindWastedRetry, Server: c.Server, Tenant: c.Tenant,
					Document: e.doc, Key: e.key, Session: e.session, Time: first.at.t.Time(),
					Calls: callIDs(first.callID, e.callID), RetryAction: e.action,
					Summary: sprintf("An identical %s request refused at %s with %s was sent again at %s; an unchanged retry cannot help (%s).", e.tool, hhmmss(first.at.t), e.code, hhmmss(e.at.t), e.action),
				})
			}
			continue
		}
		first = e
	}
}

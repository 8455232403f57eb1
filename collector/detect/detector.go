package detect

import (
	"slices"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/classify"
)

// detector is the correlation state of one partition (one tenant and one
// server: nothing correlates across them) and the rules that run over it.
// Calls come to it in event-time order up to its partition's watermark;
// a late call (one with operations after it already processed) is judged
// against the same state, and each rule then also looks forward, at what
// the late call changes for the calls that followed it.
type detector struct {
	cfg Config
	out *emitter
	// judging is the ID of the call being processed: the one that
	// withdraws a finding when it settles a write (settle).
	judging string
	// prevState, while a late answer is judged (rejudge), has the state
	// each write of its call had in the unanswered reading, by sequence
	// number: the answer's write is told as that write's next state.
	prevState map[int32]word

	// server and tenant name the partition.
	server, tenant string
	// toolNames lists the tool names of the ledger's writes, tools their
	// places (at most maxTools; a write keeps others in its texts).
	toolNames []string
	tools     map[string]uint16
	// clock is the watermark: every call up to it was processed and every
	// verification window that ended before it closed.
	clock etime
	// last is the position of the latest operation processed.
	last pos
	// leasesJudged counts the copy applies and receipts judged again
	// after a late one (rejudgeLeases): what tests read of its cost.
	leasesJudged uint64

	// The maps are keyed by 64-bit hashes of their names (docKey,
	// keyHash, actorKey), as dedupe's are: a number costs less to keep and
	// to look up than the text, and the findings take the texts from the
	// writes and the call.
	docs    expMap[uint64, docState]
	reads   expMap[uint64, readList]
	keys    expMap[uint64, keyState]
	creates expMap[createKey, []*createRec]
	failed  expMap[uint64, []*failedReq]

	// held holds the request_id_reuse findings waiting for the key's
	// first use, which may still be judged late (holdReuse).
	held []*heldReuse
	// heldKeys counts the held reuses not yet reported by key.
	heldKeys map[keyID]int

	deadlines writeHeap
	// deferred holds writes whose window ended while their source was
	// still delivering what came before the end (a late backlog): they
	// close once it has caught up or gone idle (closeDeferred).
	deferred []*writeRec
	// npending counts the writes in deadlines and deferred whose state is
	// pending (what pending walked them for: a status is taken every
	// second); latest is the latest place of those, stale (to be found
	// again) when latestGone.
	npending   int
	latest     etime
	latestGone bool
	lastSweep  etime
	// behind reports whether a source has not yet delivered past t;
	// set by the engine.
	behind func(s *source, t etime) bool
}

func newDetector(cfg Config, out *emitter, k PartitionKey) *detector {
	return &detector{
		cfg: cfg, out: out, server: k.Server, tenant: k.Tenant,
		docs: newExpMap[uint64, docState](), reads: newExpMap[uint64, readList](),
		keys: newExpMap[uint64, keyState](), creates: newExpMap[createKey, []*createRec](),
		failed: newExpMap[uint64, []*failedReq](),
	}
}

// advance moves the watermark to t: verification windows that ended before
// t close.
func (d *detector) advance(t etime) {
	if t.After(d.clock) {
		d.expire(t)
		d.clock = t
		if len(d.held) > 0 {
			d.releaseHeld(t, false)
		}
		d.sweep()
	}
}

// process judges one call, delivered by src, at its place in event time.
func (d *detector) process(r *audit.Record, at pos, src *source) {
	d.out.call(r)
	d.judge(r, at, src)
}

// processAnswer judges r, the late answer of a call judged without it,
// at its place: its call was told already (the answer counts as a
// duplicate observation), its writes are told as the next state of the
// unanswered reading's (prevState).
func (d *detector) processAnswer(r *audit.Record, at pos, src *source) {
	d.judge(r, at, src)
}

func (d *detector) judge(r *audit.Record, at pos, src *source) {
	c := r.Call
	ev := &event{rec: r, call: c, actor: actorOf(c), at: at, late: at.before(d.last), src: src}
	d.judging = c.ID
	if !ev.late {
		d.last = at
	}
	d.checkWasted(ev)
	for i := range r.Ops {
		op := &r.Ops[i]
		ev.at.seq = int32(op.Seq)
		switch op.Kind {
		case audit.OpRead:
			d.read(ev, op)
		case audit.OpWrite:
			d.write(ev, op)
		case audit.OpCopyPlan:
			d.plan(ev, op)
		}
		d.checkIntegrity(ev, op)
	}
	if len(r.Ops) == 0 && r.Failure != nil && r.Failure.Code == "E_INTEGRITY" {
		d.integrity(ev, "", r.Failure)
	}
	if ev.late {
		d.rejudgeUnsafeAt(ev, r)
		// A late write whose window already ended is judged now.
		d.expire(d.clock)
	}
}

// unsafeLater reports whether the unsafe_retry rule judges op, a write of
// a late call, after the call's operations (rejudgeUnsafeAt): a write on
// a document, not a create.
func (d *detector) unsafeLater(ev *event, op *audit.Op, ds *docState) bool {
	return ev.late && ds != nil && op.Tool != toolCreate
}

// rejudgeUnsafeAt judges again the unsafe_retry pairs a late call r
// may change (rejudgeUnsafe) from its place on: on the documents it
// writes and reads, and on those of the writes under its keys after it,
// whose replays, and the settling of whose uncertain writes, it may
// change.
func (d *detector) rejudgeUnsafeAt(ev *event, r *audit.Record) {
	p := pos{t: ev.at.t, ord: ev.at.ord}
	var docs []string
	add := func(doc string) {
		if doc != "" && !slices.Contains(docs, doc) {
			docs = append(docs, doc)
		}
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		switch op.Kind {
		case audit.OpWrite:
			if op.Tool != toolCreate {
				add(op.Document())
			}
		case audit.OpRead:
			add(op.Target)
		}
		if op.Key == "" {
			continue
		}
		if ks := d.keys.get(keyHash(keyID{op.KeyKind, op.Key})); ks != nil {
			for _, e := range ks.events {
				if e.w != nil && p.before(e.pos()) && d.toolOf(e.w) != toolCreate {
					add(e.w.doc())
				}
			}
			for _, u := range ks.uncertainWrites() {
				if d.toolOf(u) != toolCreate {
					add(u.doc())
				}
			}
		}
	}
	for _, doc := range docs {
		if ds := d.docs.get(docKey(doc)); ds != nil {
			d.rejudgeUnsafe(ev, ds, p)
		}
	}
}

func (d *detector) doc(target string, t etime) *docState {
	s := d.docs.at(docKey(target), t)
	if t.After(s.last) {
		s.last = t
	}
	return s
}

// maxTools bounds the tool names a partition lists for its writes.
const maxTools = 1024

// tool returns the place of a tool name in the partition's list, or
// unlisted once the list is full.
func (d *detector) tool(name string) uint16 {
	if i, ok := d.tools[name]; ok {
		return i
	}
	if d.tools == nil {
		d.tools = map[string]uint16{}
	}
	if len(d.toolNames) >= maxTools {
		return unlisted
	}
	// Its own copy: the call's texts are one allocation
	// (audit.Record.Lean), which the name would keep.
	name = strings.Clone(name)
	i := uint16(len(d.toolNames))
	d.tools[name] = i
	d.toolNames = append(d.toolNames, name)
	return i
}

// toolOf returns the name of the write's tool.
func (d *detector) toolOf(w *writeRec) string {
	if w.tool == unlisted {
		return w.text(3)
	}
	return d.toolNames[w.tool]
}

func (d *detector) key(k keyID, t etime) *keyState {
	s := d.keys.at(keyHash(k), t)
	if t.After(s.last) {
		s.last = t
	}
	return s
}

// write follows one write attempt through the rules.
func (d *detector) write(ev *event, op *audit.Op) {
	c, t := ev.call, ev.at.t
	w := &writeRec{
		tool:      d.tool(op.Tool),
		at:        ev.at,
		op:        wopOf(op),
		actorKind: ev.actor.kind,
		index:     -1,
		src:       ev.src,
	}
	unlistedTool := ""
	if w.tool == unlisted {
		unlistedTool = op.Tool
	}
	w.setTexts(c.ID, op.Document(), op.Key, unlistedTool, ev.actor.id)
	if op.Failure != nil {
		w.action = actionWords.of(op.Failure.Action)
	}

	var ks *keyState
	if op.Key != "" {
		ks = d.key(keyID{op.KeyKind, op.Key}, t)
		d.keyed(ev, op, w, ks)
	}
	var ds *docState
	if w.doc() != "" {
		ds = d.doc(w.doc(), t)
		if ds.writes == nil {
			ds.writes = ds.one[:0]
		}
		ds.writes = insertAt(ds.writes, w, writeAt)
	}
	doubled := false
	if !w.replay && !op.Protected && op.Intent != "" && op.Tool != toolCreate && ds != nil {
		doubled = d.checkDoubleApply(ev, op, w, ds)
	}
	if op.Protected && op.Intent != "" && op.Status == audit.OpSucceeded && ds != nil {
		d.settleByIdempotent(w, ds)
	}
	created := false
	if op.Tool == toolCreate {
		created = d.checkCreate(ev, op, w)
	}
	if !w.replay && !op.Protected && !doubled && !created && !d.unsafeLater(ev, op, ds) {
		d.checkUnsafe(ev, op, w, ds)
	}

	switch {
	case op.Status == audit.OpFailed:
		w.state = wRejected
	case op.Status == audit.OpUncertain:
		w.state, w.reason = wPending, reasonWords.of(op.Reason)
		w.uncertain = w.reason
		if ds != nil {
			ds.m().uncertain = insertAt(ds.uncertainWrites(), w, writeAt)
		}
		if ks != nil && op.KeyProtected {
			ks.m().uncertain = insertAt(ks.uncertainWrites(), w, writeAt)
		}
	case doubled:
		w.state = wDoubleApplied
		// What it has alone, should a call judged late show that it was
		// not applied twice (rejudgeDoubles).
		w.more.alone = wDurable
		if op.Pending {
			w.more.alone, w.more.aloneReason = wPending, reasonWords.of(op.Reason)
		}
	case op.Pending:
		w.state, w.reason = wPending, reasonWords.of(op.Reason)
		if ds != nil {
			ds.m().proof = insertAt(ds.proofWrites(), w, writeAt)
		}
	default:
		w.state = wDurable
	}
	if w.state == wPending {
		d.deadlines.push(w)
		d.pendingIn(w)
	}
	prev := audit.WriteState("")
	if s, ok := d.prevState[w.at.seq]; ok {
		prev = stateWords.word(s)
	}
	d.emitWrite(w, prev, t)

	if ev.late {
		d.lookForward(ev, op, w, ks, ds)
	}
	if op.Tool == toolApply && ks != nil {
		d.checkPremature(ev, op, ks)
		d.renewLease(ks, ev, op, true)
	}
}

// lookForward applies to a late write what the calls after it, already
// judged, say about it, and what it changes for them.
func (d *detector) lookForward(ev *event, op *audit.Op, w *writeRec, ks *keyState, ds *docState) {
	// Why the outcome was uncertain, before a later read settles the write
	// (and clears it): an unsafe retry found below still names it.
	reason := w.reason
	if w.state == wPending {
		d.settleLate(w, ks, ds)
	}
	if ds != nil && w.op.intent != 0 {
		d.rejudgeDoubles(ev, ds, w.op.intent, w.at)
	}
	if op.Status == audit.OpUncertain && !d.unsafeLater(ev, op, ds) {
		d.unsafeAfter(ev, op, w, ds, reason)
	}
	if op.Tool == toolCreate {
		d.createsAfter(ev, op, w)
	}
}

// read handles a read: it resolves the reader's uncertain writes on the
// target, proves pending syncs and saves, and renews copy leases.
func (d *detector) read(ev *event, op *audit.Op) {
	if op.Status != audit.OpSucceeded {
		return
	}
	t := ev.at.t
	if op.Tool == toolReceipt && op.Key != "" {
		ks := d.key(keyID{op.KeyKind, op.Key}, t)
		d.renewLease(ks, ev, op, false)
		// The receipt is the copy's durable record: reading it establishes
		// what became of the reader's uncertain applies (findings.md §2).
		for _, u := range ks.uncertainWrites() {
			if u.who() == ev.actor && u.at.before(ev.at) {
				d.settleByRead(u, ev.at)
			}
		}
	}
	if op.Target == "" {
		return
	}
	dk := docKey(op.Target)
	rs := d.reads.at(dk, t)
	rs.add(readRec{at: ev.at, actor: actorKey(ev.actor), rev: op.Rev, flags: readFlags(op.Sync, op.SaveState)})
	ds := d.docs.get(dk)
	if ds == nil {
		return
	}
	d.docs.holds(dk, t)
	for _, w := range ds.uncertainWrites() {
		if w.who() == ev.actor && w.at.before(ev.at) {
			d.settleByRead(w, ev.at)
		}
	}
	if ds.more == nil {
		return
	}
	kept := ds.more.proof[:0]
	for _, w := range ds.more.proof {
		if w.at.before(ev.at) && d.openAt(w, t) && proves(op.Rev, readFlags(op.Sync, op.SaveState), w) {
			d.settle(w, wDurable, t)
			continue
		}
		// One made unverified is kept for as long as a call judged late
		// may still be dated within its window.
		if w.state == wPending || w.state == wUnverified && !d.deadline(w).Before(d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness)) {
			kept = append(kept, w)
		}
	}
	clear(ds.more.proof[len(kept):])
	ds.more.proof = kept
}

// settleByRead records the writer's read of an uncertain write's target
// at p, which resolves the write while its window is open.
func (d *detector) settleByRead(w *writeRec, p pos) {
	w.noteRead(p)
	if w.op.status == audit.OpUncertain && d.openAt(w, p.t) {
		d.settle(w, wResolved, p.t)
	}
}

// proves reports whether a read (its revision, and what it said of sync
// and save states) shows a pending write durable: synced at its revision
// or later, or a save no longer blocked.
func proves(rev int64, flags uint8, w *writeRec) bool {
	switch w.reason {
	case rSyncNotConfirmed:
		return flags&readSynced != 0 && rev >= w.op.rev
	case rSaveBlocked:
		return flags&readSaved != 0 && (rev == 0 || rev >= w.op.rev)
	}
	return false
}

// settleByIdempotent resolves the pending uncertain writes of the same
// intent before w, an idempotent write re-sent and accepted: it is the
// identical replay of findings.md §2.
func (d *detector) settleByIdempotent(w *writeRec, ds *docState) {
	for _, u := range ds.uncertainWrites() {
		if u.op.intent == w.op.intent && u.at.before(w.at) && d.openAt(u, w.at.t) {
			d.settle(u, wResolved, w.at.t)
		}
	}
}

// settleLate gives a late pending write what the calls after it already
// established: the writer's read of the target, a replay under its key
// that was accepted, an idempotent re-send, or a read proving its sync.
func (d *detector) settleLate(w *writeRec, ks *keyState, ds *docState) {
	if rs := d.reads.get(docKey(w.doc())); rs != nil && w.doc() != "" {
		writer := actorKey(w.who())
		for _, r := range rs.l {
			if !w.at.before(r.at) {
				continue
			}
			if r.actor == writer && w.op.status == audit.OpUncertain {
				d.settleByRead(w, r.at)
			}
			if w.state == wPending && w.op.status != audit.OpUncertain && !r.at.t.After(d.deadline(w)) && proves(r.rev, r.flags, w) {
				d.setState(w, wDurable, r.at.t)
			}
		}
	}
	if w.state != wPending || w.op.status != audit.OpUncertain {
		return
	}
	if ks != nil && w.op.keyProtected {
		for _, e := range ks.events {
			s := e.w
			if s == nil || !w.at.before(s.at) || s.op.status != audit.OpSucceeded || !s.op.keyProtected {
				continue
			}
			if b := d.binderBefore(ks, s.at); b == nil || b.binding == s.op.binding {
				w.noteRead(s.at)
				if !s.at.t.After(d.deadline(w)) {
					d.setState(w, wResolved, s.at.t)
				}
				break
			}
		}
	}
	if w.state == wPending && ds != nil && w.op.intent != 0 {
		for _, s := range ds.writes {
			if w.at.before(s.at) && s.op.protected && s.op.intent == w.op.intent && s.op.status == audit.OpSucceeded && !s.at.t.After(d.deadline(w)) {
				d.setState(w, wResolved, s.at.t)
				break
			}
		}
	}
}

// checkIntegrity reports corruption the server reported.
func (d *detector) checkIntegrity(ev *event, op *audit.Op) {
	switch {
	case op.JournalCorrupt:
		d.integrity(ev, op.Target, &audit.Failure{Code: classify.CodeJournalCorrupt, Action: audit.ActionEscalate})
	case op.Failure != nil && (op.Failure.Code == "E_INTEGRITY" || op.Failure.Code == classify.CodeJournalCorrupt):
		d.integrity(ev, op.Document(), op.Failure)
	}
}

func (d *detector) integrity(ev *event, doc string, f *audit.Failure) {
	t := ev.at.t
	if doc != "" {
		ds := d.doc(doc, t)
		m := ds.m()
		if !m.integrity.IsZero() && within(m.integrity, t, d.cfg.CorrelationWindow) {
			return
		}
		m.integrity = t
	}
	what := "E_INTEGRITY (history sequence or hash audit failed)"
	if f.Code == classify.CodeJournalCorrupt {
		what = "journalStatus journal_corrupt (the live journal is corrupt)"
	}
	d.out.finding(&audit.Finding{
		Kind: audit.KindIntegrityFailure, Server: ev.call.Server, Tenant: ev.call.Tenant,
		Document: doc, Session: ev.call.Session, Time: t.Time(), Calls: []string{ev.call.ID}, RetryAction: audit.ActionEscalate,
		Summary: sprintf("The server reported %s for %s at %s; a person must look before anything else is written to it.", what, firstNonEmpty(doc, "a document"), hhmmss(t)),
	})
}

package pipeline

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// writeKey names a write: a call id names no tenant (the same exporter
// configured for two tenants, a capture posted to both, carries one id into
// each), so the tenant is part of it, as it is of the store's key.
type writeKey struct {
	tenant string
	call   string
	seq    int
}

// gate sits between the engine and the sinks and the store: after a
// restart it keeps back what replayed calls cause that was committed
// before the stop, it drops findings already stored, and it buffers output
// for the next commit.
type gate struct {
	sinks   []audit.Sink
	eng     *detect.Engine
	latency func(d time.Duration, window bool)

	// marks are the partitions' watermarks committed before a restart;
	// output caused by a replayed call or window up to settled(mark) was
	// committed then.
	marks map[detect.PartitionKey]time.Time
	// deferred holds, for the partitions that held verification windows
	// open past their end at the last saved mark (their source behind),
	// the earliest end: a window ending from then on may have closed after
	// the last commit, however far behind the mark its end is.
	deferred map[detect.PartitionKey]time.Time
	// settle is how far behind a mark output may still not have been
	// committed: a late call judged just before the stop.
	settle time.Duration
	// recount, set at a restart from a state file that keeps the
	// counters' values (Config.Counters), counts a stored finding the
	// replay made after its partition's mark (recounted).
	recount func(*audit.Finding)
	// skipCounts, set with recount, has the sinks count nothing in the
	// counters that go on across restarts while set (Counters.SkipCounts):
	// the calls and writes the replay judges again that the run before
	// judged before its last save (countedBefore).
	skipCounts func(bool)
	// countedAll, set with skipCounts when the state file's marks were
	// lost but its counters' values read, takes every replayed call's
	// output as counted before: the marks cannot tell, and the replay
	// then judges every stored call again.
	countedAll bool
	// known holds the ids of findings stored before the restart, and of
	// those made since, until no replayed call or window can make one
	// again (see forget); nil then.
	known map[string]bool
	// alt maps, while known is set, a call standing for an exchange to
	// the other observations of it the engine dropped: the live run may
	// have kept one of those, cited it in a stored finding and stored its
	// write under it.
	alt map[string][]*audit.Call
	// storedWrite reports whether the store holds the write w under call
	// c, another observation of its exchange (nil: never asked).
	storedWrite func(w *audit.Write, c *audit.Call) bool
	// pendingWrites calls each for every write the store holds pending
	// whose Time is in [since, until), in pages (nil: never asked).
	pendingWrites func(since, until time.Time, each func(*audit.Write)) error
	// heldPending holds, once asked (see storedPending), the writes the
	// store held pending whose windows the replay may settle: a replayed
	// call settling one of them may have come too late to be judged
	// before the stop.
	heldPending map[writeKey]bool
	// pendingAsked is set once heldPending was loaded, or could not be
	// (heldPending nil: every such write is then stored again).
	pendingAsked bool
	// aliases remembers, while known is set, which observation each write
	// of alt's calls was found stored under (nil: none, or not stored).
	aliases map[writeKey]*audit.Call
	// knownLen is len(known), for tests and status readers outside the
	// engine goroutine.
	knownLen atomic.Int64
	// replayEnd holds, for every partition with replayed calls, the
	// latest event time replayed: output dated up to it plus the verify
	// window and the lateness bounds can still repeat what was stored.
	replayEnd map[detect.PartitionKey]time.Time
	// seeded holds, for the freed partitions whose calls the replay judges
	// from the floor on (see seed), the freed watermark and the floor: a
	// replayed call of them that freedCovers covers is silent.
	seeded map[detect.PartitionKey]freedBound
	// silentCalls holds the tenant and call id (tenant, NUL, id) of the
	// silent calls the replay judged (a call id names no tenant: another
	// tenant's copy of the call is no silent call, review rev15b), while
	// known is set: output of theirs alone was committed before the
	// freeing, their writes' windows closing included.
	silentCalls map[string]bool
	// announced holds the pending writes the sinks have seen in this run.
	announced   map[writeKey]bool
	committedWM time.Time

	writes   map[writeKey]audit.Write
	findings []audit.Finding
	// origins tells, for each finding of findings, from when it could be
	// known; zero for a finding of a replayed call.
	origins []origin
	// taken holds the origins of the findings of the commit under way.
	taken []origin
	// tooLate names the calls counted too late since the last commit: the
	// commit stores them with the output (audit.Results.TooLate).
	tooLate []audit.CallRef
	// answered names the calls stored without a response that the
	// engine let an answer under their id complete since the last commit:
	// the commit has the store put the answer in their place
	// (audit.Results.Answered).
	answered []audit.CallRef
	// withdrawn holds the findings taken back after a commit stored them
	// (audit.FindingWithdrawer): the next commit marks them withdrawn, by
	// withdrawnBy, in the store's finding lifecycle.
	withdrawn []audit.FindingChange
	// answers holds the calls (tenant and id) of the answers the store
	// kept aside that the engine took since: one it judges as a call of
	// its own (not merged: its first observation is no longer held, its
	// partition freed as idle) is named too (judged). An answer the engine
	// dropped stays until the map is cleared at maxAnswersHeld.
	answers map[string]bool
	// told holds the findings of the kinds a call judged late can
	// withdraw (every kind but integrity_failure) this process told the
	// sinks, by id, with the end of their write's window (the kinds of
	// pairs, unsafe_retry included: its time plus the correlation window,
	// the latest its last call can be): a withdrawal is
	// told the sinks only for one of them (one committed before a restart
	// was not told, and a metrics counter of withdrawals would outgrow
	// the findings counter; found by rev18w). Pruned at each take once the
	// window closed more than allowed_lateness + lateness before the
	// committed watermark: no call judged can withdraw it then.
	told map[string]time.Time
	// restartAnswers holds the calls whose answer kept aside the replay
	// handed the engine though a mark covers the call (answerAtRestart).
	restartAnswers map[audit.CallRef]bool
	// remade holds, while known is set, the ids of the unverified_write
	// findings the replay made, told or recognized as stored: one of
	// them is not withdrawn (two writes of one call to one document under
	// one key share a finding id).
	remade map[string]bool
	// unsettled holds, while known is set, the oddlynew writes (Seq above
	// 0: a run's provider calls) pending or unverified, by their call,
	// document and key, the names of their unverified_write's id: two
	// writes of one run to one document share it, and it stands, judged
	// in time order, while one of them stays unverified (storedUnverified;
	// review rev19w, D3).
	unsettled map[unverifiedKey]map[int]bool
	// atRestart holds the withdrawals storedUnverified queued, by id, with
	// their findings, until the store took or refused them: the pipeline
	// logs and counts those it made (toldAtRestart; one withdrawn already,
	// its withdrawal committed before the stop, is refused and left as it
	// is).
	atRestart map[string]*audit.Finding
	// atRestartTold holds the ids in atRestart the sinks were told, at the
	// first attempt the store took or refused as unavailable: one refused
	// is kept in the state file (markFile.Withdrawals), and a restart that
	// makes it from there takes it as counted (review rev20w).
	atRestartTold map[string]bool
	// toTell holds, by id, the withdrawals of findings this process told
	// the sinks (told) that are queued in withdrawn for a stored finding:
	// the sinks are told at the first attempt to store the withdrawal
	// (tellLive), when the store took it or refused it as unavailable
	// (then kept in the state file), not when the call is judged. While
	// commits fail no attempt is made, and a crash then lost a withdrawal
	// counted live that the restart makes again and counts (review rev20w,
	// R3).
	toTell map[string]liveWithdrawal
	// moves holds the writes moved out of unverified (a call judged late
	// settled them) since the last commit that went through: the sinks
	// are told the move after it (tellMoves), so that a process that
	// dies before it has not counted a move the restart counts (sli20,
	// rev20s: the SLI's range over a restart counted such a write bad and
	// good).
	moves []audit.Write
	// restartWrites holds, by the id of the withdrawal storedUnverified
	// queued, the write the replay settled: its sinks are told once the
	// store answers the withdrawal (tellRestartWrite), as a move out of
	// unverified, the state the run that lost the withdrawal counted.
	restartWrites map[string]audit.Write
	// carried holds the ids of the withdrawals the state file kept, the
	// last run's that the store could not take (markFile.Withdrawals),
	// until the store took or refused them: the pipeline logs those it
	// made.
	carried map[string]bool
	// held is set while the engine takes a call that the store held
	// before its request stored it (a copy sent again), or that may be
	// such a copy (a store that cannot tell): counted too late, it is not
	// named. The stored row may be a copy the live run judged in time, and
	// the replay passes over every call of a name (review rev15a).
	held bool
}

// liveWithdrawal is a withdrawal WithdrawFinding queued for a stored
// finding, as the sinks are to be told it.
type liveWithdrawal struct {
	f    audit.Finding
	call string
	at   time.Time
}

// unverifiedKey names the writes under one unverified_write id: a tenant,
// a call, a document and a key (audit.Finding.ID).
type unverifiedKey struct{ tenant, call, doc, key string }

// noteUnsettled keeps unsettled up to date with w's new state.
func (g *gate) noteUnsettled(w *audit.Write) {
	k := unverifiedKey{w.Tenant, w.CallID, w.Document, w.Key}
	if w.State == audit.StatePending || w.State == audit.StateUnverified {
		if g.unsettled == nil {
			g.unsettled = map[unverifiedKey]map[int]bool{}
		}
		if g.unsettled[k] == nil {
			g.unsettled[k] = map[int]bool{}
		}
		g.unsettled[k][w.Seq] = true
		return
	}
	if seqs := g.unsettled[k]; seqs != nil {
		delete(seqs, w.Seq)
		if len(seqs) == 0 {
			delete(g.unsettled, k)
		}
	}
}

// origin is when a finding could be known: the acknowledgement of the
// call that completed its evidence, or the end of its verification window.
type origin struct {
	at     time.Time
	window bool
}

func newGate(sinks []audit.Sink, latency func(time.Duration, bool)) *gate {
	return &gate{sinks: sinks, latency: latency, announced: map[writeKey]bool{}}
}

// recovering sets what was committed before a restart: the store's
// watermark (the point commits continue from), each partition's mark and
// the stored findings.
func (g *gate) recovering(wm time.Time, marks, deferred map[detect.PartitionKey]time.Time, known map[string]bool) {
	g.marks, g.deferred, g.known, g.committedWM = marks, deferred, known, wm
	g.knownLen.Store(int64(len(known)))
	g.settle = g.eng.Config().AllowedLateness + g.eng.Config().Lateness
	g.replayEnd = map[detect.PartitionKey]time.Time{}
}

// replaying notes a call replayed from the store.
func (g *gate) replaying(c *audit.Call) {
	k := detect.PartitionKey{Tenant: c.Tenant, Server: c.Server}
	if c.Time.After(g.replayEnd[k]) {
		g.replayEnd[k] = c.Time
	}
}

// freedBound is what the state file said of a freed partition: the
// watermark it was freed at, and the file's floor.
type freedBound struct{ wm, floor time.Time }

// seed notes, during the replay, that the freed partition k (freed at wm,
// the file's floor floor) has calls the replay judges (from the floor
// on), and that its calls the file covers (freedCovers), which the replay
// would pass over, are replayed too, silently, so that the later ones are
// judged with what they correlate with: a double application's second
// attempt, judged without its first, was stored over its double_applied
// row as unverified, and a false unverified_write stored (review rev14a).
// Nothing a silent call makes reaches the sinks or the store: the call,
// the write states and findings made while it is judged, its write's
// window closing, an id collision it is dropped in. All that was
// committed before the partition was freed. Output of a call of the
// partition the replay judges, or of this run, goes on as before.
func (g *gate) seed(k detect.PartitionKey, wm, floor time.Time) {
	if g.seeded == nil {
		g.seeded = map[detect.PartitionKey]freedBound{}
		g.silentCalls = map[string]bool{}
	}
	g.seeded[k] = freedBound{wm: wm, floor: floor}
}

// seeding reports whether the freed partition k was seeded (seed).
func (g *gate) seeding(k detect.PartitionKey) bool {
	_, ok := g.seeded[k]
	return ok
}

// silent reports whether c is a replayed call of a seeded freed partition
// that the state file stands for as committed (seed).
func (g *gate) silent(c *audit.Call) bool {
	if len(g.seeded) == 0 || !c.Received.IsZero() {
		return false
	}
	b, ok := g.seeded[detect.PartitionKey{Tenant: c.Tenant, Server: c.Server}]
	return ok && freedCovers(b.wm, b.floor, c.Time)
}

// silentNow reports whether output about calls of tenant is a silent
// call's alone (seed), and so was committed before the freeing: made while
// a silent call is judged, and about silent calls only (a write of this
// run, or a finding pairing one with a silent call, is new: a late write
// settled by a silent read was left stored pending when everything made
// then was dropped, review rev15b); or, for window (a write made
// unverified, its unverified_write), by the window of a silent call's
// write closing.
func (g *gate) silentNow(tenant string, calls []string, window bool) bool {
	if len(g.seeded) == 0 || len(calls) == 0 {
		return false
	}
	if r := g.eng.Current(); r != nil && g.silent(r.Call) {
		for _, id := range calls {
			if !g.silentCalls[tenant+"\x00"+id] && !(r.Call.Tenant == tenant && r.Call.ID == id) {
				return false
			}
		}
		return true
	}
	return window && g.silentCalls[tenant+"\x00"+calls[0]]
}

// forget drops the ids of known findings once no replayed call can make
// output again: every partition that had replayed calls has judged past
// its last one by the verify window (the last window of a replayed write
// closes then) and the lateness bounds, or was removed as idle. A call
// arriving after that is new (a re-sent one is too late or dropped as a
// repeat), so its findings cannot have been stored before the restart.
// Engine goroutine.
func (g *gate) forget() {
	if g.known == nil {
		return
	}
	wms := g.eng.Watermarks()
	reach := g.eng.Config().VerifyWindow + g.settle
	for k, end := range g.replayEnd {
		if wm, ok := wms[k]; ok && !wm.Before(end.Add(reach)) || !g.eng.Has(k) {
			delete(g.replayEnd, k)
		}
	}
	if len(g.replayEnd) == 0 {
		g.remade, g.unsettled = nil, nil
		g.known, g.replayEnd, g.alt, g.aliases = nil, nil, nil, nil
		g.silentCalls = nil
		g.heldPending, g.pendingAsked = nil, true
		g.knownLen.Store(0)
	}
}

// restartNote is the note of the lifecycle change that withdraws a stored
// unverified_write at a restart (gate.storedUnverified), with the ID of the
// call that settled the write in the replay.
const restartNote = "withdrawn by mcpaudit at a restart: the calls stored, judged again in time order, settle the write (call %s, dated within its verification window); the withdrawal made when that call was judged late, after the window closed, was lost (the process stopped before its commit); judged in time order there is no such finding (docs/detection.md, Late calls)"

// restartNoteNoCall is restartNote when no call is being judged.
const restartNoteNoCall = "withdrawn by mcpaudit at a restart: the calls stored, judged again in time order, settle the write; the withdrawal made when a call judged late settled it was lost (the process stopped before its commit); judged in time order there is no such finding (docs/detection.md, Late calls)"

// storedUnverified queues, for the next commit, the withdrawal of the
// unverified_write of w that the store holds, if it does: w is a write the
// replay settled from pending (a state other than unverified: judged in
// time order, its window did not close with it pending) by a call whose
// judgement may not have been committed. The live run judged that call
// late, after the window closed, and died before the commit that withdrew
// the finding. Only while stored findings are recognized (known), so only
// a write whose call the replay judged: a finding dated before the
// replay's calls, or whose write's calls retention deleted, is never one.
// Its id is the one the engine gives the finding when the window closes
// (detect's unverifiedFinding): kind, server, tenant, document, key and
// the write's call, the observation the live run stored it under
// (storedAs). It is queued at once, not when the replay's range is judged:
// the marks saved meanwhile cover the settling call, and a restart after
// another stop would not look at it again.
//
// It returns the id of the withdrawal it queued, or "".
func (g *gate) storedUnverified(w *audit.Write) string {
	if g.known == nil || w.State == audit.StateUnverified || w.State == audit.StatePending {
		return ""
	}
	// Another write under the finding's id still pending or unverified:
	// the finding stands while one of them does (a pending one may yet go
	// unverified, the replay then makes the finding again). The last of
	// them settled withdraws it.
	if len(g.unsettled[unverifiedKey{w.Tenant, w.CallID, w.Document, w.Key}]) > 0 {
		return ""
	}
	f := g.unverifiedOf(w)
	id := f.ID()
	// One the state file kept (carried) is the last run's own withdrawal,
	// made again as it was, with its note, and counted by that run.
	if !g.known[id] || g.remade[id] || g.atRestart[id] != nil || g.carried[id] {
		return ""
	}
	note := restartNoteNoCall
	if r := g.eng.Current(); r != nil {
		note = fmt.Sprintf(restartNote, r.Call.ID)
	}
	if g.atRestart == nil {
		g.atRestart = map[string]*audit.Finding{}
	}
	g.atRestart[id] = &f
	g.withdrawn = append(g.withdrawn, audit.FindingChange{FindingID: id, Tenant: w.Tenant, State: audit.FindingWithdrawn,
		By: withdrawnBy, Note: note, Time: w.StateTime})
	return id
}

// unverifiedOf returns the unverified_write the engine makes of w when its
// window closes (detect's unverifiedFinding), under the observation the
// live run stored w's call under (storedAs).
func (g *gate) unverifiedOf(w *audit.Write) audit.Finding {
	call := w.CallID
	if c := g.storedAs(w); c != nil {
		call = c.ID
	}
	return audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.KindUnverifiedWrite.Severity(), Server: w.Server, Tenant: w.Tenant,
		Document: w.Document, Key: w.Key, Session: w.Session, Time: w.Time, Calls: []string{call}}
}

// committed reports whether output at event time t in the partition of
// (tenant, server) was committed before the restart.
//
// Only a partition's own mark says so. The store's watermark is the
// earliest over the partitions that had one, which says nothing of a
// partition that had none yet (its first calls were still waiting), so a
// partition without a mark (or every partition, when the state file was
// lost) has its output announced and stored again: write states are
// stored over themselves, findings are recognized by their ids, and
// metrics count some writes twice. Losing output would be worse.
//
// A partition freed as idle before the restart has no mark, and needs
// none here: the replay passes over the calls of it the state file
// stands for as committed (freedCovers), or replays them silently (seed:
// told by the call, not by a time), and everything else of it that
// reaches the gate comes from a call the replay judged (one it does not
// cover, so dated after the freed watermark or from the floor on) or of
// this run, and is dated no earlier than that call (a window's end, its
// write's time), which freedCovers does not cover either. The gate once took
// such output as committed too, by the same predicate: a probe on that,
// over every test, found it took nothing (docs/detection.md, Restarts).
func (g *gate) committed(tenant, server string, t time.Time) bool {
	mark, ok := g.marks[detect.PartitionKey{Tenant: tenant, Server: server}]
	return ok && !mark.IsZero() && t.Before(mark.Add(-g.settle))
}

// heldOpen reports whether a window of the partition of (tenant, server)
// ending at end may have been held open (deferred for its source) past the
// last commit before the restart: its output was then not committed,
// whatever call or time the replay closes it at. Windows ending later
// that did close before the stop are made again: findings are recognized
// by their ids, write states stored over themselves.
func (g *gate) heldOpen(tenant, server string, end time.Time) bool {
	d, ok := g.deferred[detect.PartitionKey{Tenant: tenant, Server: server}]
	return ok && !end.Before(d)
}

// lostWithdrawal reports whether the call being judged (with none, output
// at t) may have been judged late by the live run after its last commit, a
// withdrawal it made then lost: a live call, or a replayed one its
// partition's mark less allowed_lateness does not cover. That is the
// engine's own test for a call too late to be judged (engine.go), with the
// mark as the watermark: a call the live run counted too late and
// committed after is older than it, and was never judged, so it withdrew
// nothing (review rev19w, D1: the mark less the lateness bounds, which
// replayed uses, left a call counted too late within lateness of it
// uncovered). Without a mark for the partition (the state file lost, or
// never saved for it) a lost withdrawal cannot be told from a call
// counted too late on a store that keeps no too-late names (ClickHouse):
// nothing is withdrawn, and a finding the live run left standing is not
// hidden on a guess.
func (g *gate) lostWithdrawal(tenant, server string, t time.Time) bool {
	if r := g.eng.Current(); r != nil {
		if !r.Call.Received.IsZero() {
			return true // a live call
		}
		tenant, server, t = r.Call.Tenant, r.Call.Server, r.Call.Time
	}
	mark, ok := g.marks[detect.PartitionKey{Tenant: tenant, Server: server}]
	if !ok || mark.IsZero() {
		return false
	}
	return !t.Before(mark.Add(-g.eng.Config().AllowedLateness))
}

// withdrawalLost reports whether w, a write the replay settled (settling:
// from pending, by a call whose output may not have been committed), is
// one whose stored unverified_write the live run may have withdrawn and
// lost in a crash, to be withdrawn again (storedUnverified), for either
// of two reasons:
//   - settled by a call the live run may have judged late, after the
//     window closed, and after its last commit (lostWithdrawal): it died
//     before the commit that withdrew the finding;
//   - judged from an answer the live run took after committing the
//     call's judgement without it, and died before the commit naming it
//     (fx20a, answerAtRestart): the finding made when the window closed
//     without the answer.
//
// A crash after the commit naming the answer and before its withdrawals
// is neither: the state file keeps those (Pipeline.keepBeforeCommit).
func (g *gate) withdrawalLost(w *audit.Write, settling bool) bool {
	if settling && g.lostWithdrawal(w.Tenant, w.Server, w.StateTime) {
		return true
	}
	return len(g.restartAnswers) > 0 && w.State != audit.StateUnverified && w.State != audit.StatePending &&
		g.restartAnswers[audit.CallRef{Tenant: w.Tenant, ID: w.CallID}]
}

// replayed reports whether the output being made now comes from a call
// replayed from the store, or a window closing, that was judged and
// committed before the restart.
func (g *gate) replayed(tenant, server string, t time.Time) bool {
	if r := g.eng.Current(); r != nil {
		if !r.Call.Received.IsZero() {
			return false // a live call
		}
		return g.committed(r.Call.Tenant, r.Call.Server, r.Call.Time)
	}
	return g.committed(tenant, server, t)
}

func (g *gate) Call(r *audit.Record) {
	if r.Call.Received.IsZero() && g.committed(r.Call.Tenant, r.Call.Server, r.Call.Time) {
		return
	}
	if g.silent(r.Call) {
		if g.silentCalls != nil {
			g.silentCalls[r.Call.Tenant+"\x00"+r.Call.ID] = true
		}
		return
	}
	defer g.skipping(g.countedBefore(r.Call.Tenant, r.Call.Server, r.Call.Time))()
	for _, s := range g.sinks {
		s.Call(r)
	}
}

// countedBefore reports whether the output being made now, by the call
// being judged or (none) at t in the partition of (tenant, server), is
// counted in the values of the counters that go on across restarts the
// start restored (skipCounts set): made by a replayed call dated at or
// before its partition's saved mark, or with no call judged, at t at or
// before it. The run before judged it before the save that holds those
// values (a call is judged once its partition's watermark passes it), or
// judged it late after that save, dated before the mark, and died before
// the next: that count was lost, and no scrape showed it (a count is
// shown only once a save holds it), so it stays uncounted
// (docs/metrics.md, "Counters across restarts"). Live output, output after
// the mark and a partition without a saved mark (its output was never
// saved: its first forces a save) are counted; with the marks lost
// (countedAll), no replayed output is. The finding counters' own
// test is recounted's, the same but for output stored before.
func (g *gate) countedBefore(tenant, server string, t time.Time) bool {
	if g.skipCounts == nil {
		return false
	}
	r := g.eng.Current()
	if r != nil {
		if !r.Call.Received.IsZero() {
			return false
		}
		tenant, server, t = r.Call.Tenant, r.Call.Server, r.Call.Time
	}
	if g.countedAll {
		// A window closing with no call judged: of a replayed write
		// while the replay's output can still come (known).
		return r != nil || g.known != nil
	}
	mark, ok := g.marks[detect.PartitionKey{Tenant: tenant, Server: server}]
	return ok && !mark.IsZero() && !t.After(mark)
}

// skipping sets skipCounts to skip, when set, and returns what sets it
// back.
func (g *gate) skipping(skip bool) func() {
	if !skip {
		return func() {}
	}
	g.skipCounts(true)
	return func() { g.skipCounts(false) }
}

func (g *gate) Write(w *audit.Write, prev audit.WriteState) {
	if g.known != nil && w.Seq > 0 {
		g.noteUnsettled(w)
	}
	// A silent write the sinks saw pending (its call sent again in this
	// run) leaves their books as any other.
	if g.silentNow(w.Tenant, []string{w.CallID}, w.State == audit.StateUnverified && !g.announced[writeKey{w.Tenant, w.CallID, w.Seq}]) {
		return
	}
	// A write made unverified is dated at the end of its window.
	open := w.State == audit.StateUnverified && g.heldOpen(w.Tenant, w.Server, w.StateTime)
	// A write settled by a replayed call whose window had not ended before
	// the mark less the lateness bounds may have been stored pending at the
	// stop: the settling call may have come too late to be judged then
	// (stored, never judged; the replay judges it), and dropped as
	// committed the write would stay pending for good. Its state is stored
	// again when the store holds it pending; one the live run settled
	// (its read in time) was committed, and told again the sinks would
	// count it twice.
	settling := prev == audit.StatePending && w.State != audit.StatePending &&
		!g.committed(w.Tenant, w.Server, w.Time.Add(g.eng.Config().VerifyWindow))
	// A write so settled whose unverified_write the store holds, stored by
	// a live run that died before the commit that withdrew the finding, or
	// judged from an answer the live run took after committing the call's
	// judgement without it (withdrawalLost): the settled state is stored
	// (below), and the finding withdrawn (storedUnverified).
	queued := ""
	if g.withdrawalLost(w, settling) {
		queued = g.storedUnverified(w)
	}
	if !open && g.replayed(w.Tenant, w.Server, w.StateTime) && (!settling || !g.storedPending(w)) {
		return
	}
	if c := g.storedAs(w); c != nil {
		// Stored before under the observation the live run kept: go on
		// with that row, not a second one for the same write.
		as := *w
		as.CallID, as.Time = c.ID, c.Time
		w = &as
	}
	k := writeKey{w.Tenant, w.CallID, w.Seq}
	if g.writes == nil {
		g.writes = map[writeKey]audit.Write{}
	}
	g.writes[k] = *w
	// Sinks count pending writes in and out: a write replayed as pending
	// and settled now enters their books as new.
	if prev == audit.StatePending && !g.announced[k] {
		prev = ""
	}
	if g.known != nil && w.Seq == 0 && (w.State == audit.StatePending || w.State == audit.StateUnverified && prev == "") {
		// Replayed pending, or unverified again, its unverified_write
		// stored: the run before committed it unverified and counted it
		// so (its pending gauge ended with it). Not told pending, so that
		// a settling in the replay is told as the move out of unverified
		// (restartWrites); not told unverified a second time.
		f := g.unverifiedOf(w)
		if g.known[f.ID()] {
			delete(g.announced, k)
			if w.State == audit.StateUnverified && g.skipCounts != nil && !open && !g.countedBefore(w.Tenant, w.Server, w.StateTime) {
				// Made unverified after the saved mark, committed, and
				// counted by the run before after its last save, lost
				// with it in a crash (the counters went on from that
				// save's values): counted again, as recounted counts
				// its finding.
				for _, s := range g.sinks {
					s.Write(w, "")
				}
			}
			return
		}
	}
	if w.State == audit.StatePending {
		g.announced[k] = true
	} else {
		delete(g.announced, k)
	}
	// Counted by the run before in the values the start restored: told
	// for the pending gauge, counted nowhere else (countedBefore).
	skip := !open && g.countedBefore(w.Tenant, w.Server, w.StateTime)
	switch {
	case queued != "" && prev == "":
		// The run that lost the withdrawal committed the write
		// unverified, and counted it so: told as a move once the store
		// answers the withdrawal (tellRestartWrite). Its move was never
		// counted, as a move is counted once its commit went through.
		if g.restartWrites == nil {
			g.restartWrites = map[string]audit.Write{}
		}
		g.restartWrites[queued] = *w
		return
	case prev == audit.StateUnverified:
		if !skip {
			g.moves = append(g.moves, *w)
		}
		return
	}
	defer g.skipping(skip)()
	for _, s := range g.sinks {
		s.Write(w, prev)
	}
}

// tellMoves tells the sinks of the writes moved out of unverified (moves)
// once the commit storing them went through.
func (g *gate) tellMoves() {
	for i := range g.moves {
		for _, s := range g.sinks {
			s.Write(&g.moves[i], audit.StateUnverified)
		}
	}
	clear(g.moves)
	g.moves = g.moves[:0]
}

// tellRestartWrite tells the sinks of the write the replay settled whose
// stored unverified_write the withdrawal id withdraws (restartWrites):
// as a move out of unverified when the store took the withdrawal or
// refused it as unavailable (the run that lost it counted the write
// unverified, and not its move), nothing when the store holds it
// withdrawn already (committed is set: the run before committed the
// move, after which it counted it), and as a new write otherwise.
func (g *gate) tellRestartWrite(id string, moved, committed bool) {
	w, ok := g.restartWrites[id]
	if !ok {
		return
	}
	delete(g.restartWrites, id)
	if committed {
		return
	}
	prev := audit.WriteState("")
	if moved {
		prev = audit.StateUnverified
	}
	for _, s := range g.sinks {
		s.Write(&w, prev)
	}
}

func (g *gate) Finding(f *audit.Finding) {
	// Made by a replayed call, or a window closing, that was judged and
	// committed before the restart: stored then, though perhaps under
	// another id (of two observations of one exchange that both came late,
	// the one that arrived first stood for it; the replay, in time order,
	// takes the earlier), and not made at all for a call that came too
	// late to be judged then. Ids recognize what was made since.
	// A window may close later than its end, held open for a source
	// behind it (detect's expire): one held past the last commit was not
	// committed, though the mark may be far past its end.
	if g.known != nil && f.Kind == audit.KindUnverifiedWrite {
		if g.remade == nil {
			g.remade = map[string]bool{}
		}
		g.remade[f.ID()] = true
	}
	if g.silentNow(f.Tenant, f.Calls, f.Kind == audit.KindUnverifiedWrite) {
		return
	}
	t, open := f.Time, false
	if f.Kind == audit.KindUnverifiedWrite {
		t = t.Add(g.eng.Config().VerifyWindow) // its window ended then
		open = g.heldOpen(f.Tenant, f.Server, t)
	}
	if !open && g.replayed(f.Tenant, f.Server, t) {
		return
	}
	if g.known != nil {
		id := f.ID()
		if g.known[id] || g.knownAsOther(f) {
			g.recounted(f, t)
			return
		}
		g.known[id] = true
		g.knownLen.Add(1)
	}
	g.findings = append(g.findings, *f)
	var o origin
	switch r := g.eng.Current(); {
	case r != nil:
		o.at = r.Call.Received // zero for a replayed call
	case f.Kind == audit.KindUnverifiedWrite:
		o = origin{at: f.Time.Add(g.eng.Config().VerifyWindow), window: true}
	}
	g.origins = append(g.origins, o)
	g.noteTold(f)
	for _, s := range g.sinks {
		s.Finding(f)
	}
}

// noteTold notes f as told the sinks (told), with the latest time a call
// judged late can withdraw it: none for an integrity_failure.
func (g *gate) noteTold(f *audit.Finding) {
	var end time.Time
	switch f.Kind {
	case audit.KindUnverifiedWrite:
		end = f.Time.Add(g.eng.Config().VerifyWindow)
	case audit.KindUnsafeRetry, audit.KindWastedRetry, audit.KindPrematureRetry, audit.KindDuplicateCreate, audit.KindDoubleAppliedWrite, audit.KindRequestIDReuse:
		// Withdrawn when a call judged late, dated before its last call,
		// changes which calls judging in order pairs (lo21; ck22's
		// duplicate_create, rnd24's double_applied_write, rid23's
		// request_id_reuse, rnd25's unsafe_retry), or, an unsafe_retry,
		// when the late answer of its first call shows that write was not
		// uncertain (fx20a). Its last call is within the correlation
		// window of its first (a premature_retry's apply within its
		// receipt's lease, kept by the key for that window). Left out,
		// their withdrawals were not told the sinks: the metrics counted
		// them standing (out25 O2).
		end = f.Time.Add(g.eng.Config().CorrelationWindow)
	}
	if !end.IsZero() {
		if g.told == nil {
			g.told = map[string]time.Time{}
		}
		g.told[f.ID()] = end
	}
}

// recounted counts f, a finding the store holds that the replay made
// again, in the counters that go on across restarts (recount), when it
// was made after its partition's saved mark: by a replayed call dated
// after it, or (no call judged) a window ending after it (t). Such output
// was judged after the save that holds the counters' values, so they do
// not count it; the run before counted it after that save, and its count
// was lost in a crash (out47: 9 of 79 server and kind pairs never
// alerted). Output at or before the mark was judged before that save,
// counted in its values, but for a call judged late after it (dated
// before the mark), whose count stays lost: no scrape showed it, as a
// count is shown only once a save holds it (docs/metrics.md). A live call
// and a partition without a saved mark count nothing again.
func (g *gate) recounted(f *audit.Finding, t time.Time) {
	if g.recount == nil {
		return
	}
	tenant, server := f.Tenant, f.Server
	if r := g.eng.Current(); r != nil {
		if !r.Call.Received.IsZero() {
			return
		}
		tenant, server, t = r.Call.Tenant, r.Call.Server, r.Call.Time
	}
	mark, ok := g.marks[detect.PartitionKey{Tenant: tenant, Server: server}]
	if !ok || mark.IsZero() || !t.After(mark) {
		return
	}
	g.recount(f)
	// Counted by this process: a call judged late that withdraws it has
	// the withdrawal counted too.
	g.noteTold(f)
}

// toldAtRestart tells the sinks that can (audit.FindingWithdrawer) of f,
// a stored unverified_write the store just took the withdrawal of at a
// restart (storedUnverified), settled at at: the metrics count it in
// mcpaudit_findings_withdrawn_total. The run that lost the withdrawal
// counted it, if at all, in the commit interval before it died, which a
// scrape seldom saw, or told the finding in a run before it and counted
// nothing; uncounted, mcpaudit_findings_total less the withdrawn counter
// over a range spanning the restart counts a finding that does not
// stand (docs/metrics.md).
func (g *gate) toldAtRestart(f *audit.Finding, at time.Time) {
	for _, s := range g.sinks {
		if w, ok := s.(audit.FindingWithdrawer); ok {
			w.WithdrawFinding(f, "", at)
		}
	}
}

// tooLateCall notes a call the engine counted too late to be judged, for
// the next commit: the replay after a restart passes over it, as the live
// withdrawnBy names the collector as the author of the lifecycle change
// that withdraws a finding: a person reads who withdrew it in its history.
const withdrawnBy = "mcpaudit"

// withdrawnNote is the note of that change, with the ID of the call
// judged late that withdrew it.
const withdrawnNote = "withdrawn by mcpaudit: call %s, dated within the write's verification window and judged late (after the window closed), settled the write; judged in time order there is no such finding (docs/detection.md, Late calls)"

// answerWithdrawnNote is the note of the change that withdraws a finding
// made from a call judged without its response, whose answer (the same
// call id) came later within allowed_lateness (fx20a).
const answerWithdrawnNote = "withdrawn by mcpaudit: the answer of call %s, delivered after the call was judged without it and judged within allowed_lateness, gives the write's outcome; judged in time order with the answer there is no such finding (docs/detection.md, Responses under one call id)"

// replacedNote is the note of the change that withdraws a wasted_retry or
// premature_retry whose calls, judged in time order with a call judged
// late, are not a pair: judging in order makes the finding that names the
// pair they make with it (lo21).
const replacedNote = "withdrawn by mcpaudit: replaced by the finding naming the calls judging in time order pairs once call %s, dated before a call this finding names, was judged late; judged in time order there is no such finding (docs/detection.md, Late calls)"

// WithdrawFinding takes back an unverified_write that a call judged late
// showed wrong, or an unverified_write or unsafe_retry made from a call
// judged without the response its late answer gave. Not yet committed, it is dropped from the commit; stored,
// the next commit marks it withdrawn in its lifecycle (audit.FindingWithdrawn:
// its row and id stay, lists and counts leave it out, and a person sees
// who withdrew it and why). The sinks that can are told too.
func (g *gate) WithdrawFinding(f *audit.Finding, call string, at time.Time) {
	id := f.ID()
	dropped := false
	for i := range g.findings {
		if g.findings[i].ID() == id {
			g.findings = slices.Delete(g.findings, i, i+1)
			g.origins = slices.Delete(g.origins, i, i+1)
			dropped = true
			break
		}
	}
	if !dropped {
		note := withdrawnNote
		switch {
		case f.Kind == audit.KindWastedRetry || f.Kind == audit.KindPrematureRetry:
			note = replacedNote
		case len(f.Calls) > 0 && f.Calls[0] == call:
			// The finding's own first call: its answer withdrew it.
			note = answerWithdrawnNote
		}
		g.withdrawn = append(g.withdrawn, audit.FindingChange{FindingID: id, Tenant: f.Tenant, State: audit.FindingWithdrawn,
			By: withdrawnBy, Note: fmt.Sprintf(note, call), Time: at})
	}
	if _, ok := g.told[id]; !ok {
		return // the sinks were not told it in this process
	}
	delete(g.told, id)
	if !dropped {
		// Stored: told at the first attempt to store the withdrawal
		// (tellLive), which follows a commit that went through.
		if g.toTell == nil {
			g.toTell = map[string]liveWithdrawal{}
		}
		g.toTell[id] = liveWithdrawal{f: *f, call: call, at: at}
		return
	}
	for _, s := range g.sinks {
		if w, ok := s.(audit.FindingWithdrawer); ok {
			w.WithdrawFinding(f, call, at)
		}
	}
}

// tellLive tells the sinks of the withdrawal of id that WithdrawFinding
// queued for a stored finding (toTell), once: at the first attempt to
// store it that the store took or refused as unavailable. Counted before
// that, a withdrawal waiting behind failing commits was counted live, lost
// in a crash (it never reached the state file) and counted again by the
// restart that made it (review rev20w, R3).
func (g *gate) tellLive(id string) {
	lw, ok := g.toTell[id]
	if !ok {
		return
	}
	delete(g.toTell, id)
	for _, s := range g.sinks {
		if w, ok := s.(audit.FindingWithdrawer); ok {
			w.WithdrawFinding(&lw.f, lw.call, lw.at)
		}
	}
}

// run did, instead of judging it (docs/detection.md, "Late calls").
func (g *gate) tooLateCall(c *audit.Call) {
	if g.held {
		return
	}
	g.tooLate = append(g.tooLate, audit.CallRef{Tenant: c.Tenant, ID: c.ID, Time: c.Time})
}

// answeredCall notes a waiting call that an answer under its call id
// completed in the engine, for the next commit: the store puts the answer
// it holds aside in the call's place then, and only then, so that a
// restart's replay reads the call as the live run judged it
// (docs/storage.md, "An answer under a stored unanswered call").
//
// Not guarded by held, as tooLateCall is: an answer is always a call the
// store held, and naming the call it completed passes over nothing.
func (g *gate) answeredCall(c *audit.Call) {
	g.answered = append(g.answered, audit.CallRef{Tenant: c.Tenant, ID: c.ID, Time: c.Time})
}

// answerAtRestart notes c, an answer kept aside that the replay hands the
// engine: the call's judgement without it may have been committed (the
// live run took it within allowed_lateness, detect's answerLate, and died
// before the commit naming it; whether a mark covers the call or not, the
// file saved at most once a second: review rev21f). A write judged from it whose
// unverified_write the store holds has that finding withdrawn
// (storedUnverified), as the live run would have.
func (g *gate) answerAtRestart(c *audit.Call) {
	if g.restartAnswers == nil {
		g.restartAnswers = map[audit.CallRef]bool{}
	}
	g.restartAnswers[audit.CallRef{Tenant: c.Tenant, ID: c.ID}] = true
}

// maxAnswersHeld bounds gate.answers: past it the map starts again (an
// answer judged then is not named, as before review rev18l).
const maxAnswersHeld = 1 << 12

// answerHeld notes that the engine is about to take c, kept aside by the
// store as the answer of a stored unanswered call.
func (g *gate) answerHeld(c *audit.Call) {
	if g.answers == nil || len(g.answers) >= maxAnswersHeld {
		g.answers = map[string]bool{}
	}
	g.answers[c.Tenant+"\x00"+c.ID] = true
}

// judged names, for the next commit, a call judged with a response that
// the store holds aside as an answer (answerHeld): the engine judged the
// answer itself, not merged into a waiting first observation (OnAnswer),
// and the store must keep the call as judged (review rev18l). A call
// named twice (merged, then judged) is completed once.
func (g *gate) judged(r *audit.Record) {
	if len(g.answers) == 0 || !r.Call.Responded {
		return
	}
	k := r.Call.Tenant + "\x00" + r.Call.ID
	if g.answers[k] {
		delete(g.answers, k)
		g.answeredCall(r.Call)
	}
}

// duplicate notes that the engine dropped observation dropped of the
// exchange kept stands for, while stored findings are being recognized.
func (g *gate) duplicate(kept string, dropped *audit.Call) {
	if g.known == nil {
		return
	}
	if g.alt == nil {
		g.alt = map[string][]*audit.Call{}
	}
	g.alt[kept] = append(g.alt[kept], dropped)
}

// storedPending reports whether the store may hold w pending, for a write
// a replayed call settles while its window had not ended before the mark
// less the lateness bounds. The store is asked once, on the first such
// write, for every write it holds pending over the range of the marks: a
// restart settling none asks nothing. A write dated outside that range (at
// or after its partition's mark less the bounds), or a store that cannot
// answer, is taken as pending: storing a state again costs a count twice,
// dropping it a write pending for good.
func (g *gate) storedPending(w *audit.Write) bool {
	if !g.committed(w.Tenant, w.Server, w.Time) {
		return true
	}
	if !g.pendingAsked {
		g.pendingAsked = true
		g.heldPending = g.loadPending()
	}
	if g.heldPending == nil {
		return true
	}
	if g.heldPending[writeKey{w.Tenant, w.CallID, w.Seq}] {
		return true
	}
	// Stored under another observation of its exchange, dated at that
	// one's time: one outside the range read was not asked about.
	c := g.storedAs(w)
	return c != nil && (g.heldPending[writeKey{w.Tenant, c.ID, w.Seq}] || !g.inPendingRange(w.Tenant, w.Server, c.Time))
}

// inPendingRange reports whether a write of the partition of (tenant,
// server) stored at t is in the range loadPending reads for it: from its
// mark less the lateness bounds and the verify window to its mark less
// the bounds, a millisecond wider either side (a store may keep times to
// the millisecond).
func (g *gate) inPendingRange(tenant, server string, t time.Time) bool {
	mark, ok := g.marks[detect.PartitionKey{Tenant: tenant, Server: server}]
	if !ok || mark.IsZero() {
		return false
	}
	vw := g.eng.Config().VerifyWindow
	return !t.Before(mark.Add(-g.settle-vw-time.Millisecond)) && t.Before(mark.Add(-g.settle+time.Millisecond))
}

// loadPending returns the writes the store holds pending that a replayed
// call may settle with their windows open at the mark less the lateness
// bounds (nil: the store could not tell).
func (g *gate) loadPending() map[writeKey]bool {
	if g.pendingWrites == nil || len(g.marks) == 0 {
		return nil
	}
	vw := g.eng.Config().VerifyWindow
	var lo, hi time.Time
	for _, m := range g.marks {
		if m.IsZero() {
			continue
		}
		if lo.IsZero() || m.Before(lo) {
			lo = m
		}
		if m.After(hi) {
			hi = m
		}
	}
	if lo.IsZero() {
		return nil
	}
	// A millisecond either side: a store may keep times to the millisecond.
	held := map[writeKey]bool{}
	err := g.pendingWrites(lo.Add(-g.settle-vw-time.Millisecond), hi.Add(-g.settle+time.Millisecond), func(w *audit.Write) {
		if g.inPendingRange(w.Tenant, w.Server, w.Time) {
			held[writeKey{w.Tenant, w.CallID, w.Seq}] = true
		}
	})
	if err != nil {
		return nil
	}
	return held
}

// storedAs returns, while stored output is being recognized, the other
// observation of w's exchange under which the store already holds w:
// of two observations that both came late, the live run kept the first to
// arrive and keyed the write by it, where the replay keeps the earlier.
// It asks the store once per write, and only for such exchanges.
func (g *gate) storedAs(w *audit.Write) *audit.Call {
	if g.known == nil || g.storedWrite == nil || len(g.alt[w.CallID]) == 0 {
		return nil
	}
	k := writeKey{w.Tenant, w.CallID, w.Seq}
	if c, ok := g.aliases[k]; ok {
		return c
	}
	var as *audit.Call
	for _, other := range g.alt[w.CallID] {
		if g.storedWrite(w, other) {
			as = other
			break
		}
	}
	if g.aliases == nil {
		g.aliases = map[writeKey]*audit.Call{}
	}
	g.aliases[k] = as
	return as
}

// knownAsOther reports whether f was stored citing, in place of one of
// its calls, another observation of the same exchange: the one the live
// run kept, where the replay keeps the earlier.
func (g *gate) knownAsOther(f *audit.Finding) bool {
	if len(g.alt) == 0 {
		return false
	}
	for i, c := range f.Calls {
		for _, other := range g.alt[c] {
			calls := slices.Clone(f.Calls)
			calls[i] = other.ID
			alt := *f
			alt.Calls = calls
			if g.known[alt.ID()] {
				return true
			}
			// Evidence is cited in time order: the other observation may
			// come after the other call.
			if len(calls) == 2 {
				calls[0], calls[1] = calls[1], calls[0]
				if g.known[alt.ID()] {
					return true
				}
			}
		}
	}
	return false
}

// maxReusedWrites bounds the writes map kept from one commit to the next.
const maxReusedWrites = 1 << 14

func (g *gate) pending() int {
	return len(g.writes) + len(g.findings) + len(g.tooLate) + len(g.answered) + len(g.withdrawn)
}

func (g *gate) take() audit.Results {
	r := audit.Results{Findings: g.findings, TooLate: g.tooLate, Answered: g.answered}
	g.tooLate, g.answered = nil, nil
	if n := len(g.writes); n > 0 {
		r.Writes = make([]audit.Write, 0, n)
		for _, w := range g.writes {
			r.Writes = append(r.Writes, w)
		}
		// The map keeps its room for the next commit's writes, about as
		// many: growing it again at each commit cost as much as the writes
		// it held. A map grown by a burst (maps never shrink) is dropped.
		if n > maxReusedWrites {
			g.writes = nil
		} else {
			clear(g.writes)
		}
	}
	g.findings = nil
	g.taken = append(g.taken, g.origins...)
	g.origins = nil
	if len(g.told) > 0 && !g.committedWM.IsZero() {
		c := g.eng.Config()
		gone := g.committedWM.Add(-c.AllowedLateness - c.Lateness)
		maps.DeleteFunc(g.told, func(_ string, end time.Time) bool { return end.Before(gone) })
	}
	return r
}

func (g *gate) putBack(r audit.Results) {
	if g.writes == nil {
		g.writes = map[writeKey]audit.Write{}
	}
	for _, w := range r.Writes {
		k := writeKey{w.Tenant, w.CallID, w.Seq}
		if _, newer := g.writes[k]; !newer {
			g.writes[k] = w
		}
	}
	g.findings = append(r.Findings, g.findings...)
	g.tooLate = append(r.TooLate, g.tooLate...)
	g.answered = append(r.Answered, g.answered...)
	g.origins = append(g.taken, g.origins...)
	g.taken = nil
}

// committedNow tells the latency of the findings taken by the commit that
// succeeded at now.
func (g *gate) committedNow(now time.Time) {
	if g.latency != nil {
		for _, o := range g.taken {
			if !o.at.IsZero() {
				g.latency(now.Sub(o.at), o.window)
			}
		}
	}
	g.taken = g.taken[:0]
}

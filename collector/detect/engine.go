// Package detect is the write ledger and the detector: it puts calls in
// event-time order per partition (one tenant and one server), drops
// duplicate observations, follows every write attempt to a state and
// reports findings (findings.md §2–§4).
//
// The Engine keeps event time per partition. A source is one stream of
// calls (an exporter, a poster, an input file); its clock is the latest
// event time it delivered, whatever partitions its calls were for, or, with
// ClockPerPartition (the live service), for each partition apart. A
// partition's watermark is the minimum over the active sources that feed
// it of their clocks, less the lateness bound, never ahead of the wall
// clock by more than the allowed skew. Calls wait for the watermark and are judged in time order; a call
// that arrives behind it is judged at once against the state still open
// (within the allowed lateness), and the rules then also look at the calls
// after it. A partition whose sources have all gone quiet advances with the
// wall clock, so that its verification windows close on time.
package detect

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// PartitionKey names a partition: every correlation of the contract lies
// within one tenant and one server.
type PartitionKey struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`
}

// Engine routes calls to their partitions, keeps each partition's event
// time and judges its calls. It is not safe for concurrent use: one
// goroutine feeds it.
type Engine struct {
	cfg   Config
	out   emitter
	stats Stats
	parts map[PartitionKey]*partition
	// freed keeps, per key, the counts of the partitions ExpireIdle
	// removed under it since the start, and of their sources
	// (FreedStatus): a freed partition's calls too late are still not
	// judged, and the status must go on saying so (px19). It keeps at
	// most FreedKept keys; the counts of those dropped past it are kept
	// per tenant in freedDropped (mem20). freedOrder lists the keys in
	// the order they were last freed, with stale places (freedEntry.seq)
	// skipped, for the least recently freed to be dropped first.
	freed        map[PartitionKey]*freedEntry
	freedDropped map[string]*PartitionStatus
	freedOrder   []freedPlace
	freedSeq     uint64
	// partitionsMade counts the partitions made (partition.gen).
	partitionsMade uint64
	sources        map[sourceKey]*source
	// named holds the sources by tenant and name: with
	// ClockPerPartition a source has one per partition it feeds, found by
	// its name at each refused delivery (Touch). Kept in step with
	// sources (register, unregister).
	named map[[2]string][]*source
	// ids drops a call taken again by its id (a file given twice); nil
	// where the store already refuses stored ids.
	ids *recentIDs
	// collided remembers the collisions counted, by the dropped call's id
	// and response (the last collisionsKept), so that the same observation
	// sent again (a retry after a lost acknowledgement, a backlog re-sent)
	// is a duplicate, not another collision. Made at the first.
	collided *recentIDs
	arrival  uint64
	// memos numbers the partitions' bound memos (boundMemo.seq).
	memos uint64
	// current is the record being judged, nil while windows close alone.
	current *audit.Record
	// wall is the latest wall time the engine was told (Add, Tick).
	wall time.Time
	// perPartition keeps a source's clock per partition (ClockPerPartition).
	perPartition bool
	// routes remembers the partitions and sources of the latest calls:
	// a stream of calls names a few, and two map lookups of string keys
	// per call cost more than comparing the names.
	routes    [4]route
	nextRoute int
	// onDuplicate, when set, is told of each observation dropped for
	// another that waits with it (OnDuplicate).
	onDuplicate func(kept string, dropped *audit.Call)
	// onCollision, when set, is told of each id collision (OnCollision).
	onCollision func(Collision)
	// onJudged, when set, is given each record once judged (OnJudged).
	onJudged func(*audit.Record)
	// onTooLate, when set, is told of each call counted too late
	// (OnTooLate).
	onTooLate func(*audit.Call)
	// onAnswer, when set, is told of each waiting call an answer under
	// its call id completed (OnAnswer).
	onAnswer func(*audit.Call)
	// pack is set when waiting calls are kept packed (PackWaiting);
	// scratch is the buffer they are packed in.
	pack    bool
	scratch []byte
	// replay names the stream of stored calls replayed at start
	// (ReplaySource): it learns no lag.
	replay string
	// held is set while AddHeld takes a call.
	held bool
}

// route is where calls of one tenant, server and source go.
type route struct {
	p   *partition
	s   *source
	src string
}

// partition is the event time and the state of one partition.
type partition struct {
	key PartitionKey
	// gen is the partition's number among those the engine made: it tells
	// it from an earlier one under its key, freed (ExpireIdle).
	gen     uint64
	det     *detector
	buf     entryHeap
	sources []*source
	dedupe  dedupe
	// wm is the watermark: calls up to it were judged.
	wm time.Time
	// born is the wall time of the partition's first call: for the idle
	// timeout after it, the watermark waits for every source to show up.
	born time.Time
	// hold, after a restart, is the wall time until which the watermark
	// does not pass holdAt (HoldAfterRestart).
	hold, holdAt time.Time
	// gone is the clock (max, alive) of the latest of the sources
	// forgotten after a long quiet (ExpireIdle): when every source left is
	// quiet too, the watermark goes on from it as it would have from them.
	gone struct{ max, alive time.Time }
	// alive is the latest wall time any of its sources was known active:
	// once every source has been quiet for the idle timeout after it, the
	// partition is in a quiet spell, which does not count against the
	// time a quiet source keeps holding it (source.holdUntil).
	alive time.Time
	Counts
	// overflow, once the partition had no room for a new source
	// (Config.MaxSources) while none of its sources was quiet, takes the
	// calls of the sources it had no room for, its clock following the
	// latest of them; nil before. overflowCalls counts those calls and
	// displaced the quiet sources forgotten to make room for a new one.
	overflow      *source
	overflowCalls int64
	displaced     int64
	// memo is the partition's latest bound, while it holds (boundMemo).
	memo boundMemo
}

// OverflowSource names, in the status, the source a partition takes the
// calls of the sources it has no room for under (Config.MaxSources). It is
// never a sender's source: a sender naming its source so has a source of
// its own.
const OverflowSource = "mcpaudit/overflow"

// sourceKey names a source; sources of different tenants never mix. server
// is set when the engine keeps a source's clock per partition, empty
// otherwise.
type sourceKey struct{ tenant, name, server string }

// keyOf is the key of source name's stream of calls for partition k.
func (e *Engine) keyOf(k PartitionKey, name string) sourceKey {
	if e.perPartition {
		return sourceKey{k.Tenant, name, k.Server}
	}
	return sourceKey{tenant: k.Tenant, name: name}
}

// sourcesNamed returns the sources of tenant named name: one, or with
// ClockPerPartition one per partition it feeds.
func (e *Engine) sourcesNamed(tenant, name string) []*source {
	return e.named[[2]string{tenant, name}]
}

// source is one stream of calls.
type source struct {
	key sourceKey
	// max is the latest event time the source delivered, clamped to the
	// wall clock plus the allowed skew.
	max time.Time
	// lastSeen is the wall time of its latest delivery (zero in analyze).
	lastSeen time.Time
	// alive is the latest wall time the source was known to be active:
	// its latest delivery, an attempt the collector refused (Touch), or,
	// after a restart, a grace for its exporter to come back
	// (RestoreSource). It goes idle the idle timeout after.
	alive time.Time
	// current is set once the source delivered a call dated within
	// MaxClockLag of the wall time of its delivery, or was restored after
	// a restart: a source that never was may have a wrong clock
	// (wrongClock).
	current bool
	// lag is the least lag (the wall time of a delivery less the source's
	// clock then) it showed since its first delivery since the start (or
	// the lag restored with it); spell is the wall time its latest spell
	// of deliveries began (zero before its first delivery since the
	// start). A source that goes quiet after such a spell goes on holding
	// its partitions, its clock taken to run with the wall clock that far
	// behind it (heldClock), until wall time holdUntil: a pod whose clock
	// is minutes slow, quiet with the rest of its server, comes back as far
	// behind as it was, and a watermark that had moved on without it would
	// leave every call it sends too late.
	lag       time.Duration
	spell     time.Time
	holdUntil time.Time
	Counts
	// parts are the partitions the source fed.
	parts []*partition
	// overflow is set on a partition's overflow source.
	overflow bool
	// tooLateSenders, on an overflow source, names the senders of its
	// latest calls counted too late, the most recent first, each once, at
	// most TooLateSendersKept: the overflow source's name is no sender's.
	tooLateSenders []string
	// counted is the memo (boundMemo.seq) in which the source's clock was
	// one of those the watermark is the earliest of.
	counted uint64
}

// entry is a call waiting for its partition's watermark.
type entry struct {
	s  *seen
	at pos
}

// NewEngine returns an engine whose output goes to sinks, in processing
// order.
func NewEngine(cfg Config, sinks ...audit.Sink) *Engine {
	e := &Engine{cfg: cfg, stats: newStats(), parts: map[PartitionKey]*partition{}, sources: map[sourceKey]*source{},
		named: map[[2]string][]*source{}}
	e.out = emitter{sinks: sinks, stats: &e.stats}
	return e
}

// ClockPerPartition makes the engine keep each source's clock per
// partition: a source that sends several servers (a poster of mixed call
// records, a pipeline that forwards several services under one name) holds
// each partition back only by what it delivered for it, so a server it
// sends late does not make another's calls late. The live service uses it;
// analyze does not, as an input file is one stream in time order across
// servers, whose calls of one server move every partition's clock. Call it
// before the first call.
func (e *Engine) ClockPerPartition() { e.perPartition = true }

// DropRepeatedIDs makes the engine drop a call whose id it took before
// (among the last 200,000), however late it comes: a file given twice, a
// re-sent upload. The live service leaves this to its store.
func (e *Engine) DropRepeatedIDs() { e.ids = newRecentIDs(recentIDsKept) }

// OnDuplicate has f told, for each pair of observations of one exchange
// that wait together for the watermark, the id of the one that stands for
// the call and the one dropped. The live service uses it after a restart:
// the replay takes such pairs in time order, where the live run may have
// kept the other one.
func (e *Engine) OnDuplicate(f func(kept string, dropped *audit.Call)) { e.onDuplicate = f }

// Collision is an id collision: two different exchanges delivered under
// the same (trace_id, span_id), or two observations of one call id (the
// same request at the same millisecond) that answered differently
// (Differs holds DiffResponse). The spec counts a second observation of
// one exchange once, by its span ids; two exchanges that share them are a
// broken exporter or a replay tool rewriting ids. The engine still keeps
// one of the two, as it keeps one of two observations, and drops the
// other unjudged (it is stored all the same).
type Collision struct {
	PartitionKey
	TraceID, SpanID string
	// Kept is the id of the call that stands for the span ids; empty when
	// it was judged a while ago and is no longer held. KeptSource is the
	// source that delivered it, empty when unknown.
	Kept, KeptSource string
	// Dropped is the call not judged, DroppedSource its source.
	Dropped       *audit.Call
	DroppedSource string
	// Differs names what differs: DiffSession, DiffRPCID, DiffTool,
	// DiffArguments, DiffTime, or DiffRequest when the kept call is no
	// longer held.
	Differs []string
}

// OnCollision has f told of each id collision (Collision), when the
// colliding observation is dropped: once, however often that observation
// is sent again. It is called from Add, on the
// engine's goroutine; f must not keep Dropped past its return.
func (e *Engine) OnCollision(f func(Collision)) { e.onCollision = f }

// OnJudged has f given each record once it is judged, when the engine
// keeps no reference to the record, its call or its operations, so that
// the caller may reuse them (dialect.Reader.Recycle). It holds only when no
// sink keeps a record past its Call: analyze's sinks keep none. A record
// dropped unjudged (a duplicate, too late) is not given.
func (e *Engine) OnJudged(f func(*audit.Record)) { e.onJudged = f }

// OnTooLate has f told of each call counted too late to be judged (later
// than AllowedLateness behind its partition's watermark), once, when it is
// counted. It is called from Add, on the engine's goroutine; f must not
// keep c past its return. The live service commits their ids, so that the
// replay after a restart passes over them as the live run did.
func (e *Engine) OnTooLate(f func(c *audit.Call)) { e.onTooLate = f }

// OnAnswer has f told of each call, waiting for its watermark, whose two
// observations under one call id (the same request at the same
// millisecond), one without its response and one with it, the engine
// merged, once, when it does, whichever of the two it keeps for the call
// (the answer may be dated a fraction of a millisecond before), and of
// each call judged without its response whose answer comes later, within
// AllowedLateness of its partition's watermark: the engine then judges
// the call's writes again from the answer (detector.answerLate) and takes
// back what the unanswered reading made that judging in order does not.
// An answer later than that is dropped as a duplicate, and the call stays
// judged without it. It is called from Add, on the engine's goroutine; f
// must not keep c past its return. The live service commits their ids, so
// that the store keeps the answer in the call's place exactly when the
// engine took it (audit.Results.Answered).
func (e *Engine) OnAnswer(f func(c *audit.Call)) { e.onAnswer = f }

// ReplaySource names the stream of stored calls the live service
// replays through the engine at start: it is no exporter, and the age of
// the calls it replays says nothing of a clock, so it learns no lag and
// holds nothing once quiet (source.lag). Call it before the replay.
func (e *Engine) ReplaySource(name string) { e.replay = name }

// PackWaiting has the engine keep the lean records (audit.Record.Lean)
// of calls waiting for their watermark packed, in a quarter of the memory,
// and unpack each to judge it. The live service uses it: there a lagging
// exporter keeps tens of thousands of calls waiting. analyze does not: its
// calls wait a moment each, and it recycles their records (OnJudged).
func (e *Engine) PackWaiting() { e.pack = true }

// Stats returns what was processed so far.
func (e *Engine) Stats() *Stats { return &e.stats }

// Current returns the record being judged, or nil while verification
// windows close on their own (Tick, Flush).
func (e *Engine) Current() *audit.Record { return e.current }

// Add takes one call delivered by the named source. wall is the wall time
// of its arrival; zero for a finite input read from files, which has no
// wall clock (no idle sources, no skew). The call is judged once its
// partition's watermark passes it, or at once if it is late.
func (e *Engine) Add(src string, r *audit.Record, wall time.Time) {
	c := r.Call
	t := c.Time
	p, s, moved, ahead := e.arrive(src, c, wall)
	// A second observation of an exchange is dropped (it may complete the
	// first with its response), and so is the same call sent again, while
	// a call of its time can still be judged; with DropRepeatedIDs, a call
	// sent again however late (a file given twice).
	tk := p.dedupe.take(r, s)
	seen, replaced := tk.s, tk.replaced
	if tk.dropped != nil && e.onDuplicate != nil {
		e.onDuplicate(seen.r.Call.ID, tk.dropped.Call)
	}
	if tk.answered && e.onAnswer != nil {
		e.onAnswer(seen.r.Call)
	}
	if tk.col != nil {
		e.collision(p, s, tk.col)
	}
	if seen != nil && seen.r != r && !replaced {
		// A later observation completed a waiting one with its response.
		seen = nil
	}
	if seen == nil {
		e.duplicate()
		if c.Responded && tk.col == nil && !t.Before(p.wm.Add(-e.cfg.AllowedLateness)) {
			// The answer of a call judged without it, within
			// allowed_lateness: judged as in order, and the store told.
			e.current = r
			took := false
			if u, ok := p.dedupe.answerOf(r); ok {
				took = p.det.answerJudged(r, u.t, u.at, u.src)
			} else {
				took = p.det.answerFound(r)
			}
			e.current = nil
			if took {
				e.stats.LateAnswers++
				if e.onAnswer != nil {
					e.onAnswer(c)
				}
			}
		}
		return
	}
	if e.ids != nil && !e.ids.add(c.Tenant, c.ID) {
		if !replaced {
			// Taken before, and judged: the observation just filed
			// stands for a judged call, and holds nothing. A call sent
			// again that late moves no watermark, so no sweep would
			// free its record before the input ends (a file given
			// twice would be held whole).
			seen.processed = true
			seen.forget()
		}
		e.duplicate()
		return
	}
	if replaced {
		e.duplicate()
	}
	e.arrival++
	at := pos{t: etimeOf(t), ord: ordOf(seen.r.Call.ID, e.arrival)}
	seen.at = at
	if t.Before(p.wm) {
		seen.processed = true
		if t.Before(p.wm.Add(-e.cfg.AllowedLateness)) {
			// Not judged: nothing reads the record of a processed
			// observation, and it would be held until a sweep passes
			// its time, which a watermark that late calls do not move
			// may never bring.
			seen.forget()
			if e.held {
				e.duplicate()
				return
			}
			count(p, s, countTooLate, t)
			e.stats.TooLate++
			if e.slowClock(s, src, wall) {
				count(p, s, countBehind, t)
			}
			if s.overflow {
				s.tooLateSenders = recentFirst(s.tooLateSenders, src, TooLateSendersKept)
			}
			if e.onTooLate != nil {
				e.onTooLate(c)
			}
			return
		}
		count(p, s, countLate, t)
		e.stats.Late++
		e.judge(p, seen, at)
		return
	}
	if len(p.det.deferred) > 0 && moved {
		defer p.det.closeDeferred()
	}
	if ahead {
		// Dated beyond the allowed skew: its source's clock is clamped, so
		// the watermark would reach it only when the wall clock does. It is
		// judged now, at its place in event time, as a late call is.
		e.judge(p, seen, at)
		return
	}
	if e.pack {
		e.scratch = seen.pack(e.scratch)
	}
	p.buf.push(entry{seen, at})
	if moved {
		// The source's clock moved: every partition it feeds may follow.
		for _, q := range s.parts {
			e.advance(q, wall)
		}
	} else {
		e.advance(p, wall)
	}
}

// AddHeld is Add of a call that the caller's store held already under
// its call id, stored by an earlier request (a copy sent again, or a
// second observation of the exchange, with or without its response).
// Later than AllowedLateness behind its partition's watermark it is
// dropped as a duplicate observation (Stats.Duplicates), not counted too
// late (Stats.TooLate, the partition's and source's TooLate): the stored
// copy was handed to the engine when it came, and the engine no longer
// remembers it (its dedupe forgets an observation allowed_lateness +
// 2 × lateness + 2 s behind the watermark). Counting it too late said
// "not judged" of calls judged in time (the outside pass live21's D4: a
// server exporter 150–170 s behind its client's).
func (e *Engine) AddHeld(src string, r *audit.Record, wall time.Time) {
	e.held = true
	defer func() { e.held = false }()
	e.Add(src, r, wall)
}

// arrive routes c, delivered by src at wall, to its partition and source,
// counts it delivered and moves its source's clocks (moved: its event
// time; ahead: dated beyond the allowed skew, clamped).
func (e *Engine) arrive(src string, c *audit.Call, wall time.Time) (p *partition, s *source, moved, ahead bool) {
	if wall.After(e.wall) {
		e.wall = wall
	}
	p, s = e.route(c, src, wall)
	if p.born.IsZero() {
		p.born = wall
	}
	// s.parts, not p.sources: a source feeds one partition (or a few),
	// a partition may have many sources.
	if !slices.Contains(s.parts, p) {
		p.sources = append(p.sources, s)
		s.parts = append(s.parts, p)
	}
	count(p, s, countCall, c.Time)
	if s.overflow {
		p.overflowCalls++
	}
	if !wall.IsZero() && e.perPartition {
		// Only then is a bound kept (boundMemo, Engine.bound).
		defer e.arrived(s, s.current)
	}
	m := c.Time
	// Back after a quiet spell (or first delivery): a new spell of
	// deliveries, whose lag is learned afresh.
	back := s.spell.IsZero() || e.quiet(s, wall)
	if !wall.IsZero() {
		e.resume(p, s, wall)
		s.lastSeen = wall
		if wall.After(s.alive) {
			s.alive = wall
		}
		if limit := wall.Add(e.cfg.MaxClockSkew); c.Time.After(limit) {
			m, ahead = limit, true
			count(p, s, countAhead, c.Time)
			e.stats.Ahead++
		}
	}
	if !s.current && !wall.IsZero() && !m.Before(wall.Add(-e.cfg.MaxClockLag)) {
		s.current = true
	}
	moved = m.After(s.max)
	if moved {
		s.max = m
	}
	if !wall.IsZero() && src != e.replay && !s.overflow {
		// The least lag since its first delivery, not since it came back:
		// a source that comes back further behind than it went (an
		// exporter that was stuck delivers its queue) shows a backlog, not
		// a slower clock, and must not hold its server at the backlog's
		// age once quiet; a slow clock comes back as far behind as it went.
		if lag := wall.Sub(s.max); s.spell.IsZero() || lag < s.lag {
			s.lag = lag
		}
		if back {
			s.spell = wall
		}
		s.holdUntil = laterOf(s.holdUntil, wall.Add(e.cfg.MaxClockLag))
	}
	return p, s, moved, ahead
}

// slowClock reports whether source s, delivering at wall, has never been
// current: every call it delivered was dated more than MaxClockLag before
// its arrival, as a clock that slow dates them (or a sender that joins
// with a backlog that old). A source once current whose calls come too
// late delivers a backlog late; the replayed stream is no clock.
func (e *Engine) slowClock(s *source, src string, wall time.Time) bool {
	return !s.current && !wall.IsZero() && e.cfg.MaxClockLag > 0 && src != e.replay
}

// AddRefused takes a call that the store did not store because a call of
// its id (the same request at the same millisecond) is stored with another
// response (audit.ResponseComparer): an id collision (DiffResponse) whose
// response is neither stored nor judged. It is counted as delivered and as
// an id collision for its partition and source, and told (OnCollision);
// its source's clocks move as a duplicate's do; nothing of it is kept, so
// the engine cannot count it a second time against an observation it
// holds.
func (e *Engine) AddRefused(src string, r *audit.Record, wall time.Time) {
	p, s, _, _ := e.arrive(src, r.Call, wall)
	e.duplicate()
	e.collision(p, s, &clash{kept: r.Call.ID, dropped: r.Call, droppedSrc: s, differs: []string{DiffResponse}})
}

// resume notes a sign of life of source s in partition p at wall time
// wall. When it ends a quiet spell of the whole partition (every source
// quiet for the idle timeout), the spell does not count against the time
// the other sources, quiet, go on holding p (heldClock): a pod with a
// slow clock that paused with the rest of its server comes back with it,
// however long the server was quiet, and must find the watermark where
// its clock is.
func (e *Engine) resume(p *partition, s *source, wall time.Time) {
	if from := p.alive.Add(e.cfg.IdleTimeout); !p.alive.IsZero() && wall.After(from) {
		spell := wall.Sub(from)
		p.memo.invalidate()
		for _, o := range p.sources {
			if o != s && o.holdUntil.After(from) {
				o.holdUntil = o.holdUntil.Add(spell)
				// o's clock is one for every partition it feeds (unless
				// each keeps its own): its hold moved in all of them.
				for _, q := range o.parts {
					q.memo.invalidate()
				}
			}
		}
	}
	p.alive = laterOf(p.alive, wall)
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// route returns the partition of c and the source src of it at wall: the
// partition's overflow source when src is new to it and it has no room.
func (e *Engine) route(c *audit.Call, src string, wall time.Time) (*partition, *source) {
	for i := range e.routes {
		r := &e.routes[i]
		if r.p != nil && r.p.key.Server == c.Server && r.p.key.Tenant == c.Tenant && r.src == src {
			return r.p, r.s
		}
	}
	p := e.partition(c)
	k := e.keyOf(p.key, src)
	s := e.sources[k]
	if (s == nil || !slices.Contains(s.parts, p)) && (e.replay == "" || src != e.replay) && !e.makeRoom(p, wall) {
		s = e.overflowOf(p)
	} else if s == nil {
		s = e.source(k)
	}
	e.routes[e.nextRoute] = route{p, s, src}
	e.nextRoute = (e.nextRoute + 1) % len(e.routes)
	return p, s
}

// forgetRoutes drops the remembered routes, when a partition or a source
// is removed.
func (e *Engine) forgetRoutes() { e.routes = [len(e.routes)]route{} }

func (e *Engine) source(k sourceKey) *source {
	s := e.sources[k]
	if s == nil {
		s = &source{key: k}
		e.register(s)
	}
	return s
}

// EndSource says that a source will deliver nothing more (the end of an
// input file): it stops holding its partitions back.
func (e *Engine) EndSource(tenant, name string) {
	e.forgetRoutes()
	for _, s := range slices.Clone(e.sourcesNamed(tenant, name)) {
		e.unregister(s)
		for _, p := range s.parts {
			p.sources = slices.DeleteFunc(p.sources, func(x *source) bool { return x == s })
			p.memo.invalidate()
			e.advance(p, time.Time{})
		}
	}
}

func (e *Engine) duplicate() { e.stats.Duplicates++ }

// collision counts an id collision for the partition and the source whose
// delivery revealed it, and tells the caller (OnCollision).
func (e *Engine) collision(p *partition, s *source, col *clash) {
	if d := col.dropped; d.ID != "" {
		if e.collided == nil {
			e.collided = newRecentIDs(collisionsKept)
		}
		if !e.collided.add(p.key.Tenant, d.ID+"\x00"+strconv.FormatUint(d.RespSum, 16)) {
			// Counted when it first came: a duplicate now (the caller
			// counts it so).
			return
		}
	}
	count(p, s, countCollision, col.dropped.Time)
	e.stats.Collisions++
	if e.onCollision == nil {
		return
	}
	name := func(s *source) string {
		if s == nil {
			return ""
		}
		return s.key.name
	}
	e.onCollision(Collision{
		PartitionKey: p.key, TraceID: col.dropped.TraceID, SpanID: col.dropped.SpanID,
		Kept: col.kept, KeptSource: name(col.keptSrc),
		Dropped: col.dropped, DroppedSource: name(col.droppedSrc), Differs: col.differs,
	})
}

func (e *Engine) partition(c *audit.Call) *partition {
	return e.partitionOf(PartitionKey{Tenant: c.Tenant, Server: c.Server})
}

func (e *Engine) partitionOf(k PartitionKey) *partition {
	p := e.parts[k]
	if p == nil {
		// Its own copy of the names, kept for the life of the engine: a
		// call's texts are one allocation (audit.Record.Lean).
		k = PartitionKey{Tenant: strings.Clone(k.Tenant), Server: strings.Clone(k.Server)}
		e.partitionsMade++
		p = &partition{key: k, gen: e.partitionsMade, det: newDetector(e.cfg, &e.out, k), dedupe: newDedupe()}
		p.det.behind = e.behind
		e.parts[k] = p
	}
	return p
}

// judge has the partition's detector judge one call.
func (e *Engine) judge(p *partition, s *seen, at pos) {
	s.processed = true
	r := s.record()
	e.current = r
	p.det.process(r, at, s.src)
	e.current = nil
	if !r.Call.Responded {
		p.dedupe.judgedWithout(r, at, s.src)
	}
	// Judged: what dedupe still needs of it is its time.
	s.forget()
	if e.onJudged != nil {
		e.onJudged(r)
	}
}

// behind reports whether src, still active, has not yet delivered past t
// (less the lateness bound): what it sends next may settle a write whose
// window ended at t.
func (e *Engine) behind(src *source, t etime) bool {
	if e.wall.IsZero() || e.wall.Sub(src.alive) >= e.cfg.IdleTimeout {
		return false
	}
	return !etimeOf(src.max.Add(-e.cfg.Lateness)).After(t)
}

// Tick moves every partition's watermark to what the wall time now allows:
// sources quiet for the idle timeout stop holding their partition back,
// and a partition with no active source advances with the wall clock.
func (e *Engine) Tick(wall time.Time) {
	if wall.After(e.wall) {
		e.wall = wall
	}
	for _, p := range e.parts {
		e.advance(p, wall)
		if len(p.det.deferred) > 0 {
			p.det.closeDeferred()
		}
	}
}

// advance recomputes a partition's watermark and judges what it passes.
// A new partition holds its watermark for JoinWait, at most the idle
// timeout: its sources (the pods of a server, posters) show up one after
// the other, each with a batch that may span minutes of event time when a
// backlog is replayed or its clock is slow, and the first must not make
// the others' calls late. Exporters started together first deliver when
// their flush interval first fires (the OpenTelemetry SDK's every 5 s),
// seconds apart. (It was twice the lateness bound, 2 s: a pod 3 minutes
// slow whose first batch came 3 s after the other pod's had every call
// counted too late.)
func (e *Engine) advance(p *partition, wall time.Time) {
	if !wall.IsZero() && wall.Sub(p.born) < min(e.cfg.JoinWait, e.cfg.IdleTimeout) {
		return
	}
	wm, _, _ := e.bound(p, wall)
	if wm.IsZero() {
		return
	}
	if !wall.IsZero() {
		if limit := wall.Add(e.cfg.MaxClockSkew); wm.After(limit) {
			wm = limit
		}
		if wall.Before(p.hold) && wm.After(p.holdAt) {
			wm = p.holdAt
		}
	}
	e.release(p, wm)
}

// bound returns how far partition p's watermark may go at wall, by its
// sources' clocks (before the skew limit and a restart hold), and the
// source it waits for (nil when none: zero wm when no source bounds it).
// The watermark is the earliest clock of its active sources, less the
// lateness bound, leaving out those that hold nothing back (holdsNothing);
// when every source is quiet, the latest of their clocks, each taken to
// go on with the wall clock since it was last active. A quiet source that
// still holds at its learned lag (heldClock) keeps it there when that is
// earlier by more than the lateness bound: its calls come back that far
// behind. ahead reports whether another source is ahead of the one it
// waits for.
func (e *Engine) bound(p *partition, wall time.Time) (wm time.Time, h *source, ahead bool) {
	if m := &p.memo; m.valid(wall) {
		if memoCheck == nil {
			return m.wm, m.h, m.ahead
		}
		kept := *m
		m.invalidate()
		wm, h, ahead = e.bound(p, wall)
		var diff string
		if !wm.Equal(kept.wm) || h != kept.h || ahead != kept.ahead {
			diff = fmt.Sprintf("memo wm %v held by %v ahead %v; recomputed wm %v held by %v ahead %v",
				kept.wm, kept.h.key.name, kept.ahead, wm, nameOf(h), ahead)
		}
		memoCheck(p.key, wall, diff)
		return wm, h, ahead
	}
	var quiet, held time.Time
	var hq *source
	var cc clockCheck
	// What a memo of this bound needs (boundMemo): a memo is kept only
	// with a wall clock, and only with a clock per partition (the live
	// service's mode): a clock shared by partitions moves in one by what
	// happens in another (a resume there moves its hold), which the memo
	// does not follow in every case (a random test found a second one), and
	// no product path keeps a wall clock without ClockPerPartition.
	memo := !wall.IsZero() && e.perPartition
	var until time.Time
	e.memos++
	seq := e.memos
	soonest := func(t time.Time) {
		if until.IsZero() || t.Before(until) {
			until = t
		}
	}
	for _, s := range p.sources {
		if e.quiet(s, wall) {
			if q := quietClock(s.max, s.alive, wall); q.After(quiet) {
				quiet = q
			}
			c, ok := e.heldClock(p, s, wall)
			if ok && (hq == nil || c.Before(held)) {
				held, hq = c, s
			}
			if memo && !ok {
				// Not held only because its clock is too far behind the
				// watermark, it holds again once the wall clock brings it
				// within the allowed lateness.
				if t, later := e.heldFrom(p, s, wall); later {
					soonest(t)
				}
			}
			continue
		}
		// Active: it goes quiet at the idle timeout after its last sign
		// of life, and the bound changes then.
		if memo {
			soonest(s.alive.Add(e.cfg.IdleTimeout))
		}
		if e.holdsNothing(p, s, wall, &cc) {
			if cc.done && cc.current && !s.current {
				memo = false // a wrong clock: whether it is depends on the wall time
			}
			// Further behind the watermark than the allowance (it joined
			// or came back that far behind), or never current beside a
			// source that is: its calls are too late to be judged, so it
			// holds nothing back; otherwise one exporter with a slow clock
			// or queue would stop its partition, and the other sources'
			// calls would pile up until back-pressure.
			continue
		}
		if !s.current && e.cfg.MaxClockLag > 0 {
			memo = false // may be found to have a wrong clock later
		}
		s.counted = seq
		m := s.max.Add(-e.cfg.Lateness)
		switch {
		case h == nil:
			wm, h = m, s
		case m.Before(wm):
			wm, h, ahead = m, s, true
		case m.After(wm):
			ahead = true
		}
	}
	if h == nil {
		if !p.gone.alive.IsZero() {
			if q := quietClock(p.gone.max, p.gone.alive, wall); q.After(quiet) {
				quiet = q
			}
		}
		wm = quiet
	}
	if hq != nil && held.Before(wm.Add(-e.cfg.Lateness)) {
		// Behind every other bound by more than the disorder tolerated
		// within time order (a quiet pod whose lag is a second more than
		// the others' holds nothing), so another source is ahead of it.
		p.memo.ok = false
		return held, hq, true
	}
	p.memo = boundMemo{ok: memo && h != nil && wall.Before(until), seq: seq, at: wall, until: until, wm: wm, h: h, ahead: ahead}
	if h == nil && !wm.IsZero() {
		// Every source is quiet: the clock they are taken to go on with
		// is the wall clock less their delay at their last delivery, and
		// the next call may come with a longer one, by the disorder a
		// busy source is allowed (a proxy posts a call after its
		// response, in the segment it seals within the second: without
		// it, a call whose delay was a few milliseconds longer than the
		// previous one's counted as late, about one in two on a quiet
		// server).
		wm = wm.Add(-e.cfg.Lateness)
	}
	return wm, h, ahead
}

// heldClock returns the clock by which source s, quiet, still holds
// partition p back at wall, and whether it does. A source that was
// current and behind the wall clock by a lag of at most MaxClockLag at
// every delivery (the least: a batch delivered late, or a queue delivered
// after the exporter was stuck, says nothing of the clock) is taken to go
// on as far behind the wall clock: a pod whose clock is 3 minutes slow,
// quiet with the rest of its server, comes back 3 minutes behind, and a
// watermark that had moved on with the right pods would leave all its
// calls too late. It holds until
// it has been quiet for MaxClockLag while its partition was not (a pod
// scaled down for good holds its server back by its lag that long), and
// not when that clock is further behind the watermark than the allowed
// lateness (it came back that far behind before it went quiet).
func (e *Engine) heldClock(p *partition, s *source, wall time.Time) (time.Time, bool) {
	if !e.holding(p, s, wall) {
		return time.Time{}, false
	}
	c := wall.Add(-max(s.lag, 0))
	if s.max.After(c) {
		c = s.max
	}
	if !p.wm.IsZero() && c.Before(p.wm.Add(-e.cfg.AllowedLateness)) {
		return time.Time{}, false
	}
	return c, true
}

// holdNow is the wall time against which a quiet source's hold on
// partition p is measured at wall: wall, or, in a quiet spell of the whole
// partition, which does not count, the spell's start.
func (e *Engine) holdNow(p *partition, wall time.Time) time.Time {
	if from := p.alive.Add(e.cfg.IdleTimeout); !wall.Before(from) {
		return from
	}
	return wall
}

// quietClock is the clock of a quiet source whose latest call is dated
// max and which was last known active at alive, at wall time wall: it goes
// on at the pace of the wall clock since alive, but not past the wall
// clock: a clock that ran ahead (clamped to the skew) waits for the wall
// clock instead of keeping the partition ahead for ever.
func quietClock(max, alive, wall time.Time) time.Time {
	q := max.Add(wall.Sub(alive))
	if q.After(wall) {
		q = wall
		if max.After(wall) {
			q = max
		}
	}
	return q
}

// quiet reports whether source s has been quiet for the idle timeout at
// wall, and so holds no partition back (never, without a wall clock).
func (e *Engine) quiet(s *source, wall time.Time) bool {
	return !wall.IsZero() && wall.Sub(s.alive) >= e.cfg.IdleTimeout
}

// holdsNothing reports whether source s, active, holds partition p's
// watermark back no more at wall: it is further behind the watermark than
// the allowed lateness, or its clock looks wrong (wrongClock).
func (e *Engine) holdsNothing(p *partition, s *source, wall time.Time, cc *clockCheck) bool {
	return e.tooFarBehind(p, s) || cc.wrongClock(e, p, s, wall)
}

// clockCheck answers wrongClock for the sources of one partition at one
// wall time, looking for a current source of it once: looked for again for
// each source, it made each recomputation of the watermark quadratic in
// the partition's sources (found from outside: 4,000 posters whose calls
// were dated an hour back took a request of one call from 10 ms to 40 ms
// and more).
type clockCheck struct{ done, current bool }

// tooFarBehind reports whether source s is further behind partition p's
// watermark than the allowed lateness, and so holds it back no more.
func (e *Engine) tooFarBehind(p *partition, s *source) bool {
	return !p.wm.IsZero() && s.max.Before(p.wm.Add(-e.cfg.AllowedLateness))
}

// wrongClock reports whether source s has never been current (every call
// it delivered dated more than MaxClockLag before its arrival) while
// another active source of partition p is current at wall. Such a source
// would otherwise hold p from the start, when p has no watermark yet for
// tooFarBehind to measure against: a pod whose clock is 2 h slow held
// every finding of its server 2 h, for as long as it ran, where the same
// pod joining a minute later has its calls counted too late.
func (cc *clockCheck) wrongClock(e *Engine, p *partition, s *source, wall time.Time) bool {
	if s.current || wall.IsZero() || e.cfg.MaxClockLag <= 0 {
		return false
	}
	if !cc.done {
		// Any current source is another than s, which is not current.
		cc.done, cc.current = true, e.hasCurrent(p, wall)
	}
	return cc.current
}

// hasCurrent reports whether a source of p is current and active at wall,
// its latest call dated within MaxClockLag of it.
func (e *Engine) hasCurrent(p *partition, wall time.Time) bool {
	since := wall.Add(-e.cfg.MaxClockLag)
	for _, o := range p.sources {
		if o.current && !e.quiet(o, wall) && !o.max.Before(since) {
			return true
		}
	}
	return false
}

// SourceName is a source as its sender names it, within a tenant.
type SourceName struct{ Tenant, Name string }

// HoldingBack fills into, cleared first, with the source that each
// partition with calls waiting holds its watermark for, while other
// sources of it are ahead: its active source with the earliest clock.
// The other sources' calls wait for that source's next ones, so the live
// service takes them even when the open calls are at their limit;
// refused, the source would stay active by retrying and hold its
// partition, and every call waiting in it, for as long as it tries.
func (e *Engine) HoldingBack(into map[SourceName]bool) {
	clear(into)
	for _, p := range e.parts {
		if p.buf.Len() == 0 {
			continue
		}
		if h, ahead := e.holder(p, e.wall); h != nil && ahead {
			into[SourceName{Tenant: p.key.Tenant, Name: h.key.name}] = true
		}
	}
}

// holder returns the source partition p's watermark waits for at wall,
// by advance's rule (bound); nil when there is none. ahead reports
// whether another source that holds it is ahead of it.
func (e *Engine) holder(p *partition, wall time.Time) (h *source, ahead bool) {
	_, h, ahead = e.bound(p, wall)
	return h, ahead
}

// release judges the waiting calls up to wm in time order and moves the
// partition's watermark there.
func (e *Engine) release(p *partition, wm time.Time) {
	if !wm.After(p.wm) {
		return
	}
	to := etimeOf(wm)
	for p.buf.Len() > 0 && !p.buf[0].at.t.After(to) {
		en := p.buf.pop()
		if en.at != en.s.at || en.s.processed {
			continue // replaced by an earlier observation
		}
		p.det.advance(en.at.t)
		e.judge(p, en.s, en.at)
	}
	p.wm = wm
	p.det.advance(to)
	p.dedupe.sweep(wm.Add(-2*e.cfg.Lateness - 2*time.Second))
	p.dedupe.sweepUnanswered(wm.Add(-e.cfg.AllowedLateness))
	// A call dated a second before the allowance may still be a second
	// observation of one judged within it.
	p.dedupe.old.forget(to.Add(-e.cfg.AllowedLateness - 2*e.cfg.Lateness - 2*time.Second))
}

// Flush judges every waiting call, as at the end of a finite input.
// Windows still open at the last call's time stay open: their writes
// remain pending and produce nothing.
func (e *Engine) Flush() {
	for _, p := range e.parts {
		p.det.closeDeferred()
		for p.buf.Len() > 0 {
			en := p.buf.pop()
			if en.at != en.s.at || en.s.processed {
				continue
			}
			p.det.advance(en.at.t)
			e.judge(p, en.s, en.at)
			if t := en.at.t.Time(); t.After(p.wm) {
				p.wm = t
			}
		}
		p.det.releaseHeld(p.det.clock, true)
	}
}

// Buffered returns how many calls wait for their partition's watermark.
func (e *Engine) Buffered() int {
	n := 0
	for _, p := range e.parts {
		n += p.buf.Len()
	}
	return n
}

// entryHeap orders waiting calls by position.
type entryHeap []entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) less(i, j int) bool { return h[i].at.before(h[j].at) }

func (h *entryHeap) push(b entry) {
	*h = append(*h, b)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

// pop removes and returns the first call; the heap must not be empty.
func (h *entryHeap) pop() entry {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = entry{}
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(q) && q.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

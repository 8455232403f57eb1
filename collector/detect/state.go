package detect

import (
	"encoding/binary"
	"hash/maphash"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// pos orders the operations of one partition: event time, then a
// tie-break derived from the call's id (so that every delivery order and
// both carriers break ties alike), then the operation's place in its call.
type pos struct {
	t   etime
	ord uint64
	seq int32
}

func (a pos) before(b pos) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	if a.ord != b.ord {
		return a.ord < b.ord
	}
	return a.seq < b.seq
}

// ordOf returns the tie-break of a call: the first 64 bits of its id's hash
// (call ids are "c_" and hex), or arrival order for calls built by hand
// without an id.
func ordOf(id string, arrival uint64) uint64 {
	if len(id) >= 18 && id[:2] == "c_" {
		if v, ok := hex64(id[2:18]); ok {
			return v
		}
	}
	if id != "" {
		return maphash.String(ordSeed, id)
	}
	return arrival
}

var ordSeed = maphash.MakeSeed()

// actor identifies who sent a call: its session ('s'), else its client
// ('c'). Calls with neither share one anonymous actor, the zero value.
type actor struct {
	kind byte
	id   string
}

// actorOf returns the actor of a call.
func actorOf(c *audit.Call) actor {
	if c.Session != "" {
		return actor{'s', c.Session}
	}
	if c.Client != "" {
		return actor{'c', c.Client}
	}
	return actor{}
}

// within reports whether later is at most w after earlier.
func within(earlier, later etime, w time.Duration) bool {
	return later >= earlier && later.Sub(earlier) <= w
}

// event is the context of the call being processed.
type event struct {
	rec   *audit.Record
	call  *audit.Call
	actor actor
	at    pos
	// late is set when operations after this call were processed already:
	// rules then also look forward, at what this call changes for them.
	late bool
	// src is the source that delivered the call; nil when unknown.
	src *source
}

// wop is what the ledger keeps of a write's operation: its fingerprints
// as numbers, revisions and flags, never the operation's strings.
type wop struct {
	intent, binding                     uint64 // 0 when none
	baseRev, rev                        int64
	status                              audit.OpStatus
	hasBaseRev, keyProtected, protected bool
	// first is set by the double-apply rules, not read from the
	// operation (here, the write's padding holds it: a field of its own
	// made writeRec a size class larger): an accepted write not applied
	// twice, more than the correlation window after the first application
	// of its intent before it (or with none), the first application the
	// first rule compares the writes of its window with (storedFirst).
	first bool
}

func wopOf(op *audit.Op) wop {
	return wop{intent: fp(op.Intent), binding: fp(op.Binding), baseRev: op.BaseRev, rev: op.Rev, status: op.Status,
		hasBaseRev: op.HasBaseRev, keyProtected: op.KeyProtected, protected: op.Protected}
}

// fp turns a fingerprint (16 hex digits, canon.Hash) into a number; 0 for
// none. Any other text is hashed.
func fp(s string) uint64 {
	if s == "" {
		return 0
	}
	if len(s) == 16 {
		if v, ok := hex64(s); ok && v != 0 {
			return v
		}
	}
	return maphash.String(ordSeed, s) | 1
}

// hex64 reads 16 hex digits, either case, as strconv.ParseUint(s, 16, 64)
// does, without its generality: every write and key passes here. A table
// gives each byte's value, or bad, and the bits of bad are looked at once
// after the loop: no branch a digit.
func hex64(s string) (uint64, bool) {
	var v uint64
	var bad byte
	for i := 0; i < 16; i++ {
		d := hexDigits[s[i]]
		bad |= d
		v = v<<4 | uint64(d&0xf)
	}
	return v, bad&hexBad == 0
}

// hexBad marks a byte that is no hex digit in hexDigits.
const hexBad = 0x80

// hexDigits holds the value of each hex digit, either case, and hexBad
// for every other byte.
var hexDigits = func() (t [256]byte) {
	for i := range t {
		switch c := byte(i); {
		case '0' <= c && c <= '9':
			t[i] = c - '0'
		case 'a' <= c && c <= 'f':
			t[i] = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			t[i] = c - 'A' + 10
		default:
			t[i] = hexBad
		}
	}
	return t
}()

// writeRec is one write attempt in the ledger, kept compact (112 bytes):
// the ledger holds one for every write of the correlation window. Its
// texts are its own, in one allocation (txt): strings cut from the call
// would keep the call's texts (audit.Record.Lean holds them in one), and
// four of its own would be four allocations, each rounded up. The
// partition's server and tenant are the detector's, and so is its list of
// tool names.
type writeRec struct {
	// txt is the call id, the document, the key and a tool name the
	// detector does not list, each a uvarint length and its bytes, then
	// the writer's actor id (writeTexts).
	txt string
	// at is the write's place: its call's time, tie-break and the
	// operation's place in the call (the provider call index of a run).
	at pos
	op wop
	// src is the source that delivered the write: a write that came late
	// with its source behind keeps its window open until the source has
	// delivered what followed it.
	src *source
	// more is what only uncertain writes, and writes applied twice, have;
	// nil for the others.
	more *uncertainMore
	// index is the write's place in the deadline heap, -1 when not there.
	index int32
	// tool is the tool's place in the detector's list (detector.tool),
	// or unlisted when the name is in txt.
	tool uint16
	// state, reason and action are numbered words (words.go).
	state, reason, action word
	// uncertain is why an uncertain write's outcome was uncertain (a
	// numbered reason), kept once a read settles it (which clears reason):
	// a blind re-send judged after that read, having come late, still
	// names it.
	uncertain word
	// actorKind is the writer's kind (actor), its id in txt.
	actorKind byte
	// unsafe is set once the write is the uncertain first half of an
	// unsafe retry or of a rebased double apply: it is reported once.
	unsafe bool
	// replay: a re-send under its key of an earlier attempt's binding.
	replay bool
	// retried is set once the write is the second half of an unsafe
	// retry; duplicate once it is the second of a duplicate create.
	retried, duplicate bool
	// accepted: an accepted non-idempotent write, a candidate for the
	// double-apply rules (not a replay).
	accepted bool
}

// unlisted marks a write whose tool name is in its texts.
const unlisted = 1<<16 - 1

// setTexts copies the write's texts into one allocation of its own;
// tool is "" when the detector lists the write's tool.
func (w *writeRec) setTexts(callID, doc, key, tool, actorID string) {
	parts := [...]string{callID, doc, key, tool}
	n := len(actorID)
	for _, p := range parts {
		n += len(p) + uvarintLen(uint64(len(p)))
	}
	// A builder sized exactly gives its bytes as the string without a
	// copy: one allocation, not a buffer and then its string.
	var b strings.Builder
	b.Grow(n)
	var l [binary.MaxVarintLen64]byte
	for _, p := range parts {
		b.Write(binary.AppendUvarint(l[:0], uint64(len(p))))
		b.WriteString(p)
	}
	b.WriteString(actorID)
	w.txt = b.String()
}

// text returns the i-th of the write's texts (0 the call id, 1 the
// document, 2 the key, 3 an unlisted tool, 4 the actor id).
func (w *writeRec) text(i int) string {
	s := w.txt
	for j := 0; j < 4; j++ {
		n, k := uvarintOf(s)
		if j == i {
			return s[k : k+int(n)]
		}
		s = s[k+int(n):]
	}
	return s
}

// uvarintLen returns the length of v as binary.AppendUvarint writes it.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// uvarintOf reads a uvarint from the start of s, which setTexts wrote:
// its value and its length.
func uvarintOf(s string) (uint64, int) {
	var v uint64
	for i := 0; ; i++ {
		c := s[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
}

// callID returns the id of the write's call.
func (w *writeRec) callID() string { return w.text(0) }

// doc returns the document written, "" when none.
func (w *writeRec) doc() string { return w.text(1) }

// key returns the idempotency key, "" when none.
func (w *writeRec) key() string { return w.text(2) }

// actorID returns the writer's session or client, "" when anonymous.
func (w *writeRec) actorID() string { return w.text(4) }

// uncertainMore is what the ledger remembers of an uncertain write beyond
// what every write has.
type uncertainMore struct {
	// readAt is where the writer first read the target after the write
	// (or a replay settled it); zero while nothing did.
	readAt pos
	// follows is the earlier attempt this one replays under the same key
	// while both are uncertain: one logical write, one unverified finding.
	follows *writeRec
	// unreported is set when its window closed with no finding of its own,
	// the attempt it follows reported (closeWindow): a call judged late
	// that settles it has no finding of its to withdraw, whatever became
	// of that attempt since.
	unreported bool
	// resends is the uncertain write an unsafe_retry reported this one,
	// itself uncertain, the blind re-send of (emitUnsafe): when the
	// answer of this one's call comes, the pair is judged again
	// (rejudge), whatever order the two answers come in.
	resends *writeRec
	// doubles is the write a double_applied_write reported this one the
	// second application of: the first application (rule 1), or the
	// uncertain write re-sent rebased (rule 2, rebased). A call judged
	// late may change which, or whether (rejudgeDoubles), and the finding
	// made is withdrawn by it.
	doubles *writeRec
	rebased bool
	// alone and aloneReason are the state and reason the write, doubled,
	// would have had were it not: it goes back to them when a call judged
	// late shows it was not applied twice after all.
	alone, aloneReason word
}

// follows returns the attempt w replays while both are uncertain, or nil.
func (w *writeRec) follows() *writeRec {
	if w.more == nil {
		return nil
	}
	return w.more.follows
}

// setFollows records that w replays u while both are uncertain.
func (w *writeRec) setFollows(u *writeRec) {
	if w.more == nil {
		w.more = &uncertainMore{}
	}
	w.more.follows = u
}

// resends returns the write an unsafe_retry reported w, uncertain, the
// blind re-send of; nil when none (or w was not uncertain then).
func (w *writeRec) resends() *writeRec {
	if w.more == nil {
		return nil
	}
	return w.more.resends
}

// setResends records that an unsafe_retry reported w, uncertain, as the
// blind re-send of u (nil: no longer).
func (w *writeRec) setResends(u *writeRec) {
	if w.more == nil {
		if u == nil {
			return
		}
		w.more = &uncertainMore{}
	}
	w.more.resends = u
}

// session returns the session of the write's call, "" when it had none.
func (w *writeRec) session() string {
	if w.actorKind == 's' {
		return w.actorID()
	}
	return ""
}

// who returns the writer.
func (w *writeRec) who() actor { return actor{w.actorKind, w.actorID()} }

// doubled reports whether the write is the second application of an edit.
func (w *writeRec) doubled() bool { return w.state == wDoubleApplied }

// readBefore reports whether the writer read the target after the write
// and before p.
func (w *writeRec) readBefore(p pos) bool {
	return w.more != nil && !w.more.readAt.t.IsZero() && w.more.readAt.before(p)
}

// noteRead records a read (or settling replay) of the write's target by its
// writer at p.
func (w *writeRec) noteRead(p pos) {
	if w.more == nil {
		w.more = &uncertainMore{}
	}
	if w.more.readAt.t.IsZero() || p.before(w.more.readAt) {
		w.more.readAt = p
	}
}

// docState is what is remembered about one document. Most documents
// only have writes that settled: the rest is apart (docMore), allocated
// when needed.
type docState struct {
	// writes are every write attempt on the document, in order; the
	// accepted non-idempotent ones are marked (writeRec.accepted). Most
	// documents of a window see one: it is held in one.
	writes []*writeRec
	one    [1]*writeRec
	more   *docMore
	last   etime
}

type docMore struct {
	// uncertain holds writes whose outcome was unknown, in order, for the
	// correlation window, whether or not they were resolved since.
	uncertain []*writeRec
	// proof holds accepted writes awaiting a read that proves durability.
	proof []*writeRec
	// integrity is when integrity was last reported.
	integrity etime
}

// m returns the document's docMore, made when absent.
func (s *docState) m() *docMore {
	if s.more == nil {
		s.more = &docMore{}
	}
	return s.more
}

// uncertainWrites returns the document's uncertain writes, in order.
func (s *docState) uncertainWrites() []*writeRec {
	if s.more == nil {
		return nil
	}
	return s.more.uncertain
}

// proofWrites returns the document's writes awaiting proof, in order.
func (s *docState) proofWrites() []*writeRec {
	if s.more == nil {
		return nil
	}
	return s.more.proof
}

// readList is the reads of one document kept, in order; the first is held
// in one.
type readList struct {
	l   []readRec
	one [1]readRec
}

// add inserts r at its place.
func (rs *readList) add(r readRec) {
	if rs.l == nil {
		rs.l = rs.one[:0]
	}
	rs.l = insertAt(rs.l, r, readAt)
}

// readRec is one read of a document, kept for the allowed lateness so that
// a late write can see the reads that followed it.
type readRec struct {
	at    pos
	actor uint64 // actorKey
	rev   int64
	flags uint8
}

// Flags of a read: what it said of sync and save states.
const (
	readSynced      = 1 << iota // sync.state synced
	readSaved                   // a save state other than blocked
	readSaveBlocked             // save state blocked
)

func readFlags(sync, saveState string) uint8 {
	var f uint8
	if sync == "synced" {
		f |= readSynced
	}
	switch saveState {
	case "":
	case "blocked":
		f |= readSaveBlocked
	default:
		f |= readSaved
	}
	return f
}

// actorKey is a number for an actor, for the reads and creates kept.
func actorKey(a actor) uint64 {
	if a.id == "" && a.kind == 0 {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(ordSeed)
	h.WriteByte(a.kind)
	h.WriteString(a.id)
	return h.Sum64() | 1
}

// docKey is the number a document is kept under.
func docKey(doc string) uint64 { return maphash.String(docSeed, doc) }

// docSeed hashes documents apart from the other names.
var docSeed = maphash.MakeSeed()

// keyID names an idempotency key within a partition.
type keyID struct{ kind, key string }

// keyHash is the number a key is kept under: its kind's length, its kind
// and the key, so that no two keyIDs hash alike by concatenation.
func keyHash(k keyID) uint64 {
	var h maphash.Hash
	h.SetSeed(docSeed)
	h.WriteByte(byte(len(k.kind)))
	h.WriteByte(byte(len(k.kind) >> 8))
	h.WriteString(k.kind)
	h.WriteString(k.key)
	return h.Sum64()
}

// keyEvent is one use of a key that may bind it to an intent.
type keyEvent struct {
	binding uint64
	// w is the write that used the key; plan the copy plan, when it was
	// one (w is nil then).
	w    *writeRec
	plan *planUse
	// operationID: the key is an operationId, bound by its first use.
	operationID bool
}

// planUse is what a key event of a copy plan remembers of its call.
type planUse struct {
	at                   pos
	callID, session, doc string
	// target is the plan's target: a wasted retry of a blocked plan
	// judged late names its replay's.
	target string
}

// pos returns where the key was used.
func (e *keyEvent) pos() pos {
	if e.w != nil {
		return e.w.at
	}
	return e.plan.at
}

func (e *keyEvent) callID() string {
	if e.w != nil {
		return e.w.callID()
	}
	return e.plan.callID
}

func (e *keyEvent) session() string {
	if e.w != nil {
		return e.w.session()
	}
	return e.plan.session
}

func (e *keyEvent) doc() string {
	if e.w != nil {
		return e.w.doc()
	}
	return e.plan.doc
}

// keyState is what is remembered about one idempotency key; what most
// keys never have is apart (keyMore).
type keyState struct {
	// events are the uses of the key that bind it, in order; the first is
	// held in one.
	events []keyEvent
	one    [1]keyEvent
	more   *keyMore
	// ru is what the reuse rule keeps of a key with more than one use or
	// a refusal (judgeReuse); nil before.
	ru   *reuseState
	last etime
	// dropped is the time of the last use the sweep dropped (the binder
	// it kept comes first in events): binderBefore forgets a key unused
	// for the correlation window since. Zero when none.
	dropped etime
}

type keyMore struct {
	// uncertain holds the key-protected attempts whose outcome was unknown.
	uncertain []*writeRec
	lease     *lease
	blocked   *blockedPlan
	// leases holds the key's copy applies and receipts in time order
	// (renewLease), leasesReported the receipts (call ids) whose lease a
	// premature_retry was reported for: a late one has them judged again
	// (rejudgeLeases).
	leases         []leaseEvent
	leasesReported []string
	// base is the lease in effect after the applies and receipts folded
	// out of leases, which no call judged from now on comes before
	// (foldLeases); nil when none.
	base *lease
	// appliesReported holds the applies (call ids) reported re-sent too
	// early: rejudgeLeases reports none twice.
	appliesReported []string
	// premature holds the premature_retry findings made for the uses in
	// leases (and the base's receipt): rejudgeLeases withdraws those that
	// judging in order does not make.
	premature []prematureMade
}

// reuseMade is a request_id_reuse made with the binder it names: the
// finding as made, and the place and binding of the use (or refusal) it
// reports.
type reuseMade struct {
	f       audit.Finding
	at      pos
	binding uint64
}

// m returns the key's keyMore, made when absent.
func (s *keyState) m() *keyMore {
	if s.more == nil {
		s.more = &keyMore{}
	}
	return s.more
}

// uncertainWrites returns the key's uncertain attempts, in order.
func (s *keyState) uncertainWrites() []*writeRec {
	if s.more == nil {
		return nil
	}
	return s.more.uncertain
}

// lease returns the key's copy lease, nil when none.
func (s *keyState) lease() *lease {
	if s.more == nil {
		return nil
	}
	return s.more.lease
}

// blocked returns the key's blocked copy plan, nil when none.
func (s *keyState) blocked() *blockedPlan {
	if s.more == nil {
		return nil
	}
	return s.more.blocked
}

// leaseEvent is an apply or a receipt of a copy as the premature-retry
// rule reads it: where, by which call, its retryAfter (zero when none) and
// whether it ends the lease (a state other than applying).
type leaseEvent struct {
	at                      pos
	callID, session, target string
	apply, clears           bool
	until                   etime
}

type lease struct {
	until    etime
	callID   string
	callTime etime
	reported bool
}

type blockedPlan struct {
	callID string
	// at is the plan's place: one judged late before it takes its place.
	at       pos
	time     etime
	binding  uint64
	action   audit.RetryAction
	reported bool
	// with is the replay reported with the plan (wastedPlan): a plan or a
	// replay judged late before it may take its place, and the finding
	// made with it is withdrawn then.
	with planReplay
}

// planReplay is a copy plan's replay as its wasted_retry names it.
type planReplay struct {
	at                      pos
	callID, target, session string
}

// prematureMade is a premature_retry made: the lease's receipt, the apply
// re-sent within it, and what the finding names, so that a call judged
// late that changes the pair in order withdraws it (rejudgeLeases).
type prematureMade struct {
	lease                  lease
	apply, target, session string
	at                     etime
}

// createKey names the creates of one actor (actorKey) and identity.
type createKey struct {
	actor, identity uint64
}

// createRec remembers a create for duplicate and blind re-create checks.
// One is kept in each of the lists it is indexed by (createKeys).
type createRec struct {
	w       *writeRec
	created bool
	// keys are the lists it is kept in: judging it again (createsAfter)
	// looks where judging it in order looked.
	keys []createKey
	// first is the create it was reported a duplicate of, nil when none:
	// a create judged late before it may take its place.
	first *writeRec
}

// failedReq remembers a request refused with fix_input or reauthorize.
type failedReq struct {
	callID string
	at     pos
	code   string
	action audit.RetryAction
	// with is the retry reported with this refusal as its first, nil when
	// none: a refusal judged late may take its place (checkWasted).
	with *failedReq
	// run is the first of the run of identical refusals this one is in
	// (itself for a first): kept by its retries when the sweep forgets
	// it (checkWasted).
	run *failedReq
	// What the finding names: the request's document, key, session, tool.
	doc, key, session, tool string
}

// insertAt inserts x into s, which is in order, at its place by at.
func insertAt[T any](s []T, x T, at func(T) pos) []T {
	p := at(x)
	i := len(s)
	for i > 0 && p.before(at(s[i-1])) {
		i--
	}
	s = append(s, x)
	if i < len(s)-1 {
		copy(s[i+1:], s[i:])
		s[i] = x
	}
	return s
}

func writeAt(w *writeRec) pos   { return w.at }
func readAt(r readRec) pos      { return r.at }
func createAt(r *createRec) pos { return r.w.at }
func failedAt(f *failedReq) pos { return f.at }

package capgen

import (
	"math/rand"
	"slices"
	"strconv"
	"time"
)

// scenario is one session's script.
type scenario struct {
	name   string
	server string
	run    func(s *session)
}

// session generates the calls of one session into its stream.
type session struct {
	st     *Stream
	rng    *rand.Rand
	server string
	id     string
	t      time.Time
	rpcID  int
	// buf is where a payload is written before it is copied out at its
	// size: the calls a live load holds are its memory.
	buf []byte
}

func (st *Stream) newSession(server, id string, start time.Time) *session {
	return &session{st: st, rng: st.rng, server: server, id: id, t: start, buf: st.buf[:0]}
}

// raw is a JSON value. A string, so that it goes into a span's attribute
// without a copy.
type raw string

var (
	rawEmpty   = raw(`{}`)
	projectsOK = raw(`{"isError":false,"structuredContent":{"projects":[]}}`)
	guideArgs  = raw(`{"question":"how do I edit a document?"}`)
	guideOK    = raw(`{"isError":false,"structuredContent":{"answer":"..."}}`)
)

// call queues one answered exchange and moves the session's clock on.
func (s *session) call(tool string, args, result raw) { s.queue(tool, args, result, "") }

// timeout queues one exchange that got no answer in time.
func (s *session) timeout(tool string, args raw) { s.queue(tool, args, "", "timeout") }

func (s *session) queue(tool string, args, result raw, transportErr string) {
	s.rpcID++
	c := &Call{Time: s.t, Server: s.server, Session: s.id, Tenant: s.st.cfg.Tenant, Tool: tool, RPCID: s.rpcID,
		Duration: time.Duration(20+s.rng.Intn(800)) * time.Millisecond, Arguments: string(args), Result: string(result), TransportError: transportErr}
	if transportErr != "" {
		c.Duration = 30 * time.Second
	}
	s.st.seq++
	c.seq = s.st.seq
	if c.Time.Before(s.st.skipUntil) {
		s.st.skipped++
	} else {
		s.st.open.push(c)
	}
	s.wait(2 * time.Second)
}

// expect records a finding the capture must produce.
func (s *session) expect(kind, doc, key string) {
	if s.st.OnExpected != nil {
		s.st.OnExpected(Expected{Kind: kind, Server: s.server, Document: doc, Key: key})
	}
}

// wait advances the session's clock by d plus up to half of d.
func (s *session) wait(d time.Duration) {
	s.t = s.t.Add(d + time.Duration(s.rng.Int63n(int64(d)/2+1)))
}

// hex returns n random hex digits.
func (s *session) hex(n int) string {
	b := make([]byte, n)
	var r uint64
	for i := range b {
		if i%15 == 0 {
			r = uint64(s.rng.Int63())
		}
		b[i] = hexDigits[r&0xf]
		r >>= 4
	}
	return string(b)
}

// begin starts a payload in the session's buffer; end returns a copy of
// it. The values of a payload are made before it begins.
func (s *session) begin() []byte { return s.buf[:0] }

func (s *session) end(b []byte) raw {
	s.buf = b[:0]
	s.st.buf = s.buf
	return raw(b)
}

// kv is one member of a JSON object: its value a string, an int, a bool,
// nil, a raw value or a list of raw values.
type kv struct {
	k string
	v any
}

// obj writes a JSON object of members given in key order.
func (s *session) obj(members ...kv) raw {
	b := append(s.begin(), '{')
	for _, m := range members {
		b = appendKey(b, m.k)
		switch v := m.v.(type) {
		case string:
			b = appendStr(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case nil:
			b = append(b, "null"...)
		case raw:
			b = append(b, v...)
		case []raw:
			b = append(b, '[')
			for i, e := range v {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, e...)
			}
			b = append(b, ']')
		default:
			panic("capgen: unsupported JSON value")
		}
	}
	return s.end(append(b, '}'))
}

var normals = []scenario{
	{"thegram-normal-edit", "thegram", thegramNormal},
	{"thegram-normal-edit", "thegram", thegramNormal},
	{"thegram-cloud-sync-confirmed", "thegram", thegramSyncConfirmed},
	{"oddlynew-normal-edit", "oddlynew", oddlynewNormal},
	{"oddlynew-normal-edit", "oddlynew", oddlynewNormal},
	{"oddlynew-create-then-edit", "oddlynew", oddlynewCreateEdit},
}

var anomalies = []scenario{
	{"thegram-commit-unknown-replayed", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_patch", s.patch(args), s.toolErr("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: fsync: input/output error"))
		s.wait(20 * time.Second)
		s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, true, "synced"))
	}},
	{"thegram-commit-unknown-abandoned", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev, "synced"))
		s.call("gram_patch", s.patch(s.patchArgs(p, rev, s.reqID())), s.toolErr("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: disk full"))
		s.call("gram_read", s.pathArgs(s.doc()), s.readOK("other", 3, "synced"))
		s.expect("unverified_write", p, "")
	}},
	{"thegram-commit-unknown-then-read", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		s.call("gram_patch", s.patch(s.patchArgs(p, rev, s.reqID())), s.toolErr("COMMIT_UNKNOWN", "Marker observed but durability not confirmed: timeout"))
		s.wait(10 * time.Second)
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev+1, "synced"))
	}},
	{"thegram-timeout-reread-double-apply", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev, "synced"))
		s.timeout("gram_patch", s.patch(args))
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev+1, "synced"))
		again := args.rebase(rev+1, s.reqID())
		s.call("gram_patch", s.patch(again), s.patchOK(p, rev+2, again.reqID, false, "synced"))
		s.expect("double_applied_write", p, "")
	}},
	{"thegram-both-succeeded-double-apply", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, false, "synced"))
		s.wait(3 * time.Minute)
		again := args.rebase(rev+1, s.reqID())
		s.call("gram_patch", s.patch(again), s.patchOK(p, rev+2, again.reqID, false, "synced"))
		s.expect("double_applied_write", p, "")
	}},
	{"thegram-blind-new-id-cas-saved", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.timeout("gram_patch", s.patch(args))
		s.call("gram_patch", s.patch(args.rebase(rev, s.reqID())), s.toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev+1, "synced"))
		s.expect("unsafe_retry", p, "")
	}},
	{"thegram-timeout-replayed", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.timeout("gram_patch", s.patch(args))
		s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, true, "synced"))
	}},
	{"thegram-sync-pending-never", "thegram", func(s *session) {
		p, rev := "gdrive-shared/"+s.hex(8)+".gram", s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, false, "pending"))
		s.expect("unverified_write", p, "")
	}},
	{"thegram-request-reuse", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_patch", s.patch(args), s.toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev+1, "synced"))
		changed := args.rebase(rev+1, args.reqID)
		changed.ops = append(changed.ops, s.op())
		s.call("gram_patch", s.patch(changed), s.toolErr("E_REQUEST_REUSE", "request_id belongs to another intent"))
		s.expect("request_id_reuse", p, args.reqID)
	}},
	{"thegram-argument-wasted", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		args.mode = "fast"
		s.call("gram_patch", s.patch(args), s.toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.wait(5 * time.Second)
		s.call("gram_patch", s.patch(args), s.toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.expect("wasted_retry", p, "")
	}},
	{"thegram-integrity", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		s.call("gram_patch", s.patch(s.patchArgs(p, rev, s.reqID())), s.toolErr("E_INTEGRITY", "History sequence audit failed at r"+strconv.Itoa(rev)))
		s.expect("integrity_failure", p, "")
	}},
	{"thegram-same-ops-other-documents", "thegram", func(s *session) {
		p, q, rev := s.doc(), s.doc(), s.rev()
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, false, "synced"))
		other := args.rebase(rev, s.reqID())
		other.path = q
		s.call("gram_patch", s.patch(other), s.patchOK(q, rev+1, other.reqID, false, "synced"))
	}},
	{"oddlynew-in-flight-never", "oddlynew", func(s *session) {
		d := s.docID()
		s.call("run", s.code(editJS(d, s.wb(), s.text())), s.runFail("Execution timed out", []raw{s.ledger(edit, "in_flight_unknown")}, s.outcome(1, edit, "write", "in_flight_unknown", "")))
		s.expect("unverified_write", d, "")
	}},
	{"oddlynew-in-flight-blind", "oddlynew", func(s *session) {
		d, wb := s.docID(), s.wb()
		s.call("run", s.code(editJS(d, wb, s.text())), s.runFail("Execution timed out", []raw{s.ledger(edit, "in_flight_unknown")}, s.outcome(1, edit, "write", "in_flight_unknown", "")))
		s.call("run", s.code(editJS(d, wb, s.text())), s.runFail("stale_live_revision", []raw{s.ledger(edit, "failed_but_handled")}, s.outcome(1, edit, "write", "failed_but_handled", "")))
		s.call("run", s.code(getJS(d)), s.runOK(s.obj(kv{"documentId", d}, kv{"revision", 9}, kv{"writeBasis", s.wb()}), s.ledger(get, "succeeded")))
		s.expect("unsafe_retry", d, "")
	}},
	{"oddlynew-in-flight-then-read", "oddlynew", func(s *session) {
		d, wb, text := s.docID(), s.wb(), s.text()
		s.call("run", s.code(editJS(d, wb, text)), s.runFail("Execution timed out", []raw{s.ledger(edit, "in_flight_unknown")}, s.outcome(1, edit, "write", "in_flight_unknown", "")))
		s.call("run", s.code(getJS(d)), s.runOK(s.obj(kv{"documentId", d}, kv{"revision", 9}, kv{"writeBasis", s.wb()}), s.ledger(get, "succeeded")))
		s.call("run", s.code(editJS(d, s.wb(), s.text())), s.runOK(s.edited(d, 10), s.ledger(edit, "succeeded")))
	}},
	{"oddlynew-edit-double-apply", "oddlynew", func(s *session) {
		d, text := s.docID(), s.text()
		js := s.code(readEditJS(d, text))
		omitted := s.obj(kv{"access", "read"}, kv{"omitted", true}, kv{"outcome", "succeeded"}, kv{"seq", 1}, kv{"sizeBytes", 48211}, kv{"tool", get})
		s.call("run", js, s.runFail("Execution timed out", []raw{s.ledger(get, "succeeded"), s.ledger(edit, "succeeded")},
			s.outcome(2, edit, "write", "succeeded", s.edited(d, 14)), omitted))
		s.call("run", js, s.runOK(s.edited(d, 15), s.ledger(get, "succeeded"), s.ledger(edit, "succeeded")))
		s.expect("double_applied_write", d, "")
	}},
	{"oddlynew-duplicate-create", "oddlynew", func(s *session) {
		title := "Incident review " + s.hex(4)
		d1, d2 := s.docID(), s.docID()
		s.call("run", s.code(createJS(s.uuid7(), title)+"; await sleep(40000)"), s.runFail("Execution timed out", []raw{s.ledger(create, "succeeded")},
			s.outcome(1, create, "write", "succeeded", s.created(d1, "created", title))))
		s.call("run", s.code(createJS(s.uuid7(), title)), s.runOK(s.created(d2, "created", title), s.ledger(create, "succeeded")))
		s.expect("duplicate_create", d2, "")
	}},
	{"oddlynew-create-replayed", "oddlynew", func(s *session) {
		title, cid := "Weekly report "+s.hex(4), s.uuid7()
		s.call("run", s.code(createJS(cid, title)), s.runFail("Execution timed out", []raw{s.ledger(create, "in_flight_unknown")}, s.outcome(1, create, "write", "in_flight_unknown", "")))
		s.call("run", s.code(createJS(cid, title)), s.runOK(s.created(s.docID(), "alreadyBootstrapped", title), s.ledger(create, "succeeded")))
	}},
	{"oddlynew-creation-reuse", "oddlynew", func(s *session) {
		cid := s.uuid7()
		s.call("run", s.code(createJS(cid, "Roadmap "+s.hex(4))), s.runOK(s.created(s.docID(), "created", "Roadmap"), s.ledger(create, "succeeded")))
		s.call("run", s.code(createJS(cid, "Budget "+s.hex(4))), s.runFail("Existing document creation identity has incompatible input. Use a new UUIDv7 creationId for a new document.",
			[]raw{s.obj(kv{"count", 0}, kv{"outcome", "failed_but_handled"}, kv{"tool", create})}, s.outcome(1, create, "write", "failed_but_handled", "")))
		s.expect("request_id_reuse", "", cid)
	}},
	{"oddlynew-copy-blocked-replay", "oddlynew", func(s *session) {
		cid, src := s.uuid7(), s.docID()
		js := s.code(`async () => await organizations.planDocumentCopy({ copyId: "` + cid + `", sourceDocumentId: "` + src + `", destinationOrganizationId: "org_` + s.hex(6) + `" })`)
		blocker := s.obj(kv{"code", "source_archived"}, kv{"message", "The source document is archived"}, kv{"resolution", "Restore the source document"})
		blocked := s.runOK(s.obj(kv{"blockers", []raw{blocker}}, kv{"copyId", cid}, kv{"failure", nil}, kv{"nextAction", "create_new_plan"}, kv{"state", "blocked"}), s.ledger(plan, "succeeded"))
		s.call("run", js, blocked)
		s.call("run", js, blocked)
		s.expect("wasted_retry", "", cid)
	}},
	{"oddlynew-copy-premature", "oddlynew", func(s *session) {
		opID := "op_" + s.hex(12)
		js := s.code(`async () => await organizations.applyDocumentCopy({ operationId: "` + opID + `", planToken: "pt_` + s.hex(16) + `" })`)
		lease := s.t.Add(time.Minute).Format(time.RFC3339Nano)
		applying := s.runOK(s.obj(kv{"failure", nil}, kv{"nextAction", "wait_then_retry_apply"}, kv{"operationId", opID}, kv{"retryAfter", lease}, kv{"state", "applying"}), s.ledger(apply, "succeeded"))
		s.call("run", js, applying)
		s.call("run", js, applying)
		s.t = s.t.Add(90 * time.Second)
		s.call("run", js, s.runOK(s.obj(kv{"destinationDocumentId", s.docID()}, kv{"failure", nil}, kv{"nextAction", "done"}, kv{"operationId", opID}, kv{"retryAfter", nil}, kv{"state", "completed"}), s.ledger(apply, "succeeded")))
		s.expect("premature_retry", "", opID)
	}},
	{"oddlynew-journal-corrupt", "oddlynew", func(s *session) {
		d := s.docID()
		s.call("run", s.code(getJS(d)), s.runOK(s.obj(kv{"documentId", d}, kv{"journalStatus", "journal_corrupt"}, kv{"writeBasis", s.wb()}), s.ledger(get, "succeeded")))
		s.expect("integrity_failure", d, "")
	}},
	{"oddlynew-archive-resent", "oddlynew", func(s *session) {
		d := s.docID()
		js := s.code(`async () => await documents.archiveDocument({ documentId: "` + d + `" })`)
		s.call("run", js, s.runFail("Execution timed out", []raw{s.ledger(archive, "in_flight_unknown")}, s.outcome(1, archive, "write", "in_flight_unknown", "")))
		s.call("run", js, s.runOK(s.obj(kv{"archived", true}, kv{"documentId", d}), s.ledger(archive, "succeeded")))
	}},
}

func thegramNormal(s *session) {
	p, rev := s.doc(), s.rev()
	s.call("gram_projects", rawEmpty, projectsOK)
	for i := 0; i < 1+s.rng.Intn(3); i++ {
		s.call("gram_read", s.pathArgs(p), s.readOK(p, rev, "synced"))
		s.wait(5 * time.Second)
		args := s.patchArgs(p, rev, s.reqID())
		s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, false, "synced"))
		rev++
	}
}

func thegramSyncConfirmed(s *session) {
	p, rev := "gdrive-shared/"+s.hex(8)+".gram", s.rev()
	args := s.patchArgs(p, rev, s.reqID())
	s.call("gram_patch", s.patch(args), s.patchOK(p, rev+1, args.reqID, false, "pending"))
	s.wait(30 * time.Second)
	s.call("gram_read", s.pathArgs(p), s.readOK(p, rev+1, "synced"))
}

func oddlynewNormal(s *session) {
	d := s.docID()
	if s.rng.Intn(3) == 0 {
		s.call("guide", guideArgs, guideOK)
	}
	for i := 0; i < 1+s.rng.Intn(3); i++ {
		result := s.obj(kv{"documentId", d}, kv{"pendingProjections", []raw{raw(`"search_projection"`)}}, kv{"revision", 10 + i}, kv{"saveState", "pending"}, kv{"writeConfirmed", true})
		s.call("run", s.code(readEditJS(d, s.text())), s.runOK(result, s.ledger(get, "succeeded"), s.ledger(edit, "succeeded")))
		s.wait(10 * time.Second)
	}
}

func oddlynewCreateEdit(s *session) {
	title := "Notes " + s.hex(6)
	d := s.docID()
	s.call("run", s.code(createJS(s.uuid7(), title)), s.runOK(s.created(d, "created", title), s.ledger(create, "succeeded")))
	s.call("run", s.code(readEditJS(d, s.text())), s.runOK(s.edited(d, 2), s.ledger(get, "succeeded"), s.ledger(edit, "succeeded")))
}

// Thegram payloads.

var (
	gramDirs  = []string{"team", "eng", "ops", "research"}
	gramKinds = []string{"notes", "spec", "log", "faq", "runbook"}
	gramOps   = []string{"append_block", "insert_after", "replace_section", "set_field"}
)

func (s *session) doc() string {
	return gramDirs[s.rng.Intn(len(gramDirs))] + "/" + gramKinds[s.rng.Intn(len(gramKinds))] + "-" + s.hex(6) + ".gram"
}

func (s *session) rev() int      { return 1 + s.rng.Intn(40) }
func (s *session) reqID() string { return "req-" + s.hex(12) }
func (s *session) text() string  { return "note " + s.hex(6) }

// gramOp is one operation of a gram_patch.
type gramOp struct{ op, target, text string }

func (s *session) op() gramOp {
	op := gramOps[s.rng.Intn(len(gramOps))]
	target := "h" + strconv.Itoa(s.rng.Intn(10)) + "-" + strconv.Itoa(s.rng.Intn(30))
	return gramOp{op, target, s.text()}
}

// patchReq is the arguments of a gram_patch.
type patchReq struct {
	path  string
	base  int
	reqID string
	ops   []gramOp
	// mode is an argument the server does not know, when set.
	mode string
}

func (s *session) patchArgs(path string, base int, reqID string) patchReq {
	p := patchReq{path: path, base: base, reqID: reqID}
	for i := 0; i < 1+s.rng.Intn(3); i++ {
		p.ops = append(p.ops, s.op())
	}
	return p
}

// rebase copies a patch onto another base under another request id.
func (p patchReq) rebase(base int, reqID string) patchReq {
	q := p
	q.base, q.reqID, q.ops = base, reqID, slices.Clone(p.ops)
	return q
}

func (s *session) patch(p patchReq) raw {
	b := append(s.begin(), '{')
	b = appendKeyInt(b, "base_revision", p.base)
	b = appendHash(appendKey(b, "expected_hash"), p.path, p.base)
	if p.mode != "" {
		b = appendKeyStr(b, "mode", p.mode)
	}
	b = append(appendKey(b, "operations"), '[')
	for i, o := range p.ops {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendKeyStr(b, "op", o.op)
		b = appendKeyStr(b, "target", o.target)
		b = appendKeyStr(b, "text", o.text)
		b = append(b, '}')
	}
	b = append(b, ']')
	b = appendKeyStr(b, "path", p.path)
	b = appendKeyStr(b, "request_id", p.reqID)
	return s.end(append(b, '}'))
}

func (s *session) pathArgs(path string) raw {
	return s.end(append(appendKeyStr(append(s.begin(), '{'), "path", path), '}'))
}

// appendHash appends the content hash of a document at a revision, as a
// JSON string.
func appendHash(b []byte, path string, rev int) []byte {
	h := uint32(2166136261)
	mix := func(c byte) { h = (h ^ uint32(c)) * 16777619 }
	for i := 0; i < len(path); i++ {
		mix(path[i])
	}
	mix('@')
	var digits [20]byte
	for _, c := range strconv.AppendInt(digits[:0], int64(rev), 10) {
		mix(c)
	}
	b = append(b, '"')
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[h>>shift&0xf])
	}
	r := strconv.FormatInt(int64(rev), 16)
	for i := len(r); i < 4; i++ {
		b = append(b, '0')
	}
	b = append(b, r...)
	return append(b, '"')
}

func (s *session) patchOK(path string, rev int, reqID string, replayed bool, sync string) raw {
	b := append(s.begin(), `{"content":[{"text":`...)
	b = appendStr(b, path+" at r"+strconv.Itoa(rev))
	b = append(b, `,"type":"text"}],"isError":false,"structuredContent":{`...)
	b = appendHash(appendKey(b, "hash"), path, rev)
	b = appendKeyStr(b, "path", path)
	b = appendKeyBool(b, "replayed", replayed)
	b = appendKeyStr(b, "request_id", reqID)
	b = appendKeyInt(b, "rev", rev)
	b = append(appendKey(b, "sync"), '{')
	b = appendKeyStr(b, "state", sync)
	return s.end(append(b, "}}}"...))
}

func (s *session) readOK(path string, rev int, sync string) raw {
	b := append(s.begin(), `{"isError":false,"structuredContent":{`...)
	b = appendHash(appendKey(b, "hash"), path, rev)
	b = appendKeyStr(b, "path", path)
	b = appendKeyInt(b, "rev", rev)
	b = append(appendKey(b, "sync"), '{')
	b = appendKeyStr(b, "state", sync)
	b = append(b, '}')
	b = appendKeyStr(b, "text", "...")
	return s.end(append(b, "}}"...))
}

func (s *session) toolErr(code, msg string) raw {
	b := append(s.begin(), `{"content":[{"text":`...)
	b = appendStr(b, code+": "+msg)
	b = append(b, `,"type":"text"}],"isError":true,"structuredContent":{"error":{`...)
	b = appendKeyStr(b, "code", code)
	b = appendKeyStr(b, "message", msg)
	return s.end(append(b, "}}}"...))
}

// Oddlynew payloads.

const (
	edit    = "documents.editDocument"
	get     = "documents.getDocument"
	create  = "documents.createDocument"
	archive = "documents.archiveDocument"
	plan    = "organizations.planDocumentCopy"
	apply   = "organizations.applyDocumentCopy"
)

func (s *session) docID() string { return "doc_" + s.hex(16) }
func (s *session) wb() string    { return "wb_" + s.hex(20) }
func (s *session) uuid7() string {
	h := s.hex(28)
	return "01a19b7c-" + h[0:4] + "-7" + h[4:7] + "-" + h[7:11] + "-" + h[11:23]
}

// code is the arguments of a run: its JavaScript.
func (s *session) code(js string) raw {
	return s.end(append(appendKeyStr(append(s.begin(), '{'), "code", js), '}'))
}

// The scripts quote identifiers that need no escaping.

func editJS(doc, wb, text string) string {
	return `async () => await documents.editDocument({ documentId: "` + doc + `", writeBasis: "` + wb + `", edits: [{ op: "replaceBlock", block: "b7", text: "` + text + `" }] })`
}

func readEditJS(doc, text string) string {
	return "async () => {\n  const d = await documents.getDocument({ documentId: \"" + doc + "\" });\n  return await documents.editDocument({ documentId: \"" + doc +
		"\", writeBasis: d.writeBasis,\n    edits: [{ op: \"appendParagraph\", text: \"" + text + "\" }] });\n}"
}

func getJS(doc string) string {
	return `async () => await documents.getDocument({ documentId: "` + doc + `" })`
}

func createJS(cid, title string) string {
	return `async () => await documents.createDocument({ creationId: "` + cid + `", title: "` + title + `", type: "note" })`
}

func (s *session) edited(doc string, rev int) raw {
	return s.obj(kv{"documentId", doc}, kv{"revision", rev}, kv{"writeConfirmed", true})
}

func (s *session) created(doc, action, title string) raw {
	return s.obj(kv{"action", action}, kv{"documentId", doc}, kv{"title", title}, kv{"type", "note"})
}

func (s *session) ledger(tool, outcome string) raw {
	return s.obj(kv{"count", 1}, kv{"outcome", outcome}, kv{"tool", tool})
}

func (s *session) outcome(seq int, tool, access, out string, value raw) raw {
	if value != "" {
		return s.obj(kv{"access", access}, kv{"outcome", out}, kv{"seq", seq}, kv{"tool", tool}, kv{"value", value})
	}
	return s.obj(kv{"access", access}, kv{"outcome", out}, kv{"seq", seq}, kv{"tool", tool})
}

func (s *session) runOK(result raw, calls ...raw) raw {
	sc := s.obj(kv{"calls", calls}, kv{"logs", raw(`[]`)}, kv{"result", result})
	return s.obj(kv{"isError", false}, kv{"structuredContent", sc})
}

func (s *session) runFail(msg string, calls []raw, outcomes ...raw) raw {
	var sc raw
	if len(outcomes) > 0 {
		sc = s.obj(kv{"calls", calls}, kv{"error", msg}, kv{"logs", raw(`[]`)}, kv{"outcomes", outcomes})
	} else {
		sc = s.obj(kv{"calls", calls}, kv{"error", msg}, kv{"logs", raw(`[]`)})
	}
	content := s.obj(kv{"text", msg}, kv{"type", "text"})
	return s.obj(kv{"content", []raw{content}}, kv{"isError", true}, kv{"structuredContent", sc})
}

// badLines are records the collector must reject, each with the span that
// stands for it in OTLP.
var badLines = []struct {
	text string
}{
	{`{"time":"not a time","server":"thegram","request":{}}`},
	{`{"server":"thegram","request":{"params":{"name":"gram_read"}}}`},
	{`this is not json`},
	{`{"time":"2026-11-02T09:00:00Z","server":"oddlynew"}`},
}

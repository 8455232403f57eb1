package capgen

import (
	"fmt"
	"time"
)

// scenario is one session's script.
type scenario struct {
	name   string
	server string
	run    func(s *session)
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
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, toolErr("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: fsync: input/output error"))
		s.wait(20 * time.Second)
		s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), true, "synced"))
	}},
	{"thegram-commit-unknown-abandoned", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev, "synced"))
		s.call("gram_patch", patchArgs(s, p, rev, s.reqID()), toolErr("COMMIT_UNKNOWN", "Replacement published but durability is uncertain: disk full"))
		s.call("gram_read", map[string]any{"path": s.doc()}, readOK("other", 3, "synced"))
		s.expect("unverified_write", p, "")
	}},
	{"thegram-commit-unknown-then-read", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		s.call("gram_patch", patchArgs(s, p, rev, s.reqID()), toolErr("COMMIT_UNKNOWN", "Marker observed but durability not confirmed: timeout"))
		s.wait(10 * time.Second)
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev+1, "synced"))
	}},
	{"thegram-timeout-reread-double-apply", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev, "synced"))
		s.call("gram_patch", args, "timeout")
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev+1, "synced"))
		again := rebase(args, rev+1, s.reqID())
		s.call("gram_patch", again, patchOK(p, rev+2, again["request_id"].(string), false, "synced"))
		s.expect("double_applied_write", p, "")
	}},
	{"thegram-both-succeeded-double-apply", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), false, "synced"))
		s.wait(3 * time.Minute)
		again := rebase(args, rev+1, s.reqID())
		s.call("gram_patch", again, patchOK(p, rev+2, again["request_id"].(string), false, "synced"))
		s.expect("double_applied_write", p, "")
	}},
	{"thegram-blind-new-id-cas-saved", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, "timeout")
		s.call("gram_patch", rebase(args, rev, s.reqID()), toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev+1, "synced"))
		s.expect("unsafe_retry", p, "")
	}},
	{"thegram-timeout-replayed", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, "timeout")
		s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), true, "synced"))
	}},
	{"thegram-sync-pending-never", "thegram", func(s *session) {
		p, rev := "gdrive-shared/"+s.g.hex(8)+".gram", s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), false, "pending"))
		s.expect("unverified_write", p, "")
	}},
	{"thegram-request-reuse", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, toolErr("STALE_REVISION", "Accepted revision or hash changed"))
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev+1, "synced"))
		changed := rebase(args, rev+1, args["request_id"].(string))
		changed["operations"] = append(changed["operations"].([]any), op(s))
		s.call("gram_patch", changed, toolErr("E_REQUEST_REUSE", "request_id belongs to another intent"))
		s.expect("request_id_reuse", p, args["request_id"].(string))
	}},
	{"thegram-argument-wasted", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		args["mode"] = "fast"
		s.call("gram_patch", args, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.wait(5 * time.Second)
		s.call("gram_patch", args, toolErr("E_ARGUMENT", "Unknown argument mode"))
		s.expect("wasted_retry", p, "")
	}},
	{"thegram-integrity", "thegram", func(s *session) {
		p, rev := s.doc(), s.rev()
		s.call("gram_patch", patchArgs(s, p, rev, s.reqID()), toolErr("E_INTEGRITY", fmt.Sprintf("History sequence audit failed at r%d", rev)))
		s.expect("integrity_failure", p, "")
	}},
	{"thegram-same-ops-other-documents", "thegram", func(s *session) {
		p, q, rev := s.doc(), s.doc(), s.rev()
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), false, "synced"))
		other := rebase(args, rev, s.reqID())
		other["path"] = q
		s.call("gram_patch", other, patchOK(q, rev+1, other["request_id"].(string), false, "synced"))
	}},
	{"oddlynew-in-flight-never", "oddlynew", func(s *session) {
		d := s.docID()
		s.call("run", code(editJS(d, s.wb(), s.text())), runFail("Execution timed out", []any{ledger(edit, "in_flight_unknown")}, outcome(1, edit, "write", "in_flight_unknown", nil)))
		s.expect("unverified_write", d, "")
	}},
	{"oddlynew-in-flight-blind", "oddlynew", func(s *session) {
		d, wb := s.docID(), s.wb()
		s.call("run", code(editJS(d, wb, s.text())), runFail("Execution timed out", []any{ledger(edit, "in_flight_unknown")}, outcome(1, edit, "write", "in_flight_unknown", nil)))
		s.call("run", code(editJS(d, wb, s.text())), runFail("stale_live_revision", []any{ledger(edit, "failed_but_handled")}, outcome(1, edit, "write", "failed_but_handled", nil)))
		s.call("run", code(getJS(d)), runOK(map[string]any{"documentId": d, "writeBasis": s.wb(), "revision": 9}, ledger(get, "succeeded")))
		s.expect("unsafe_retry", d, "")
	}},
	{"oddlynew-in-flight-then-read", "oddlynew", func(s *session) {
		d, wb, text := s.docID(), s.wb(), s.text()
		s.call("run", code(editJS(d, wb, text)), runFail("Execution timed out", []any{ledger(edit, "in_flight_unknown")}, outcome(1, edit, "write", "in_flight_unknown", nil)))
		s.call("run", code(getJS(d)), runOK(map[string]any{"documentId": d, "writeBasis": s.wb(), "revision": 9}, ledger(get, "succeeded")))
		s.call("run", code(editJS(d, s.wb(), s.text())), runOK(map[string]any{"documentId": d, "writeConfirmed": true, "revision": 10}, ledger(edit, "succeeded")))
	}},
	{"oddlynew-edit-double-apply", "oddlynew", func(s *session) {
		d, text := s.docID(), s.text()
		js := readEditJS(d, text)
		s.call("run", code(js), runFail("Execution timed out", []any{ledger(get, "succeeded"), ledger(edit, "succeeded")},
			outcome(2, edit, "write", "succeeded", map[string]any{"documentId": d, "writeConfirmed": true, "revision": 14}),
			map[string]any{"seq": 1, "tool": get, "access": "read", "outcome": "succeeded", "omitted": true, "sizeBytes": 48211}))
		s.call("run", code(js), runOK(map[string]any{"documentId": d, "writeConfirmed": true, "revision": 15}, ledger(get, "succeeded"), ledger(edit, "succeeded")))
		s.expect("double_applied_write", d, "")
	}},
	{"oddlynew-duplicate-create", "oddlynew", func(s *session) {
		title := "Incident review " + s.g.hex(4)
		d1, d2 := s.docID(), s.docID()
		s.call("run", code(createJS(s.uuid7(), title)+"; await sleep(40000)"), runFail("Execution timed out", []any{ledger(create, "succeeded")},
			outcome(1, create, "write", "succeeded", map[string]any{"documentId": d1, "action": "created", "title": title, "type": "note"})))
		s.call("run", code(createJS(s.uuid7(), title)), runOK(map[string]any{"documentId": d2, "action": "created", "title": title, "type": "note"}, ledger(create, "succeeded")))
		s.expect("duplicate_create", d2, "")
	}},
	{"oddlynew-create-replayed", "oddlynew", func(s *session) {
		title, cid := "Weekly report "+s.g.hex(4), s.uuid7()
		s.call("run", code(createJS(cid, title)), runFail("Execution timed out", []any{ledger(create, "in_flight_unknown")}, outcome(1, create, "write", "in_flight_unknown", nil)))
		s.call("run", code(createJS(cid, title)), runOK(map[string]any{"documentId": s.docID(), "action": "alreadyBootstrapped", "title": title, "type": "note"}, ledger(create, "succeeded")))
	}},
	{"oddlynew-creation-reuse", "oddlynew", func(s *session) {
		cid := s.uuid7()
		s.call("run", code(createJS(cid, "Roadmap "+s.g.hex(4))), runOK(map[string]any{"documentId": s.docID(), "action": "created", "title": "Roadmap", "type": "note"}, ledger(create, "succeeded")))
		s.call("run", code(createJS(cid, "Budget "+s.g.hex(4))), runFail("Existing document creation identity has incompatible input. Use a new UUIDv7 creationId for a new document.",
			[]any{map[string]any{"tool": create, "outcome": "failed_but_handled", "count": 0}}, outcome(1, create, "write", "failed_but_handled", nil)))
		s.expect("request_id_reuse", "", cid)
	}},
	{"oddlynew-copy-blocked-replay", "oddlynew", func(s *session) {
		cid, src := s.uuid7(), s.docID()
		js := fmt.Sprintf(`async () => await organizations.planDocumentCopy({ copyId: %q, sourceDocumentId: %q, destinationOrganizationId: "org_%s" })`, cid, src, s.g.hex(6))
		blocked := runOK(map[string]any{"copyId": cid, "state": "blocked", "nextAction": "create_new_plan", "failure": nil,
			"blockers": []any{map[string]any{"code": "source_archived", "message": "The source document is archived", "resolution": "Restore the source document"}}}, ledger(plan, "succeeded"))
		s.call("run", code(js), blocked)
		s.call("run", code(js), blocked)
		s.expect("wasted_retry", "", cid)
	}},
	{"oddlynew-copy-premature", "oddlynew", func(s *session) {
		opID := "op_" + s.g.hex(12)
		js := fmt.Sprintf(`async () => await organizations.applyDocumentCopy({ operationId: %q, planToken: "pt_%s" })`, opID, s.g.hex(16))
		lease := s.t.Add(time.Minute).Format(time.RFC3339Nano)
		applying := runOK(map[string]any{"operationId": opID, "state": "applying", "failure": nil, "nextAction": "wait_then_retry_apply", "retryAfter": lease}, ledger(apply, "succeeded"))
		s.call("run", code(js), applying)
		s.call("run", code(js), applying)
		s.t = s.t.Add(90 * time.Second)
		s.call("run", code(js), runOK(map[string]any{"operationId": opID, "state": "completed", "failure": nil, "nextAction": "done", "retryAfter": nil, "destinationDocumentId": s.docID()}, ledger(apply, "succeeded")))
		s.expect("premature_retry", "", opID)
	}},
	{"oddlynew-journal-corrupt", "oddlynew", func(s *session) {
		d := s.docID()
		s.call("run", code(getJS(d)), runOK(map[string]any{"documentId": d, "journalStatus": "journal_corrupt", "writeBasis": s.wb()}, ledger(get, "succeeded")))
		s.expect("integrity_failure", d, "")
	}},
	{"oddlynew-archive-resent", "oddlynew", func(s *session) {
		d := s.docID()
		js := fmt.Sprintf(`async () => await documents.archiveDocument({ documentId: %q })`, d)
		s.call("run", code(js), runFail("Execution timed out", []any{ledger(archive, "in_flight_unknown")}, outcome(1, archive, "write", "in_flight_unknown", nil)))
		s.call("run", code(js), runOK(map[string]any{"documentId": d, "archived": true}, ledger(archive, "succeeded")))
	}},
}

func thegramNormal(s *session) {
	p, rev := s.doc(), s.rev()
	s.call("gram_projects", map[string]any{}, okResult(map[string]any{"projects": []any{}}))
	for i := 0; i < 1+s.g.rng.Intn(3); i++ {
		s.call("gram_read", map[string]any{"path": p}, readOK(p, rev, "synced"))
		s.wait(5 * time.Second)
		args := patchArgs(s, p, rev, s.reqID())
		s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), false, "synced"))
		rev++
	}
}

func thegramSyncConfirmed(s *session) {
	p, rev := "gdrive-shared/"+s.g.hex(8)+".gram", s.rev()
	args := patchArgs(s, p, rev, s.reqID())
	s.call("gram_patch", args, patchOK(p, rev+1, args["request_id"].(string), false, "pending"))
	s.wait(30 * time.Second)
	s.call("gram_read", map[string]any{"path": p}, readOK(p, rev+1, "synced"))
}

func oddlynewNormal(s *session) {
	d := s.docID()
	if s.g.rng.Intn(3) == 0 {
		s.call("guide", map[string]any{"question": "how do I edit a document?"}, okResult(map[string]any{"answer": "..."}))
	}
	for i := 0; i < 1+s.g.rng.Intn(3); i++ {
		s.call("run", code(readEditJS(d, s.text())), runOK(map[string]any{"documentId": d, "writeConfirmed": true, "revision": 10 + i, "saveState": "pending", "pendingProjections": []any{"search_projection"}},
			ledger(get, "succeeded"), ledger(edit, "succeeded")))
		s.wait(10 * time.Second)
	}
}

func oddlynewCreateEdit(s *session) {
	title := "Notes " + s.g.hex(6)
	d := s.docID()
	s.call("run", code(createJS(s.uuid7(), title)), runOK(map[string]any{"documentId": d, "action": "created", "title": title, "type": "note"}, ledger(create, "succeeded")))
	s.call("run", code(readEditJS(d, s.text())), runOK(map[string]any{"documentId": d, "writeConfirmed": true, "revision": 2}, ledger(get, "succeeded"), ledger(edit, "succeeded")))
}

// Thegram payloads.

func (s *session) doc() string {
	s.g.docs++
	dirs := []string{"team", "eng", "ops", "research"}
	kinds := []string{"notes", "spec", "log", "faq", "runbook"}
	return fmt.Sprintf("%s/%s-%s.gram", dirs[s.g.rng.Intn(len(dirs))], kinds[s.g.rng.Intn(len(kinds))], s.g.hex(6))
}

func (s *session) rev() int      { return 1 + s.g.rng.Intn(40) }
func (s *session) reqID() string { return "req-" + s.g.hex(12) }
func (s *session) text() string  { return "note " + s.g.hex(6) }

func op(s *session) any {
	ops := []string{"append_block", "insert_after", "replace_section", "set_field"}
	return map[string]any{"op": ops[s.g.rng.Intn(len(ops))], "target": fmt.Sprintf("h%d-%d", s.g.rng.Intn(10), s.g.rng.Intn(30)), "text": s.text()}
}

func patchArgs(s *session, path string, base int, reqID string) map[string]any {
	ops := []any{}
	for i := 0; i < 1+s.g.rng.Intn(3); i++ {
		ops = append(ops, op(s))
	}
	return map[string]any{"path": path, "base_revision": base, "expected_hash": hashOf(path, base), "request_id": reqID, "operations": ops}
}

// rebase copies a patch onto another base under another request id.
func rebase(args map[string]any, base int, reqID string) map[string]any {
	out := map[string]any{}
	for k, v := range args {
		out[k] = v
	}
	out["base_revision"], out["expected_hash"], out["request_id"] = base, hashOf(args["path"].(string), base), reqID
	out["operations"] = append([]any(nil), args["operations"].([]any)...)
	return out
}

func hashOf(path string, rev int) string {
	h := uint32(2166136261)
	for _, c := range fmt.Sprintf("%s@%d", path, rev) {
		h = (h ^ uint32(c)) * 16777619
	}
	return fmt.Sprintf("%08x%04x", h, rev)
}

func patchOK(path string, rev int, reqID string, replayed bool, sync string) map[string]any {
	return map[string]any{"isError": false, "structuredContent": map[string]any{"path": path, "rev": rev, "hash": hashOf(path, rev),
		"request_id": reqID, "replayed": replayed, "sync": map[string]any{"state": sync}},
		"content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("%s at r%d", path, rev)}}}
}

func readOK(path string, rev int, sync string) map[string]any {
	return okResult(map[string]any{"path": path, "rev": rev, "hash": hashOf(path, rev), "sync": map[string]any{"state": sync}, "text": "..."})
}

func toolErr(code, msg string) map[string]any {
	return map[string]any{"isError": true, "structuredContent": map[string]any{"error": map[string]any{"code": code, "message": msg}},
		"content": []any{map[string]any{"type": "text", "text": code + ": " + msg}}}
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

func (s *session) docID() string { return "doc_" + s.g.hex(16) }
func (s *session) wb() string    { return "wb_" + s.g.hex(20) }
func (s *session) uuid7() string {
	h := s.g.hex(28)
	return fmt.Sprintf("01a19b7c-%s-7%s-%s-%s", h[0:4], h[4:7], h[7:11], h[11:23])
}

func code(js string) map[string]any { return map[string]any{"code": js} }

func editJS(doc, wb, text string) string {
	return fmt.Sprintf(`async () => await documents.editDocument({ documentId: %q, writeBasis: %q, edits: [{ op: "replaceBlock", block: "b7", text: %q }] })`, doc, wb, text)
}

func readEditJS(doc, text string) string {
	return fmt.Sprintf("async () => {\n  const d = await documents.getDocument({ documentId: %q });\n  return await documents.editDocument({ documentId: %q, writeBasis: d.writeBasis,\n    edits: [{ op: \"appendParagraph\", text: %q }] });\n}", doc, doc, text)
}

func getJS(doc string) string {
	return fmt.Sprintf(`async () => await documents.getDocument({ documentId: %q })`, doc)
}

func createJS(cid, title string) string {
	return fmt.Sprintf(`async () => await documents.createDocument({ creationId: %q, title: %q, type: "note" })`, cid, title)
}

func ledger(tool, outcome string) map[string]any {
	return map[string]any{"tool": tool, "outcome": outcome, "count": 1}
}

func outcome(seq int, tool, access, out string, value map[string]any) map[string]any {
	o := map[string]any{"seq": seq, "tool": tool, "access": access, "outcome": out}
	if value != nil {
		o["value"] = value
	}
	return o
}

func runOK(result map[string]any, calls ...map[string]any) map[string]any {
	cs := make([]any, len(calls))
	for i := range calls {
		cs[i] = calls[i]
	}
	return okResult(map[string]any{"result": result, "logs": []any{}, "calls": cs})
}

func runFail(msg string, calls []any, outcomes ...map[string]any) map[string]any {
	sc := map[string]any{"error": msg, "logs": []any{}, "calls": calls}
	if len(outcomes) > 0 {
		os := make([]any, len(outcomes))
		for i := range outcomes {
			os[i] = outcomes[i]
		}
		sc["outcomes"] = os
	}
	return map[string]any{"isError": true, "structuredContent": sc, "content": []any{map[string]any{"type": "text", "text": msg}}}
}

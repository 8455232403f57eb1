package web

import "github.com/mcpaudit/mcpaudit/audit"

// Step is what a retry action means and the safe next step it calls for
// (findings.md §1).
type Step struct {
	Meaning string
	Next    string
}

// Steps are the safe next steps by retry action, as the contract states
// them.
var Steps = map[audit.RetryAction]Step{
	audit.ActionNone:     {"Success; nothing to do.", "Nothing."},
	audit.ActionFixInput: {"The request itself is wrong; an unchanged retry cannot help.", "Fix the arguments (path, request id, CAS base, tool name) and send a corrected request; never resend the same one."},
	audit.ActionRefreshAndRetry: {"A read's cursor or snapshot moved.",
		"Read again from a fresh cursor or snapshot, then continue."},
	audit.ActionRereadAndRebase: {"Write conflict: the document changed under the write.",
		"Re-read the document, rebase the intent onto the current revision, and send it with a NEW request id."},
	audit.ActionReplaySameRequest: {"The outcome is uncertain but an idempotency key protects it.",
		"Resend the identical intent with the same key (request_id, creationId, operationId and planToken); the server replays the original receipt."},
	audit.ActionVerifyThenDecide: {"The outcome is uncertain and nothing makes a blind retry safe.",
		"Read the target's current state first; write again only if the first attempt did not land, and then as a new intent."},
	audit.ActionWaitThenRetry: {"Transient: the server is not ready.",
		"Wait (not before retryAfter when the receipt gives one), then retry."},
	audit.ActionReauthorize: {"Authority is missing.",
		"Re-authorize (provider login, write access), then retry."},
	audit.ActionNewPlan: {"This plan can no longer proceed.",
		"Fix the plan's blockers and plan again with a fresh key."},
	audit.ActionSplitWork: {"A size or budget ceiling was hit.",
		"Split the work into smaller requests."},
	audit.ActionEscalate: {"Corruption or a server fault.",
		"A person must look: do not retry or repair by editing; follow the server's recovery procedure."},
	audit.ActionUnknown: {"No rule matched this failure.",
		"Inspect the raw error; it is counted and kept with its code."},
}

// KindSteps say what an engineer does about each kind of finding: they
// lead the finding's "Safe next step" (op23's D11: the retry action's step
// led, and for a double application it said to resend). They follow the
// reference documents' recovery rules: a repair is one new write based on
// a fresh read (a new request_id on Thegram, the writeBasis of that read
// on Oddlynew); a call is resent unchanged only under the key that makes
// it a replay.
var KindSteps = map[audit.Kind]string{
	audit.KindDoubleAppliedWrite: "The same edit is in the document twice: do not resend either call. Read the document as it is now and remove the duplicate edit with one new write based on that read (a new request_id on Thegram, the writeBasis of that read on Oddlynew). Then fix the client: after an uncertain write it replays under the same key, or reads before writing again.",
	audit.KindDuplicateCreate:    "One intended document now exists twice; the finding names the later one. Compare the two, keep one and archive the other (documents.archiveDocument is safe to repeat). Then fix the client: after an uncertain create it resends it with the same creationId.",
	audit.KindUnverifiedWrite:    "Nobody established whether this write landed. Read the target now: if the edit is there, nothing needs writing; if it is missing, send it again as the retry action below says. Then fix the client so that it verifies an uncertain write.",
	audit.KindUnsafeRetry:        "A client re-sent an uncertain write without the safe step. Read the document: if the edit is there twice (the first attempt landed too), remove one with a new write based on that read. Then fix the client: after an uncertain write it replays under the same key, or reads first.",
	audit.KindRequestIDReuse:     "One idempotency key carried two intents. Do not resend the second under that key: read the target, and if the second intent is still wanted send it with a new key (for an Oddlynew create, compare the original request with a read of the existing document first). Then fix the client to mint one key per intent.",
	audit.KindWastedRetry:        "A retry that could not help: the same request failed the same way, and no data is at risk. Fix what the error names before sending again: the arguments, the authorization, or a blocked copy plan's blockers, then a new plan with a fresh copyId.",
	audit.KindPrematureRetry:     "A copy was applied again before the receipt's retryAfter; no data is at risk. Make the client wait until retryAfter, then retry applyDocumentCopy with the same operationId and planToken.",
	audit.KindIntegrityFailure:   "The server reported corruption: do not retry, and do not repair by editing. Escalate to the server's operators. Thegram refuses writes to corrupt history (E_INTEGRITY); an Oddlynew journal_corrupt document is repaired with documents.repairDocumentJournal, after reading it and keeping what is still needed.",
}

// reasonSteps replace the step of an unverified_write whose reason calls
// for another one: a write answered but not yet synced is proved by a
// read, and a blocked save does not resolve on its own.
var reasonSteps = map[audit.Reason]string{
	audit.ReasonSyncNotConfirmed: "The write was answered, but no read showed it synced. Read the target: once it reports sync.state synced at the write's revision or later the write is durable; if the edit is missing, send it again as a new intent based on that read. Then fix the client so that it checks sync.state.",
	audit.ReasonSaveBlocked:      "The save is blocked (saveBlockedReason) and does not resolve on its own: for document_size_limit, split the document into smaller ones. Read it first and keep what is not yet saved.",
}

// KindStep is the step that leads a finding's "Safe next step": that of
// its kind, or of its reason where the reason calls for another.
func KindStep(f audit.Finding) string {
	if s, ok := reasonSteps[f.Reason]; ok && f.Kind == audit.KindUnverifiedWrite {
		return s
	}
	return KindSteps[f.Kind]
}

// StepWasClients reports whether the retry action of a finding of kind k
// says what the client should have done after its uncertain call, not a
// step to take now: the finding is the retry that skipped it.
func StepWasClients(k audit.Kind) bool {
	switch k {
	case audit.KindDoubleAppliedWrite, audit.KindDuplicateCreate, audit.KindUnsafeRetry:
		return true
	}
	return false
}

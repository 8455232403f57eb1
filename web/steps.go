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

// KindSteps say what an engineer does about each kind of finding.
var KindSteps = map[audit.Kind]string{
	audit.KindDoubleAppliedWrite: "The same edit is in the document twice. Read the document at the later revision, remove the duplicate edit with a new write, and fix the client so that after an uncertain write it replays under the same key or reads before writing again.",
	audit.KindDuplicateCreate:    "One intended document exists twice. Keep one, archive the duplicate, and make the client resend a create with the same creationId after an uncertain outcome.",
	audit.KindUnverifiedWrite:    "Nobody established whether this write landed. Read the target now: if the edit is missing, resend it (replay under the same key where one protects it); if present, nothing to do but fix the client's verification.",
	audit.KindUnsafeRetry:        "A client re-sent an uncertain write without the safe step. Check the document for a double application, then fix the client to replay under the same key or read first.",
	audit.KindRequestIDReuse:     "One idempotency key carried two intents. The second intent was refused or misapplied: send it with a new key, and make the client derive keys per intent.",
	audit.KindWastedRetry:        "A retry that could not help. Fix the request (or the authorization) before retrying; no data is at risk.",
	audit.KindPrematureRetry:     "A retry came before the server allowed it. Make the client honour retryAfter; no data is at risk.",
	audit.KindIntegrityFailure:   "The server reported corruption. Escalate to the server's operators; do not retry or repair by editing.",
}

// Package classify maps error codes and situations of the audited MCP
// servers to the retry action a correct client must take (findings.md §1).
// The rules come from the Thegram and Oddlynew reference documents.
package classify

import (
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Codes of situations that are not server error codes. Oddlynew reports
// errors as messages; they are normalized to these codes so that metrics and
// findings can name them.
const (
	// Transport situations: no response arrived.
	CodeTimeout         = "timeout"
	CodeConnectionReset = "connection_reset"
	CodeCanceled        = "canceled"
	CodeTransport       = "transport_error" // any other transport error text
	CodeNoResponse      = "no_response"     // neither response nor transport error observed
	// CodeNotSent: the observer knows the request never reached the
	// server (the relay could not connect, or the stdio child was gone
	// before the request was written): nothing was applied.
	CodeNotSent = "not_sent"

	// Oddlynew run and provider situations.
	CodeStaleLiveRevision      = "stale_live_revision"
	CodeInvalidWriteBasis      = "invalid_write_basis"
	CodeExecutionTimedOut      = "execution_timed_out"
	CodeExecutorTimedOut       = "executor_timed_out"
	CodeCallBudgetExceeded     = "call_budget_exceeded"
	CodeIncompatibleCreation   = "incompatible_creation_identity"
	CodeUnknownMethod          = "unknown_method"
	CodeUnknownParameter       = "unknown_parameter"
	CodeMissingParameter       = "missing_parameter"
	CodeOversizedArguments     = "oversized_arguments"
	CodeCopyIDReused           = "copy_id_reused"
	CodePlanTokenMismatch      = "plan_token_mismatch"
	CodeInvalidCreationID      = "invalid_creation_id"
	CodeInFlightUnknown        = "in_flight_unknown"
	CodeJournalCorrupt         = "journal_corrupt"
	CodeDocumentSizeLimit      = "document_size_limit"
	CodeSaveBlocked            = "save_blocked"
	CodeCopyBlocked            = "copy_blocked"
	CodeCopyExpired            = "copy_expired"
	CodeCopyCreateNewPlan      = "create_new_plan"
	CodeCopyRetryApply         = "retry_apply"
	CodeCopyWaitThenRetryApply = "wait_then_retry_apply"
	CodeCopyApplying           = "copy_applying"
	CodeCopyFailed             = "copy_failed"
	CodeRunFailed              = "run_failed" // a failed run whose message matches no rule

	// Thegram situation: STALE_REVISION with "Create target already exists".
	CodeCreateTargetExists = "STALE_REVISION_CREATE_EXISTS"
)

// table maps every known code to its retry action.
var table = map[string]audit.RetryAction{
	// Thegram: exact operational codes and the other source-defined errors.
	"E_ARGUMENT":             audit.ActionFixInput,
	"E_PATH":                 audit.ActionFixInput,
	"E_READ_ONLY":            audit.ActionReauthorize,
	"STALE_READ":             audit.ActionRefreshAndRetry,
	"STALE_CURSOR":           audit.ActionRefreshAndRetry,
	"E_CURSOR":               audit.ActionRefreshAndRetry,
	"E_REQUEST_REUSE":        audit.ActionFixInput,
	"COMMIT_UNKNOWN":         audit.ActionReplaySameRequest,
	"STORAGE_CONFLICT":       audit.ActionRereadAndRebase,
	"PROVIDER_AUTH_REQUIRED": audit.ActionReauthorize,
	"E_STORAGE":              audit.ActionVerifyThenDecide,
	"E_INTEGRITY":            audit.ActionEscalate,
	"E_MIGRATION":            audit.ActionEscalate,
	"E_CORE_UNAVAILABLE":     audit.ActionWaitThenRetry,
	"E_TIMEOUT":              audit.ActionVerifyThenDecide,
	"E_CORE":                 audit.ActionEscalate,
	"E_INTERNAL":             audit.ActionEscalate,
	"E_UNKNOWN_TOOL":         audit.ActionFixInput,
	"E_CONTEXT_BUDGET":       audit.ActionSplitWork,
	"E_TOO_MANY_DOCUMENTS":   audit.ActionSplitWork,
	"E_TIME_NOT_RECORDED":    audit.ActionFixInput,
	"E_REQUEST_ID":           audit.ActionFixInput,
	"E_CAS_REQUIRED":         audit.ActionFixInput,
	"E_APP_NOT_RUNNING":      audit.ActionWaitThenRetry,
	"STALE_REVISION":         audit.ActionRereadAndRebase,
	CodeCreateTargetExists:   audit.ActionVerifyThenDecide,

	// JSON-RPC protocol errors.
	"-32700": audit.ActionFixInput, // parse error
	"-32600": audit.ActionFixInput, // invalid request
	"-32601": audit.ActionFixInput, // method not found
	"-32602": audit.ActionFixInput, // invalid params
	"-32603": audit.ActionVerifyThenDecide,

	// Oddlynew.
	CodeStaleLiveRevision:      audit.ActionRereadAndRebase,
	CodeInvalidWriteBasis:      audit.ActionFixInput,
	CodeExecutionTimedOut:      audit.ActionVerifyThenDecide,
	CodeExecutorTimedOut:       audit.ActionVerifyThenDecide,
	CodeCallBudgetExceeded:     audit.ActionSplitWork,
	CodeIncompatibleCreation:   audit.ActionFixInput,
	CodeUnknownMethod:          audit.ActionFixInput,
	CodeUnknownParameter:       audit.ActionFixInput,
	CodeMissingParameter:       audit.ActionFixInput,
	CodeOversizedArguments:     audit.ActionFixInput,
	CodeCopyIDReused:           audit.ActionFixInput,
	CodeInvalidCreationID:      audit.ActionFixInput,
	CodePlanTokenMismatch:      audit.ActionReplaySameRequest,
	CodeInFlightUnknown:        audit.ActionVerifyThenDecide,
	CodeJournalCorrupt:         audit.ActionEscalate,
	CodeDocumentSizeLimit:      audit.ActionSplitWork,
	CodeCopyBlocked:            audit.ActionNewPlan,
	CodeCopyExpired:            audit.ActionNewPlan,
	CodeCopyCreateNewPlan:      audit.ActionNewPlan,
	CodeCopyRetryApply:         audit.ActionReplaySameRequest,
	CodeCopyWaitThenRetryApply: audit.ActionWaitThenRetry,
	CodeCopyApplying:           audit.ActionWaitThenRetry,

	// Transport: the server was not reached; it may be back later.
	CodeNotSent: audit.ActionWaitThenRetry,
}

// Action returns the retry action of a code. Unknown codes map to
// audit.ActionUnknown; the caller keeps the raw code.
func Action(code string) audit.RetryAction {
	if a, ok := table[code]; ok {
		return a
	}
	if status, ok := httpRefusal(code); ok {
		return httpAction(status)
	}
	return audit.ActionUnknown
}

// httpRefusal returns the status of an http_4NN code: the server answered
// the HTTP request that carried the call with a client error and no
// JSON-RPC response. A 4xx refuses the request as a request (malformed,
// unauthorized, unknown session, too large, too many): the call did not
// run. A 5xx proves nothing: a gateway answers 502 or 504 after it sent
// the request on, and a server answers 500 from a handler that may have
// written; those stay uncertain (CodeTransport).
func httpRefusal(code string) (int, bool) {
	if len(code) != len("http_400") || !strings.HasPrefix(code, "http_4") {
		return 0, false
	}
	status, err := strconv.Atoi(code[len("http_"):])
	if err != nil || status < 400 || status > 499 {
		return 0, false
	}
	return status, true
}

// httpAction is the retry action of an HTTP client error status.
func httpAction(status int) audit.RetryAction {
	switch status {
	case 401, 403, 407:
		return audit.ActionReauthorize
	case 408, 425, 429:
		return audit.ActionWaitThenRetry
	case 413:
		return audit.ActionSplitWork
	}
	// 400 (a malformed body, or a batch the server does not take), 404 (an
	// unknown session: initialize again), 405, 406, 415...: the request as
	// sent cannot succeed.
	return audit.ActionFixInput
}

// NotApplied reports whether a transport code proves that the call was
// not applied: the request never reached the server (CodeNotSent), or the
// server refused the HTTP request before it ran the call (http_4NN).
func NotApplied(code string) bool {
	if code == CodeNotSent {
		return true
	}
	_, ok := httpRefusal(code)
	return ok
}

// KnownCode reports whether code is one of the codes above or a Thegram code
// from the reference. Metrics use it to bound the code label.
func KnownCode(code string) bool {
	if _, ok := table[code]; ok {
		return true
	}
	switch code {
	case CodeTimeout, CodeConnectionReset, CodeCanceled, CodeTransport, CodeNoResponse,
		CodeSaveBlocked, CodeCopyFailed, CodeRunFailed:
		return true
	}
	_, ok := httpRefusal(code)         // at most 100 label values
	return ok || httpServerError(code) // and 100 more
}

// httpServerError reports whether code is http_5NN: the server, or a
// gateway in front of it, answered the HTTP request with a server error and
// no JSON-RPC response. The call may have run: it is as uncertain as
// CodeTransport, but keeps its status, so that `mcpaudit calls` says
// http_502 where it said transport_error, which read as a broken
// connection (prox17).
func httpServerError(code string) bool {
	if len(code) != len("http_500") || !strings.HasPrefix(code, "http_5") {
		return false
	}
	status, err := strconv.Atoi(code[len("http_"):])
	return err == nil && status >= 500 && status <= 599
}

// Transport normalizes a transport_error text to a code. The texts that
// prove the call was not applied keep codes of their own (CodeNotSent and
// http_4NN, see NotApplied), and http_5NN keeps its own, uncertain as
// CodeTransport is; any other text is CodeTransport, uncertain.
func Transport(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return CodeNoResponse
	case "timeout", "timed_out", "deadline_exceeded", "context deadline exceeded":
		return CodeTimeout
	case "connection_reset", "econnreset", "connection reset by peer", "reset":
		return CodeConnectionReset
	case "canceled", "cancelled", "context canceled":
		return CodeCanceled
	case "not_sent":
		// Only mcpaudit's own relays write it, and only when they know no
		// byte left. Another observer's "connection refused" stays free
		// text, uncertain as the spec reads a call with no response: it
		// may be a reused connection's failure after the request left.
		return CodeNotSent
	}
	if code := strings.ToLower(strings.TrimSpace(s)); NotApplied(code) || httpServerError(code) {
		return code
	}
	return CodeTransport
}

// RPC returns the code of a JSON-RPC error: the Thegram code carried in
// data.code when there is one (-32000 with E_APP_NOT_RUNNING), else the
// numeric code as text.
func RPC(code int64, dataCode string) string {
	if dataCode != "" {
		return dataCode
	}
	return strconv.FormatInt(code, 10)
}

// Thegram returns the code of a Thegram tool error, telling the create
// conflict apart from other STALE_REVISION errors by its message.
func Thegram(code, message string) string {
	if code == "STALE_REVISION" && strings.Contains(strings.ToLower(message), "create target already exists") {
		return CodeCreateTargetExists
	}
	return code
}

// Oddlynew normalizes an Oddlynew error message to a code. Messages that
// match no rule return CodeRunFailed (action unknown, message kept).
func Oddlynew(message string) string {
	m := strings.ToLower(message)
	switch {
	case m == "":
		return CodeRunFailed
	case strings.Contains(m, "codemode executor timed out"):
		return CodeExecutorTimedOut
	case strings.Contains(m, "execution timed out"):
		return CodeExecutionTimedOut
	case strings.Contains(m, "provider call budget exceeded"):
		return CodeCallBudgetExceeded
	case strings.Contains(m, "existing document creation identity has incompatible input"):
		return CodeIncompatibleCreation
	case strings.Contains(m, "stale_live_revision"):
		return CodeStaleLiveRevision
	case strings.Contains(m, "invalid_write_basis"), strings.Contains(m, "invalid document writebasis"):
		return CodeInvalidWriteBasis
	case strings.Contains(m, "journal_corrupt"):
		return CodeJournalCorrupt
	case strings.Contains(m, "document_size_limit"):
		return CodeDocumentSizeLimit
	case strings.Contains(m, "plantoken") && (strings.Contains(m, "match") || strings.Contains(m, "recorded")):
		return CodePlanTokenMismatch
	case strings.Contains(m, "copyid") && (strings.Contains(m, "another") || strings.Contains(m, "different") || strings.Contains(m, "reuse") || strings.Contains(m, "already")):
		return CodeCopyIDReused
	case strings.Contains(m, "unknown parameter"), strings.Contains(m, "unknown argument"), strings.Contains(m, "did you mean"):
		return CodeUnknownParameter
	case strings.Contains(m, "missing required"), strings.Contains(m, "missing parameter"), strings.Contains(m, "is required"), strings.Contains(m, "required parameter"):
		return CodeMissingParameter
	case strings.Contains(m, "unknown method"), strings.Contains(m, "is not a function"), strings.Contains(m, "method does not exist"), strings.Contains(m, "no such method"):
		return CodeUnknownMethod
	case (strings.Contains(m, "argument") || strings.Contains(m, "arguments")) && (strings.Contains(m, "too large") || strings.Contains(m, "exceed") || strings.Contains(m, "oversize")):
		return CodeOversizedArguments
	case strings.Contains(m, "creationid") && (strings.Contains(m, "uuid") || strings.Contains(m, "version")):
		return CodeInvalidCreationID
	case strings.Contains(m, "signature:"):
		return CodeUnknownParameter
	}
	return CodeRunFailed
}

// Uncertain reports whether a write that failed with code may nevertheless
// have been applied, so that its outcome must be established.
func Uncertain(code string) bool {
	switch code {
	case "COMMIT_UNKNOWN", "E_STORAGE", "E_TIMEOUT", "-32603",
		CodeTimeout, CodeConnectionReset, CodeCanceled, CodeTransport, CodeNoResponse,
		CodeExecutionTimedOut, CodeExecutorTimedOut, CodeInFlightUnknown:
		return true
	}
	return httpServerError(code)
}

// Reason returns the unverified-write reason of an uncertain code.
func Reason(code string) audit.Reason {
	switch code {
	case "COMMIT_UNKNOWN":
		return audit.ReasonCommitUnknown
	case "E_STORAGE":
		return audit.ReasonStorageError
	case CodeInFlightUnknown, CodeExecutionTimedOut:
		return audit.ReasonInFlightUnknown
	}
	return audit.ReasonNoResponse
}

// CodeText is how a person is shown code beside outcome: the code itself,
// but for CodeNoResponse, whose name repeats its outcome's
// (no_response / no_response, op20's D5): what it means, said once.
func CodeText(code string) string {
	if code == CodeNoResponse {
		return "neither response nor transport error seen"
	}
	return code
}

package audit

import (
	"encoding/binary"
	"hash/maphash"
	"time"
)

// Outcome is how a tools/call exchange ended, as seen on the wire.
type Outcome string

// Outcomes of a call. They are metric label values and never change.
const (
	OutcomeOK            Outcome = "ok"             // a result with isError false
	OutcomeToolError     Outcome = "tool_error"     // a result with isError true
	OutcomeProtocolError Outcome = "protocol_error" // a JSON-RPC error response
	OutcomeNoResponse    Outcome = "no_response"    // a transport error, or nothing observed
)

// RetryAction is what a correct client must do after a failed or uncertain
// call (findings.md §1). The values are fixed: they appear in metrics, rules,
// dashboards and findings.
type RetryAction string

// Retry actions.
const (
	ActionNone              RetryAction = "none"
	ActionFixInput          RetryAction = "fix_input"
	ActionRefreshAndRetry   RetryAction = "refresh_and_retry"
	ActionRereadAndRebase   RetryAction = "reread_and_rebase"
	ActionReplaySameRequest RetryAction = "replay_same_request"
	ActionVerifyThenDecide  RetryAction = "verify_then_decide"
	ActionWaitThenRetry     RetryAction = "wait_then_retry"
	ActionReauthorize       RetryAction = "reauthorize"
	ActionNewPlan           RetryAction = "new_plan"
	ActionSplitWork         RetryAction = "split_work"
	ActionEscalate          RetryAction = "escalate"
	ActionUnknown           RetryAction = "unknown"
)

// RetryActions lists every retry action in the order of findings.md §1.
var RetryActions = []RetryAction{
	ActionNone, ActionFixInput, ActionRefreshAndRetry, ActionRereadAndRebase,
	ActionReplaySameRequest, ActionVerifyThenDecide, ActionWaitThenRetry,
	ActionReauthorize, ActionNewPlan, ActionSplitWork, ActionEscalate, ActionUnknown,
}

// WriteState is where a write attempt stands (findings.md §2).
type WriteState string

// Write states.
const (
	StatePending       WriteState = "pending"
	StateDurable       WriteState = "durable"
	StateResolved      WriteState = "resolved"
	StateRejected      WriteState = "rejected"
	StateUnverified    WriteState = "unverified"
	StateDoubleApplied WriteState = "double_applied"
)

// WriteStates lists every write state; all but pending are terminal.
var WriteStates = []WriteState{
	StateDurable, StateResolved, StateRejected, StatePending, StateUnverified, StateDoubleApplied,
}

// Terminal reports whether no further transition can happen from s.
func (s WriteState) Terminal() bool { return s != StatePending && s != "" }

// Reason says why a write is not (yet) durable; it names the cause of an
// unverified_write finding.
type Reason string

// Reasons of unverified writes.
const (
	ReasonCommitUnknown     Reason = "commit_unknown"
	ReasonNoResponse        Reason = "no_response"
	ReasonStorageError      Reason = "storage_error"
	ReasonSyncNotConfirmed  Reason = "sync_not_confirmed"
	ReasonInFlightUnknown   Reason = "in_flight_unknown"
	ReasonNotWriteConfirmed Reason = "not_write_confirmed"
	ReasonSaveBlocked       Reason = "save_blocked"
)

// Kind is the kind of a finding (findings.md §4).
type Kind string

// Finding kinds.
const (
	KindDoubleAppliedWrite Kind = "double_applied_write"
	KindDuplicateCreate    Kind = "duplicate_create"
	KindUnverifiedWrite    Kind = "unverified_write"
	KindUnsafeRetry        Kind = "unsafe_retry"
	KindRequestIDReuse     Kind = "request_id_reuse"
	KindWastedRetry        Kind = "wasted_retry"
	KindPrematureRetry     Kind = "premature_retry"
	KindIntegrityFailure   Kind = "integrity_failure"
)

// Kinds lists every finding kind.
var Kinds = []Kind{
	KindDoubleAppliedWrite, KindDuplicateCreate, KindUnverifiedWrite, KindUnsafeRetry,
	KindRequestIDReuse, KindWastedRetry, KindPrematureRetry, KindIntegrityFailure,
}

// Severity ranks findings. Ordered: info < warning < critical.
type Severity string

// Severities.
const (
	SeverityInfo     Severity = "info"
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

// Rank orders severities for comparisons; unknown severities rank 0.
func (s Severity) Rank() int {
	switch s {
	case SeverityInfo:
		return 1
	case SeverityWarning:
		return 2
	case SeverityCritical:
		return 3
	}
	return 0
}

// Severity returns the fixed severity of a finding kind.
func (k Kind) Severity() Severity {
	switch k {
	case KindDoubleAppliedWrite, KindDuplicateCreate, KindIntegrityFailure:
		return SeverityCritical
	case KindUnverifiedWrite, KindUnsafeRetry, KindRequestIDReuse:
		return SeverityWarning
	}
	return SeverityInfo
}

// Finding is one conclusion of the detector, printed exactly as findings.md §5.
type Finding struct {
	Kind        Kind        `json:"kind"`
	Severity    Severity    `json:"severity"`
	Server      string      `json:"server"`
	Tenant      string      `json:"tenant"`
	Document    string      `json:"document,omitempty"`
	Key         string      `json:"key,omitempty"`
	Session     string      `json:"session,omitempty"`
	Time        time.Time   `json:"time"`
	Calls       []string    `json:"calls"`
	Reason      Reason      `json:"reason,omitempty"`
	RetryAction RetryAction `json:"retry_action,omitempty"`
	Summary     string      `json:"summary"`
	// Status is the finding's lifecycle state as a store last saw it; nil
	// from the detector, and from a store for a finding nobody changed.
	Status *FindingStatus `json:"status,omitempty"`
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int64  `json:"code"`
	Message string `json:"message,omitempty"`
	Data    []byte `json:"data,omitempty"` // raw JSON, may be nil
}

// Call is one MCP tools/call exchange, normalized from either carrier (call
// records or OTLP spans). A Call is immutable once built.
type Call struct {
	// ID is the stable identity of the exchange: the same exchange carried as
	// a call record or as a span gets the same ID (see StableID).
	ID string
	// Fingerprint identifies the request without its time (see
	// Fingerprint): duplicate observations share it.
	Fingerprint string
	Time        time.Time
	Duration    time.Duration
	Server      string
	Session     string
	Client      string
	Tenant      string
	TraceID     string
	SpanID      string
	// RPCID is the JSON-RPC request id rendered as text ("7" or "abc").
	RPCID string
	// Method is the JSON-RPC method, normally "tools/call".
	Method string
	Tool   string
	// Arguments is the raw JSON of params.arguments; nil when absent.
	Arguments []byte
	// Responded is true when a JSON-RPC response was observed.
	Responded bool
	// Result is the raw JSON of response.result; nil when absent or when the
	// response carried an error.
	Result []byte
	// Error is response.error, nil when absent.
	Error *RPCError
	// TransportError is set when no response arrived: timeout,
	// connection_reset, canceled or free text.
	TransportError string
	// Source names where the call came from. serve stores the name of the
	// sender, as status and the detector's held_by name it
	// ("otlp:thegram/pod-b/node-2", "calls:proxy/thegram/host:8080"); a
	// call read of a file, or one stored before, names its place
	// ("file:line", "otlp_grpc:resourceSpans[0].scopeSpans[0].spans[3]").
	Source string
	// Received is the wall time the live service acknowledged the call;
	// zero for files. It is not stored.
	Received time.Time
	// RespSum identifies the response observed (ResponseSum), so that two
	// observations under one call id that answered differently are told
	// apart from a second observation of one exchange. 0 when no response
	// was observed or it is not known (a call read back from the store).
	// It is not stored.
	RespSum uint64
}

// respSeed seeds ResponseSum: sums compare within one process.
var respSeed = maphash.MakeSeed()

// ResponseSum returns c's RespSum for a response whose result and error
// data sum to result and errData (the decoder's hash of each JSON value,
// 0 when absent), with c's JSON-RPC error and the texts of extra (what
// else the carrier says of the response); 0 when c saw no response.
func ResponseSum(c *Call, result, errData uint64, extra ...string) uint64 {
	if !c.Responded {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(respSeed)
	var b [8 * 4]byte
	binary.LittleEndian.PutUint64(b[0:], result)
	binary.LittleEndian.PutUint64(b[8:], errData)
	if c.Error != nil {
		b[16] = 1
		binary.LittleEndian.PutUint64(b[24:], uint64(c.Error.Code))
		h.Write(b[:])
		h.WriteString(c.Error.Message)
	} else {
		h.Write(b[:])
	}
	for _, s := range extra {
		h.WriteByte(0)
		h.WriteString(s)
	}
	return h.Sum64() | 1
}

// Failure is the classification of one failed or uncertain call, or of one
// failed provider call inside an Oddlynew run.
type Failure struct {
	// Code is the raw error code or situation (E_ARGUMENT, stale_live_revision,
	// timeout, -32603...).
	Code string
	// Action is what a correct client must do next.
	Action RetryAction
	// Message is the server's message, when there is one.
	Message string
}

// Write is one write attempt and the state it reached. The detector emits a
// Write each time its state changes.
type Write struct {
	CallID   string     `json:"call_id"`
	Seq      int        `json:"seq"` // provider call index inside an Oddlynew run; 0 for Thegram
	Time     time.Time  `json:"time"`
	Server   string     `json:"server"`
	Tenant   string     `json:"tenant"`
	Session  string     `json:"session,omitempty"`
	Tool     string     `json:"tool"`
	Document string     `json:"document,omitempty"`
	Key      string     `json:"key,omitempty"`
	State    WriteState `json:"state"`
	// Reason is set while pending and for unverified writes.
	Reason Reason `json:"reason,omitempty"`
	// Action is the retry action of the call's failure, if it failed.
	Action RetryAction `json:"retry_action,omitempty"`
	// StateTime is the event time at which the state was reached.
	StateTime time.Time `json:"state_time"`
}

// Sink receives the detector's output. Calls to a Sink are made from one
// goroutine at a time, in processing order.
type Sink interface {
	// Call is called once for every distinct call processed.
	Call(r *Record)
	// Write is called when a write attempt is first seen and at every later
	// state change. w is valid until Write returns: the detector fills the
	// same Write again for the next change, so a sink copies what it keeps.
	Write(w *Write, prev WriteState)
	// Finding is called once for every finding.
	Finding(f *Finding)
}

// FindingWithdrawer is a Sink that also takes back a finding it was given:
// an unverified_write made when its write's window closed, which a call
// dated within that window, judged after it closed (late), settles; judging
// in order makes no such finding (docs/detection.md, "Late calls"). f is
// the finding as it was made (same ID); call is the ID of the call judged
// late that withdrew it, at that call's time. A sink never given f, or
// that no longer keeps it, ignores the call. Called from the detector's
// goroutine, as the Sink's methods are.
type FindingWithdrawer interface {
	WithdrawFinding(f *Finding, call string, at time.Time)
}

// SLI computes the write-durability SLI of findings.md §2 from counts by
// state. ok is false when no write counts toward it.
func SLI(counts map[WriteState]int64) (sli float64, ok bool) {
	good := counts[StateDurable] + counts[StateResolved]
	total := good + counts[StateUnverified] + counts[StateDoubleApplied]
	if total == 0 {
		return 0, false
	}
	return float64(good) / float64(total), true
}

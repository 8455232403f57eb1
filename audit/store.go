package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// Errors returned by stores.
var (
	// ErrUnavailable is returned when the backend cannot be reached; the
	// operation may succeed later (retryable).
	ErrUnavailable = errors.New("store unavailable")
	// ErrBadCursor is returned when a page cursor was not made by the store.
	ErrBadCursor = errors.New("invalid cursor")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("store closed")
	// ErrOverloaded is returned when the service holds as much as it is
	// configured to (queued calls, open correlation state, memory) and
	// refuses more for now: nothing of the request was kept. Retryable.
	ErrOverloaded = errors.New("overloaded")
	// ErrTooLarge is returned when one request's calls are more than the
	// store can take at once however long the sender waits (larger than
	// its whole call log or spool): not retryable; the sender must send
	// fewer calls per request, or the operator raise the setting the
	// error names.
	ErrTooLarge = errors.New("request too large for the store")
	// ErrUnsupported is returned by a method whose data the store does not
	// keep: TooLateCalls of a store that ignores Results.TooLate (the
	// ClickHouse store). Not retryable.
	ErrUnsupported = errors.New("not supported by this store")
)

// Results is one batch of detector output, committed atomically with the
// watermark it was produced at: after a restart, calls after Watermark are
// replayed and everything up to it is known to be saved.
type Results struct {
	// Writes are upserted by (CallID, Seq): the latest state wins.
	Writes []Write
	// Findings are inserted once: a finding whose ID is stored is skipped.
	Findings []Finding
	// Watermark is the event time up to which the detector has processed
	// every call. The zero time leaves the stored watermark unchanged.
	Watermark time.Time
	// TooLate names the stored calls the detector counted too late to be
	// judged (later than allowed_lateness behind their partition's
	// watermark) since the last commit: the replay after a restart passes
	// over them as the live run did. Inserted once: a call named again is
	// skipped.
	TooLate []CallRef
	// Answered names the stored calls, stored without a response, whose
	// answer (a later observation under the same call id, held by the
	// store aside: AnswerReporter) the detector took as completing the
	// first observation since the last commit. A store that keeps such
	// answers aside puts each in its call's place in the transaction of
	// this commit, and only then: an answer the detector dropped (it came
	// after the first observation was judged) stays aside, so that a
	// restart's replay reads the call as the live run judged it. A call
	// named without an answer aside is passed over.
	Answered []CallRef
}

// CallRef names one stored call: its tenant, id and time (retention
// deletes the reference with its call, by time).
type CallRef struct {
	Tenant string
	ID     string
	Time   time.Time
}

// FindingQuery filters findings. Zero fields do not filter.
type FindingQuery struct {
	// ID selects one finding.
	ID       string
	Kind     Kind
	Severity Severity // this severity or higher
	Server   string
	Tenant   string
	Document string
	Key      string
	Session  string
	Since    time.Time // Time >= Since
	Until    time.Time // Time < Until
	Limit    int       // at most this many; the store applies a default and a cap
	Cursor   string    // from a previous page
	// State keeps the findings in this lifecycle state (open: never
	// changed, or reopened). Empty keeps every state but withdrawn, unless
	// ID is set: a withdrawn finding is found by its state or its id only.
	State FindingState
	// Newest returns the newest findings first; a cursor continues in the
	// order it was made in.
	Newest bool
}

// FindingPage is one page of findings in time order (then ID order), or
// newest first when the query asked for it.
type FindingPage struct {
	Findings   []Finding `json:"findings"`
	NextCursor string    `json:"next_cursor"`
}

// WriteQuery filters write attempts. Zero fields do not filter.
type WriteQuery struct {
	State    WriteState
	Server   string
	Tenant   string
	Document string
	Session  string
	Since    time.Time
	Until    time.Time
	Limit    int
	Cursor   string
}

// WritePage is one page of write attempts in time order.
type WritePage struct {
	Writes     []Write `json:"writes"`
	NextCursor string  `json:"next_cursor"`
}

// TimelineQuery selects one document's history.
type TimelineQuery struct {
	Server   string // empty: every server
	Tenant   string
	Document string
	Since    time.Time
	Until    time.Time
	Limit    int
}

// Event types of a timeline.
const (
	EventCall    = "call"
	EventWrite   = "write"
	EventFinding = "finding"
)

// TimelineEvent is one entry of a document's timeline.
type TimelineEvent struct {
	Time   time.Time `json:"time"`
	Type   string    `json:"type"` // call, write or finding
	CallID string    `json:"call_id,omitempty"`
	Server string    `json:"server"`
	// Tenant is the tenant the event belongs to, omitted for the empty
	// tenant (authentication off): a reader of every tenant ("*") tells
	// two tenants' calls of one document or session apart by it (op21's
	// D4).
	Tenant      string      `json:"tenant,omitempty"`
	Session     string      `json:"session,omitempty"`
	Tool        string      `json:"tool,omitempty"`
	Outcome     Outcome     `json:"outcome,omitempty"`
	Code        string      `json:"code,omitempty"`
	RetryAction RetryAction `json:"retry_action,omitempty"`
	Key         string      `json:"key,omitempty"`
	State       WriteState  `json:"state,omitempty"`
	Reason      Reason      `json:"reason,omitempty"`
	Finding     *Finding    `json:"finding,omitempty"`
	// Source names, for a call, where it came from: for a call stored by
	// serve its sender as status and held_by name it
	// ("otlp:thegram/pod-b/node-2", "calls:proxy/thegram/host:8080").
	Source string `json:"source,omitempty"`
	// RevisionBefore and HashBefore are, for a call in a document's
	// timeline, the document's revision and content hash its request
	// expected (Thegram's base_revision and expected_hash);
	// RevisionAfter and HashAfter those its response reported (rev and
	// hash; Oddlynew's revision). As the payloads give them, "null" for an
	// explicit null; empty where they do not say, and on every other
	// event.
	RevisionBefore string `json:"revision_before,omitempty"`
	RevisionAfter  string `json:"revision_after,omitempty"`
	HashBefore     string `json:"hash_before,omitempty"`
	HashAfter      string `json:"hash_after,omitempty"`
}

// TimelinePage is the start of a document's timeline: its earliest events
// in time order, and whether the range held more.
type TimelinePage struct {
	Events []TimelineEvent `json:"events"`
	// Truncated reports that the range held events after those returned.
	Truncated bool `json:"truncated"`
	// NextSince, when Truncated, is the time of the earliest event left
	// out: a query with it as Since continues where this one stopped (the
	// events of that instant already returned come again). Zero otherwise.
	NextSince time.Time `json:"next_since,omitzero"`
}

// CountQuery selects the writes counted for the SLO: those whose Time is in
// [Since, Until), by their current state.
type CountQuery struct {
	Server string
	Tenant string
	Since  time.Time
	Until  time.Time
}

// UnknownClient names the client of a bad write whose call is not stored
// or names no client, in BadWriteCounts.Clients.
const UnknownClient = "(unknown)"

// BadWriteQuery selects the bad writes (unverified and double-applied, by
// current state) whose Time is in [Since, Until), to count them by cause,
// server, tool, document and client.
type BadWriteQuery struct {
	CountQuery
	// Top is how many servers, tools, documents and clients to return: the
	// ones with the most bad writes, ties in byte order of the name. Zero
	// returns all.
	Top int
	// Clients counts the bad writes by the client of their call; without
	// it Clients is empty.
	Clients bool
}

// CauseCount is the bad writes of one state and reason.
type CauseCount struct {
	State  WriteState `json:"state"`
	Reason Reason     `json:"reason"`
	Count  int64      `json:"count"`
}

// NameCount is the bad writes of one server, tool, document or client.
type NameCount struct {
	Name string `json:"name"`
	// Server is, for a document, the server that holds it: a document is
	// a server's, and two servers' documents of one path count apart.
	// Empty for the other dimensions.
	Server string `json:"server,omitempty"`
	Count  int64  `json:"count"`
}

// BadWriteCounts are the bad writes of a window counted along each
// dimension on its own. Causes holds every (state, reason); the others
// hold the query's Top names, most bad writes first, then by name in byte
// order.
type BadWriteCounts struct {
	Causes  []CauseCount
	Servers []NameCount
	Tools   []NameCount
	// Documents leaves out the writes that name no document. It counts
	// by document and server, ties in byte order of the document, then
	// of the server.
	Documents []NameCount
	// Clients counts each write under the client of its stored call of
	// the same tenant, UnknownClient when that call is not stored or
	// names no client.
	Clients []NameCount
}

// Store keeps calls, write attempts and findings. Implementations are safe
// for concurrent use. Every method returns ErrUnavailable (wrapped) when the
// backend cannot be reached, so that callers can retry.
type Store interface {
	// AppendCalls stores calls with their reading durably: when it returns
	// nil, every call is committed and survives a crash. A call whose ID is
	// already stored for its tenant is skipped, so a retried batch never
	// stores a call twice, while two tenants posting the same exchange each
	// keep it (IDs do not depend on the tenant); it returns how many were
	// stored for the first time (a store that cannot tell counts them all).
	AppendCalls(ctx context.Context, calls []Record) (int, error)
	// Commit stores detector output and the watermark atomically.
	Commit(ctx context.Context, r Results) error
	// Watermark returns the last committed watermark (zero if none).
	Watermark(ctx context.Context) (time.Time, error)
	// ScanCalls calls fn with every stored call whose Time >= since, with
	// its stored reading, in time order, to rebuild correlation state after
	// a restart.
	ScanCalls(ctx context.Context, since time.Time, fn func(*Record) error) error
	// FindingIDs returns the IDs of the findings whose Time >= since.
	FindingIDs(ctx context.Context, since time.Time) (map[string]bool, error)
	// TooLateCalls returns the calls committed as too late to be judged
	// (Results.TooLate) whose Time >= since, in no particular order, or
	// ErrUnsupported from a store that does not keep them.
	TooLateCalls(ctx context.Context, since time.Time) ([]CallRef, error)
	// Findings returns one page of findings.
	Findings(ctx context.Context, q FindingQuery) (FindingPage, error)
	// Writes returns one page of write attempts with their current state.
	Writes(ctx context.Context, q WriteQuery) (WritePage, error)
	// Timeline returns the earliest calls, write states and findings on a
	// document in time order, up to the query's limit, and says when the
	// range held more.
	Timeline(ctx context.Context, q TimelineQuery) (TimelinePage, error)
	// WriteCounts counts write attempts by current state.
	WriteCounts(ctx context.Context, q CountQuery) (map[WriteState]int64, error)
	// WriteCountsByRange counts, as WriteCounts does, the write attempts
	// of each range [bounds[i], bounds[i+1]) (q's Since and Until are not
	// used), in one read: it returns len(bounds)-1 maps. The bounds must
	// increase.
	WriteCountsByRange(ctx context.Context, q CountQuery, bounds []time.Time) ([]map[WriteState]int64, error)
	// BadWriteCounts counts the bad writes that q selects by cause,
	// server, tool, document and client, at a cost that follows the
	// number of names rather than of writes where the backend can.
	BadWriteCounts(ctx context.Context, q BadWriteQuery) (BadWriteCounts, error)
	// DeleteBefore removes every call, write and finding whose Time is
	// before t (retention), except those of the tenants in keep, which have
	// retentions of their own, and returns how many rows went. The
	// references to calls too late (Results.TooLate) go with their calls,
	// and are not counted.
	DeleteBefore(ctx context.Context, t time.Time, keep ...string) (int64, error)
	// DeleteTenantBefore removes the calls, writes and findings of one
	// tenant whose Time is before t (with the references to its calls too
	// late, not counted), and returns how many rows went.
	DeleteTenantBefore(ctx context.Context, tenant string, t time.Time) (int64, error)
	// Close flushes and releases the store.
	Close() error
	// Investigator serves the investigation page and the lifecycle.
	Investigator
}

// ResponseComparer is a Store that compares the response of a call it
// skips as stored with the stored call's. The same request at the same
// millisecond is one call id, so a call whose id is stored for its tenant
// is skipped; when the two answered differently it is not a second
// observation of one exchange but an id collision, and the caller counts
// and logs it rather than losing the second response without a trace.
type ResponseComparer interface {
	// AppendCallsCompared is AppendCalls that also returns, in order, the
	// indexes in calls of the calls skipped for their id (held: stored
	// before, or taken earlier in calls), and of those the ones whose
	// response differs from the one the store kept. Only responses that both say enough to compare are compared
	// (exporter/store.StoredResponse); a stored call that cannot be read
	// back is taken as the same. The comparison reads the stored call, so
	// it costs only calls sent again. A store may also keep a skipped
	// call's response when the stored call has none (the embedded store
	// does: aside, until the detector takes it, Results.Answered).
	AppendCallsCompared(ctx context.Context, calls []Record) (stored int, held, differ []int, err error)
}

// AnswerReporter is a ResponseComparer that also tells which of the calls
// it held may carry what the stored call lacked: a held call is otherwise
// the stored call sent again, and a caller may take it as judged already
// when the stored one was (a partition freed as idle: the pipeline).
type AnswerReporter interface {
	ResponseComparer
	// AppendCallsAnswered is AppendCallsCompared that also returns, in
	// order, the indexes of the held calls that answered where the stored
	// call had no answer (the store keeps the answer aside, durably, until
	// a commit names the call in Results.Answered), or whose stored call
	// could not be read to tell.
	AppendCallsAnswered(ctx context.Context, calls []Record) (stored int, held, differ, answered []int, err error)
}

// AnswerKeeper is an AnswerReporter that can list the answers it keeps
// aside: a commit never named their calls (Results.Answered). The replay
// after a restart hands the engine those of the calls whose judgement was
// never committed, as the live run had them: the sender, told they were
// stored, does not send them again (review rev18l, D3). A store that keeps
// no answers aside (ClickHouse) does not implement it.
type AnswerKeeper interface {
	AnswerReporter
	// AnswersAside returns the answers kept aside whose calls are dated
	// from since on (every one when since is zero), in no order. It reads
	// only those rows; safe for concurrent use.
	AnswersAside(ctx context.Context, since time.Time) ([]Record, error)
}

// FindingTime is the event time of the newest stored finding of one server
// and kind (NewestFinder).
type FindingTime struct {
	Server string
	Kind   Kind
	Time   time.Time
}

// NewestFinder is a Store that tells, for each server and kind, the event
// time of its newest stored finding: serve seeds
// mcpaudit_finding_last_event_timestamp_seconds from it at start, so that
// the gauge does not read empty after a restart until the next finding
// (op21's D6). Both stores implement it.
type NewestFinder interface {
	// NewestFindings returns the newest finding time of each server and
	// kind among the stored findings of every tenant, in every lifecycle
	// state (a withdrawn finding was announced, and the gauge keeps it),
	// newest first, at most limit of them (all when limit is 0). Safe for
	// concurrent use.
	NewestFindings(ctx context.Context, limit int) ([]FindingTime, error)
}

// TooLateCounter is a Store that counts the calls committed as too late
// to be judged (Results.TooLate) by tenant in one query, without reading
// their references: serve counts those of the runs before it once at
// start, for its status, and the replay reads the references it needs
// from its horizon only (TooLateCalls). Both stores implement it.
type TooLateCounter interface {
	// CountTooLate returns, by tenant, how many calls TooLateCalls(ctx,
	// time.Time{}) would return; tenants with none are left out. Safe for
	// concurrent use.
	CountTooLate(ctx context.Context) (map[string]int64, error)
}

// ID returns the stable identity of a finding: the same evidence always
// gives the same ID, so a finding re-derived after a restart is recognized.
func (f *Finding) ID() string {
	h := sha256.New()
	for _, s := range []string{string(f.Kind), f.Server, f.Tenant, f.Document, f.Key} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, c := range f.Calls {
		h.Write([]byte(c))
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	return "f_" + hex.EncodeToString(h.Sum(sum[:0])[:10])
}

package clickhouse

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// The rows below are what one batch inserts, in the columns' order. They are
// also what the spool keeps (gob: strings are kept byte for byte), so a
// field renamed here makes the spooled batches of the old release lose it.

// Flags of a call row.
const (
	flagArguments = 1 << iota
	flagResponded
	flagResult
	flagError
	flagErrorData
	flagFailure
	flagFingerprintDerived
)

type callRow struct {
	Tenant         string
	Server         string
	Document       string
	Time           int64
	TimeNanos      uint32
	ID             string
	OtherDocuments []string
	DurationNS     int64
	Session        string
	Client         string
	TraceID        string
	SpanID         string
	Fingerprint    string
	RPCID          string
	Method         string
	Tool           string
	ToolLabel      string
	Arguments      string
	Result         string
	ErrorCode      int64
	ErrorMessage   string
	ErrorData      string
	TransportError string
	Source         string
	Outcome        string
	FailureCode    string
	FailureAction  string
	FailureMessage string
	// Reading is audit.AppendReading of the record; empty in rows stored
	// before it was kept.
	Reading string
	Flags   uint8
	Version uint64
	// Chain is the nonce of the chain entry that covers the row (chain.go);
	// 0 until the batch is chained, just before its insert.
	Chain uint64
}

var callColumns = []string{
	"tenant", "server", "document", "time", "time_nanos", "id", "other_documents", "duration_ns",
	"session", "client", "trace_id", "span_id", "fingerprint", "rpc_id", "method", "tool", "tool_label",
	"arguments", "result", "error_code", "error_message", "error_data", "transport_error",
	"source", "outcome", "failure_code", "failure_action", "failure_message", "reading", "flags", "version",
	"chain_entry",
}

type writeRow struct {
	Tenant     string
	Server     string
	Document   string
	Time       int64
	TimeNanos  uint32
	CallID     string
	Seq        int32
	Session    string
	Tool       string
	Key        string
	State      string
	Reason     string
	Action     string
	StateDelay int64 // StateTime - Time in nanoseconds

	Version uint64
}

var writeColumns = []string{
	"tenant", "server", "document", "time", "time_nanos", "call_id", "seq", "session", "tool",
	"key", "state", "reason", "action", "state_delay_ns", "version",
}

type findingRow struct {
	Tenant      string
	Server      string
	Document    string
	Time        int64
	TimeNanos   uint32
	ID          string
	Kind        string
	Severity    string
	Key         string
	Session     string
	Calls       []string
	Reason      string
	RetryAction string
	Summary     string
	Version     uint64
	// Chain is as in callRow.
	Chain uint64
}

var findingColumns = []string{
	"tenant", "server", "document", "time", "time_nanos", "id", "kind", "severity", "key",
	"session", "calls", "reason", "retry_action", "summary", "version", "chain_entry",
}

type watermarkRow struct {
	Replica   string
	Time      int64
	TimeNanos uint32
	Version   uint64
}

var watermarkColumns = []string{"replica", "time", "time_nanos", "version"}

// tooLateRow is a row of too_late: a call the detector counted too late to
// be judged. Version is the commit's.
type tooLateRow struct {
	Tenant    string
	Time      int64
	TimeNanos uint32
	CallID    string
	Version   uint64
}

var tooLateColumns = []string{"tenant", "time", "time_nanos", "call_id", "version"}

// maxTime is the last second a DateTime holds.
var maxTime = time.Unix(1<<32-1, 999999999)

// splitTime returns the stored form of t: unix seconds and nanoseconds. The
// zero time is stored as 0, 0 (1970-01-01T00:00:00Z reads back as the zero
// time); times a DateTime cannot hold are refused.
func splitTime(t time.Time) (int64, uint32, error) {
	if t.IsZero() {
		return 0, 0, nil
	}
	if t.Before(time.Unix(0, 0)) || t.After(maxTime) {
		return 0, 0, fmt.Errorf("time %s is outside what ClickHouse DateTime holds (1970 to 2106)", t.Format(time.RFC3339Nano))
	}
	return t.Unix(), uint32(t.Nanosecond()), nil
}

// joinTime is the inverse of splitTime; times come back in UTC.
func joinTime(sec int64, nanos uint32) time.Time {
	if sec == 0 && nanos == 0 {
		return time.Time{}
	}
	return time.Unix(sec, int64(nanos)).UTC()
}

func callRowOf(r *audit.Record) (callRow, error) {
	var scratch []byte
	return callRowWith(r, &scratch)
}

// callRowWith is callRowOf with a buffer of the caller's to encode the
// reading in before it is copied into the row.
func callRowWith(r *audit.Record, scratch *[]byte) (callRow, error) {
	c := r.Call
	if c == nil {
		return callRow{}, fmt.Errorf("call record without a call")
	}
	if c.ID == "" {
		return callRow{}, fmt.Errorf("call without an id (source %q)", c.Source)
	}
	sec, ns, err := splitTime(c.Time)
	if err != nil {
		return callRow{}, fmt.Errorf("call %s: %w", c.ID, err)
	}
	row := callRow{
		Tenant: c.Tenant, Server: c.Server, Time: sec, TimeNanos: ns, ID: c.ID,
		DurationNS: int64(c.Duration), Session: c.Session, Client: c.Client,
		TraceID: c.TraceID, SpanID: c.SpanID, RPCID: c.RPCID, Method: c.Method, Tool: c.Tool,
		ToolLabel: r.Tool, Arguments: string(c.Arguments), Result: string(c.Result),
		TransportError: c.TransportError, Source: c.Source, Outcome: string(r.Outcome),
	}
	*scratch = audit.AppendReading((*scratch)[:0], r)
	row.Reading = string(*scratch)
	docs := r.Documents()
	// The first document orders the table; the others are kept beside it.
	// A first document "" would not come back apart from the others: such a
	// list is kept whole.
	row.OtherDocuments = []string{}
	switch {
	case len(docs) > 0 && docs[0] != "":
		row.Document = docs[0]
		row.OtherDocuments = docs[1:]
	case len(docs) > 0:
		row.OtherDocuments = docs
	}
	if c.Arguments != nil {
		row.Flags |= flagArguments
	}
	if c.Responded {
		row.Flags |= flagResponded
	}
	if c.Result != nil {
		row.Flags |= flagResult
	}
	if e := c.Error; e != nil {
		row.Flags |= flagError
		row.ErrorCode, row.ErrorMessage = e.Code, e.Message
		if e.Data != nil {
			row.Flags |= flagErrorData
			row.ErrorData = string(e.Data)
		}
	}
	if f := r.Failure; f != nil {
		row.Flags |= flagFailure
		row.FailureCode, row.FailureAction, row.FailureMessage = f.Code, string(f.Action), f.Message
	}
	// A fingerprint is 16 incompressible bytes, and nearly always the one
	// the request gives: that one is derived again when read.
	switch {
	case c.Fingerprint == "":
	case store.Derived(c):
		row.Flags |= flagFingerprintDerived
	default:
		row.Fingerprint = c.Fingerprint
	}
	return row, nil
}

// record rebuilds the record of a row: the call and its stored reading.
func (row *callRow) record() *audit.Record {
	c := &audit.Call{
		ID: row.ID, Time: joinTime(row.Time, row.TimeNanos), Duration: time.Duration(row.DurationNS),
		Server: row.Server, Session: row.Session, Client: row.Client, Tenant: row.Tenant,
		TraceID: row.TraceID, SpanID: row.SpanID, RPCID: row.RPCID, Method: row.Method, Tool: row.Tool,
		Responded: row.Flags&flagResponded != 0, TransportError: row.TransportError, Source: row.Source,
	}
	if row.Flags&flagArguments != 0 {
		c.Arguments = []byte(row.Arguments)
	}
	if row.Flags&flagResult != 0 {
		c.Result = []byte(row.Result)
	}
	if row.Flags&flagError != 0 {
		c.Error = &audit.RPCError{Code: row.ErrorCode, Message: row.ErrorMessage}
		if row.Flags&flagErrorData != 0 {
			c.Error.Data = []byte(row.ErrorData)
		}
	}
	c.Fingerprint = row.Fingerprint
	if row.Flags&flagFingerprintDerived != 0 {
		c.Fingerprint = store.Fingerprint(c)
	}
	rec := &audit.Record{Call: c}
	if row.Reading != "" && audit.ReadReading([]byte(row.Reading), rec) == nil {
		return rec
	}
	// A row stored before readings were kept: its outcome and failure,
	// without operations.
	rec.Outcome, rec.Tool = audit.Outcome(row.Outcome), row.ToolLabel
	if row.Flags&flagFailure != 0 {
		rec.Failure = &audit.Failure{Code: row.FailureCode, Action: audit.RetryAction(row.FailureAction), Message: row.FailureMessage}
	}
	return rec
}

func writeRowOf(w *audit.Write, version uint64) (writeRow, error) {
	sec, ns, err := splitTime(w.Time)
	if err != nil {
		return writeRow{}, fmt.Errorf("write %s/%d: %w", w.CallID, w.Seq, err)
	}
	delay := int64(noStateTime)
	if !w.StateTime.IsZero() {
		if _, _, err := splitTime(w.StateTime); err != nil {
			return writeRow{}, fmt.Errorf("write %s/%d: state %w", w.CallID, w.Seq, err)
		}
		delay = w.StateTime.UnixNano() - (sec*1e9 + int64(ns))
	}
	return writeRow{
		Tenant: w.Tenant, Server: w.Server, Document: w.Document, Time: sec, TimeNanos: ns,
		CallID: w.CallID, Seq: int32(w.Seq), Session: w.Session, Tool: w.Tool, Key: w.Key,
		State: string(w.State), Reason: string(w.Reason), Action: string(w.Action),
		StateDelay: delay, Version: version,
	}, nil
}

// noStateTime is the state delay of a write without a state time.
const noStateTime = math.MinInt64

func (row *writeRow) write() audit.Write {
	w := audit.Write{
		CallID: row.CallID, Seq: int(row.Seq), Time: joinTime(row.Time, row.TimeNanos),
		Server: row.Server, Tenant: row.Tenant, Session: row.Session, Tool: row.Tool,
		Document: row.Document, Key: row.Key, State: audit.WriteState(row.State),
		Reason: audit.Reason(row.Reason), Action: audit.RetryAction(row.Action),
	}
	if row.StateDelay != noStateTime {
		w.StateTime = time.Unix(row.Time, int64(row.TimeNanos)+row.StateDelay).UTC()
	}
	return w
}

func findingRowOf(f *audit.Finding) (findingRow, error) {
	sec, ns, err := splitTime(f.Time)
	if err != nil {
		return findingRow{}, fmt.Errorf("finding %s: %w", f.ID(), err)
	}
	calls := f.Calls
	if calls == nil {
		calls = []string{}
	}
	sev := f.Severity
	if sev == "" {
		sev = f.Kind.Severity()
	}
	return findingRow{
		Tenant: f.Tenant, Server: f.Server, Document: f.Document, Time: sec, TimeNanos: ns,
		ID: f.ID(), Kind: string(f.Kind), Severity: string(sev), Key: f.Key, Session: f.Session,
		Calls: calls, Reason: string(f.Reason), RetryAction: string(f.RetryAction), Summary: f.Summary,
	}, nil
}

func (row *findingRow) finding() audit.Finding {
	return audit.Finding{
		Kind: audit.Kind(row.Kind), Severity: audit.Severity(row.Severity), Server: row.Server,
		Tenant: row.Tenant, Document: row.Document, Key: row.Key, Session: row.Session,
		Time: joinTime(row.Time, row.TimeNanos), Calls: row.Calls, Reason: audit.Reason(row.Reason),
		RetryAction: audit.RetryAction(row.RetryAction), Summary: row.Summary,
	}
}

// Tables a batch writes. They are numbered as a spooled batch's
// acknowledged tables (batch.Done) were before too_late came; insertOrder
// is the order they are written in: the watermark goes last, so that a
// watermark is never stored before what it covers.
const (
	tCalls = iota
	tWrites
	tFindings
	tWatermarks
	tTooLate
	nTables
)

var tableNames = [nTables]string{"calls", "writes", "findings", "watermarks", "too_late"}

var insertOrder = [nTables]int{tCalls, tWrites, tFindings, tTooLate, tWatermarks}

// batch is what one insert round sends: the rows of every AppendCalls and
// Commit collected in one batch window. It is built once, client-side, and
// re-sent unchanged (same rows, same versions, same token) by every retry
// and after a spool, so that a retry can be recognized.
type batch struct {
	Calls      []callRow
	Writes     []writeRow
	Findings   []findingRow
	Watermarks []watermarkRow
	// TooLate names the calls counted too late (audit.Results.TooLate);
	// encoded last in the spool, so that a batch spooled before it came
	// reads back with none.
	TooLate []tooLateRow
	// Token identifies the batch; each table's insert carries Token:table as
	// its insert_deduplication_token.
	Token string
	// Done marks the tables already acknowledged by ClickHouse.
	Done [nTables]bool

	spooled bool
	// chain holds the chain entries of the batch while it is inserted
	// (chain.go); never spooled: a batch is chained again at each insert
	// that starts without them.
	chain *batchChain
	// index finds rows by identity while the batch is built. Calls and
	// write attempts are identified within their tenant: two tenants may
	// post the same exchange.
	callIndex    map[callKey]bool
	writeIndex   map[writeKey]int
	findingIndex map[string]bool
	tooLateIndex map[callKey]bool
}

type callKey struct{ tenant, id string }

type writeKey struct {
	tenant, callID string
	seq            int32
}

func (b *batch) rows() int {
	return len(b.Calls) + len(b.Writes) + len(b.Findings) + len(b.Watermarks) + len(b.TooLate)
}

// addTooLate adds too_late rows, each call once.
func (b *batch) addTooLate(rows []tooLateRow) {
	if len(rows) == 0 {
		return
	}
	if b.tooLateIndex == nil {
		b.tooLateIndex = map[callKey]bool{}
		for _, r := range b.TooLate {
			b.tooLateIndex[callKey{r.Tenant, r.CallID}] = true
		}
	}
	for _, r := range rows {
		k := callKey{r.Tenant, r.CallID}
		if !b.tooLateIndex[k] {
			b.tooLateIndex[k] = true
			b.TooLate = append(b.TooLate, r)
		}
	}
}

// addCalls adds call rows, skipping ids the batch already has.
func (b *batch) addCalls(rows []callRow) {
	// Sized for the rows at once: a request of 512 calls is a batch of its
	// own with one sender, and growing both step by step took as long as
	// encoding the batch for the spool.
	if b.callIndex == nil {
		b.callIndex = make(map[callKey]bool, len(rows))
	}
	b.Calls = slices.Grow(b.Calls, len(rows))
	for _, r := range rows {
		if k := (callKey{r.Tenant, r.ID}); !b.callIndex[k] {
			b.callIndex[k] = true
			b.Calls = append(b.Calls, r)
		}
	}
}

// takeCalls is addCalls for rows that nobody reads after: the first rows of
// an empty batch become its rows, without a copy (with one sender a batch
// is one request), the ids repeated among them dropped in place.
func (b *batch) takeCalls(rows []callRow) {
	if len(b.Calls) > 0 || b.callIndex != nil {
		b.addCalls(rows)
		return
	}
	b.callIndex = make(map[callKey]bool, len(rows))
	kept := rows[:0]
	for i := range rows {
		if k := (callKey{rows[i].Tenant, rows[i].ID}); !b.callIndex[k] {
			b.callIndex[k] = true
			kept = append(kept, rows[i])
		}
	}
	b.Calls = kept
}

// addResults adds write, finding and watermark rows; of one write attempt
// only the latest state is kept: the highest version, and within one
// commit (one version) the later row.
func (b *batch) addResults(writes []writeRow, findings []findingRow, wm *watermarkRow) {
	if b.writeIndex == nil {
		b.writeIndex, b.findingIndex = map[writeKey]int{}, map[string]bool{}
	}
	for _, w := range writes {
		k := writeKey{w.Tenant, w.CallID, w.Seq}
		if i, ok := b.writeIndex[k]; ok {
			if w.Version >= b.Writes[i].Version {
				b.Writes[i] = w
			}
			continue
		}
		b.writeIndex[k] = len(b.Writes)
		b.Writes = append(b.Writes, w)
	}
	for _, f := range findings {
		if !b.findingIndex[f.ID] {
			b.findingIndex[f.ID] = true
			b.Findings = append(b.Findings, f)
		}
	}
	if wm != nil && (len(b.Watermarks) == 0 || wm.Version > b.Watermarks[0].Version) {
		b.Watermarks = []watermarkRow{*wm}
	}
}

// seal stamps the calls and findings with the version that makes the first
// stored copy of an id win, and computes the token from the identities of
// the rows: the same rows always give the same token. A batch is sealed
// once; retries and the spool keep both.
func (b *batch) seal() {
	first := ^uint64(time.Now().UnixNano())
	for i := range b.Calls {
		b.Calls[i].Version = first
	}
	for i := range b.Findings {
		b.Findings[i].Version = first
	}
	b.finish()
}

// partial reports whether ClickHouse acknowledged some tables of b already.
func (b *batch) partial() bool { return b.Done != [nTables]bool{} }

// merge adds the rows of o, a spooled batch, to b, another one: the spool
// drains several batches in one insert. Versions stay as sealed; finish
// computes the token of the whole.
func (b *batch) merge(o *batch) {
	if b.callIndex == nil {
		calls, writes, findings, wms := b.Calls, b.Writes, b.Findings, b.Watermarks
		b.Calls, b.Writes, b.Findings, b.Watermarks = nil, nil, nil, nil
		b.addCalls(calls)
		b.addResults(writes, findings, nil)
		for i := range wms {
			b.addResults(nil, nil, &wms[i])
		}
	}
	b.addCalls(o.Calls)
	b.addResults(o.Writes, o.Findings, nil)
	for i := range o.Watermarks {
		b.addResults(nil, nil, &o.Watermarks[i])
	}
	b.addTooLate(o.TooLate)
}

// finish computes the token from the identities of the rows and drops the
// indexes used while building.
func (b *batch) finish() {
	h := sha256.New()
	var buf [8]byte
	put := func(s string) {
		binary.LittleEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	putInt := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	put("calls")
	for i := range b.Calls {
		put(b.Calls[i].Tenant)
		put(b.Calls[i].ID)
	}
	put("writes")
	for i := range b.Writes {
		put(b.Writes[i].Tenant)
		put(b.Writes[i].CallID)
		putInt(uint64(b.Writes[i].Seq))
		putInt(b.Writes[i].Version)
	}
	put("findings")
	for i := range b.Findings {
		put(b.Findings[i].ID)
	}
	put("watermarks")
	for i := range b.Watermarks {
		put(b.Watermarks[i].Replica)
		putInt(b.Watermarks[i].Version)
	}
	// Only a batch that names calls too late hashes them: the token of
	// every other batch is what it was before too_late came.
	if len(b.TooLate) > 0 {
		put("too_late")
		for i := range b.TooLate {
			put(b.TooLate[i].Tenant)
			put(b.TooLate[i].CallID)
		}
	}
	b.Token = hex.EncodeToString(h.Sum(nil)[:16])
	b.callIndex, b.writeIndex, b.findingIndex, b.tooLateIndex = nil, nil, nil, nil
}

// tableRows returns how many rows b holds for table t.
func (b *batch) tableRows(t int) int {
	switch t {
	case tCalls:
		return len(b.Calls)
	case tWrites:
		return len(b.Writes)
	case tFindings:
		return len(b.Findings)
	case tTooLate:
		return len(b.TooLate)
	default:
		return len(b.Watermarks)
	}
}

// columns returns the column names of table t and the values of its rows
// lo to hi, for a columnar insert.
func (b *batch) columns(t, lo, hi int) (names []string, cols []any) {
	switch t {
	case tCalls:
		return callColumns, callColumnValues(b.Calls[lo:hi])
	case tWrites:
		return writeColumns, writeColumnValues(b.Writes[lo:hi])
	case tFindings:
		return findingColumns, findingColumnValues(b.Findings[lo:hi])
	case tTooLate:
		return tooLateColumns, tooLateColumnValues(b.TooLate[lo:hi])
	default:
		return watermarkColumns, watermarkColumnValues(b.Watermarks[lo:hi])
	}
}

// Limits of one block of an insert (chunkEnd). An insert of a drained
// backlog holds up to four batch sizes of rows; encoded as one block, the
// driver's column and compression buffers grew to the size of the whole
// insert (tens of MB) and its connection kept them. Sent as blocks of about
// insertBlockBytes, in one INSERT, the server still makes one part of them
// (it squashes the blocks of an insert up to min_insert_block_size_rows,
// about a million rows), and the client holds one block at a time.
const (
	insertBlockBytes = 2 << 20
	insertBlockRows  = 16384
)

// chunkEnd returns where the block of table t that starts at row lo ends:
// after insertBlockRows rows, or once the rows' texts pass
// insertBlockBytes (calls carry their arguments and results; the rows of
// the other tables are small).
func (b *batch) chunkEnd(t, lo int) int {
	n := b.tableRows(t)
	hi := min(n, lo+insertBlockRows)
	if t != tCalls {
		return hi
	}
	size := 0
	for i := lo; i < hi; i++ {
		size += b.Calls[i].textBytes()
		if size >= insertBlockBytes {
			return i + 1
		}
	}
	return hi
}

// textBytes is about what the texts of the batch's calls take (the rows of
// the other tables are small).
func (b *batch) textBytes() int64 {
	var n int64
	for i := range b.Calls {
		n += int64(b.Calls[i].textBytes())
	}
	return n
}

// textBytes is about what the row's texts take encoded.
func (r *callRow) textBytes() int {
	n := len(r.Tenant) + len(r.Server) + len(r.Document) + len(r.ID) + len(r.Session) + len(r.Client) +
		len(r.TraceID) + len(r.SpanID) + len(r.Fingerprint) + len(r.RPCID) + len(r.Method) + len(r.Tool) +
		len(r.ToolLabel) + len(r.Arguments) + len(r.Result) + len(r.ErrorMessage) + len(r.ErrorData) +
		len(r.TransportError) + len(r.Source) + len(r.Outcome) + len(r.FailureCode) + len(r.FailureAction) +
		len(r.FailureMessage) + len(r.Reading)
	for _, d := range r.OtherDocuments {
		n += len(d)
	}
	return n
}

func callColumnValues(rows []callRow) []any {
	return []any{
		col(rows, func(r *callRow) string { return r.Tenant }),
		col(rows, func(r *callRow) string { return r.Server }),
		col(rows, func(r *callRow) string { return r.Document }),
		col(rows, func(r *callRow) int64 { return r.Time }),
		col(rows, func(r *callRow) uint32 { return r.TimeNanos }),
		col(rows, func(r *callRow) string { return r.ID }),
		col(rows, func(r *callRow) []string { return r.OtherDocuments }),
		col(rows, func(r *callRow) int64 { return r.DurationNS }),
		col(rows, func(r *callRow) string { return r.Session }),
		col(rows, func(r *callRow) string { return r.Client }),
		col(rows, func(r *callRow) string { return r.TraceID }),
		col(rows, func(r *callRow) string { return r.SpanID }),
		col(rows, func(r *callRow) string { return r.Fingerprint }),
		col(rows, func(r *callRow) string { return r.RPCID }),
		col(rows, func(r *callRow) string { return r.Method }),
		col(rows, func(r *callRow) string { return r.Tool }),
		col(rows, func(r *callRow) string { return r.ToolLabel }),
		col(rows, func(r *callRow) string { return r.Arguments }),
		col(rows, func(r *callRow) string { return r.Result }),
		col(rows, func(r *callRow) int64 { return r.ErrorCode }),
		col(rows, func(r *callRow) string { return r.ErrorMessage }),
		col(rows, func(r *callRow) string { return r.ErrorData }),
		col(rows, func(r *callRow) string { return r.TransportError }),
		col(rows, func(r *callRow) string { return r.Source }),
		col(rows, func(r *callRow) string { return r.Outcome }),
		col(rows, func(r *callRow) string { return r.FailureCode }),
		col(rows, func(r *callRow) string { return r.FailureAction }),
		col(rows, func(r *callRow) string { return r.FailureMessage }),
		col(rows, func(r *callRow) string { return r.Reading }),
		col(rows, func(r *callRow) uint8 { return r.Flags }),
		col(rows, func(r *callRow) uint64 { return r.Version }),
		col(rows, func(r *callRow) uint64 { return r.Chain }),
	}
}

func writeColumnValues(rows []writeRow) []any {
	return []any{
		col(rows, func(r *writeRow) string { return r.Tenant }),
		col(rows, func(r *writeRow) string { return r.Server }),
		col(rows, func(r *writeRow) string { return r.Document }),
		col(rows, func(r *writeRow) int64 { return r.Time }),
		col(rows, func(r *writeRow) uint32 { return r.TimeNanos }),
		col(rows, func(r *writeRow) string { return r.CallID }),
		col(rows, func(r *writeRow) int32 { return r.Seq }),
		col(rows, func(r *writeRow) string { return r.Session }),
		col(rows, func(r *writeRow) string { return r.Tool }),
		col(rows, func(r *writeRow) string { return r.Key }),
		col(rows, func(r *writeRow) string { return r.State }),
		col(rows, func(r *writeRow) string { return r.Reason }),
		col(rows, func(r *writeRow) string { return r.Action }),
		col(rows, func(r *writeRow) int64 { return r.StateDelay }),
		col(rows, func(r *writeRow) uint64 { return r.Version }),
	}
}

func findingColumnValues(rows []findingRow) []any {
	return []any{
		col(rows, func(r *findingRow) string { return r.Tenant }),
		col(rows, func(r *findingRow) string { return r.Server }),
		col(rows, func(r *findingRow) string { return r.Document }),
		col(rows, func(r *findingRow) int64 { return r.Time }),
		col(rows, func(r *findingRow) uint32 { return r.TimeNanos }),
		col(rows, func(r *findingRow) string { return r.ID }),
		col(rows, func(r *findingRow) string { return r.Kind }),
		col(rows, func(r *findingRow) string { return r.Severity }),
		col(rows, func(r *findingRow) string { return r.Key }),
		col(rows, func(r *findingRow) string { return r.Session }),
		col(rows, func(r *findingRow) []string { return r.Calls }),
		col(rows, func(r *findingRow) string { return r.Reason }),
		col(rows, func(r *findingRow) string { return r.RetryAction }),
		col(rows, func(r *findingRow) string { return r.Summary }),
		col(rows, func(r *findingRow) uint64 { return r.Version }),
		col(rows, func(r *findingRow) uint64 { return r.Chain }),
	}
}

func watermarkColumnValues(rows []watermarkRow) []any {
	return []any{
		col(rows, func(r *watermarkRow) string { return r.Replica }),
		col(rows, func(r *watermarkRow) int64 { return r.Time }),
		col(rows, func(r *watermarkRow) uint32 { return r.TimeNanos }),
		col(rows, func(r *watermarkRow) uint64 { return r.Version }),
	}
}

func tooLateColumnValues(rows []tooLateRow) []any {
	return []any{
		col(rows, func(r *tooLateRow) string { return r.Tenant }),
		col(rows, func(r *tooLateRow) int64 { return r.Time }),
		col(rows, func(r *tooLateRow) uint32 { return r.TimeNanos }),
		col(rows, func(r *tooLateRow) string { return r.CallID }),
		col(rows, func(r *tooLateRow) uint64 { return r.Version }),
	}
}

// col extracts one column from rows.
func col[R, T any](rows []R, f func(*R) T) []T {
	out := make([]T, len(rows))
	for i := range rows {
		out[i] = f(&rows[i])
	}
	return out
}

package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// wallStart is where the tests' wall clocks start: after every event of
// the generated captures (2026-11-02 09:00 to about 10:30), so that no
// call is ahead of the collector's clock unless a test means it to be.
var wallStart = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

// testClock is the wall clock the pipeline is given. It moves only when
// the test moves it, so that watermarks, idle sources and the hold of a
// new partition follow the test's steps, not the machine's speed.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *testClock { return &testClock{t: t} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// recorder is a sink that keeps what the pipeline announced.
type recorder struct {
	mu       sync.Mutex
	calls    map[string]int
	callTime map[string]time.Time
	callPart map[string]detect.PartitionKey
	writes   map[string]int // "call/seq/state"
	findings map[string]int
	// withdrawn counts the findings told withdrawn
	// (audit.FindingWithdrawer), as the metrics' withdrawn counter does.
	withdrawn map[string]int
	// pending counts, per tenant, the writes told pending and not yet
	// told leaving it, as the metrics' pending gauge keeps them.
	pending map[string]int
	// block, when set, holds the first Call until it is closed: the
	// engine goroutine stops there.
	block   chan struct{}
	blocked chan struct{}
	// also are sinks the pipeline tells beside the recorder (a real
	// metrics sink).
	also []audit.Sink
}

func newRecorder() *recorder {
	return &recorder{calls: map[string]int{}, callTime: map[string]time.Time{}, callPart: map[string]detect.PartitionKey{},
		writes: map[string]int{}, findings: map[string]int{}, withdrawn: map[string]int{}, pending: map[string]int{}}
}

// newBlockingRecorder returns a recorder whose next Call blocks the engine
// goroutine (closing rec.blocked) until unblock is called; unblock may be
// called more than once.
func newBlockingRecorder() (rec *recorder, unblock func()) {
	rec = newRecorder()
	release := make(chan struct{})
	rec.block, rec.blocked = release, make(chan struct{})
	released := false
	return rec, func() {
		if !released {
			released = true
			close(release)
		}
	}
}

func (s *recorder) Call(r *audit.Record) {
	s.mu.Lock()
	block := s.block
	s.block = nil
	s.calls[r.Call.ID]++
	s.callTime[r.Call.ID] = r.Call.Time
	s.callPart[r.Call.ID] = detect.PartitionKey{Tenant: r.Call.Tenant, Server: r.Call.Server}
	s.mu.Unlock()
	if block != nil {
		close(s.blocked)
		<-block
	}
}

func (s *recorder) Write(w *audit.Write, prev audit.WriteState) {
	s.mu.Lock()
	s.writes[fmt.Sprintf("%s/%d/%s", w.CallID, w.Seq, w.State)]++
	if prev == audit.StatePending {
		s.pending[w.Tenant]--
	}
	if w.State == audit.StatePending {
		s.pending[w.Tenant]++
	}
	s.mu.Unlock()
}

func (s *recorder) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.withdrawn[f.ID()]++
}

func (s *recorder) Finding(f *audit.Finding) {
	s.mu.Lock()
	s.findings[f.ID()]++
	s.mu.Unlock()
}

// snapshot returns copies of what was announced so far.
func (s *recorder) snapshot() (calls, findings map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls, findings = map[string]int{}, map[string]int{}
	for k, v := range s.calls {
		calls[k] = v
	}
	for k, v := range s.findings {
		findings[k] = v
	}
	return calls, findings
}

// syncBuffer collects the pipeline's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// errCrashed is what the store answers once the process is taken as dead.
var errCrashed = errors.New("the process died")

// crashStore is the real store with a crash switch, the one fault the
// real store cannot show in one process: once crashed, every write fails
// and the state file is put back as it was at the crash when the run is
// closed, as if the process had died at that moment (cmd/mcpaudit's
// TestServe_KillLoop kills a real serve process with SIGKILL).
type crashStore struct {
	audit.Store
	marksPath string

	mu      sync.RWMutex
	crashed bool
	marks   []byte // the state file at the crash; nil when there was none

	// tells is what the pipeline is shown of the store's report of the
	// calls it held: everything (the embedded store), tellsCompared (the
	// calls held and those refused, not those that may complete the
	// stored call: a store before audit.AnswerReporter), or tellsNothing
	// (the ClickHouse store). Set by a fault func.
	tells int
	// dieAfterAppend makes the next AppendCalls commit its calls and the
	// process die before the acknowledgement.
	dieAfterAppend atomic.Bool
	// failAppend makes AppendCalls fail (the store unreachable) without
	// crashing.
	failAppend atomic.Bool
	// appendGate, when set, holds AppendCalls until it is closed;
	// appendEntered is closed when it is entered and appended is set when
	// it returned.
	appendGate    chan struct{}
	appendEntered chan struct{}
	appended      atomic.Bool
	// failWrites makes Writes fail (the store cannot answer).
	failWrites atomic.Bool
	// forgetTooLate makes the store keep no calls too late, as the
	// ClickHouse store does, and as a store migrated from schema 5 holds
	// none stored before: Commit drops Results.TooLate and TooLateCalls
	// returns audit.ErrUnsupported.
	forgetTooLate atomic.Bool
	// dieAtCommit makes the process die at the next Commit of output
	// (writes or findings; one of the watermark alone goes through),
	// before it commits: what the engine judged since the last commit (a
	// late call's withdrawal) is lost, the calls acknowledged before stay
	// stored.
	dieAtCommit atomic.Bool
	// dieAtChange makes the process die at the next ChangeFinding, before
	// the change: the commit before it went through (a late call's or a
	// late answer's output stored), its withdrawal is lost (fx21).
	dieAtChange atomic.Bool
	// failChange makes ChangeFinding fail as a store that cannot be
	// reached (audit.ErrUnavailable) while Commit goes through: the
	// pipeline keeps a withdrawal to try again at the next commit.
	failChange atomic.Bool
	// failCommit makes Commit fail as a store that cannot be reached
	// (audit.ErrUnavailable) without crashing: the pipeline keeps the
	// output for the next commit.
	failCommit atomic.Bool
}

// ChangeFinding refuses, once the process is taken as dead, to change a
// finding's lifecycle, as every other write.
func (s *crashStore) ChangeFinding(ctx context.Context, c audit.FindingChange) (audit.FindingStatus, error) {
	if s.dieAtChange.Load() {
		s.crash()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.crashed {
		return audit.FindingStatus{}, errCrashed
	}
	if s.failChange.Load() {
		return audit.FindingStatus{}, fmt.Errorf("cannot change finding %s: %w", c.FindingID, audit.ErrUnavailable)
	}
	return s.Store.ChangeFinding(ctx, c)
}

func (s *crashStore) TooLateCalls(ctx context.Context, since time.Time) ([]audit.CallRef, error) {
	if s.forgetTooLate.Load() {
		return nil, fmt.Errorf("cannot read the calls too late: %w", audit.ErrUnsupported)
	}
	return s.Store.TooLateCalls(ctx, since)
}

// AnswersAside passes on the real store's answers kept aside
// (audit.AnswerKeeper), as serve's pipeline reads them at start.
func (s *crashStore) AnswersAside(ctx context.Context, since time.Time) ([]audit.Record, error) {
	k, ok := s.Store.(audit.AnswerKeeper)
	if !ok {
		return nil, fmt.Errorf("cannot read the answers kept aside: %w", audit.ErrUnsupported)
	}
	return k.AnswersAside(ctx, since)
}

func (s *crashStore) Writes(ctx context.Context, q audit.WriteQuery) (audit.WritePage, error) {
	if s.failWrites.Load() {
		return audit.WritePage{}, fmt.Errorf("cannot read writes: %w", audit.ErrUnavailable)
	}
	return s.Store.Writes(ctx, q)
}

// What a crashStore shows of its report of the calls it held (tells).
const (
	tellsAll = iota
	tellsCompared
	tellsNothing
)

// compareOnly shows a store's comparison of responses, not which held
// calls may complete the stored one.
type compareOnly struct{ *crashStore }

func (s compareOnly) AppendCallsCompared(ctx context.Context, recs []audit.Record) (int, []int, []int, error) {
	return s.crashStore.AppendCallsCompared(ctx, recs)
}

// AppendCallsAnswered hides crashStore's: compareOnly is no
// audit.AnswerReporter.
func (compareOnly) AppendCallsAnswered() {}

func (s *crashStore) AppendCalls(ctx context.Context, recs []audit.Record) (int, error) {
	n, _, _, _, err := s.appendCalls(ctx, recs, false)
	return n, err
}

// AppendCallsCompared passes on the real store's comparison of responses
// (audit.ResponseComparer), as serve's pipeline gets it.
func (s *crashStore) AppendCallsCompared(ctx context.Context, recs []audit.Record) (int, []int, []int, error) {
	n, held, differ, _, err := s.appendCalls(ctx, recs, true)
	return n, held, differ, err
}

// AppendCallsAnswered passes on the real store's report of the held calls
// that may complete the stored one (audit.AnswerReporter), as serve's
// pipeline gets it.
func (s *crashStore) AppendCallsAnswered(ctx context.Context, recs []audit.Record) (int, []int, []int, []int, error) {
	return s.appendCalls(ctx, recs, true)
}

func (s *crashStore) appendCalls(ctx context.Context, recs []audit.Record, compare bool) (int, []int, []int, []int, error) {
	if s.appendGate != nil {
		close(s.appendEntered)
		<-s.appendGate
	}
	if s.failAppend.Load() {
		return 0, nil, nil, nil, fmt.Errorf("cannot append calls: %w", audit.ErrUnavailable)
	}
	s.mu.RLock()
	if s.crashed {
		s.mu.RUnlock()
		return 0, nil, nil, nil, errCrashed
	}
	var n int
	var held, differ, answered []int
	var err error
	if c, ok := s.Store.(audit.AnswerReporter); ok && compare {
		n, held, differ, answered, err = c.AppendCallsAnswered(ctx, recs)
	} else {
		n, err = s.Store.AppendCalls(ctx, recs)
	}
	s.mu.RUnlock()
	s.appended.Store(err == nil)
	if err == nil && s.dieAfterAppend.Load() {
		s.crash()
		return 0, nil, nil, nil, errCrashed
	}
	return n, held, differ, answered, err
}

func (s *crashStore) Commit(ctx context.Context, r audit.Results) error {
	if s.dieAtCommit.Load() && (len(r.Writes) > 0 || len(r.Findings) > 0) {
		s.crash()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.crashed {
		return errCrashed
	}
	if s.failCommit.Load() {
		return fmt.Errorf("cannot commit: %w", audit.ErrUnavailable)
	}
	if s.forgetTooLate.Load() {
		r.TooLate = nil
	}
	return s.Store.Commit(ctx, r)
}

// crash stops every write from now on and keeps the state file as it is.
func (s *crashStore) crash() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashed {
		return
	}
	s.crashed = true
	if b, err := os.ReadFile(s.marksPath); err == nil {
		s.marks = b
	}
}

// run is one life of a pipeline over a data directory.
type run struct {
	t      testing.TB
	dir    string
	clock  *testClock
	store  *sqlite.Store
	cs     *crashStore
	p      *pipeline.Pipeline
	rec    *recorder
	logs   *syncBuffer
	closed bool
}

// openRun starts a pipeline over the store in dir (made if missing).
func openRun(t testing.TB, dir string, clock *testClock, edit func(*pipeline.Config), rec *recorder) *run {
	t.Helper()
	return openRunDetect(t, dir, clock, edit, nil, rec)
}

// openRunDetect is openRun with the detector's config edited by dedit.
func openRunDetect(t testing.TB, dir string, clock *testClock, edit func(*pipeline.Config), dedit func(*detect.Config), rec *recorder) *run {
	t.Helper()
	return openRunStore(t, dir, clock, edit, dedit, rec, nil)
}

// openRunStore is openRunDetect with the store's faults set by fault
// before the pipeline starts (and recovers).
func openRunStore(t testing.TB, dir string, clock *testClock, edit func(*pipeline.Config), dedit func(*detect.Config), rec *recorder, fault func(*crashStore)) *run {
	t.Helper()
	return openRunWith(t, dir, clock, edit, dedit, rec, fault, sqlite.Options{Synchronous: "normal"})
}

// openRunWith is openRunStore over a store opened with opts.
func openRunWith(t testing.TB, dir string, clock *testClock, edit func(*pipeline.Config), dedit func(*detect.Config), rec *recorder, fault func(*crashStore), opts sqlite.Options) *run {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(dir, "partitions.json")
	cs := &crashStore{Store: st, marksPath: marks}
	if fault != nil {
		fault(cs)
	}
	cfg := pipeline.NewDefaultConfig()
	cfg.StateFile = marks
	cfg.Now = clock.Now
	cfg.CommitEvery = 10 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	if rec == nil {
		rec = newRecorder()
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dcfg := detect.NewDefaultConfig()
	// These tests step the clock by seconds from a partition's birth: they
	// were written for a new partition that waits 2 s for its sources (the
	// wait's default is now 10 s; collector/detect's joingrace_test.go
	// tests the wait itself).
	dcfg.JoinWait = 2 * time.Second
	if dedit != nil {
		dedit(&dcfg)
	}
	var ps audit.Store = cs
	switch cs.tells {
	case tellsCompared:
		ps = compareOnly{cs}
	case tellsNothing:
		ps = plainStore{cs}
	}
	p, err := pipeline.New(context.Background(), cfg, dcfg, ps, log, append([]audit.Sink{rec}, rec.also...)...)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	r := &run{t: t, dir: dir, clock: clock, store: st, cs: cs, p: p, rec: rec, logs: logs}
	t.Cleanup(func() {
		if !r.closed {
			r.p.Close(context.Background())
			r.store.Close()
		}
	})
	return r
}

// ingest hands the pipeline one request's batches and waits until the
// engine has taken them: the engine notes a call's arrival at the wall
// time it takes it, so a test that moves its clock must let the engine
// take what was sent first.
func (r *run) ingest(batches ...audit.Batch) (int, error) {
	n, err := r.p.Ingest(context.Background(), batches...)
	if err == nil {
		r.p.Status()
	}
	return n, err
}

// steps moves the clock on by n steps of 30 s, asking the engine where it
// stands after each (it judges and commits up to the new time first);
// each, when set, is called first at every step (a neighbour that keeps
// sending).
func (r *run) steps(n int, each func()) {
	r.t.Helper()
	for range n {
		if each != nil {
			each()
		}
		r.clock.Add(30 * time.Second)
		r.status()
	}
}

// saved waits until the engine has found, at the clock's time, the state
// file holding its marks: written then, or unchanged since it was. The
// engine saves it on its commit ticker (Config.CommitEvery, real time), not
// at each status: without this wait a crash right after a step leaves the
// file of whichever step the ticker last saved it at, and a restart's
// watermarks differ from run to run with the machine's speed. The engine
// does not rewrite a file whose marks did not change for stateRefresh
// (10 s): after a step of a second in which nothing changed (a held
// partition, its sources' clocks as they were), a wait for a file written
// at the clock's time waited for a write that never came (flk47:
// TestRestart_KilledDuringHold failed so when the ticker saved the last
// second's calls before the test moved its clock, 1 run in 30 at a load
// of 20).
func (r *run) saved() {
	r.t.Helper()
	now := r.clock.Now()
	giveUp := time.Now().Add(time.Minute)
	for pipeline.StateCurrent(r.p).Before(now) {
		if time.Now().After(giveUp) {
			r.t.Fatalf("the state file was not found holding the engine's marks at %s within a minute (last at %s, last written at %s)", now, pipeline.StateCurrent(r.p), r.p.StateSaved())
		}
		time.Sleep(time.Millisecond)
	}
}

// stepsUntil takes steps of 30 s (steps, each called first at every
// step) until done reports true, at most n of them, and reports whether
// done did. After each step it waits for the engine's ticker to write the
// state file at the new time (saved), which is where idle partitions are
// freed too (expireIdle): the bound is in steps of the test's clock, not in
// real time. A bound in real time (a deadline of 10 s or 20 s around
// steps) was a bound on how many steps a loaded machine managed: under
// -race on a loaded box the partition that needed some 90 steps to be
// freed got 75 to 85 (fl22b).
func (r *run) stepsUntil(n int, each func(), done func() bool) bool {
	r.t.Helper()
	for i := 0; ; i++ {
		if done() {
			return true
		}
		if i == n {
			return false
		}
		r.steps(1, each)
		r.saved()
	}
}

// status asks the engine where it stands; everything acknowledged before
// is taken first.
func (r *run) status() map[detect.PartitionKey]detect.PartitionStatus {
	parts, _ := r.p.Status()
	m := map[detect.PartitionKey]detect.PartitionStatus{}
	for _, p := range parts {
		m[p.PartitionKey] = p
	}
	return m
}

// outcome is what a store holds after a run: findings by id, the state of
// every write and the id of every call.
type outcome struct {
	findings map[string]audit.Finding
	writes   map[string]audit.WriteState
	calls    map[string]int
}

// read reads the outcome from the run's store.
func (r *run) read() outcome {
	r.t.Helper()
	return readStore(r.t, r.store)
}

func readStore(t testing.TB, st audit.Store) outcome {
	t.Helper()
	ctx := context.Background()
	o := outcome{findings: map[string]audit.Finding{}, writes: map[string]audit.WriteState{}, calls: map[string]int{}}
	for cur := ""; ; {
		pg, err := st.Findings(ctx, audit.FindingQuery{Limit: 1000, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range pg.Findings {
			o.findings[f.ID()] = f
		}
		if cur = pg.NextCursor; cur == "" {
			break
		}
	}
	for cur := ""; ; {
		pg, err := st.Writes(ctx, audit.WriteQuery{Limit: 1000, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range pg.Writes {
			o.writes[fmt.Sprintf("%s/%d", w.CallID, w.Seq)] = w.State
		}
		if cur = pg.NextCursor; cur == "" {
			break
		}
	}
	err := st.ScanCalls(ctx, time.Time{}, func(rec *audit.Record) error {
		o.calls[rec.Call.ID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// stop closes the run normally and returns what its store holds.
func (r *run) stop() outcome {
	r.t.Helper()
	if err := r.p.Close(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	o := r.read()
	r.store.Close()
	r.closed = true
	return o
}

// crash takes the process as dead now: nothing more is stored, the state
// file stays as it is. It returns the findings committed before.
func (r *run) crash() map[string]bool {
	r.t.Helper()
	r.cs.crash()
	return r.die()
}

// die closes a run whose store has crashed and returns the findings
// committed before the crash.
func (r *run) die() map[string]bool {
	r.t.Helper()
	r.p.Close(context.Background())
	o := r.read()
	r.store.Close()
	r.closed = true
	if r.cs.marks == nil {
		os.Remove(r.cs.marksPath)
	} else if err := os.WriteFile(r.cs.marksPath, r.cs.marks, 0o644); err != nil {
		r.t.Fatal(err)
	}
	ids := map[string]bool{}
	for id := range o.findings {
		ids[id] = true
	}
	return ids
}

// decode reads capture lines into records (bad lines skipped), as a
// receiver hands them over: fresh records each time, since the pipeline
// keeps what it is given.
func decode(t testing.TB, lines [][]byte) []*audit.Record {
	t.Helper()
	dec, err := capture.NewDecoder(bytes.NewReader(bytes.Join(lines, []byte("\n"))), "capture")
	if err != nil {
		t.Fatal(err)
	}
	rd := dialect.NewReader(dialect.Config{})
	var recs []*audit.Record
	for {
		c, err := dec.Next()
		if err == io.EOF {
			return recs
		}
		if err != nil {
			continue
		}
		recs = append(recs, rd.Read(c))
	}
}

// callLine is a call record of a harmless read (gram_projects) on server,
// in session, at t.
func callLine(server, session string, rpc int, t time.Time) []byte {
	return fmt.Appendf(nil, `{"time":%q,"server":%q,"session":%q,"request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"projects":[]}}}}`,
		t.Format(time.RFC3339Nano), server, session, rpc, rpc)
}

// pendingPatchLine is a gram_patch accepted with sync pending: unless a
// read shows it synced, it is an unverified_write when its window ends.
func pendingPatchLine(session string, rpc int, t time.Time, path string) []byte {
	return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":%q,"request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":%q,"base_revision":3,"expected_hash":"aa","request_id":"req-%d","operations":[{"op":"append_block","target":"h1","text":"x"}]}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":%q,"rev":4,"hash":"bb","replayed":false,"request_id":"req-%d","sync":{"state":"pending"}}}}}`,
		t.Format(time.RFC3339Nano), session, rpc, path, rpc, rpc, path, rpc)
}

// batch is a batch of one source from capture lines.
func batch(t testing.TB, source string, lines ...[]byte) audit.Batch {
	return audit.Batch{Source: source, Records: decode(t, lines)}
}

func ids(b audit.Batch) []string {
	var out []string
	for _, r := range b.Records {
		out = append(out, r.Call.ID)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

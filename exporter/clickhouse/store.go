package clickhouse

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

var _ audit.Store = (*Store)(nil)

// healthInterval is how often an idle store checks that ClickHouse answers.
const healthInterval = 5 * time.Second

// Store keeps calls, write attempts and findings in ClickHouse. Writes are
// collected into batches client-side; while ClickHouse is unreachable they
// go to a local spool and are drained, in order, when it answers again. It
// is safe for concurrent use.
type Store struct {
	opts  Options
	log   *slog.Logger
	spool *spool
	// retries logs failed insert attempts, rate-limited: an outage retries
	// every batch.
	retries *ratelog.Logger

	// conn and caps are set once by connect, before up is closed; read them
	// only after connected() reports true.
	conn   driver.Conn
	caps   capabilities
	layout layout
	up     chan struct{}

	// modeMu orders spool appends with the switch back to direct inserts:
	// while spooling is set every batch goes to the spool, so that nothing
	// overtakes what is spooled.
	modeMu   sync.Mutex
	spooling atomic.Bool
	drained  chan struct{} // closed when the spool empties; guarded by modeMu

	// commitMu makes a commit atomic for the readers of this store that
	// need it (Watermark, FindingIDs, WriteCounts): a batch with results
	// holds it for writing until its watermark is stored, so that they never
	// see a commit's findings without its watermark, nor the reverse.
	commitMu sync.RWMutex

	mu          sync.Mutex // guards the fields below
	backendErr  error      // why ClickHouse is not usable; nil when it is
	downLogged  bool       // an outage's start was logged, its end not yet
	wm          time.Time  // latest watermark committed by this process
	wmVersion   uint64
	lastVersion uint64

	// skippedOnRetry counts the rows a retry found already stored and did
	// not send again (servers without deduplication tokens).
	skippedOnRetry atomic.Int64
	// abandoned are the query ids of inserts that failed on the client's
	// side (servers without deduplication tokens): the server may still
	// be committing their blocks, so a retry's check for stored rows waits
	// until none of them runs (awaitAbandoned). Guarded by abandonedMu.
	abandonedMu sync.Mutex
	abandoned   map[string]bool
	// spoolRejected counts the spool files moved aside as .rejected.
	spoolRejected atomic.Int64
	// spoolTailsCut counts the torn tails recovery cut off spool segments.
	spoolTailsCut atomic.Int64

	collectMu sync.Mutex // held by the inserter filling the next batch

	// chainMu orders the tamper-evidence chains (chain.go): held from the
	// chaining of a batch until its chain rows are stored or its insert is
	// given up, so that entries land in seq order.
	chainMu       sync.Mutex
	heads         map[string]head // this replica's chains, by tenant, as stored
	checkpointSeq uint64          // the last checkpoint of this replica
	lastSigned    string          // what it signed, without its time
	// signable are the cuts this replica's checkpoints may sign: those
	// stored when it first read its chains, and those it made since
	// (review rev20c's D1: a cut someone wrote into chain_cuts while serve
	// ran was signed by its next checkpoint). Nil until the first read.
	signable map[cutID]bool

	// With Ack "log": readers wait for the drain to reach what was
	// acknowledged before they started (settle); progress is closed and
	// replaced each time the drain moves.
	progressMu sync.Mutex
	progress   chan struct{}
	urgent     chan struct{}
	// settles counts the waits for the spool (settle) with Ack "log"
	// since Open; tests read it.
	settles atomic.Int64

	sendMu sync.RWMutex // held for reading while a request is queued
	closed bool
	reqs   chan *request
	quit   chan struct{}
	kick   chan struct{}
	wg     sync.WaitGroup
}

// request is one AppendCalls or Commit waiting for its batch.
type request struct {
	calls     []callRow
	writes    []writeRow
	findings  []findingRow
	tooLate   []tooLateRow
	watermark *watermarkRow
	at        time.Time
	done      chan error
}

func (r *request) rows() int {
	n := len(r.calls) + len(r.writes) + len(r.findings) + len(r.tooLate)
	if r.watermark != nil {
		n++
	}
	return n
}

// Open connects to ClickHouse, detects the server's capabilities, creates or
// migrates the schema (when CreateSchema) and starts the batch writer. When
// ClickHouse cannot be reached, Open still returns a store: it spools writes
// and connects in the background (Ready reports the state). Configuration,
// authentication and schema errors fail Open.
func Open(ctx context.Context, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("invalid clickhouse options: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	sp, err := openSpool(o.Spool.Dir, o.Spool.MaxBytes, 4*o.BatchSize)
	if err != nil {
		return nil, err
	}
	sp.KeepBytes(o.DrainBytes, (*batch).textBytes)
	s := &Store{
		retries:  ratelog.New(log, ratelog.NewDefaultConfig()),
		opts:     o,
		log:      log,
		spool:    sp,
		layout:   layout{DB: o.Database, Cluster: o.Cluster},
		up:       make(chan struct{}),
		drained:  make(chan struct{}),
		reqs:     make(chan *request, 1024),
		quit:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		urgent:   make(chan struct{}, 1),
		progress: make(chan struct{}),
	}
	close(s.drained)
	s.spoolTailsCut.Store(int64(len(sp.Torn())))
	for _, t := range sp.Torn() {
		if t.KeepErr != nil {
			log.Error("clickhouse: a torn tail at the end of a spool segment could not be kept in a file of its own; left in place, not cut, and gone once the segment drains: appends whose sync never returned, not acknowledged (or the last frame, damaged after its sync)",
				"file", t.Path, "at_byte", t.At, "bytes", t.Bytes, "err", t.KeepErr)
			continue
		}
		log.Warn("clickhouse: cut the torn tail off a spool segment, its bytes kept: appends whose sync never returned, not acknowledged (or the last frame, damaged after its sync)",
			"file", t.Path, "at_byte", t.At, "bytes", t.Bytes, "kept", t.Kept)
	}
	if n, bytes := sp.usage(); n > 0 {
		log.Warn("clickhouse: batches left in the spool; draining them", "batches", n, "bytes", bytes, "dir", o.Spool.Dir)
		s.recoverWatermark()
		s.startSpooling(errors.New("batches left in the spool by an earlier run"))
	}
	if err := s.connect(ctx); err != nil {
		if !errors.Is(err, audit.ErrUnavailable) {
			return nil, err
		}
		s.setBackendErr(err) // logs that it is unavailable
		s.modeMu.Lock()
		s.startSpooling(err)
		s.modeMu.Unlock()
	}
	// Sign at once, when ClickHouse answers: the heads a crash left
	// unsigned, or the replica's first (empty) checkpoint.
	s.signNow(false)
	s.wg.Add(3 + o.Inserters)
	for range o.Inserters {
		go s.writeLoop()
	}
	go s.drainLoop()
	go s.retentionLoop()
	go s.checkpointLoop()
	return s, nil
}

// connect opens the connection pool, reads the server version, and sets up
// the schema. It returns an error wrapping audit.ErrUnavailable when the
// server cannot be reached.
func (s *Store) connect(ctx context.Context) error {
	opts, err := ch.ParseDSN(s.opts.DSN)
	if err != nil {
		return fmt.Errorf("invalid clickhouse dsn: %w", err)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = min(5*time.Second, s.opts.InsertTimeout)
	}
	if opts.Compression == nil {
		opts.Compression = &ch.Compression{Method: ch.CompressionLZ4}
	}
	conn, err := openConn(ctx, opts)
	if err != nil {
		return err
	}
	sv, err := conn.ServerVersion()
	if err != nil {
		conn.Close()
		return fmt.Errorf("cannot read the clickhouse server version: %w: %w", audit.ErrUnavailable, err)
	}
	caps := capabilitiesOf(version{sv.Version.Major, sv.Version.Minor, sv.Version.Patch})
	settings := ch.Settings{}
	if caps.LowCardinalityExperimental {
		settings["allow_experimental_low_cardinality_type"] = 1
	}
	if s.opts.Cluster != "" {
		// The insert returns once every shard has its rows, not when the
		// Distributed table has queued them.
		settings["insert_distributed_sync"] = 1
	}
	if len(settings) > 0 {
		conn.Close()
		if opts.Settings == nil {
			opts.Settings = ch.Settings{}
		}
		for k, v := range settings {
			opts.Settings[k] = v
		}
		if conn, err = openConn(ctx, opts); err != nil {
			return err
		}
	}
	s.conn, s.caps, s.layout.Caps = conn, caps, caps
	if s.opts.CreateSchema {
		err := s.migrate(ctx)
		if err == nil && caps.TTL {
			err = s.applyTTL(ctx)
		}
		if err != nil {
			conn.Close()
			s.conn = nil
			return classify(err)
		}
	}
	if err := s.loadHeads(ctx); err != nil {
		conn.Close()
		s.conn = nil
		return classify(fmt.Errorf("cannot read the tamper-evidence chains: %w", err))
	}
	s.log.Info("clickhouse: connected", "server_version", caps.Version.String(), "database", s.opts.Database, "cluster", s.opts.Cluster)
	caps.logFallbacks(s.log)
	close(s.up)
	return nil
}

func openConn(ctx context.Context, opts *ch.Options) (driver.Conn, error) {
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("cannot open clickhouse: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, classify(fmt.Errorf("cannot reach clickhouse: %w", err))
	}
	return conn, nil
}

// connected reports whether connect has succeeded.
func (s *Store) connected() bool {
	select {
	case <-s.up:
		return true
	default:
		return false
	}
}

// reader returns the connection for a query, or an error wrapping
// audit.ErrUnavailable.
func (s *Store) reader() (driver.Conn, error) {
	if s.isClosed() {
		return nil, audit.ErrClosed
	}
	if !s.connected() {
		return nil, fmt.Errorf("cannot query clickhouse: not connected: %w", audit.ErrUnavailable)
	}
	return s.conn, nil
}

// Ready returns nil when ClickHouse answers and nothing waits in the spool;
// otherwise an error wrapping audit.ErrUnavailable that says why and how
// much is spooled (writes are still accepted until the spool is full), or
// audit.ErrClosed after Close.
func (s *Store) Ready() error {
	if s.isClosed() {
		return audit.ErrClosed
	}
	s.mu.Lock()
	err := s.backendErr
	s.mu.Unlock()
	if s.spooling.Load() {
		n, bytes := s.spool.usage()
		if err == nil {
			return fmt.Errorf("clickhouse is back; draining %d spooled batches (%d bytes): %w", n, bytes, audit.ErrUnavailable)
		}
		if errors.Is(err, audit.ErrUnavailable) {
			return fmt.Errorf("clickhouse unavailable, %d batches (%d bytes) spooled: %w", n, bytes, err)
		}
		return fmt.Errorf("clickhouse unavailable, %d batches (%d bytes) spooled: %w: %w", n, bytes, audit.ErrUnavailable, err)
	}
	if err != nil {
		if errors.Is(err, audit.ErrUnavailable) {
			// Wrapped once: "store unavailable" is not said twice.
			err = fmt.Errorf("clickhouse unavailable: %w", err)
		} else {
			err = fmt.Errorf("clickhouse unavailable: %w: %w", audit.ErrUnavailable, err)
		}
		if n, bytes := s.spool.usage(); n > 0 {
			// With Ack "log" the spool takes every batch, outage or not.
			return fmt.Errorf("%w; %d batches (%d bytes) wait in the spool", err, n, bytes)
		}
		return err
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	return s.closed
}

func (s *Store) setBackendErr(err error) {
	s.mu.Lock()
	s.backendErr = err
	// Each outage is logged once, when it begins and when it ends: with
	// Ack "log" every batch goes to the spool anyway, and nothing else
	// would tell an outage in the log.
	down := errors.Is(err, audit.ErrUnavailable)
	began, ended := down && !s.downLogged, err == nil && s.downLogged
	if began || ended {
		s.downLogged = down
	}
	s.mu.Unlock()
	switch {
	case began:
		n, bytes := s.spool.usage()
		s.log.Warn("clickhouse: unavailable; acknowledged batches wait in the spool until it answers",
			"err", err, "spooled_batches", n, "spooled_bytes", bytes, "dir", s.opts.Spool.Dir)
	case ended:
		n, bytes := s.spool.usage()
		s.log.Info("clickhouse: available again; the spool drains into it", "spooled_batches", n, "spooled_bytes", bytes)
	}
}

// AppendCalls stores calls durably: it returns nil once ClickHouse has
// acknowledged them or, while ClickHouse is unreachable, once they are
// synced to the spool. Calls whose ID is already stored are skipped. When the
// spool is full it returns an error wrapping audit.ErrUnavailable.
// ClickHouse collapses a call stored twice later, in the background: the
// count returned is every call of the batch.
func (s *Store) AppendCalls(ctx context.Context, calls []audit.Record) (int, error) {
	if len(calls) == 0 {
		return 0, nil
	}
	rows, err := callRows(calls)
	if err != nil {
		return 0, fmt.Errorf("cannot store calls: %w", err)
	}
	if err := s.submit(ctx, &request{calls: rows}); err != nil {
		return 0, err
	}
	return len(calls), nil
}

// rowsPerWorker is the fewest calls worth a goroutine of their own in
// callRows.
const rowsPerWorker = 64

// callRows makes the rows of calls, in order, on up to GOMAXPROCS
// goroutines at once: the acknowledgement of a request waits for them, and
// each row derives its call's fingerprint again (canonical JSON and a hash)
// to know whether it may be left out. With one sender waiting for each
// acknowledgement nothing else uses the other cores meanwhile. The error is
// that of the first call that fails, as a loop would return it.
func callRows(calls []audit.Record) ([]callRow, error) {
	rows := make([]callRow, len(calls))
	workers := min(runtime.GOMAXPROCS(0), len(calls)/rowsPerWorker)
	if workers <= 1 {
		var scratch []byte
		for i := range calls {
			row, err := callRowWith(&calls[i], &scratch)
			if err != nil {
				return nil, err
			}
			rows[i] = row
		}
		return rows, nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(calls)/workers, (w+1)*len(calls)/workers
		wg.Go(func() {
			var scratch []byte
			for i := lo; i < hi; i++ {
				row, err := callRowWith(&calls[i], &scratch)
				if err != nil {
					errs[w] = err
					return
				}
				rows[i] = row
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// Commit stores detector output and the watermark. ClickHouse has no
// transactions across tables: the watermark row is written last, after the
// writes and findings it covers, and a batch that fails halfway is retried
// whole (rows already stored are recognized), so that a watermark is never
// stored before what it covers.
func (s *Store) Commit(ctx context.Context, r audit.Results) error {
	if len(r.Writes) == 0 && len(r.Findings) == 0 && len(r.TooLate) == 0 && r.Watermark.IsZero() {
		return nil
	}
	// One version for the whole commit: within it the later state of a
	// write wins when the batch is built, so its rows never tie, and a
	// column of one value costs nothing on disk.
	v := s.nextVersion()
	req := &request{}
	for i := range r.Writes {
		row, err := writeRowOf(&r.Writes[i], v)
		if err != nil {
			return fmt.Errorf("cannot commit: %w", err)
		}
		req.writes = append(req.writes, row)
	}
	for i := range r.Findings {
		row, err := findingRowOf(&r.Findings[i])
		if err != nil {
			return fmt.Errorf("cannot commit: %w", err)
		}
		req.findings = append(req.findings, row)
	}
	for _, c := range r.TooLate {
		sec, ns, err := splitTime(c.Time)
		if err != nil {
			return fmt.Errorf("cannot commit call %s too late: %w", c.ID, err)
		}
		req.tooLate = append(req.tooLate, tooLateRow{Tenant: c.Tenant, Time: sec, TimeNanos: ns, CallID: c.ID, Version: v})
	}
	if !r.Watermark.IsZero() {
		sec, ns, err := splitTime(r.Watermark)
		if err != nil {
			return fmt.Errorf("cannot commit watermark: %w", err)
		}
		req.watermark = &watermarkRow{Replica: s.opts.Replica, Time: sec, TimeNanos: ns, Version: v}
	}
	return s.submit(ctx, req)
}

// nextVersion returns a new row version. Versions follow the wall clock in
// nanoseconds, so that a later commit, even by a later process, wins; they
// never repeat within a process.
func (s *Store) nextVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastVersion = max(uint64(time.Now().UnixNano()), s.lastVersion+1)
	return s.lastVersion
}

// submit queues req for the next batch and waits for its outcome.
func (s *Store) submit(ctx context.Context, req *request) error {
	req.at = time.Now()
	req.done = make(chan error, 1)
	s.sendMu.RLock()
	if s.closed {
		s.sendMu.RUnlock()
		return audit.ErrClosed
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.sendMu.RUnlock()
		return fmt.Errorf("cannot store: %w", ctx.Err())
	}
	s.sendMu.RUnlock()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The batch goes on; only the caller stops waiting for it.
		return fmt.Errorf("cannot store: %w", ctx.Err())
	}
}

// writeLoop collects requests into batches and ships them, until Close.
// Inserters of them run at once, taking turns to collect: one fills the next
// batch while the others ship theirs, so that batches are not split between
// them. Batches carry their own versions and tokens, so the order in which
// they land does not matter, and a commit is one request, so its watermark
// still follows its rows.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	for {
		s.collectMu.Lock()
		b, reqs, more := s.collect()
		s.collectMu.Unlock()
		if len(reqs) > 0 {
			s.ship(b, reqs)
		}
		if !more {
			return
		}
	}
}

// collect gathers requests until the batch holds BatchSize rows or its first
// request is BatchAge old. more is false once the store is closing and every
// queued request has been taken.
func (s *Store) collect() (b *batch, reqs []*request, more bool) {
	b = new(batch)
	add := func(r *request) {
		reqs = append(reqs, r)
		b.takeCalls(r.calls)
		b.addResults(r.writes, r.findings, r.watermark)
		b.addTooLate(r.tooLate)
	}
	rows := 0
	select {
	case r := <-s.reqs:
		add(r)
		rows += r.rows()
	case <-s.quit:
		return b, s.takeQueued(add), false
	}
	if s.opts.Ack == AckLog {
		// The acknowledgement waits for the spool's sync, not for a
		// timer: take what is queued now; batches grow with the load
		// while the previous one syncs.
		for rows < s.opts.BatchSize {
			select {
			case r := <-s.reqs:
				add(r)
				rows += r.rows()
			case <-s.quit:
				return b, append(reqs, s.takeQueued(add)...), false
			default:
				return b, reqs, true
			}
		}
		return b, reqs, true
	}
	timer := time.NewTimer(s.opts.BatchAge - time.Since(reqs[0].at))
	defer timer.Stop()
	for rows < s.opts.BatchSize {
		select {
		case r := <-s.reqs:
			add(r)
			rows += r.rows()
		case <-timer.C:
			return b, reqs, true
		case <-s.quit:
			return b, append(reqs, s.takeQueued(add)...), false
		}
	}
	return b, reqs, true
}

// takeQueued takes every request still queued; after Close no new one
// comes.
func (s *Store) takeQueued(add func(*request)) []*request {
	var taken []*request
	for {
		select {
		case r := <-s.reqs:
			add(r)
			taken = append(taken, r)
		default:
			return taken
		}
	}
}

// ship delivers one batch and tells every waiting request the outcome.
func (s *Store) ship(b *batch, reqs []*request) {
	b.seal()
	results := len(b.Writes)+len(b.Findings)+len(b.Watermarks)+len(b.TooLate) > 0
	if results {
		s.commitMu.Lock()
	}
	// Only the calls of one sender's request can be refused for good:
	// detector output is the pipeline's, which keeps it and tries again.
	callsAlone := len(reqs) == 1 && reqs[0].rows() == len(reqs[0].calls)
	err := s.deliver(b, callsAlone)
	if err == nil {
		for _, w := range b.Watermarks {
			s.mu.Lock()
			if w.Version > s.wmVersion {
				s.wm, s.wmVersion = joinTime(w.Time, w.TimeNanos), w.Version
			}
			s.mu.Unlock()
		}
	}
	if results {
		s.commitMu.Unlock()
	}
	for _, r := range reqs {
		r.done <- err
	}
}

// deliver inserts b, retrying for RetryFor; if ClickHouse stays
// unreachable it spools b instead. While the spool holds batches, b goes
// straight to it. callsAlone says that b is the calls of one request only:
// with Ack "log", too large for the whole spool, they are refused for good.
func (s *Store) deliver(b *batch, callsAlone bool) error {
	if b.rows() == 0 {
		return nil
	}
	if s.opts.Ack == AckLog {
		// Durable once synced: the drain inserts it behind, merged with
		// the batches around it.
		if err := s.spool.append(b); err != nil {
			if errors.Is(err, errSpoolTooLarge) && callsAlone {
				// Every batch goes through the spool: draining never
				// makes room for this one.
				return fmt.Errorf("cannot store: %w: %w", err, audit.ErrTooLarge)
			}
			// A batch of several requests may be too large where each
			// alone fits: they are sent again, most likely apart.
			// Detector output is tried again by the pipeline.
			return fmt.Errorf("cannot store: %w: %w", err, audit.ErrUnavailable)
		}
		return nil
	}
	if !s.spooling.Load() {
		err := s.insertRetrying(b, s.opts.RetryFor)
		if err == nil || !errors.Is(err, audit.ErrUnavailable) {
			return err
		}
		s.setBackendErr(err) // logs that it is unavailable
	}
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	if !s.spooling.Load() {
		s.startSpooling(nil)
	}
	if err := s.spool.append(b); err != nil {
		return fmt.Errorf("cannot store: clickhouse unreachable and %w: %w", err, audit.ErrUnavailable)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// startSpooling switches to the spool; the caller holds modeMu (or is Open).
func (s *Store) startSpooling(reason error) {
	if s.spooling.Load() {
		return
	}
	s.drained = make(chan struct{})
	s.spooling.Store(true)
	if reason != nil {
		s.setBackendErr(reason)
	}
}

// insertRetrying inserts b, retrying with backoff while the error is
// retryable and the budget lasts. Every attempt sends the same rows with the
// same token, so a retry of an insert that did land stores nothing twice.
func (s *Store) insertRetrying(b *batch, budget time.Duration) (err error) {
	s.chainMu.Lock()
	defer s.chainMu.Unlock()
	if b.chain == nil && len(b.Calls)+len(b.Findings) > 0 {
		s.chainBatch(b)
	}
	defer func() {
		if err != nil {
			b.unchain()
		}
	}()
	deadline := time.Now().Add(budget)
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := s.insertBatch(b, attempt > 0 || b.spooled)
		if err == nil {
			s.setBackendErr(nil)
			return nil
		}
		if !errors.Is(err, audit.ErrUnavailable) {
			return err
		}
		jittered := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(jittered).After(deadline) {
			return err
		}
		s.retries.Warn("store_retry", "clickhouse: insert failed; retrying", "attempt", attempt+1, "rows", b.rows(), "wait", jittered, "err", err)
		select {
		case <-s.quit:
			return err
		case <-time.After(jittered):
		}
		wait = min(2*wait, time.Second)
	}
}

// insertBatch inserts the tables of b not yet acknowledged, in order. On a
// retry without deduplication tokens, it first drops the rows ClickHouse
// already has.
func (s *Store) insertBatch(b *batch, retry bool) error {
	if !s.connected() {
		return fmt.Errorf("cannot insert: not connected: %w", audit.ErrUnavailable)
	}
	for _, t := range insertOrder {
		if t == tWatermarks {
			// The chain entries follow the rows they cover, and the
			// watermark follows them.
			if err := s.insertChain(b, retry); err != nil {
				return err
			}
		}
		if b.Done[t] {
			continue
		}
		src := b
		if retry && !s.caps.DedupToken {
			if err := s.awaitAbandoned(); err != nil {
				return err
			}
			var err error
			if src, err = s.unstored(b, t); err != nil {
				return err
			}
		}
		if src.tableRows(t) > 0 {
			if err := s.insert(b.Token+":"+tableNames[t], t, src); err != nil {
				return err
			}
		}
		b.Done[t] = true
	}
	return nil
}

// awaitAbandoned waits, for up to InsertTimeout, until no insert this
// store gave up on still runs on the server. A client gives up on an
// insert (a timeout, a broken connection) that the server may go on with:
// it commits each block it has read, and a check for stored rows made
// meanwhile misses the rows it commits next, which the retry then stores
// again (review rev21c: TestExactlyOnce_ServerKilled stored 58,000 rows
// for 50,000 calls after a read timed out). Servers with deduplication
// tokens need no wait: they drop a block stored under the same token.
func (s *Store) awaitAbandoned() error {
	s.abandonedMu.Lock()
	ids := make([]string, 0, len(s.abandoned))
	for id := range s.abandoned {
		ids = append(ids, id)
	}
	s.abandonedMu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.InsertTimeout)
	defer cancel()
	for {
		running := map[string]bool{}
		q := "SELECT query_id FROM system.processes WHERE query_id IN " + quoteList(ids)
		err := each(ctx, s.conn, "find abandoned inserts", q, func(r driver.Rows) error {
			var id string
			if err := r.Scan(&id); err != nil {
				return err
			}
			running[id] = true
			return nil
		})
		if err != nil && errors.Is(err, audit.ErrUnavailable) {
			return err
		}
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
		}
		if err != nil {
			// A user not allowed to read system.processes: the check goes
			// on as before the wait, the race left open.
			s.retries.Warn("abandoned_inserts", "clickhouse: cannot tell whether an insert given up on still runs; checking for stored rows now", "err", err)
			running = nil
		}
		s.abandonedMu.Lock()
		for _, id := range ids {
			if !running[id] {
				delete(s.abandoned, id)
			}
		}
		s.abandonedMu.Unlock()
		if len(running) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cannot check for stored rows: %d insert(s) given up on still run on the server: %w", len(running), audit.ErrUnavailable)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newQueryID returns a random query id for an insert.
func newQueryID() string {
	var b [16]byte
	crand.Read(b[:])
	return "mcpaudit-" + hex.EncodeToString(b[:])
}

// insert sends the rows of table t of b in one INSERT, as blocks of a
// bounded size (chunkEnd): the driver encodes and compresses one block at
// a time.
func (s *Store) insert(token string, t int, b *batch) error {
	names, _ := b.columns(t, 0, 0)
	return s.insertBlocks(token, tableNames[t], names, b.tableRows(t), func(lo int) (int, []any) {
		hi := b.chunkEnd(t, lo)
		_, cols := b.columns(t, lo, hi)
		return hi, cols
	})
}

// insertBlocks sends n rows in one INSERT, block by block: block returns
// the end of the block that starts at row lo and its column values.
func (s *Store) insertBlocks(token, table string, names []string, n int, block func(lo int) (hi int, cols []any)) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.InsertTimeout)
	defer cancel()
	if s.caps.DedupToken {
		ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplication_token": token}))
	} else {
		// Named, so that a retry can wait for it to end (awaitAbandoned).
		qid := newQueryID()
		ctx = ch.Context(ctx, ch.WithQueryID(qid))
		defer func() {
			if err != nil {
				s.abandonedMu.Lock()
				if s.abandoned == nil {
					s.abandoned = map[string]bool{}
				}
				s.abandoned[qid] = true
				s.abandonedMu.Unlock()
			}
		}()
	}
	bt, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.table(table)+" ("+strings.Join(names, ", ")+")")
	if err != nil {
		return classify(fmt.Errorf("cannot insert into %s: %w", table, err))
	}
	for lo := 0; lo < n; {
		hi, cols := block(lo)
		for i, c := range cols {
			if err := bt.Column(i).Append(c); err != nil {
				bt.Abort()
				return fmt.Errorf("cannot encode column %s of %s: %w", names[i], table, err)
			}
		}
		if lo = hi; lo < n {
			// The block goes now; the INSERT goes on.
			if err := bt.Flush(); err != nil {
				bt.Abort()
				return classify(fmt.Errorf("cannot insert into %s: %w", table, err))
			}
		}
	}
	if err := bt.Send(); err != nil {
		return classify(fmt.Errorf("cannot insert into %s: %w", table, err))
	}
	return nil
}

// drainLoop connects when Open could not, drains the spool while ClickHouse
// answers, and checks the connection while idle. It stops at Close; what is
// left in the spool is drained by the next start.
func (s *Store) drainLoop() {
	defer s.wg.Done()
	delay := 100 * time.Millisecond
	for {
		select {
		case <-s.quit:
			return
		case <-s.kick:
		case <-s.urgent:
		case <-time.After(delay):
		}
		if !s.connected() {
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.InsertTimeout)
			err := s.connect(ctx)
			cancel()
			if err != nil {
				if !errors.Is(err, audit.ErrUnavailable) {
					s.log.Error("clickhouse: cannot set up the store; retrying", "err", err)
				}
				s.setBackendErr(err)
				delay = min(2*delay, healthInterval)
				continue
			}
		}
		logged := s.opts.Ack == AckLog
		if !s.spooling.Load() && !(logged && s.spool.doneThrough() < s.spool.lastAppended()) {
			s.checkHealth()
			delay = healthInterval
			if logged {
				delay = s.opts.BatchAge
			}
			continue
		}
		if err := s.drain(); err != nil {
			s.setBackendErr(err)
			delay = min(2*delay, healthInterval)
			continue
		}
		delay = 100 * time.Millisecond
		if logged {
			// Let the next large batch gather, unless a query asks.
			delay = s.opts.BatchAge
		}
	}
}

// progressed wakes the readers waiting in settle.
func (s *Store) progressed() {
	s.progressMu.Lock()
	close(s.progress)
	s.progress = make(chan struct{})
	s.progressMu.Unlock()
}

// settle waits, with Ack "log", until every batch acknowledged before it
// was called is in ClickHouse, so that a query sees what was acknowledged.
// It returns an error wrapping audit.ErrUnavailable when ctx ends first.
func (s *Store) settle(ctx context.Context) error {
	if s.opts.Ack != AckLog {
		return nil
	}
	s.settles.Add(1)
	target := s.spool.lastAppended()
	for {
		s.progressMu.Lock()
		wait := s.progress
		s.progressMu.Unlock()
		if s.spool.doneThrough() >= target {
			return nil
		}
		s.mu.Lock()
		down := s.backendErr
		s.mu.Unlock()
		if down != nil {
			// Known down: answer now rather than wait for the outage.
			return fmt.Errorf("cannot read: acknowledged batches wait in the spool: clickhouse unavailable: %w: %w", audit.ErrUnavailable, down)
		}
		select {
		case s.urgent <- struct{}{}:
		default:
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("cannot read: acknowledged batches not yet in clickhouse: %w: %w", audit.ErrUnavailable, ctx.Err())
		case <-s.quit:
			return audit.ErrClosed
		}
	}
}

// settledReader is reader after settle.
func (s *Store) settledReader(ctx context.Context) (driver.Conn, error) {
	conn, err := s.reader()
	if err != nil {
		return nil, err
	}
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	return conn, nil
}

// checkHealth pings ClickHouse so that Ready notices an outage without
// traffic.
func (s *Store) checkHealth() {
	ctx, cancel := context.WithTimeout(context.Background(), min(2*time.Second, s.opts.InsertTimeout))
	defer cancel()
	if err := s.conn.Ping(ctx); err != nil {
		s.setBackendErr(classify(fmt.Errorf("cannot reach clickhouse: %w", err)))
		return
	}
	s.setBackendErr(nil)
}

// drain sends spooled batches, oldest first, until the spool is empty (then
// direct inserts resume) or ClickHouse fails (the error is returned).
// Several small batches go in one insert, so that the drain outpaces the
// traffic that keeps arriving meanwhile. A batch ClickHouse refuses for good
// is moved aside and logged.
func (s *Store) drain() error {
	single := false // after a refused merge, find the culprit batch by batch
	for {
		select {
		case <-s.quit:
			return nil
		default:
		}
		seqs := s.spool.first(64)
		if len(seqs) == 0 {
			s.progressed()
			if !s.spooling.Load() {
				return nil // Ack "log": nothing left to insert
			}
			s.modeMu.Lock()
			if n, _ := s.spool.usage(); n == 0 {
				s.spooling.Store(false)
				close(s.drained)
				s.modeMu.Unlock()
				s.setBackendErr(nil)
				s.log.Info("clickhouse: spool drained; inserting directly again")
				return nil
			}
			s.modeMu.Unlock()
			if len(s.spool.first(1)) == 0 {
				// Only appends whose sync is in flight (Ack "log"
				// appends without modeMu): the next round takes them,
				// rather than spinning until they are synced.
				return nil
			}
			continue
		}
		b, used, err := s.gather(seqs, single)
		if err == nil {
			// With Ack "log", a batch no insert has carried yet needs no
			// check for rows stored already (servers without deduplication
			// tokens). Spooled in an outage, it may have been tried before.
			if tried := s.spool.tried(used); s.opts.Ack == AckLog {
				b.spooled = tried
			}
			err = s.insertRetrying(b, 0)
			if err == nil {
				for _, seq := range used {
					if err := s.spool.remove(seq); err != nil {
						return err
					}
				}
				s.progressed()
				single = false
				continue
			}
			if errors.Is(err, audit.ErrUnavailable) {
				return err
			}
			if len(used) > 1 {
				single = true
				continue
			}
		}
		path, rerr := s.spool.reject(used[0])
		if rerr != nil {
			// Still in the spool: the drain stops here and tries again.
			s.log.Error("clickhouse: a spooled batch cannot be stored, nor moved aside; the drain retries it", "file", s.spool.where(used[0]), "err", err, "move_err", rerr)
			return rerr
		}
		// Counted before progressed, and before the spool can be seen
		// empty: whoever sees the file gone sees it counted.
		s.spoolRejected.Add(1)
		s.progressed()
		if errors.Is(err, errSpoolCorrupt) {
			// Its rows cannot be trusted: none of them is inserted. The
			// batches before it were; the ones after it drain next.
			s.log.Error("clickhouse: a spool file is corrupt; moved aside for a person to look at, the batches around it drain", "file", path, "err", err)
		} else {
			s.log.Error("clickhouse: a spooled batch cannot be stored; moved aside for a person to look at", "file", path, "err", err)
		}
	}
}

// SpoolFilesRejected returns how many spool files were moved aside as
// NNNN.rejected since Open: damaged, or refused by ClickHouse for good.
// Their calls were acknowledged and do not reach ClickHouse unless a
// person acts; each is also logged at error level.
func (s *Store) SpoolFilesRejected() int64 { return s.spoolRejected.Load() }

// SpoolTailsCut returns how many torn tails recovery cut off the ends of
// spool segments at Open, kept or not (each is logged). One is expected
// after a crash (appends whose sync never returned, not acknowledged);
// after a clean stop it is the last frame, damaged after its sync.
func (s *Store) SpoolTailsCut() int64 { return s.spoolTailsCut.Load() }

// drainAtClose wakes the drain and waits until the spool is empty,
// ClickHouse is known down, or d has passed. Nothing is appended any more
// but what the write loops hold already.
func (s *Store) drainAtClose(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.progressMu.Lock()
		wait := s.progress
		s.progressMu.Unlock()
		if n, _ := s.spool.usage(); n == 0 {
			return
		}
		s.mu.Lock()
		down := s.backendErr != nil
		s.mu.Unlock()
		if down || !s.connected() {
			return
		}
		select {
		case s.urgent <- struct{}{}:
		default:
		}
		select {
		case <-wait:
		case <-time.After(100 * time.Millisecond): // a failed round does not signal progress
		case <-deadline.C:
			return
		}
	}
}

// SpoolLeft returns the batches the spool holds and their bytes:
// acknowledged calls and detector output not yet in ClickHouse. After
// Close it is what the next Open drains.
func (s *Store) SpoolLeft() (batches int, bytes int64) {
	return s.spool.usage()
}

// SpoolUsage returns the bytes the spool holds, acknowledged calls not yet
// in ClickHouse, and its limit (spool.max_bytes).
func (s *Store) SpoolUsage() (bytes, limit int64) {
	_, bytes = s.spool.usage()
	return bytes, s.opts.Spool.MaxBytes
}

// SpoolFilesSetAside returns how many files the spool directory holds,
// now, that were set aside for a person: NNNN.rejected (acknowledged calls
// that will not reach ClickHouse unless someone acts) and *.torn (tails
// recovery cut off segments), from this run and earlier ones, until
// someone moves them out. It reads the directory at each call.
func (s *Store) SpoolFilesSetAside() (rejected, torn int, err error) {
	return s.spool.setAside()
}

// gather reads spooled batches in order and merges them, up to four batch
// sizes of rows and DrainBytes of texts. A batch some of whose tables were
// acknowledged goes alone, and so does every batch when single is set. err
// is set, with the one batch in used, when that batch cannot be read.
func (s *Store) gather(seqs []uint64, single bool) (b *batch, used []uint64, err error) {
	var parts []*batch
	firstKept := false
	rows, calls, writes, findings := 0, 0, 0, 0
	var texts int64
	for _, seq := range seqs {
		next, kept, err := s.spool.view(seq)
		if err != nil {
			if len(parts) == 0 {
				return nil, []uint64{seq}, err
			}
			break // read again, alone, next time
		}
		var nt int64
		if s.opts.DrainBytes > 0 {
			nt = next.textBytes()
		}
		if len(parts) > 0 && (next.partial() || rows+next.rows() > 4*s.opts.BatchSize ||
			s.opts.DrainBytes > 0 && texts+nt > s.opts.DrainBytes) {
			break
		}
		if len(parts) == 0 {
			firstKept = kept
		}
		parts, used = append(parts, next), append(used, seq)
		rows += next.rows()
		texts += nt
		calls, writes, findings = calls+len(next.Calls), writes+len(next.Writes), findings+len(next.Findings)
		if len(parts) == 1 && (single || next.partial()) {
			break
		}
	}
	if len(parts) == 1 {
		// Alone it goes to the insert as it is, once it is the caller's.
		return owned(parts[0], firstKept), used, nil
	}
	// The batches are read only (those kept in memory must stay as
	// spooled): their rows are copied once, into the merged batch.
	b = &batch{
		Calls: make([]callRow, 0, calls), Writes: make([]writeRow, 0, writes),
		Findings: make([]findingRow, 0, findings), spooled: true,
		callIndex: make(map[callKey]bool, calls), writeIndex: make(map[writeKey]int, writes),
		findingIndex: make(map[string]bool, findings),
	}
	for _, p := range parts {
		b.merge(p)
	}
	b.finish()
	return b, used, nil
}

// waitDrained waits until the spool is empty, so that reads see every
// acknowledged call.
func (s *Store) waitDrained(ctx context.Context) error {
	s.modeMu.Lock()
	drained := s.drained
	s.modeMu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cannot read: spooled batches not yet in clickhouse: %w: %w", audit.ErrUnavailable, ctx.Err())
	}
}

// recoverWatermark finds the latest watermark among spooled batches, so that
// Watermark answers before they are drained.
func (s *Store) recoverWatermark() {
	for _, seq := range s.spool.Seqs() {
		b, err := s.spool.read(seq)
		if err != nil {
			continue // drain moves it aside
		}
		for _, w := range b.Watermarks {
			if w.Replica == s.opts.Replica && w.Version > s.wmVersion {
				s.wm, s.wmVersion = joinTime(w.Time, w.TimeNanos), w.Version
			}
			s.lastVersion = max(s.lastVersion, w.Version)
		}
		for _, w := range b.Writes {
			s.lastVersion = max(s.lastVersion, w.Version)
		}
	}
}

// Close flushes what is queued (to ClickHouse, or to the spool), drains the
// spool into ClickHouse while it answers (for up to InsertTimeout), stops
// the background work and closes the connections. What is left in the spool
// (SpoolLeft says how much) is drained by the next Open.
func (s *Store) Close() error {
	s.sendMu.Lock()
	if s.closed {
		s.sendMu.Unlock()
		return nil
	}
	s.closed = true
	s.sendMu.Unlock()
	// With Ack "log" the drain waits BatchAge between rounds, and the last
	// batches (the detector's output committed by the stop) came just
	// before: closing at once left them in the spool after every stop
	// (live23's S1: 2 batches, 4,349 bytes, after "stopped cleanly").
	s.drainAtClose(s.opts.InsertTimeout)
	close(s.quit)
	s.wg.Wait()
	s.spool.close()
	if s.connected() {
		s.signNow(false)
		return s.conn.Close()
	}
	return nil
}

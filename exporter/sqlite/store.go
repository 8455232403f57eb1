package sqlite

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

var _ audit.Store = (*Store)(nil)

// Options configures a Store. Zero fields take their defaults, so the zero
// value is usable.
type Options struct {
	// Synchronous is SQLite's synchronous setting in WAL mode: "full" syncs
	// the log at every commit, so an acknowledged call survives a power
	// loss; "normal" syncs only at checkpoints and may lose the last
	// commits on power loss (never on a process crash). Default "full".
	Synchronous string `yaml:"synchronous"`
	// Ack is when an append of calls is acknowledged: "commit", once the
	// SQLite transaction holding them has committed; "log", once they are
	// synced (fdatasync) to the call log beside the file (the file's name
	// and ".log"), which the committer drains into SQLite behind the
	// acknowledgements in large transactions. With "log", queries wait
	// for the calls acknowledged before them to be committed (log_wait),
	// and a restart applies the log before the store answers. Default
	// "commit".
	Ack string `yaml:"ack"`
	// LogMaxBytes bounds the call log (ack "log"): an append that would
	// pass it is refused (503) until the drain has made room; one request
	// larger than the whole log never fits and is refused for good (413,
	// gRPC InvalidArgument). Default 1GiB.
	LogMaxBytes int64 `yaml:"log_max_bytes"`
	// LogWait is how long a query waits, with ack "log", for the calls
	// acknowledged before it to be committed before it fails (503).
	// Default 10s.
	LogWait time.Duration `yaml:"log_wait"`
	// MaxBatch is how many calls one group commit holds at most before it
	// is committed. Default 2000.
	MaxBatch int `yaml:"max_batch"`
	// MaxDelay is how long the committer waits for more calls when its
	// batch is below max_batch and nothing else is queued. Default 0: commit
	// at once; batches still form from the calls that arrive while the
	// previous commit syncs.
	MaxDelay time.Duration `yaml:"max_delay"`
	// DeleteChunk is how many rows one retention transaction deletes at
	// most, bounding how long it holds the write lock. Default 2000.
	DeleteChunk int `yaml:"delete_chunk"`
	// CacheMiB is SQLite's page cache of the writing connection, in MiB.
	// Default 64. serve holds it to an eighth of serve.memory_limit when
	// that is set (the share left outside the Go heap, where the cache
	// lives), less the id index's buffers (8 MiB in a build with cgo, none
	// in the release image, built without), and logs the size it took.
	CacheMiB int `yaml:"cache_mib"`
	// ReadConns is how many connections serve queries at once. Default 4.
	ReadConns int `yaml:"read_conns"`
	// ReadCacheMiB is SQLite's page cache of each reading connection, in
	// MiB. Default 16. When serve.memory_limit is set, serve holds the
	// readers' caches together to a quarter of the share it leaves the
	// store's caches (see cache_mib), and logs the size it took.
	ReadCacheMiB int `yaml:"read_cache_mib"`
	// SigningKey, when set, signs checkpoints of the tamper-evidence chains
	// (package chain) every CheckpointEvery, after retention and at Close.
	// serve reads it from serve.tamper.signing_key_file.
	SigningKey ed25519.PrivateKey `yaml:"-"`
	// CheckpointEvery is how often the chains' heads are signed when they
	// moved. Default 1m.
	CheckpointEvery time.Duration `yaml:"checkpoint_every"`
	// OnCommit, when set, is called by the committer after every commit
	// with its duration (BEGIN to COMMIT) and the calls it held; the serve
	// command feeds metrics.ObserveStoreCommit with it.
	OnCommit func(d time.Duration, calls int) `yaml:"-"`
	// Logger receives the store's messages: the start, progress and end of
	// a migration or a rebuild of the id index at Open, and the id index's
	// failures. Default slog.Default(); serve passes its own.
	Logger *slog.Logger `yaml:"-"`
	// OnProgress, when set, is told the start of a migration or a build of
	// the id index at Open and every batch of calls it gets through, from
	// Open's goroutine: serve's /readyz says it while the store opens.
	OnProgress func(Progress) `yaml:"-"`
	// IDIndexWait is how long Open waits for the id index when another
	// process holds it (a command reading the same data dir, which holds
	// it for its few seconds) before it opens without it, scanning for
	// the store's whole life. Zero: it does not wait. serve waits 30 s;
	// the commands that read a data dir do not.
	IDIndexWait time.Duration `yaml:"-"`
	// Calls is where calls are kept: "sqlite", in the calls table; or
	// "log", in one segmented call log per tenant under the
	// data dir's calls/ (exporter/sqlite/calllogs), everything else
	// staying in SQLite; or "auto", chosen at every start by what the data
	// dir holds: "log" when its call logs hold calls or no call is stored
	// yet (a new data dir), "sqlite" when its calls table holds calls or
	// with ack "log"; refused when both hold calls (mcpaudit migrate-calls
	// moves the table's into the logs). serve logs the choice and its
	// reason. With "log", the chain covers the logs' blocks (each block's
	// SHA-256 as synced; mcpaudit verify hashes them again); backup
	// copies the logs and the --data-dir readers open them read-only
	// beside serve; retention hides deleted calls at once and removes
	// their segment once it is wholly before the cut; a store whose calls
	// table holds calls is not opened with it, nor (by serve) a data dir
	// with call logs (calls/) with "sqlite". It cannot go with ack "log".
	// Default "auto": a new data dir keeps its calls in the logs, one
	// written before keeps them in its table.
	Calls string `yaml:"calls"`
	// CallLogOpenFiles bounds the sealed segment files of the call logs
	// (Calls "log") kept open at once, across every tenant: the least
	// recently read is closed past it and opened again when read. Each
	// tenant's log keeps its live segment's file open besides. Default
	// 256.
	CallLogOpenFiles int `yaml:"call_log_open_files"`
	// CallLog holds the calls with Calls "log", and with "auto" when it
	// chooses the log; the store closes it (at once when "auto" chooses
	// "sqlite"). "auto" without one chooses "sqlite".
	CallLog CallLog `yaml:"-"`
}

// calllogOpenFiles is calllog.DefaultOpenFiles, which this package cannot
// import (calllog imports it); calllogs' tests check that they agree.
const calllogOpenFiles = 256

// NewDefaultOptions returns the documented defaults.
func NewDefaultOptions() Options {
	return Options{Synchronous: "full", Ack: AckCommit, Calls: CallsAuto, LogMaxBytes: 1 << 30, LogWait: 10 * time.Second, MaxBatch: 2000, DeleteChunk: 2000, CacheMiB: 64, ReadConns: 4, ReadCacheMiB: 16, CheckpointEvery: time.Minute, CallLogOpenFiles: calllogOpenFiles}
}

// Validate checks the options; zero fields are valid (they take defaults).
func (o *Options) Validate() error {
	var errs []error
	switch strings.ToLower(o.Synchronous) {
	case "", "full", "normal":
	default:
		errs = append(errs, fmt.Errorf("synchronous: must be full or normal, not %q", o.Synchronous))
	}
	switch o.Ack {
	case "", AckCommit, AckLog:
	default:
		errs = append(errs, fmt.Errorf("ack: must be commit or log, not %q", o.Ack))
	}
	switch o.Calls {
	case "", CallsSQLite, CallsAuto:
	case CallsLog:
		if o.Ack == AckLog {
			errs = append(errs, errors.New("calls: log cannot go with ack: log (the calls are acknowledged from their own log)"))
		}
	default:
		errs = append(errs, fmt.Errorf("calls: must be auto, sqlite or log, not %q", o.Calls))
	}
	if o.LogMaxBytes < 0 {
		errs = append(errs, errors.New("log_max_bytes: must not be negative"))
	}
	if o.LogWait < 0 {
		errs = append(errs, errors.New("log_wait: must not be negative"))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_batch", o.MaxBatch}, {"delete_chunk", o.DeleteChunk}, {"cache_mib", o.CacheMiB}, {"read_conns", o.ReadConns}, {"read_cache_mib", o.ReadCacheMiB}, {"call_log_open_files", o.CallLogOpenFiles}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", f.name))
		}
	}
	if o.CheckpointEvery < 0 {
		errs = append(errs, errors.New("checkpoint_every: must not be negative"))
	}
	if o.MaxDelay < 0 {
		errs = append(errs, errors.New("max_delay: must not be negative"))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	d := NewDefaultOptions()
	if o.Synchronous == "" {
		o.Synchronous = d.Synchronous
	}
	o.Synchronous = strings.ToLower(o.Synchronous)
	if o.Ack == "" {
		o.Ack = d.Ack
	}
	if o.Calls == "" {
		o.Calls = d.Calls
	}
	if o.LogMaxBytes == 0 {
		o.LogMaxBytes = d.LogMaxBytes
	}
	if o.LogWait == 0 {
		o.LogWait = d.LogWait
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = d.MaxBatch
	}
	if o.DeleteChunk == 0 {
		o.DeleteChunk = d.DeleteChunk
	}
	if o.CacheMiB == 0 {
		o.CacheMiB = d.CacheMiB
	}
	if o.ReadConns == 0 {
		o.ReadConns = d.ReadConns
	}
	if o.ReadCacheMiB == 0 {
		o.ReadCacheMiB = d.ReadCacheMiB
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = d.CheckpointEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Store is the embedded store: one SQLite file in WAL mode. One committer
// goroutine owns the only writing connection and group-commits the calls of
// concurrent AppendCalls; queries use a pool of read-only connections that
// WAL lets run beside it. It is safe for concurrent use.
type Store struct {
	opts Options
	// callsWhy says why the calls are kept where opts.Calls says (Calls
	// "auto" chose it, or it was configured).
	callsWhy string
	// path is the database file, named by the errors of a full disk.
	path string
	w    *sql.DB // one connection, used by the committer only
	r    *sql.DB // read-only connections

	// signable are the cuts checkpoints may sign: those in the file when
	// the commit loop first chained, and those it made since (review
	// rev20c's D1: a cut someone wrote into chain_cuts while serve ran was
	// signed by its next checkpoint). Only the commit loop uses it.
	signable map[cutID]bool

	// mu orders sends to reqs against Close, which closes reqs.
	mu     sync.RWMutex
	closed atomic.Bool
	reqs   chan *request
	done   chan struct{} // closed when the committer has exited

	// strs caches the interned strings; the committer alone uses it.
	strs map[string]int64
	// sessions caches the session minutes the committer stored.
	sessions map[sessionMinute]struct{}
	// rows are the committer's multi-row statements.
	rows *rowStatements
	// scratch is the committer's space, reused from one commit to the next.
	scratch commitScratch

	// inv serves the investigation side (investigate.go).
	inv *investigation
	// ids looks calls up by id (ids.go).
	ids *idIndex
	// completed holds the answers that completed logged calls (Calls
	// "log", completeLogged).
	completed completedCalls

	// clog is the call log, with Ack "log" (acklog.go); nil otherwise.
	clog *callLog
	// blocks chains the call log's blocks (Calls "log"); nil otherwise.
	blocks *blockChain
	// logDir is the call log's directory, whatever Ack says: a log left
	// by a run with Ack "log" is applied at Open.
	logDir string
	// fullAt is the last write the disk had no room for, nil when none
	// or cleared (diskfull.go).
	fullAt atomic.Pointer[fullWrite]
	// logRejected counts the call log frames set aside since Open, and
	// logTailsCut the torn tails Open cut off its segments.
	logRejected, logTailsCut atomic.Int64
	// catchUps counts the waits for the call log (caughtUp) since Open;
	// tests read it.
	catchUps atomic.Int64

	// The checkpoint loop, when a signing key is set.
	stopCheckpoints, checkpointsDone chan struct{}
}

// checkpointLoop signs the chains' heads every CheckpointEvery.
func (s *Store) checkpointLoop() {
	defer close(s.checkpointsDone)
	t := time.NewTicker(s.opts.CheckpointEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stopCheckpoints:
			return
		case <-t.C:
			s.Checkpoint(context.Background()) // a failure is retried at the next tick
		}
	}
}

// schemaVersion is stored in PRAGMA user_version. Version 3 keys calls and
// writes by tenant too; version 4 dedupes calls by (millisecond, tenant,
// id) instead of (id, tenant), and looks them up by id through the id index
// (ids.go); version 5 moves the document index into the id index (no
// call_documents) and upserts writes by their primary key (no UNIQUE
// (call_id, seq, tenant)); version 6 keeps the calls counted too late to be
// judged (too_late). Files of versions 2 to 5 are migrated when opened
// (migrate2to3, migrate3to4, migrate4to5, migrate5to6).
const schemaVersion = 6

// schema creates the tables. Times are unix nanoseconds. Call and finding
// ids are stored packed (packID). Calls are indexed by time, writes
// clustered by it, for time ranges (scans, pages, counts, retention). The
// enumerations and names of
// writes (state, server, tenant, tool, reason, action) are interned in strs:
// a write row holds their numbers, 0 standing for the empty string. Only
// what queries need is indexed besides: findings by time and by document,
// and calls by the near-sequential key that dedupes them (calls_key). No
// SQLite index has a random key first: call ids and the documents calls
// touched are indexed beside the file (ids.go), and writes are upserted by
// their primary key, whose time is fixed (a write's Time is its call's).
var schema = []string{
	// A rowid table: rows appended in time order fill their pages, where
	// a table clustered by (time, id) leaves a tenth of them free and
	// copies keys, blobs included, into its interior pages.
	//
	`CREATE TABLE calls (
		rid    INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: the chain names calls by it
		id     ANY     NOT NULL, -- packID
		tenant INTEGER NOT NULL, -- strs.id
		time   INTEGER NOT NULL,
		rec    BLOB    NOT NULL -- codec byte, then the compressed record (record.go)
	) STRICT`,
	`CREATE INDEX calls_time ON calls (time)`,
	callsKeyIndex,
	`CREATE TABLE strs (
		id INTEGER PRIMARY KEY,
		s  TEXT    NOT NULL UNIQUE
	) STRICT`,
	`CREATE TABLE writes (
		time        INTEGER NOT NULL,
		call_id     ANY     NOT NULL, -- packID
		seq         INTEGER NOT NULL,
		state       INTEGER NOT NULL, -- strs.id, as are server to action
		server      INTEGER NOT NULL,
		tenant      INTEGER NOT NULL,
		tool        INTEGER NOT NULL,
		reason      INTEGER NOT NULL,
		action      INTEGER NOT NULL,
		session     TEXT    NOT NULL,
		document    TEXT    NOT NULL,
		key         TEXT    NOT NULL,
		state_after INTEGER,          -- StateTime - Time; NULL for a zero StateTime
		PRIMARY KEY (time, call_id, seq, tenant)
	) WITHOUT ROWID, STRICT`,
	// A finding's filter fields are columns; the rest of it is in body.
	`CREATE TABLE findings (
		id       BLOB    NOT NULL PRIMARY KEY,
		time     INTEGER NOT NULL,
		kind     TEXT    NOT NULL,
		severity INTEGER NOT NULL, -- Severity.Rank
		server   TEXT    NOT NULL,
		tenant   TEXT    NOT NULL,
		document TEXT    NOT NULL,
		key      TEXT    NOT NULL,
		session  TEXT    NOT NULL,
		body     BLOB    NOT NULL, -- codec byte, then compressed JSON (findingBody)
		chain    INTEGER NOT NULL DEFAULT 0 -- the seq of the tenant's chain entry it was stored with
	) WITHOUT ROWID, STRICT`,
	`CREATE INDEX findings_time ON findings (time, id)`,
	`CREATE INDEX findings_document ON findings (document, time)`,
	`CREATE TABLE meta (
		key   TEXT PRIMARY KEY,
		value ANY
	) WITHOUT ROWID, STRICT`,
	tooLateTable,
}

// tooLateTable keeps the calls the detector counted too late to be judged
// (audit.Results.TooLate), committed with the output of the same commit:
// the replay after a restart passes over them. Few rows (too-late calls
// are rare), clustered by time for retention.
const tooLateTable = `CREATE TABLE too_late (
		time    INTEGER NOT NULL,
		tenant  INTEGER NOT NULL, -- strs.id
		call_id ANY     NOT NULL, -- packID
		PRIMARY KEY (time, tenant, call_id)
	) WITHOUT ROWID, STRICT`

// Open opens or creates the store at path (a file; its directory must
// exist). The file is created with the current schema; an existing file of
// another schema version is refused.
func Open(path string, opts Options) (*Store, error) {
	return OpenContext(context.Background(), path, opts)
}

// OpenContext is Open, which ctx may break off: a migration or a build of
// the id index (minutes on a large store) stops between two of its batches
// once ctx is done, as does a wait for the id index (IDIndexWait), and
// OpenContext returns an error that wraps ctx.Err().
// What was under way is undone: a migration is rolled back (the file keeps
// its schema, and the next open migrates it again), and an index whose
// build did not finish is rebuilt by the next open; a catch-up of the index
// resumes where it stopped. ctx bounds the open only, not the store.
func OpenContext(ctx context.Context, path string, opts Options) (*Store, error) {
	s, err := open(ctx, path, opts)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// An interrupted statement fails with SQLite's own error, and a
		// transaction that database/sql rolled back with ErrTxDone.
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return s, err
}

func open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cannot open store %s: %w", path, err)
	}
	opts = opts.withDefaults()
	if opts.Calls == CallsLog && opts.CallLog == nil {
		return nil, fmt.Errorf("cannot open store %s: calls: log without a call log", path)
	}
	// SQLite gives its log and shared-memory files the mode of the
	// database file: create that one private, whatever the umask.
	if err := datadir.CreatePrivate(path); err != nil {
		return nil, fmt.Errorf("cannot open store %s: %w", path, err)
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", opts.Synchronous)
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", opts.CacheMiB<<10))
	// Checkpoints keep SQLite's default (every 1000 pages of log); after
	// one, a log grown past 16 MiB is truncated back to that size.
	q.Add("_pragma", "journal_size_limit(16777216)")
	cn, err := sqlite.NewConnector(base + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("cannot open store %s: %w", path, err)
	}
	migrated := new(atomic.Bool)
	w := sql.OpenDB(writerConnector{Connector: cn, migrated: migrated})
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w, opts.Logger, opts.OnProgress); err != nil {
		w.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, wrap(err))
	}
	// A write-state upsert of several rows keeps a statement journal (its
	// NOT NULL columns may abort it halfway), which SQLite spills to a
	// temporary file past 64 KiB: a pwrite per page, 2 % of serve's CPU.
	// In memory it holds the pages one statement changed, and nothing
	// stored changes. Set after the migrations, whose sorts may be large:
	// on the connection open now, and by writerConnector on any that
	// database/sql opens again later.
	migrated.Store(true)
	if _, err := w.Exec(afterMigrations); err != nil {
		w.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, wrap(err))
	}
	// Made when missing, without a schema version: a release before it
	// reads and writes the file as before, and the table is then unused.
	for _, q := range []string{answersLateTable, answersLateTime} {
		if _, err := w.Exec(q); err != nil {
			w.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, wrap(err))
		}
	}
	if err := upgradeChainRecords(ctx, w, opts.Logger); err != nil {
		w.Close()
		return nil, fmt.Errorf("cannot open store %s: cannot chain the answers aside and the records of removed rows: %w", path, wrap(err))
	}

	why := "calls: " + opts.Calls
	if opts.Calls == CallsAuto {
		// Chosen before the committer starts, which reads opts.Calls.
		var n int64
		if err := w.QueryRowContext(ctx, `SELECT count(*) FROM calls`).Scan(&n); err != nil {
			w.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, wrap(err))
		}
		if opts.Calls, why, err = chooseCalls(ctx, path, opts, n); err != nil {
			w.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, err)
		}
		why = "calls: auto: " + why
		if opts.Calls == CallsSQLite && opts.CallLog != nil {
			opts.CallLog.Close()
			opts.CallLog = nil
		}
	}

	rq := url.Values{}
	rq.Set("_busy_timeout", "10000")
	rq.Set("_query_only", "1")
	rq.Add("_pragma", fmt.Sprintf("cache_size(-%d)", opts.ReadCacheMiB<<10))
	r, err := sql.Open("sqlite", base+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, err)
	}
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	if err := r.Ping(); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, wrap(err))
	}

	s := &Store{
		opts:     opts,
		w:        w,
		r:        r,
		reqs:     make(chan *request, 256),
		done:     make(chan struct{}),
		strs:     map[string]int64{},
		sessions: map[sessionMinute]struct{}{},
		rows:     newRowStatements(),
		callsWhy: why,
	}
	if err := s.openSide(ctx, base+"?"+q.Encode()); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, err)
	}
	if s.ids, err = openIDs(ctx, IDIndexDir(path), w, opts.Logger, opts.OnProgress, opts.IDIndexWait); err != nil {
		s.closeSide()
		w.Close()
		r.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, wrap(err))
	}
	go s.commitLoop()
	s.path, s.logDir = path, LogDir(path)
	if err := s.openLog(s.logDir); err != nil {
		s.Close()
		return nil, fmt.Errorf("cannot open store %s: %w", path, err)
	}
	if opts.Calls == CallsLog {
		if err := s.openBlocks(ctx, opts.CallLog); err != nil {
			s.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, err)
		}
		if err := s.loadCompleted(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, err)
		}
		var n int64
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM calls`).Scan(&n); err != nil {
			s.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, err)
		}
		if n > 0 {
			s.Close()
			return nil, fmt.Errorf("cannot open store %s with calls: log: %w (%d); keep calls: sqlite until retention has deleted them", path, ErrCallsInTable, n)
		}
	}
	if opts.SigningKey != nil {
		// Sign at once: the heads a crash left unsigned, or a new store's
		// first (empty) checkpoint.
		if err := s.Checkpoint(context.Background()); err != nil {
			s.Close()
			return nil, fmt.Errorf("cannot open store %s: %w", path, err)
		}
		s.stopCheckpoints = make(chan struct{})
		s.checkpointsDone = make(chan struct{})
		go s.checkpointLoop()
	}
	return s, nil
}

// CallsKept returns where the store keeps its calls, CallsSQLite or
// CallsLog, and why: with Calls "auto", the reason of Open's choice.
func (s *Store) CallsKept() (calls, why string) { return s.opts.Calls, s.callsWhy }

// callsKeyIndex dedupes calls. A call is unique by (id, tenant): ids are
// tenant-agnostic (findings name them, and they equal analyze's), so two
// tenants posting the same exchange each keep their copy. An id hashes its
// call's time rounded to the millisecond, so the index leads with that
// millisecond (callsKey): live traffic inserts at its right edge instead of
// at a random page, as an index on the random ids did. Lookups by id alone
// use the id index (ids.go).
const callsKeyIndex = `CREATE UNIQUE INDEX calls_key ON calls (` + callsKey + `, tenant, id)`

// migrate brings the file to schemaVersion: it creates the schema in an
// empty file, or migrates an older one, logging the migration's start, its
// progress every progressEvery and its end to log: it copies every call,
// and the store does not answer until it is done. report, if not nil, is
// told the progress too. Once ctx is done, the step under way is rolled
// back (each runs in one transaction), and the file keeps the schema the
// last step that committed gave it.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger, report func(Progress)) error {
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	switch version {
	case schemaVersion:
		return nil
	case 2, 3, 4, 5:
		var calls int64
		if err := db.QueryRow(`SELECT count(*) FROM calls`).Scan(&calls); err != nil {
			return err
		}
		log.Info("migrating the store: it answers when done", "from_schema", version, "to_schema", schemaVersion, "calls", calls)
		p := newProgress(log, "migrating the store", calls).reportTo(report)
		steps := []func(context.Context, *sql.DB, *progress) error{migrate2to3, migrate3to4, migrate4to5, migrate5to6}
		for i, step := range steps[version-2:] {
			if err := step(ctx, db, p); err != nil {
				if ctx.Err() != nil {
					// The step's transaction is rolled back: the file is
					// whole at the schema the steps before it gave.
					log.Info("migration interrupted: rolled back, the next open migrates again",
						"schema", version+i, "to_schema", schemaVersion, "done", p.done, "calls", calls, "elapsed", p.elapsed())
				}
				return err
			}
		}
		log.Info("migrated the store", "from_schema", version, "to_schema", schemaVersion, "calls", calls, "elapsed", p.elapsed())
		return nil
	case 0:
	default:
		return fmt.Errorf("schema version %d is not supported (this mcpaudit reads versions 2 to %d): "+
			"open it with the mcpaudit that wrote it, or move the file away to start an empty store", version, schemaVersion)
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var tables int
	if err := tx.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table'`).Scan(&tables); err != nil {
		return err
	}
	if tables > 0 {
		return errors.New("the file holds tables but no mcpaudit schema version: not a store")
	}
	for _, stmt := range append(slices.Clone(schema), chainSchema...) {
		if _, err := tx.Exec(stmt); err != nil {
			return fmt.Errorf("cannot create schema: %w", err)
		}
	}
	if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// Close commits the calls already queued, checkpoints the log into the
// database file and releases the store. Later calls of any method return
// audit.ErrClosed; a second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	s.mu.Unlock()
	// The checkpoint loop is stopped without the lock, which a checkpoint
	// it is queueing needs (send takes it to check closed, and then
	// returns ErrClosed): waiting for the loop while holding it hung Close.
	if s.stopCheckpoints != nil {
		close(s.stopCheckpoints)
		<-s.checkpointsDone
	}
	// Appends refused now; the call log drains through the committer.
	s.stopLog()
	s.stopBlocks()
	s.mu.Lock()
	close(s.reqs)
	s.mu.Unlock()
	<-s.done
	s.rows.close(s.w)
	s.closeLog()

	var errs []error
	if err := s.closeSide(); err != nil {
		errs = append(errs, err)
	}
	if err := s.ids.close(); err != nil {
		errs = append(errs, fmt.Errorf("cannot close the call id index: %w", err))
	}
	// The blocks synced so far are chained (those synced later, by
	// appends racing Close, are at the next open), and signed below.
	if _, err := s.chainBlocksStep(); err != nil {
		errs = append(errs, fmt.Errorf("cannot chain the call log's blocks: %w", err))
	}
	// The last heads are signed: a stop leaves no unsigned tail.
	if _, err := s.chainStep(&chainRequest{}); err != nil {
		errs = append(errs, fmt.Errorf("cannot sign the last checkpoint: %w", err))
	}
	if _, err := s.w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		errs = append(errs, fmt.Errorf("cannot checkpoint: %w", s.full(err)))
	}
	if err := s.r.Close(); err != nil {
		errs = append(errs, err)
	}
	if s.opts.CallLog != nil {
		if err := s.opts.CallLog.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.w.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cannot close store: %w", err)
	}
	return nil
}

// errClosed is returned (wrapped by the method's context) after Close.
func errClosed(op string) error { return fmt.Errorf("cannot %s: %w", op, audit.ErrClosed) }

// fail wraps an error of operation op: audit.ErrClosed once the store is
// closed, audit.ErrUnavailable for conditions that may pass (a busy or full
// disk, I/O errors), context errors as they are.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, audit.ErrClosed) || errors.Is(err, audit.ErrBadCursor) {
		return fmt.Errorf("cannot %s: %w", op, err)
	}
	if s.closed.Load() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return errClosed(op)
	}
	err = fmt.Errorf("cannot %s: %w", op, wrap(s.full(err)))
	s.noteWrite(err, 0)
	return err
}

// full names the file and the setting to look at in SQLite's "database or
// disk is full", once.
func (s *Store) full(err error) error {
	var se *sqlite.Error
	var df *diskFull
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL && !errors.As(err, &df) {
		return &diskFull{path: s.path, err: err}
	}
	return err
}

// diskFull is SQLite's "database or disk is full" with the file and the
// setting an operator looks at.
type diskFull struct {
	path string
	err  error
}

func (e *diskFull) Error() string {
	return fmt.Sprintf("%v (the disk of %s is full: free space on it, or move serve.data_dir to a larger one)", e.err, e.path)
}

func (e *diskFull) Unwrap() error { return e.err }

// Is makes SQLite's SQLITE_FULL read as the system's ENOSPC, which is what
// it reports: callers tell a full disk by errors.Is(err, syscall.ENOSPC)
// whichever file (the database, its log, the id index) ran out.
func (e *diskFull) Is(target error) bool { return target == syscall.ENOSPC }

// Writing names the file the failed write was to, for a sender's answer:
// its base name, never the path.
func (e *diskFull) Writing() string { return filepath.Base(e.path) }

// wrap marks the SQLite errors that may pass with time as
// audit.ErrUnavailable, once.
func wrap(err error) error {
	if errors.Is(err, audit.ErrUnavailable) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
			return fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
		}
	}
	return err
}

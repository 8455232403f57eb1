package calllogs

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// Dir is the directory of the call logs in a data dir.
func Dir(dataDir string) string { return filepath.Join(dataDir, "calls") }

// Logs is the call logs of every tenant under one directory. Safe for
// concurrent use.
type Logs struct {
	dir  string
	opts calllog.Options

	mu     sync.RWMutex
	logs   map[string]*calllog.Log // by tenant
	closed bool
	// deferred is set from an Open with opts.Defer until Start: the logs
	// were opened without changing a file, and no tenant's log is created.
	deferred bool
	// cuts holds, by tenant, the time before which retention deleted the
	// tenant's calls: reads leave them out at once, while the segments
	// holding them stay until they are wholly before it (the call log
	// removes whole segments only). Kept in the file cutsFile.
	cuts map[string]int64
	// cutMu orders DeleteBefore's counting, cutting and saving.
	cutMu sync.Mutex
	// onBlock is the hook ChainBlocks sets, given every block synced.
	onBlock atomic.Pointer[func(sqlite.LogBlock)]
}

// ErrInUse is returned by Check when a data dir's calls are in call
// logs: a store opened with its calls in the calls table
// (serve.sqlite.calls: sqlite) would not read them.
var ErrInUse = errors.New("the data dir's calls are in its call logs")

// Check returns an error matching ErrInUse, with the calls the logs hold,
// when dataDir keeps calls in call logs (InUse), for an open that would
// keep them in the calls table: it would answer every query without the
// logs' calls and store new ones where the logs' readers (the --data-dir
// commands) do not look. It reads the logs read-only.
func Check(dataDir string) error {
	if !InUse(dataDir) {
		return nil
	}
	held := "calls"
	if n, err := Count(dataDir); err == nil {
		held = fmt.Sprintf("%d calls", n)
	}
	return fmt.Errorf("%w: %s holds %s, which serve.sqlite.calls: sqlite would not read; set serve.sqlite.calls: log (move %s aside only if none of them is needed)",
		ErrInUse, Dir(dataDir), held, Dir(dataDir))
}

// Count returns the calls dataDir's call logs hold, read read-only beside
// whatever writes them.
func Count(dataDir string) (int64, error) {
	l, err := Open(Dir(dataDir), calllog.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	st, err := l.Stats()
	return st.Calls, err
}

// cutsFile is the file of Logs.cuts in the logs' directory: one line per
// tenant, its directory name and the cut in unix nanoseconds.
const cutsFile = "cuts"

var _ sqlite.BlockLog = (*Logs)(nil)

// Open opens the logs of every tenant under dir (creating dir); a
// tenant's log is created at its first call. opts.Tenant is set per log.
// Every log shares opts.Files (one of opts.OpenFiles made when nil), so
// that the sealed segments' files open at once are bounded across the
// tenants: each log holds its live segment's file besides.
// With opts.ReadOnly the logs are read beside the process that writes
// them (calllog.Options.ReadOnly): nothing is created or written, each
// tenant's log holds the calls synced when it was opened, a missing dir
// is logs of no call, and Append and DeleteBefore return
// calllog.ErrReadOnly.
// With opts.Defer (calllog.Options.Defer) no file is changed, dir not
// created, until Start: a caller that refuses the logs once open (the
// store, sqlite.ErrCallsLost) leaves them as it found them.
func Open(dir string, opts calllog.Options) (*Logs, error) {
	if opts.ReadOnly {
		opts.Defer = false
	}
	if !opts.ReadOnly && !opts.Defer {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cannot create call logs %s: %w", dir, err)
		}
	}
	ents, err := os.ReadDir(dir)
	if (opts.ReadOnly || opts.Defer) && errors.Is(err, os.ErrNotExist) {
		ents, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read call logs %s: %w", dir, err)
	}
	if opts.Files == nil {
		opts.Files = calllog.NewFiles(opts.OpenFiles)
	}
	l := &Logs{dir: dir, opts: opts, logs: map[string]*calllog.Log{}, deferred: opts.Defer}
	if !opts.ReadOnly && !opts.Defer {
		l.removeTemps()
	}
	if l.cuts, err = readCuts(filepath.Join(dir, cutsFile)); err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		tenant, ok := tenantOf(e.Name())
		if !ok {
			l.Close()
			return nil, fmt.Errorf("cannot open call logs %s: %s is no tenant's log (hex of its name, or - for the default tenant)", dir, e.Name())
		}
		if _, err := l.open(tenant); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// removeTemps removes the cuts files of a retention killed while it saved
// them.
func (l *Logs) removeTemps() {
	left, _ := filepath.Glob(datadir.TempGlob(filepath.Join(l.dir, cutsFile)))
	for _, f := range left {
		os.Remove(f)
	}
}

// Start makes the changes an Open with opts.Defer held (dir created, each
// tenant's log repaired, calllog.Log.Start) and takes appends from then
// on. It does nothing on logs started already or opened without Defer.
func (l *Logs) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("cannot start the call logs: %w", audit.ErrClosed)
	}
	if !l.deferred {
		return nil
	}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("cannot create call logs %s: %w", l.dir, err)
	}
	l.removeTemps()
	for tenant, lg := range l.logs {
		if err := lg.Start(); err != nil {
			return fmt.Errorf("cannot start the call log of tenant %q: %w", tenant, err)
		}
	}
	l.deferred = false
	return nil
}

// DirName is the name of tenant's log directory.
func DirName(tenant string) string {
	if tenant == "" {
		return "-"
	}
	return hex.EncodeToString([]byte(tenant))
}

func tenantOf(name string) (string, bool) {
	if name == "-" {
		return "", true
	}
	b, err := hex.DecodeString(name)
	return string(b), err == nil && len(b) > 0
}

// open opens tenant's log; l.mu is held or l not yet shared.
func (l *Logs) open(tenant string) (*calllog.Log, error) {
	o := l.opts
	o.Tenant = tenant
	o.Defer = l.deferred
	if !o.ReadOnly {
		o.OnBlock = func(b calllog.BlockInfo) {
			if fn := l.onBlock.Load(); fn != nil {
				(*fn)(logBlock(tenant, b))
			}
		}
	}
	lg, err := calllog.Open(filepath.Join(l.dir, DirName(tenant)), o)
	if err != nil {
		return nil, fmt.Errorf("cannot open the call log of tenant %q: %w", tenant, err)
	}
	l.logs[tenant] = lg
	return lg, nil
}

// log returns tenant's log, opened when create is set and it has none.
func (l *Logs) log(tenant string, create bool) (*calllog.Log, error) {
	l.mu.RLock()
	lg, closed := l.logs[tenant], l.closed
	l.mu.RUnlock()
	if closed {
		return nil, fmt.Errorf("cannot use the call logs: %w", audit.ErrClosed)
	}
	if lg != nil || !create {
		return lg, nil
	}
	if l.opts.ReadOnly {
		return nil, fmt.Errorf("cannot append to the call logs %s: %w", l.dir, calllog.ErrReadOnly)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("cannot use the call logs: %w", audit.ErrClosed)
	}
	if l.deferred {
		// No tenant's directory is made before Start.
		return nil, fmt.Errorf("cannot append to the call logs %s: %w", l.dir, calllog.ErrNotStarted)
	}
	if lg = l.logs[tenant]; lg != nil {
		return lg, nil
	}
	return l.open(tenant)
}

// all returns every tenant's log, in no order.
func (l *Logs) all() ([]*calllog.Log, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, fmt.Errorf("cannot use the call logs: %w", audit.ErrClosed)
	}
	out := make([]*calllog.Log, 0, len(l.logs))
	for _, lg := range l.logs {
		out = append(out, lg)
	}
	return out, nil
}

// wrap maps the call log's errors to the store's.
func wrap(err error) error {
	switch {
	case errors.Is(err, calllog.ErrClosed):
		return fmt.Errorf("%w: %w", audit.ErrClosed, err)
	case errors.Is(err, calllog.ErrTooLarge):
		return fmt.Errorf("%w: %w", audit.ErrTooLarge, err)
	}
	return err
}

// Append stores recs in their tenants' logs; see sqlite.CallLog. The
// tenants' appends are made one after the other: an error leaves the
// earlier tenants' calls stored (held when sent again).
func (l *Logs) Append(ctx context.Context, recs []audit.Record) ([]int, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	tenant := recs[0].Call.Tenant
	one := true
	for i := range recs {
		if recs[i].Call.Tenant != tenant {
			one = false
			break
		}
	}
	if one {
		lg, err := l.log(tenant, true)
		if err != nil {
			return nil, l.named(err)
		}
		held, err := lg.Append(ctx, recs)
		return held, wrap(l.named(err))
	}
	by := map[string][]int{}
	var order []string
	for i := range recs {
		t := recs[i].Call.Tenant
		if _, ok := by[t]; !ok {
			order = append(order, t)
		}
		by[t] = append(by[t], i)
	}
	var held []int
	for _, t := range order {
		idx := by[t]
		sub := make([]audit.Record, len(idx))
		for j, i := range idx {
			sub[j] = recs[i]
		}
		lg, err := l.log(t, true)
		if err != nil {
			return nil, l.named(err)
		}
		h, err := lg.Append(ctx, sub)
		if err != nil {
			return nil, wrap(l.named(err))
		}
		for _, j := range h {
			held = append(held, idx[j])
		}
	}
	sort.Ints(held)
	return held, nil
}

// Get returns the stored calls of id, one per tenant that holds it. With
// at set it looks in the segments meeting at's millisecond alone
// (calllog.Log.GetAt); with at zero, or out of the log's range, in every
// segment of every tenant's log.
func (l *Logs) Get(ctx context.Context, id string, at time.Time) ([]audit.Record, error) {
	logs, err := l.all()
	if err != nil {
		return nil, err
	}
	_, timed := sqlite.TimeNanos(at)
	timed = timed && !at.IsZero()
	var out []audit.Record
	for _, lg := range logs {
		var r *audit.Record
		var ok bool
		var err error
		if timed {
			r, ok, err = lg.GetAt(ctx, id, at)
		} else {
			r, ok, err = lg.Get(ctx, id)
		}
		if err != nil {
			return nil, wrap(err)
		}
		if ok && !l.cut(r) {
			out = append(out, *r)
		}
	}
	return out, nil
}

// writeError is an error of a write to the call logs that names, for a
// sender's answer (a full disk: "writing NAME"), the file or directory it
// was to by its path under the data dir, never the whole path: until
// fd52 the answer named a tenant's directory by its base name alone,
// "writing -" for the default tenant's.
type writeError struct {
	name string
	err  error
}

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// Writing names what the failed write was to: calls/<tenant's dir>/<file>,
// or calls/<tenant's dir> with whose directory it is.
func (e *writeError) Writing() string { return e.name }

// named wraps err, when it carries the path of a file or directory under
// the logs' directory, so that it names it (writeError).
func (l *Logs) named(err error) error {
	var pe *fs.PathError
	var we *writeError
	if err == nil || !errors.As(err, &pe) || errors.As(err, &we) {
		return err
	}
	rel, rerr := filepath.Rel(filepath.Dir(l.dir), pe.Path)
	if rerr != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return err
	}
	name := filepath.ToSlash(rel)
	if parts := strings.Split(name, "/"); len(parts) == 2 {
		if tenant, ok := tenantOf(parts[1]); ok && tenant == "" {
			name += " (the call log directory of the default tenant)"
		} else if ok {
			name += fmt.Sprintf(" (the call log directory of tenant %q)", tenant)
		}
	}
	return &writeError{name: name, err: err}
}

// errStop ends a tenant's scan early.
var errStop = errors.New("stop")

// scan is one log's scan of q.
func scan(ctx context.Context, lg *calllog.Log, q sqlite.CallScan, fn func(*audit.Record) error) error {
	switch {
	case q.Document != "":
		return lg.ByDocument(ctx, q.Document, q.From, q.To, fn)
	case q.Session != "":
		return lg.BySession(ctx, q.Session, q.From, q.To, fn)
	}
	return lg.Scan(ctx, q.From, q.To, fn)
}

// Scan calls fn with the calls of q of every tenant in time order,
// merging the tenants' logs; see sqlite.CallLog.
func (l *Logs) Scan(ctx context.Context, q sqlite.CallScan, fn func(*audit.Record) error) error {
	logs, err := l.all()
	if err != nil {
		return err
	}
	kept := func(r *audit.Record) error {
		if l.cut(r) {
			return nil
		}
		return fn(r)
	}
	if len(logs) == 1 {
		return wrap(scan(ctx, logs[0], q, kept))
	}
	type cursor struct {
		next func() (*audit.Record, bool)
		stop func()
		err  error
		rec  *audit.Record
	}
	cs := make([]*cursor, 0, len(logs))
	defer func() {
		for _, c := range cs {
			c.stop()
		}
	}()
	for _, lg := range logs {
		c := &cursor{}
		seq := iter.Seq[*audit.Record](func(yield func(*audit.Record) bool) {
			err := scan(ctx, lg, q, func(r *audit.Record) error {
				if !yield(r) {
					return errStop
				}
				return nil
			})
			if err != nil && !errors.Is(err, errStop) {
				c.err = err
			}
		})
		c.next, c.stop = iter.Pull(seq)
		cs = append(cs, c)
	}
	live := cs[:0:0]
	for _, c := range cs {
		if r, ok := c.next(); ok {
			c.rec = r
			live = append(live, c)
		} else if c.err != nil {
			return wrap(c.err)
		}
	}
	for len(live) > 0 {
		// A handful of tenants: the earliest of them by a linear pass.
		m := 0
		for i := 1; i < len(live); i++ {
			if live[i].rec.Call.Time.Before(live[m].rec.Call.Time) {
				m = i
			}
		}
		c := live[m]
		if err := kept(c.rec); err != nil {
			return err
		}
		if r, ok := c.next(); ok {
			c.rec = r
		} else {
			if c.err != nil {
				return wrap(c.err)
			}
			live = slices.Delete(live, m, m+1)
		}
	}
	return nil
}

// DeleteBefore deletes the calls before t of every tenant's log but
// keep's, or of tenant's alone with only set, and returns how many went.
// Reads leave them out at once (the tenant's cut, saved before it
// returns); the call log removes the sealed segments wholly before t, and
// a segment holding calls on both sides of t stays until a later pass.
func (l *Logs) DeleteBefore(t time.Time, tenant string, only bool, keep []string) (int64, error) {
	return l.deleteBefore(t, func(name string) bool {
		return only && name == tenant || !only && !slices.Contains(keep, name)
	})
}

// DeleteTenantsBefore is DeleteBefore of the logs of tenants alone (one
// without a log is skipped); see sqlite.BlockLog.
func (l *Logs) DeleteTenantsBefore(t time.Time, tenants []string) (int64, error) {
	return l.deleteBefore(t, func(name string) bool { return slices.Contains(tenants, name) })
}

// deleteBefore is DeleteBefore of the logs of the tenants pick accepts.
func (l *Logs) deleteBefore(t time.Time, pick func(tenant string) bool) (int64, error) {
	if l.opts.ReadOnly {
		return 0, fmt.Errorf("cannot delete calls from %s: %w", l.dir, calllog.ErrReadOnly)
	}
	cut, ok := sqlite.TimeNanos(t)
	if t.IsZero() {
		return 0, nil // nothing is before the zero time
	}
	if !ok {
		return 0, fmt.Errorf("cannot delete calls before %s: out of range", t)
	}
	l.cutMu.Lock()
	defer l.cutMu.Unlock()
	l.mu.RLock()
	if l.deferred {
		l.mu.RUnlock()
		return 0, fmt.Errorf("cannot delete calls from %s: %w", l.dir, calllog.ErrNotStarted)
	}
	logs := map[string]*calllog.Log{}
	for name, lg := range l.logs {
		if !pick(name) {
			continue
		}
		logs[name] = lg
	}
	closed := l.closed
	cuts := maps.Clone(l.cuts)
	l.mu.RUnlock()
	if closed {
		return 0, fmt.Errorf("cannot delete calls: %w", audit.ErrClosed)
	}
	var total int64
	moved := false
	for name, lg := range logs {
		old, had := cuts[name]
		if had && old >= cut {
			continue
		}
		from := time.Time{}
		if had {
			from = sqlite.NanosTime(old)
		}
		err := lg.Scan(context.Background(), from, t, func(*audit.Record) error {
			total++
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("cannot count the calls to delete: %w", wrap(err))
		}
		cuts[name], moved = cut, true
	}
	if moved {
		if err := writeCuts(filepath.Join(l.dir, cutsFile), cuts); err != nil {
			return 0, err
		}
		l.mu.Lock()
		for name, c := range cuts {
			l.cuts[name] = max(l.cuts[name], c)
		}
		l.mu.Unlock()
	}
	var errs []error
	for _, lg := range logs {
		if _, err := lg.DeleteBefore(t); err != nil {
			errs = append(errs, wrap(err))
		}
	}
	return total, errors.Join(errs...)
}

// cut reports whether retention deleted r (its tenant's cut is past it).
func (l *Logs) cut(r *audit.Record) bool {
	l.mu.RLock()
	c, ok := l.cuts[r.Call.Tenant]
	l.mu.RUnlock()
	if !ok {
		return false
	}
	n, _ := sqlite.TimeNanos(r.Call.Time)
	return n < c
}

// cutOr returns tenant's cut in cuts, math.MinInt64 when it has none.
func cutOr(cuts map[string]int64, tenant string) int64 {
	if c, ok := cuts[tenant]; ok {
		return c
	}
	return math.MinInt64
}

// readCuts reads the cuts file at path (none: no cut).
func readCuts(path string) (map[string]int64, error) {
	cuts := map[string]int64{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cuts, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the call logs' cuts: %w", err)
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		name, num, _ := strings.Cut(line, " ")
		tenant, ok := tenantOf(name)
		n, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("cannot read the call logs' cuts: %s line %d: %q is not a tenant and a time", path, i+1, line)
		}
		cuts[tenant] = n
	}
	return cuts, nil
}

// writeCuts replaces the cuts file at path, durably.
func writeCuts(path string, cuts map[string]int64) error {
	var b strings.Builder
	for _, tenant := range slices.Sorted(maps.Keys(cuts)) {
		fmt.Fprintf(&b, "%s %d\n", DirName(tenant), cuts[tenant])
	}
	if err := datadir.WriteFileSynced(path, []byte(b.String()), datadir.FileMode); err != nil {
		return fmt.Errorf("cannot save the call logs' cuts: %w", err)
	}
	return nil
}

// Newest returns the time of the latest stored call of any tenant (zero
// when none), from each log's time index (calllog.Log.Newest): a tenant
// whose calls are all before its retention cut has none.
func (l *Logs) Newest(ctx context.Context) (time.Time, error) {
	l.mu.RLock()
	logs, cuts, closed := maps.Clone(l.logs), maps.Clone(l.cuts), l.closed
	l.mu.RUnlock()
	if closed {
		return time.Time{}, fmt.Errorf("cannot use the call logs: %w", audit.ErrClosed)
	}
	var newest time.Time
	for tenant, lg := range logs {
		t, err := lg.Newest()
		if err != nil {
			return time.Time{}, wrap(err)
		}
		// The cut hides the calls before it: the latest is then hidden
		// with every other.
		if n, _ := sqlite.TimeNanos(t); t.IsZero() || n < cutOr(cuts, tenant) {
			continue
		}
		if t.After(newest) {
			newest = t
		}
	}
	return newest, nil
}

// Snapshot copies every tenant's log into dst, a directory it creates (it
// must not exist), with calllog.Log.Snapshot, and the cuts, so that Open
// of dst holds every call acknowledged before Snapshot began (of a
// read-only Logs: every call it holds); it returns the calls copied. On
// an error dst is removed.
func (l *Logs) Snapshot(dst string) (calls int64, err error) {
	l.mu.RLock()
	logs, cuts, closed := maps.Clone(l.logs), maps.Clone(l.cuts), l.closed
	l.mu.RUnlock()
	if closed {
		return 0, fmt.Errorf("cannot snapshot the call logs: %w", audit.ErrClosed)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return 0, fmt.Errorf("cannot snapshot the call logs: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	for tenant, lg := range logs {
		st, err := lg.Stats()
		if err != nil {
			return 0, err
		}
		if err := lg.Snapshot(filepath.Join(dst, DirName(tenant))); err != nil {
			return 0, fmt.Errorf("cannot snapshot the call log of tenant %q: %w", tenant, err)
		}
		calls += st.Calls
	}
	if len(cuts) > 0 {
		if err := writeCuts(filepath.Join(dst, cutsFile), cuts); err != nil {
			return 0, err
		}
	}
	if err := datadir.SyncDir(dst); err != nil {
		return 0, fmt.Errorf("cannot snapshot the call logs: %w", err)
	}
	return calls, nil
}

// Files returns the state of the sealed segments' files the logs keep
// open.
func (l *Logs) Files() calllog.FilesStats { return l.opts.Files.Stats() }

// Stats returns the sum of every tenant's log's calllog.Stats.
func (l *Logs) Stats() (calllog.Stats, error) {
	logs, err := l.all()
	if err != nil {
		return calllog.Stats{}, err
	}
	var sum calllog.Stats
	for _, lg := range logs {
		st, err := lg.Stats()
		if err != nil {
			return sum, err
		}
		sum.Segments += st.Segments
		sum.Calls += st.Calls
		sum.Blocks += st.Blocks
		sum.Bytes += st.Bytes
		sum.TableLoads += st.TableLoads
	}
	return sum, nil
}

// Close closes every tenant's log; a second Close does nothing.
func (l *Logs) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	logs := l.logs
	l.mu.Unlock()
	var errs []error
	for _, lg := range logs {
		if err := lg.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cannot close the call logs: %w", err)
	}
	return nil
}

// InUse reports whether the data dir keeps calls in call logs: its calls/
// holds a tenant's log. Commands that read the store's file alone (export,
// verify, backup) say that it does not hold those calls.
func InUse(dataDir string) bool {
	ents, err := os.ReadDir(Dir(dataDir))
	if err != nil {
		return false
	}
	for _, e := range ents {
		if _, ok := tenantOf(e.Name()); ok && e.IsDir() {
			return true
		}
	}
	return false
}

// logBlock is b of tenant's log as the store's chain records it.
func logBlock(tenant string, b calllog.BlockInfo) sqlite.LogBlock {
	first, _ := sqlite.TimeNanos(b.First)
	last, _ := sqlite.TimeNanos(b.Last)
	return sqlite.LogBlock{Tenant: tenant, Segment: b.Segment, Block: b.Block, Calls: b.Calls, First: first, Last: last, SHA256: b.SHA256}
}

// ChainBlocks has fn called with every block any tenant's log syncs from
// now on; see sqlite.BlockLog. Logs opened read-only sync none: it
// reports false.
func (l *Logs) ChainBlocks(fn func(sqlite.LogBlock)) bool {
	if l.opts.ReadOnly {
		return false
	}
	l.onBlock.Store(&fn)
	return true
}

// Tenants returns the tenants that have a log, in order.
func (l *Logs) Tenants() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Sorted(maps.Keys(l.logs))
}

// Segments returns the segments of tenant's log, in order (none when it
// has no log).
func (l *Logs) Segments(tenant string) ([]uint64, error) {
	lg, err := l.log(tenant, false)
	if err != nil || lg == nil {
		return nil, err
	}
	segs, err := lg.Segments()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]uint64, len(segs))
	for i := range segs {
		out[i] = segs[i].Segment
	}
	return out, nil
}

// SegmentFile returns the path of segment seg of tenant's log.
func (l *Logs) SegmentFile(tenant string, seg uint64) string {
	if lg, _ := l.log(tenant, false); lg != nil {
		return lg.SegmentPath(seg)
	}
	return filepath.Join(l.dir, DirName(tenant), calllog.SegmentName(seg))
}

// Blocks calls fn with each block of segment seg of tenant's log
// (calllog.Log.BlockHashes): its SHA-256 is that of the bytes on disk now.
func (l *Logs) Blocks(ctx context.Context, tenant string, seg uint64, fn func(sqlite.LogBlock) error) error {
	lg, err := l.log(tenant, false)
	if err != nil {
		return err
	}
	if lg == nil {
		return fmt.Errorf("cannot hash the blocks of tenant %q: %w", tenant, calllog.ErrNoSegment)
	}
	return wrap(lg.BlockHashes(ctx, seg, func(b calllog.BlockInfo) error { return fn(logBlock(tenant, b)) }))
}

// Cuts returns each tenant's cut, unix ns (see Logs.cuts).
func (l *Logs) Cuts() map[string]int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return maps.Clone(l.cuts)
}

package forward

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/net/http/httpguts"

	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// Config sets up a Forwarder.
type Config struct {
	// URL is the collector's ingest address: its base (http://host:4318)
	// or the full /v1/calls URL. Required.
	URL string `yaml:"url"`
	// Source names this sender in the Mcpaudit-Source header, e.g.
	// proxy/thegram/host-1. Required.
	Source string `yaml:"source"`
	// Token, when set, is sent as Authorization: Bearer.
	Token string `yaml:"token"`
	// TLS, when set, is the client's TLS settings for an https:// URL:
	// the CAs it trusts and the certificate it presents (mTLS). Default
	// Go's: the system's CAs.
	TLS *tls.Config `yaml:"-"`
	// BufferDir holds the segments waiting for the collector. Required.
	BufferDir string `yaml:"buffer_dir"`
	// MaxBufferBytes bounds the buffer on disk. Default 1 GiB.
	MaxBufferBytes int64 `yaml:"max_buffer_bytes"`
	// BatchRecords and BatchBytes seal a segment: one POST. Defaults 1000
	// records and 4 MiB.
	BatchRecords int `yaml:"batch_records"`
	BatchBytes   int `yaml:"batch_bytes"`
	// FlushInterval is the longest a record waits in an open segment.
	// Default 1s.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// Timeout bounds one POST. Default 30s.
	Timeout time.Duration `yaml:"timeout"`
	// MinBackoff and MaxBackoff bound the wait between failed POSTs; a
	// Retry-After longer than MaxBackoff is honoured up to 10 minutes.
	// Defaults 250ms and 30s.
	MinBackoff time.Duration `yaml:"min_backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// JournalScan is how often the sender looks for the journals of
	// processes that are gone, to record their calls in flight. Default 5s
	// (also when 0).
	JournalScan time.Duration `yaml:"journal_scan"`
}

// defaultJournalScan is Config.JournalScan's default.
const defaultJournalScan = 5 * time.Second

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	return Config{MaxBufferBytes: 1 << 30, BatchRecords: 1000, BatchBytes: 4 << 20,
		FlushInterval: time.Second, Timeout: 30 * time.Second, MinBackoff: 250 * time.Millisecond, MaxBackoff: 30 * time.Second,
		JournalScan: defaultJournalScan}
}

// Validate reports every invalid field with its key path.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("forward.url: required"))
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("forward.url: %q is not an http or https URL", c.URL))
	}
	switch {
	case c.Source == "":
		errs = append(errs, errors.New("forward.source: required"))
	case len(c.Source) > maxSourceName || !utf8.ValidString(c.Source) || strings.ContainsFunc(c.Source, unicode.IsControl):
		// What the collector takes (receiver's badSourceName): another
		// source is refused at every POST, or cannot be sent at all (a
		// newline), and the records would wait for ever (rev18p).
		errs = append(errs, fmt.Errorf("forward.source: %q must be printable UTF-8 of at most %d bytes", c.Source, maxSourceName))
	}
	if c.BufferDir == "" {
		errs = append(errs, errors.New("forward.buffer_dir: required"))
	}
	if c.MaxBufferBytes <= 0 {
		errs = append(errs, errors.New("forward.max_buffer_bytes: must be positive"))
	}
	if c.BatchRecords <= 0 {
		errs = append(errs, errors.New("forward.batch_records: must be positive"))
	}
	if c.BatchBytes <= 0 {
		errs = append(errs, errors.New("forward.batch_bytes: must be positive"))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"flush_interval", c.FlushInterval}, {"timeout", c.Timeout}, {"min_backoff", c.MinBackoff}, {"max_backoff", c.MaxBackoff}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("forward.%s: must be positive", d.key))
		}
	}
	if c.MinBackoff > c.MaxBackoff {
		errs = append(errs, errors.New("forward.min_backoff: larger than max_backoff"))
	}
	return errors.Join(errs...)
}

// Errors of Add.
var (
	// ErrBufferFull is returned when the buffer holds MaxBufferBytes: the
	// record was not taken.
	ErrBufferFull = errors.New("forward buffer full")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("forwarder closed")
)

// Header is the HTTP header that names the sender of call records.
const Header = "Mcpaudit-Source"

const (
	sealedExt = ".ndjson"
	openExt   = ".ndjson.part"
	rejectDir = "rejected"
	reasonExt = ".reason" // beside a segment in rejectDir: why it is there
	// sourceExt, beside a segment, names the source its records are sent
	// under when it is not the sender's own: the calls in flight of a dead
	// relay, recovered from its journal.
	sourceExt = ".source"
	// maxSourceName bounds Source, as the collector does.
	maxSourceName = 256
	// maxRetryAfter caps how long a Retry-After can hold the sender.
	maxRetryAfter = 10 * time.Minute
)

// Forwarder buffers records on disk and ships them to the collector. It is
// safe for concurrent use.
type Forwarder struct {
	cfg     Config
	url     string
	client  *http.Client
	metrics *metrics.Relay
	log     *slog.Logger

	mu       sync.Mutex
	cur      *os.File // the open segment, locked; nil when none
	curName  string
	curN     int
	curBytes int
	curSince time.Time
	size     int64 // bytes in the buffer, ours and others' as last scanned
	seq      int
	closed   bool
	sent     int64        // records the collector took, since the start
	dropped  atomic.Int64 // records not buffered (full, unwritable, closed), since the start

	journal *Journal // nil when it could not be created

	auth authLog // which of the collector's 401/403 refusals are logged

	wake chan struct{}
	stop context.CancelFunc
	done chan struct{}
}

// New opens the buffer directory, seals what dead processes left open in it
// and starts sending.
func New(cfg Config, m *metrics.Relay, log *slog.Logger) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	u := strings.TrimSuffix(cfg.URL, "/")
	if !strings.HasSuffix(u, "/v1/calls") {
		u += "/v1/calls"
	}
	if err := os.MkdirAll(filepath.Join(cfg.BufferDir, rejectDir), 0o755); err != nil {
		return nil, fmt.Errorf("cannot create buffer dir: %w", err)
	}
	f := &Forwarder{cfg: cfg, url: u, client: newClient(cfg), metrics: m, log: log,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	f.mu.Lock()
	f.size = f.scanSize()
	f.mu.Unlock()
	// Before this process's first record: the calls a dead relay had in
	// flight are the oldest. The journals first: each names the source of
	// its process's open segments, sealed with it.
	f.recoverJournals()
	f.sealOrphans()
	j, err := f.openJournal()
	if err != nil {
		log.Error("no journal of calls in flight: a crash would lose them", "err", err)
	} else {
		f.journal = j
	}
	f.mu.Lock()
	f.metrics.SetBufferBytes(f.size)
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go f.run(ctx)
	return f, nil
}

// addFrom buffers the records of another sender, source, in a segment of
// their own, sealed at once and sent under that source (NAME.source beside
// it). It returns the first error; records past the buffer's bound are
// dropped and counted, as Add's are.
func (f *Forwarder) addFrom(source string, recs [][]byte) error {
	if source == f.cfg.Source {
		for _, r := range recs {
			if err := f.Add(append(r, '\n')); err != nil {
				return err
			}
		}
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		f.drop(len(recs))
		return ErrClosed
	}
	f.seq++
	name := fmt.Sprintf("%020d-%d-%d", time.Now().UnixNano(), os.Getpid(), f.seq)
	part := filepath.Join(f.cfg.BufferDir, name+openExt)
	fh, err := os.OpenFile(part, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.drop(len(recs))
		return fmt.Errorf("cannot create buffer segment: %w", err)
	}
	defer fh.Close()
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		os.Remove(part)
		f.drop(len(recs))
		return fmt.Errorf("cannot lock buffer segment: %w", err)
	}
	if !stillAt(fh, part) { // taken by another relay's scan before our lock, as in openLocked; the journal stays for the next scan
		return fmt.Errorf("cannot create buffer segment: %s deleted by another relay's scan", part)
	}
	// Before the records: a segment with records always has its source
	// beside it, also when a crash leaves it open for sealOrphans.
	if err := os.WriteFile(filepath.Join(f.cfg.BufferDir, name+sourceExt), []byte(source), 0o644); err != nil {
		os.Remove(part)
		f.drop(len(recs))
		return fmt.Errorf("cannot write the source of a buffer segment: %w", err)
	}
	var first error
	n := 0
	for _, r := range recs {
		l := append(r, '\n')
		if f.size+int64(len(l)) > f.cfg.MaxBufferBytes {
			f.drop(1)
			first = cmp.Or(first, ErrBufferFull)
			continue
		}
		if _, err := fh.Write(l); err != nil {
			f.drop(1)
			first = cmp.Or(first, fmt.Errorf("cannot buffer record: %w", err))
			break // a torn line ends the segment: the collector rejects that one
		}
		n++
		f.size += int64(len(l))
		f.metrics.Forward(metrics.ForwardBuffered, 1)
	}
	f.metrics.SetBufferBytes(f.size)
	if n == 0 {
		os.Remove(part)
		os.Remove(filepath.Join(f.cfg.BufferDir, name+sourceExt))
		return first
	}
	if err := os.Rename(part, filepath.Join(f.cfg.BufferDir, name+sealedExt)); err != nil {
		f.log.Error("cannot seal buffer segment", "segment", part, "err", err)
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return first
}

// segmentSource is the source the records of the segment at path are sent
// under: the one beside it, else the sender's own.
// A source file that is no valid header value (a torn or corrupt write)
// is not used: every POST of its segment would fail in the HTTP client,
// and the segments behind it, oldest first, would never go (rev18p).
func (f *Forwarder) segmentSource(path string) string {
	b, err := os.ReadFile(strings.TrimSuffix(path, sealedExt) + sourceExt)
	if err != nil || len(b) == 0 {
		return f.cfg.Source
	}
	if !httpguts.ValidHeaderFieldValue(string(b)) {
		f.log.Error("the source beside a buffer segment is no valid header value; its records go under this relay's", "segment", filepath.Base(path),
			"source", strconv.Quote(string(b)))
		return f.cfg.Source
	}
	return string(b)
}

// drop counts n records not buffered.
func (f *Forwarder) drop(n int) {
	f.metrics.Forward(metrics.ForwardDropped, n)
	f.dropped.Add(int64(n))
}

// BufferDir is the directory of the buffer.
func (f *Forwarder) BufferDir() string { return f.cfg.BufferDir }

// Record buffers one record; see Add.
func (f *Forwarder) Record(r *tap.Record) error {
	return f.Add(append(r.AppendJSON(nil), '\n'))
}

// newClient returns the HTTP client of cfg.
func newClient(cfg Config) *http.Client {
	if cfg.TLS == nil {
		return &http.Client{Timeout: cfg.Timeout}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS
	return &http.Client{Transport: tr, Timeout: cfg.Timeout}
}

// Add appends one NDJSON line (with its newline) to the buffer. Once it
// returns nil the line is on disk and will be delivered or set aside; it
// returns ErrBufferFull or a write error when the line was not taken.
func (f *Forwarder) Add(line []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		f.drop(1)
		return ErrClosed
	}
	if f.size+int64(len(line)) > f.cfg.MaxBufferBytes {
		f.drop(1)
		return ErrBufferFull
	}
	if f.cur == nil {
		if err := f.openLocked(true); err != nil {
			f.drop(1)
			return err
		}
	}
	if _, err := f.cur.Write(line); err != nil {
		f.drop(1)
		// A short write leaves a torn line: seal the segment so that the
		// collector rejects that one line and takes the others.
		f.sealLocked()
		return fmt.Errorf("cannot buffer record: %w", err)
	}
	f.curN++
	f.curBytes += len(line)
	f.size += int64(len(line))
	f.metrics.Forward(metrics.ForwardBuffered, 1)
	f.metrics.SetBufferBytes(f.size)
	if f.curN >= f.cfg.BatchRecords || f.curBytes >= f.cfg.BatchBytes {
		f.sealLocked()
	}
	return nil
}

func (f *Forwarder) openLocked(retry bool) error {
	f.seq++
	name := fmt.Sprintf("%020d-%d-%d", time.Now().UnixNano(), os.Getpid(), f.seq)
	path := filepath.Join(f.cfg.BufferDir, name+openExt)
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create buffer segment: %w", err)
	}
	if testHookSegmentCreated != nil {
		testHookSegmentCreated(path)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fh.Close()
		os.Remove(path)
		return fmt.Errorf("cannot lock buffer segment: %w", err)
	}
	// Another relay's scan may have locked it in the instant before us,
	// taken it, empty, for a dead relay's and deleted it: records written
	// to it would be lost with Add's nil (rev18p). Locked now, the file
	// still at path is ours for good.
	if !stillAt(fh, path) {
		fh.Close()
		if retry {
			return f.openLocked(false)
		}
		return fmt.Errorf("cannot create buffer segment: %s deleted by another relay's scan", path)
	}
	// Before its first record, the segment names its source: a relay that
	// seals it after this one died sends it under it, whichever relay that
	// is and whatever it knows of the dead one's journal (rev18p: a third
	// relay's scan, or two dead relays of one pid, sent it under another
	// source). Without it, sealOrphansOf still matches by pid.
	if err := os.WriteFile(filepath.Join(f.cfg.BufferDir, name+sourceExt), []byte(f.cfg.Source), 0o644); err != nil {
		f.log.Warn("cannot write the source of a buffer segment", "segment", path, "err", err)
	}
	f.cur, f.curName, f.curN, f.curBytes, f.curSince = fh, name, 0, 0, time.Now()
	return nil
}

// stillAt reports whether the open file fh is still the file at path.
func stillAt(fh *os.File, path string) bool {
	st, err := fh.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(path)
	return err == nil && os.SameFile(st, now)
}

// testHookSegmentCreated, set by tests only, runs between the creation of
// a segment and its lock: where another relay's scan may take it.
var testHookSegmentCreated func(path string)

// sealLocked closes the open segment and hands it to the sender.
func (f *Forwarder) sealLocked() {
	if f.cur == nil {
		return
	}
	open := filepath.Join(f.cfg.BufferDir, f.curName+openExt)
	if f.curN == 0 {
		os.Remove(open)
		os.Remove(filepath.Join(f.cfg.BufferDir, f.curName+sourceExt))
	} else {
		// The sender syncs the segment before it sends it: an fsync here
		// would hold every Add, and so the relayed answers, behind the disk.
		if err := os.Rename(open, filepath.Join(f.cfg.BufferDir, f.curName+sealedExt)); err != nil {
			f.log.Error("cannot seal buffer segment", "segment", open, "err", err)
		}
	}
	f.cur.Close() // releases the lock
	f.cur = nil
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// sealOrphans seals the open segments of processes that are gone: their
// lock is free. Those of a process whose journal named its source were
// sealed under it by recoverJournals; the others go under this sender's.
func (f *Forwarder) sealOrphans() {
	names, _ := filepath.Glob(filepath.Join(f.cfg.BufferDir, "*"+openExt))
	for _, p := range names {
		f.sealOrphan(p, "")
	}
}

// sealOrphansOf seals the open segments process pid left, whose journal
// says it sent under source: they go out under it, as its calls in flight
// do. (prox17 saw a relay's answered calls of its last second sent under
// the survivor's source.)
func (f *Forwarder) sealOrphansOf(pid, source string) {
	names, _ := filepath.Glob(filepath.Join(f.cfg.BufferDir, "*-"+pid+"-*"+openExt))
	for _, p := range names {
		f.sealOrphan(p, source)
	}
}

// sealOrphan seals the open segment p if its process is gone, with source
// beside it when that is not this sender's.
func (f *Forwarder) sealOrphan(p, source string) {
	fh, err := os.Open(p)
	if err != nil {
		return
	}
	defer fh.Close()
	if syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return
	}
	base := strings.TrimSuffix(p, openExt)
	if st, err := fh.Stat(); err == nil && st.Size() == 0 {
		os.Remove(p)
		os.Remove(base + sourceExt)
		return
	}
	if source != "" && source != f.cfg.Source {
		if _, err := os.Stat(base + sourceExt); err != nil {
			if err := os.WriteFile(base+sourceExt, []byte(source), 0o644); err != nil {
				f.log.Error("cannot write the source of a dead relay's segment; it goes under this relay's", "segment", p, "source", source, "err", err)
			}
		}
	}
	os.Rename(p, base+sealedExt)
}

// scanSize sums the segments in the buffer directory.
func (f *Forwarder) scanSize() int64 {
	var n int64
	ents, _ := os.ReadDir(f.cfg.BufferDir)
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		if strings.HasSuffix(e.Name(), journalExt) || strings.HasSuffix(e.Name(), journalNewExt) || strings.HasSuffix(e.Name(), sourceExt) {
			continue // not sent: the records a journal holds are counted once buffered
		}
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// leftSize is scanSize without the open segments of live relays on the
// directory: those are theirs to send, not left for the next start (a
// clean stop beside a live relay logged them as left, rev18p).
func (f *Forwarder) leftSize() int64 {
	n := f.scanSize()
	names, _ := filepath.Glob(filepath.Join(f.cfg.BufferDir, "*"+openExt))
	for _, p := range names {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		if syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			if st, err := fh.Stat(); err == nil {
				n -= st.Size()
			}
		}
		fh.Close()
	}
	return max(n, 0)
}

// run seals segments by age and sends sealed segments, oldest first.
func (f *Forwarder) run(ctx context.Context) {
	defer close(f.done)
	backoff := time.Duration(0)
	tick := time.NewTicker(f.cfg.FlushInterval / 2)
	defer tick.Stop()
	scanEvery := f.cfg.JournalScan
	if scanEvery <= 0 {
		scanEvery = defaultJournalScan
	}
	lastScan := time.Now()
	for {
		if time.Since(lastScan) >= scanEvery {
			// Another relay sharing the directory died: its open segment
			// and its calls in flight wait for no new start.
			lastScan = time.Now()
			f.recoverJournals()
			f.sealOrphans()
		}
		f.mu.Lock()
		if f.cur != nil && time.Since(f.curSince) >= f.cfg.FlushInterval {
			f.sealLocked()
		}
		f.mu.Unlock()
		wait, sent, fail := f.sendOne(ctx)
		switch {
		case wait > 0:
			if backoff == 0 {
				backoff = f.cfg.MinBackoff
			} else {
				backoff = min(2*backoff, f.cfg.MaxBackoff)
			}
			d := max(wait, backoff/2+rand.N(backoff/2+1))
			var refused *authRefusal
			switch {
			case fail != nil && errors.As(fail.err, &refused):
				f.logAuthRefusal(refused, fail.segment)
			case fail != nil:
				// The wait actually taken (the backoff, or the collector's
				// Retry-After when longer), not the Retry-After alone, which
				// a refused connection never gives: the log said "retry_in":
				// "0s" at every try of an outage.
				f.log.Warn("cannot send call records; will retry", "segment", fail.segment, "err", fail.err, "retry_in", d.Round(time.Millisecond))
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		case sent:
			backoff = 0
			if n := f.auth.accepted(); n > 0 {
				f.log.Info("the collector accepts the relay's credential again; sending the records buffered meanwhile", "refusals", n)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-tick.C:
		}
	}
}

// sendFailure is why a segment could not be sent, for the retry's log line.
type sendFailure struct {
	segment string
	err     error
}

// sendOne posts the oldest sealed segment it can lock. It returns how long
// the collector asked to wait before trying again after a failure (at least
// a millisecond), whether it sent one, and the failure.
func (f *Forwarder) sendOne(ctx context.Context) (time.Duration, bool, *sendFailure) {
	names, _ := filepath.Glob(filepath.Join(f.cfg.BufferDir, "*"+sealedExt))
	slices.Sort(names)
	for _, p := range names {
		fh, err := os.Open(p)
		if err != nil {
			continue // sent by another process meanwhile
		}
		if syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			fh.Close()
			continue
		}
		if err := fh.Sync(); err != nil {
			f.log.Warn("cannot sync buffer segment", "segment", filepath.Base(p), "err", err)
		}
		wait, err := f.post(ctx, p, fh)
		fh.Close()
		if err != nil {
			return max(wait, time.Millisecond), false, &sendFailure{segment: filepath.Base(p), err: err}
		}
		return 0, true, nil
	}
	return 0, false, nil
}

// post sends one locked segment and removes or sets it aside. A non-nil
// error means retry after the returned wait.
func (f *Forwarder) post(ctx context.Context, path string, fh *os.File) (time.Duration, error) {
	body, err := io.ReadAll(fh)
	if err != nil {
		return 0, fmt.Errorf("cannot read segment: %w", err)
	}
	if _, err := os.Stat(path); err != nil {
		return 0, nil // removed by the process that held it before us
	}
	lines := bytes.Count(body, []byte{'\n'})
	if len(bytes.TrimSpace(body)) == 0 {
		f.remove(path, int64(len(body)))
		return 0, nil
	}
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestSpeed)
	zw.Write(body)
	zw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, &zb)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Content-Encoding", "gzip")
	source := f.segmentSource(path)
	req.Header.Set(Header, source)
	if f.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.metrics.Post(metrics.PostRetry)
		return 0, fmt.Errorf("cannot post call records: %w", err)
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		f.metrics.Post(metrics.PostOK)
		var r struct {
			Accepted int      `json:"accepted"`
			Rejected int      `json:"rejected"`
			Errors   []string `json:"errors"`
		}
		if json.Unmarshal(answer, &r) == nil && r.Rejected > 0 {
			// The segment goes aside whole, with the answer that names each
			// rejected record by its line (the first 100): sent again once
			// fixed, its accepted records are acknowledged as duplicates,
			// not stored twice.
			f.metrics.Forward(metrics.ForwardRejected, r.Rejected)
			f.metrics.Forward(metrics.ForwardSent, lines-r.Rejected)
			dst := f.setAside(path, int64(len(body)), resp.Status, answer)
			f.log.Error("the collector rejected call records; their segment set aside", "rejected", r.Rejected,
				"accepted", r.Accepted, "errors", r.Errors, "kept", dst)
			return 0, nil
		}
		f.metrics.Forward(metrics.ForwardSent, lines)
		f.mu.Lock()
		f.sent += int64(lines)
		f.mu.Unlock()
		f.remove(path, int64(len(body)))
		return 0, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// Credentials are an operator's to fix: the records wait for them.
		f.metrics.Post(metrics.PostRetry)
		return retryAfter(resp.Header.Get("Retry-After"), time.Now()), &authRefusal{status: resp.Status, answer: string(bytes.TrimSpace(answer))}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout:
		f.metrics.Post(metrics.PostRetry)
		return retryAfter(resp.Header.Get("Retry-After"), time.Now()), fmt.Errorf("collector answered %s: %s", resp.Status, bytes.TrimSpace(answer))
	default:
		f.metrics.Post(metrics.PostRejected)
		f.metrics.Forward(metrics.ForwardRejected, lines)
		dst := f.setAside(path, int64(len(body)), resp.Status, answer)
		f.log.Error("the collector refused a batch of call records; set aside", "status", resp.Status, "answer", string(bytes.TrimSpace(answer)), "kept", dst)
		return 0, nil
	}
}

// authRefusal is the collector's 401 or 403: it does not take the relay's
// credential. Only an operator can change that; the records wait on disk
// and are sent again, as for any retry.
type authRefusal struct {
	status string
	answer string
}

func (e *authRefusal) Error() string { return "collector answered " + e.status + ": " + e.answer }

// authLogEvery is how often a relay the collector keeps refusing says so
// again after its first, loud, line.
const authLogEvery = 5 * time.Minute

// authLog decides which of the collector's 401/403 refusals are logged: the
// first of a run of them, then one per authLogEvery with the count since.
// A relay without a token retried every few seconds for ever, each try a
// WARN that did not say what to do (op23 D9).
type authLog struct {
	mu      sync.Mutex
	last    time.Time // the last refusal logged; zero: none since the last success
	since   int       // refusals since the last line
	refused int       // refusals since the last success
}

// refusal counts one refusal at now and says whether to log it, whether
// it is the first of its run, and how many came since the last line.
func (a *authLog) refusal(now time.Time) (log, first bool, since int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused++
	a.since++
	if !a.last.IsZero() && now.Sub(a.last) < authLogEvery {
		return false, false, 0
	}
	first, since = a.last.IsZero(), a.since
	a.last, a.since = now, 0
	return true, first, since
}

// accepted ends a run of refusals and returns its length (0: none).
func (a *authLog) accepted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.refused
	a.last, a.since, a.refused = time.Time{}, 0, 0
	return n
}

// logAuthRefusal logs a refusal of the relay's credential when authLog
// says so, with what to do: the CLI's 401 names --token and
// $MCPAUDIT_TOKEN, and so does this.
func (f *Forwarder) logAuthRefusal(e *authRefusal, segment string) {
	log, first, since := f.auth.refusal(time.Now())
	if !log {
		return
	}
	fix := "give the relay a token with the ingest scope (--token or $MCPAUDIT_TOKEN): one of the collector's serve.receiver.tenants, or from mcpaudit token new --scopes ingest (docs/security.md)"
	if f.cfg.Token != "" {
		fix = "the relay's token (--token or $MCPAUDIT_TOKEN) is not one the collector knows, or lacks the ingest scope: give it one of the collector's serve.receiver.tenants, or from mcpaudit token new --scopes ingest (docs/security.md)"
	}
	args := []any{"status", e.status, "answer", e.answer, "fix", fix, "segment", segment,
		"buffer_bytes", f.bufferBytes(), "next_log_in", authLogEvery}
	if first {
		f.log.Error("the collector refuses the relay's credential; call records stay buffered on disk and are sent once it takes them", args...)
		return
	}
	f.log.Error("the collector still refuses the relay's credential; call records stay buffered on disk", append(args, "refusals_since_last_line", since)...)
}

// bufferBytes is the size of the buffer as last counted.
func (f *Forwarder) bufferBytes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// setAside moves a segment of n bytes the collector refused, whole or in
// part, to rejected/ for a person, with the collector's status and answer
// beside it (NAME.ndjson and NAME.reason), and returns where it went.
func (f *Forwarder) setAside(path string, n int64, status string, answer []byte) string {
	dst := filepath.Join(f.cfg.BufferDir, rejectDir, filepath.Base(path))
	reason := fmt.Sprintf("%s\ncollector %s answered %s (Mcpaudit-Source: %s):\n%s\n", time.Now().UTC().Format(time.RFC3339), f.url, status,
		f.segmentSource(path), bytes.TrimSpace(answer))
	// The source goes along: the segment posted again goes under it.
	os.Rename(strings.TrimSuffix(path, sealedExt)+sourceExt, strings.TrimSuffix(dst, sealedExt)+sourceExt)
	if err := os.WriteFile(strings.TrimSuffix(dst, sealedExt)+reasonExt, []byte(reason), 0o644); err != nil {
		f.log.Error("cannot write why a segment was set aside", "segment", dst, "err", err)
	}
	if err := os.Rename(path, dst); err != nil {
		f.log.Error("cannot set a refused segment aside", "segment", path, "err", err)
		return path
	}
	f.mu.Lock()
	f.size = max(f.size-n, 0)
	f.metrics.SetBufferBytes(f.size)
	f.mu.Unlock()
	return dst
}

func (f *Forwarder) remove(path string, n int64) {
	if err := os.Remove(path); err != nil {
		f.log.Error("cannot remove a sent segment", "segment", path, "err", err)
	}
	os.Remove(strings.TrimSuffix(path, sealedExt) + sourceExt)
	f.mu.Lock()
	f.size -= n
	if f.size < 0 {
		f.size = 0
	}
	f.metrics.SetBufferBytes(f.size)
	f.mu.Unlock()
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), capped.
func retryAfter(v string, now time.Time) time.Duration {
	var d time.Duration
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s > 0 {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// Flush seals the open segment and waits until the sender has sent every
// segment or failed on one, or ctx ends. It returns the number of bytes
// still buffered.
func (f *Forwarder) Flush(ctx context.Context) int64 {
	f.mu.Lock()
	f.sealLocked()
	f.mu.Unlock()
	for {
		names, _ := filepath.Glob(filepath.Join(f.cfg.BufferDir, "*"+sealedExt))
		if len(names) == 0 || ctx.Err() != nil {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.leftSize()
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stopped is what Close did, for the relay's last log line.
type Stopped struct {
	// Sent is the number of records the collector took since the start.
	Sent int64
	// Dropped is the number of records not buffered since the start
	// (the buffer full or unwritable): lost, though their calls were
	// answered.
	Dropped int64
	// LeftBytes is what stays in the buffer directory for the next start.
	LeftBytes int64
	// Journal is the path of this process's journal when it was left,
	// with InFlight calls in flight in it; "" when it was removed.
	Journal  string
	InFlight int
	// Err is why the journal could not be removed, if it could not.
	Err error
}

// Close seals the open segment, tries to send what is buffered until ctx
// ends, and stops. What could not be sent stays on disk for the next start.
func (f *Forwarder) Close(ctx context.Context) error {
	return f.Stop(ctx).Err
}

// Stop is Close, and says what it did.
func (f *Forwarder) Stop(ctx context.Context) Stopped {
	// The journals of relays that died since the last scan: their calls
	// go out with this flush, and a clean stop leaves none of them.
	f.recoverJournals()
	left := f.Flush(ctx)
	f.mu.Lock()
	f.closed = true
	f.sealLocked()
	f.mu.Unlock()
	f.stop()
	<-f.done
	var st Stopped
	if f.journal != nil {
		st.Journal, st.InFlight, st.Err = f.journal.close()
	}
	f.mu.Lock()
	st.Sent, st.LeftBytes, st.Dropped = f.sent, left, f.dropped.Load()
	f.mu.Unlock()
	if left > 0 {
		f.log.Warn("call records left in the buffer for the next start", "dir", f.cfg.BufferDir, "bytes", left)
	}
	return st
}

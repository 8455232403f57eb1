package notify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/conf"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// Formats of a notification.
const (
	FormatAlertmanager = "alertmanager"
	FormatWebhook      = "webhook"
)

// Config configures notifications. With URL empty, nothing is sent.
type Config struct {
	// URL receives one POST per new finding: for Alertmanager, its
	// /api/v2/alerts endpoint. Default empty (off).
	URL string `yaml:"url"`
	// Format is alertmanager (a JSON array of one alert) or webhook (the
	// finding's JSON with a link). Default alertmanager.
	Format string `yaml:"format"`
	// MinSeverity is the least severe finding sent: info, warning or
	// critical. Default warning.
	MinSeverity audit.Severity `yaml:"min_severity"`
	// Headers are added to every request (Authorization, for one).
	Headers map[string]string `yaml:"headers"`
	// QueueSize is how many findings may wait to be sent. Past it, new
	// findings are counted as dropped and sent later from the store.
	// Default 10000.
	QueueSize int `yaml:"queue_size"`
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// GiveUpAfter is how long a finding is retried before it is marked
	// failed and left. Default 24h.
	GiveUpAfter time.Duration `yaml:"give_up_after"`
	// ResolveAfter is how long after it is first sent an Alertmanager
	// alert ends (endsAt). Default 1h.
	ResolveAfter time.Duration `yaml:"resolve_after"`
}

// NewDefaultConfig returns the defaults (notifications off).
func NewDefaultConfig() Config {
	return Config{Format: FormatAlertmanager, MinSeverity: audit.SeverityWarning, QueueSize: 10000,
		Timeout: 10 * time.Second, GiveUpAfter: 24 * time.Hour, ResolveAfter: time.Hour}
}

// Validate checks the configuration; errors name their key.
func (c *Config) Validate() error {
	var errs []error
	if c.URL != "" {
		if fault := conf.URLFault(c.URL, true, "http", "https"); fault != "" {
			errs = append(errs, fmt.Errorf("url: want an http or https URL: %s (the value is not repeated: it may hold a secret)", fault))
		}
	}
	if c.Format != FormatAlertmanager && c.Format != FormatWebhook {
		errs = append(errs, fmt.Errorf("format: want alertmanager or webhook, not %q", c.Format))
	}
	if c.MinSeverity.Rank() == 0 {
		errs = append(errs, fmt.Errorf("min_severity: want info, warning or critical, not %q", c.MinSeverity))
	}
	if c.QueueSize <= 0 {
		errs = append(errs, errors.New("queue_size: must be positive"))
	}
	for k, d := range map[string]time.Duration{"timeout": c.Timeout, "give_up_after": c.GiveUpAfter, "resolve_after": c.ResolveAfter} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive", k))
		}
	}
	return errors.Join(errs...)
}

// Enabled reports whether notifications are configured.
func (c *Config) Enabled() bool { return c.URL != "" }

// FindingSource reads stored findings, to send those the queue had no
// room for.
type FindingSource interface {
	Findings(ctx context.Context, q audit.FindingQuery) (audit.FindingPage, error)
}

// Notifier is the audit.Sink that sends notifications.
type Notifier struct {
	cfg     Config
	baseURL string
	// runbook is the runbook document (rules.runbook_url); empty: no
	// runbook_url annotation.
	runbook string
	log     *slog.Logger
	client  *http.Client
	store   FindingSource

	queue chan queued
	// droppedSince is the earliest event time (unix nanoseconds) of a
	// finding the full queue refused; 0 when none.
	droppedSince atomic.Int64

	journal *journal
	stop    chan struct{}
	done    chan struct{}

	// Counters for the status of the notifier.
	Sent, Failed, Dropped, Retries atomic.Int64
}

var _ audit.Sink = (*Notifier)(nil)

// queued is a finding waiting to be sent, with the time of its first
// attempt (zero until then).
type queued struct {
	Finding audit.Finding `json:"finding"`
	First   time.Time     `json:"first,omitzero"`
}

// New starts a notifier that journals in dir (created if missing), links
// findings to the page at baseURL and its alerts to the section
// RunbookAnchor of the runbook document runbookURL (either may be empty:
// no link). store serves the catch-up after an overflow; it may be nil.
// Queued findings left in the journal by an earlier run are sent first.
func New(cfg Config, dir, baseURL, runbookURL string, store FindingSource, log *slog.Logger) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid notify config: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	j, pending, err := openJournal(dir)
	if err != nil {
		return nil, err
	}
	n := &Notifier{cfg: cfg, baseURL: strings.TrimRight(baseURL, "/"), runbook: runbookURL, log: log, store: store,
		client: &http.Client{Timeout: cfg.Timeout}, journal: j,
		queue: make(chan queued, cfg.QueueSize+len(pending)), stop: make(chan struct{}), done: make(chan struct{})}
	for _, q := range pending {
		n.queue <- q
	}
	if len(pending) > 0 {
		log.Info("notify: resending findings queued by an earlier run", "findings", len(pending))
	}
	go n.run()
	return n, nil
}

// Call implements audit.Sink; calls are not notified.
func (n *Notifier) Call(*audit.Record) {}

// Write implements audit.Sink; writes are not notified.
func (n *Notifier) Write(*audit.Write, audit.WriteState) {}

// Finding implements audit.Sink: it queues f without blocking.
func (n *Notifier) Finding(f *audit.Finding) {
	if f.Severity.Rank() < n.cfg.MinSeverity.Rank() {
		return
	}
	g := *f
	g.Calls = append([]string(nil), f.Calls...)
	select {
	case n.queue <- queued{Finding: g}:
	default:
		n.Dropped.Add(1)
		t := f.Time.UnixNano()
		for {
			cur := n.droppedSince.Load()
			if (cur != 0 && cur <= t) || n.droppedSince.CompareAndSwap(cur, t) {
				break
			}
		}
	}
}

// Close stops sending; findings still queued are journaled and sent by the
// next run.
func (n *Notifier) Close() error {
	close(n.stop)
	<-n.done
	var left []queued
	for {
		select {
		case q := <-n.queue:
			left = append(left, q)
			continue
		default:
		}
		break
	}
	var errs []error
	for _, q := range left {
		if err := n.journal.pending(q); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.journal.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (n *Notifier) run() {
	defer close(n.done)
	catchUp := time.NewTicker(2 * time.Second)
	defer catchUp.Stop()
	for {
		select {
		case <-n.stop:
			return
		case q := <-n.queue:
			n.deliver(q)
		case <-catchUp.C:
			n.catchUp()
		}
	}
}

// deliver sends one finding until it succeeds, fails for good, or the
// notifier stops (then it stays pending in the journal).
func (n *Notifier) deliver(q queued) {
	id := q.Finding.ID()
	if n.journal.sent(id) {
		return
	}
	if q.First.IsZero() {
		q.First = time.Now().UTC()
		if err := n.journal.pending(q); err != nil {
			n.log.Warn("notify: cannot journal a queued finding", "finding", id, "err", err)
		}
	}
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		err := n.send(q)
		if err == nil {
			n.Sent.Add(1)
			if err := n.journal.done(id, "sent"); err != nil {
				n.log.Warn("notify: cannot journal a sent finding; it may be sent again after a restart", "finding", id, "err", err)
			}
			return
		}
		var perm *permanentError
		if errors.As(err, &perm) || time.Since(q.First) > n.cfg.GiveUpAfter {
			n.Failed.Add(1)
			n.log.Error("notify: giving up on a finding", "finding", id, "attempts", attempt, "err", err)
			n.journal.done(id, "failed")
			return
		}
		n.Retries.Add(1)
		n.log.Warn("notify: cannot send a finding; retrying", "finding", id, "attempt", attempt, "in", backoff, "err", err)
		select {
		case <-n.stop:
			return // journaled as pending: the next run sends it
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Minute)
	}
}

// catchUp sends the stored findings that a full queue refused.
func (n *Notifier) catchUp() {
	since := n.droppedSince.Swap(0)
	if since == 0 || n.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := audit.FindingQuery{Since: time.Unix(0, since), Severity: n.cfg.MinSeverity, Limit: 1000}
	for {
		p, err := n.store.Findings(ctx, q)
		if err != nil {
			n.log.Warn("notify: cannot read findings to catch up; retrying", "err", err)
			n.droppedSince.CompareAndSwap(0, since)
			return
		}
		for _, f := range p.Findings {
			select {
			case <-n.stop:
				return
			default:
			}
			n.deliver(queued{Finding: f})
		}
		if p.NextCursor == "" {
			return
		}
		q.Cursor = p.NextCursor
	}
}

// permanentError is a refusal that a retry cannot change.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Link returns the page of finding f.
func (n *Notifier) link(f *audit.Finding) string {
	return n.baseURL + "/findings/" + f.ID()
}

// Alert is one alert of Alertmanager's POST /api/v2/alerts.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// AlertName is the alertname of every finding's alert.
const AlertName = "McpAuditFinding"

// RunbookAnchor is the section of the runbook document (docs/runbooks.md)
// about the alert AlertName: its name in lowercase, as the Prometheus
// rules' runbook_url annotations build theirs.
var RunbookAnchor = strings.ToLower(AlertName)

// AlertOf returns the alert of a finding first sent at first.
func (n *Notifier) AlertOf(f *audit.Finding, first time.Time) Alert {
	labels := map[string]string{"alertname": AlertName, "kind": string(f.Kind), "severity": string(f.Severity),
		"server": f.Server, "finding_id": f.ID()}
	if f.Tenant != "" {
		labels["tenant"] = f.Tenant
	}
	ann := map[string]string{"summary": f.Summary, "event_time": f.Time.UTC().Format(time.RFC3339Nano)}
	for k, v := range map[string]string{"document": f.Document, "session": f.Session, "key": f.Key,
		"reason": string(f.Reason), "retry_action": string(f.RetryAction)} {
		if v != "" {
			ann[k] = v
		}
	}
	if n.runbook != "" {
		// The page it may wake: op23 D4 found critical findings paged
		// with no runbook.
		ann["runbook_url"] = n.runbook + "#" + RunbookAnchor
	}
	a := Alert{Labels: labels, Annotations: ann, StartsAt: first, EndsAt: first.Add(n.cfg.ResolveAfter)}
	if n.baseURL != "" {
		a.GeneratorURL = n.link(f)
		ann["investigation_url"] = n.link(f)
	}
	return a
}

// webhookBody is the finding's JSON (findings.md §5 with its id) and, when
// the page's address is known, its url.
func (n *Notifier) webhookBody(f *audit.Finding) ([]byte, error) {
	b, err := json.Marshal(f)
	if err != nil || n.baseURL == "" {
		return b, err
	}
	u, err := json.Marshal(n.link(f))
	if err != nil {
		return nil, err
	}
	return append(append(append(b[:len(b)-1], `,"url":`...), u...), '}'), nil
}

// send posts one notification.
func (n *Notifier) send(q queued) error {
	f := &q.Finding
	var body []byte
	var err error
	if n.cfg.Format == FormatAlertmanager {
		body, err = json.Marshal([]Alert{n.AlertOf(f, q.First)})
	} else {
		body, err = n.webhookBody(f)
	}
	if err != nil {
		return &permanentError{err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return &permanentError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", f.ID())
	for k, v := range n.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode >= 500:
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return &permanentError{fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))}
}

// journal is an append-only file of queued and settled findings: a line
// {"op":"pending","q":{...}} when a finding is first tried or left queued
// at shutdown, {"op":"sent"|"failed","id":...} when it is settled. At open
// it is read back and rewritten with what is still pending and the
// settled ids of the last 30 days.
type journal struct {
	mu      sync.Mutex
	f       *os.File
	path    string
	settled map[string]time.Time
}

type entry struct {
	Op string    `json:"op"`
	ID string    `json:"id,omitempty"`
	Q  *queued   `json:"q,omitempty"`
	At time.Time `json:"at"`
}

// keepSettled is how long settled ids are remembered.
const keepSettled = 30 * 24 * time.Hour

func openJournal(dir string) (*journal, []queued, error) {
	// The journal names findings and tenants: private to the owner.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("cannot create the notify journal dir: %w", err)
	}
	path := dir + "/notify-journal.ndjson"
	j := &journal{path: path, settled: map[string]time.Time{}}
	pending := map[string]queued{}
	var order []string
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for line := 1; sc.Scan(); line++ {
			var e entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				// A torn last line from a crash: what it said was not
				// acknowledged to anyone.
				continue
			}
			switch e.Op {
			case "pending":
				if e.Q != nil {
					id := e.Q.Finding.ID()
					if _, ok := pending[id]; !ok {
						order = append(order, id)
					}
					pending[id] = *e.Q
				}
			case "sent", "failed":
				j.settled[e.ID] = e.At
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("cannot read the notify journal %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("cannot open the notify journal: %w", err)
	}
	// Rewrite it compacted, then append to it. The temporary files a
	// process killed while it compacted left go first (path.tmp: a
	// version before datadir.WriteFileSynced).
	left, _ := filepath.Glob(datadir.TempGlob(path))
	for _, f := range append(left, path+".tmp") {
		os.Remove(f)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	now := time.Now()
	for id, at := range j.settled {
		if now.Sub(at) > keepSettled {
			delete(j.settled, id)
			continue
		}
		enc.Encode(entry{Op: "sent", ID: id, At: at})
	}
	var out []queued
	for _, id := range order {
		if _, done := j.settled[id]; done {
			continue
		}
		q := pending[id]
		enc.Encode(entry{Op: "pending", Q: &q, At: now})
		out = append(out, q)
	}
	// A directory not synced after the rename leaves the new journal in
	// place: it is appended to, as before the directory was synced at all.
	if err := datadir.WriteFileSynced(path, buf.Bytes(), 0o600); err != nil && !errors.Is(err, datadir.ErrDirNotSynced) {
		return nil, nil, fmt.Errorf("cannot write the notify journal: %w", err)
	}
	var err error
	if j.f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, nil, fmt.Errorf("cannot open the notify journal: %w", err)
	}
	return j, out, nil
}

func (j *journal) append(e entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return j.f.Sync()
}

func (j *journal) pending(q queued) error {
	return j.append(entry{Op: "pending", Q: &q, At: time.Now().UTC()})
}

func (j *journal) done(id, op string) error {
	at := time.Now().UTC()
	j.mu.Lock()
	j.settled[id] = at
	j.mu.Unlock()
	return j.append(entry{Op: op, ID: id, At: at})
}

func (j *journal) sent(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.settled[id]
	return ok
}

func (j *journal) close() error { return j.f.Close() }

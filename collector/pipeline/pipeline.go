// Package pipeline is the live form of the engine: receivers hand it calls,
// it commits them to the store before they are acknowledged, feeds them to
// the one detector in event-time order, closes verification windows on the
// wall clock when traffic stops, commits the detector's output with its
// watermark, and rebuilds correlation state from the store after a restart.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// Errors returned by Ingest.
var (
	// ErrQueueFull is returned when the detector is behind by more than the
	// queue holds; nothing of the request was stored. Retryable.
	ErrQueueFull = errors.New("ingest queue full")
	// ErrStopped is returned after Close.
	ErrStopped = errors.New("pipeline stopped")
)

// Config sets the pipeline's limits.
type Config struct {
	// QueueCalls is how many acknowledged calls may wait for the detector
	// before Ingest refuses more. Default 200000.
	QueueCalls int `yaml:"queue_calls"`
	// CommitEvery is how often detector output is committed. Default 200ms.
	CommitEvery time.Duration `yaml:"commit_every"`
	// FindingLatency, if set, is told the wall time from the
	// acknowledgement of a call to each finding it completes.
	FindingLatency func(time.Duration) `yaml:"-"`
	// Duplicate, if set, is told of each call dropped as a second
	// observation of one exchange.
	Duplicate func(c *audit.Call) `yaml:"-"`
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	return Config{QueueCalls: 200_000, CommitEvery: 200 * time.Millisecond}
}

// Validate checks the limits.
func (c *Config) Validate() error {
	var errs []error
	if c.QueueCalls <= 0 {
		errs = append(errs, errors.New("queue_calls: must be positive"))
	}
	if c.CommitEvery <= 0 {
		errs = append(errs, errors.New("commit_every: must be positive"))
	}
	return errors.Join(errs...)
}

// Pipeline is safe for concurrent use by receivers.
type Pipeline struct {
	cfg     Config
	dcfg    detect.Config
	store   audit.Store
	log     *slog.Logger
	readers sync.Pool

	queue    chan []*audit.Call
	inflight atomic.Int64 // calls stored but not yet handed to the detector

	// Owned by the detector goroutine.
	det       *detect.Detector
	gate      *gate
	lastCall  time.Time // wall time of the last call handed to the detector
	lastEvent time.Time // the detector's max event time then

	mu      sync.Mutex
	stopped bool
	done    chan struct{}
	cancel  context.CancelFunc
}

// New builds a pipeline over store, rebuilds correlation state from it and
// starts the detector goroutine. Sinks receive the detector's new output
// (not what is replayed at start).
func New(ctx context.Context, cfg Config, dcfg detect.Config, dial dialect.Config, store audit.Store, log *slog.Logger, sinks ...audit.Sink) (*Pipeline, error) {
	if log == nil {
		log = slog.Default()
	}
	p := &Pipeline{
		cfg: cfg, dcfg: dcfg, store: store, log: log,
		queue: make(chan []*audit.Call, 1024),
		done:  make(chan struct{}),
	}
	p.readers.New = func() any { return dialect.NewReader(dial) }
	p.gate = &gate{sinks: sinks, announced: map[writeKey]bool{}, latency: cfg.FindingLatency}
	p.det = detect.New(dcfg, dial, p.gate)
	// Calls are in the store before the detector sees them: its reorder
	// buffer need not keep their payloads.
	p.det.DropPayloads = true
	p.det.OnDuplicate = cfg.Duplicate
	p.gate.det = p.det
	if err := p.recover(ctx); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.run(runCtx)
	return p, nil
}

// recover replays the stored calls that the correlation state of calls
// after the watermark can depend on. Output caused by calls up to the
// watermark was committed before the stop and is dropped; findings after it
// are checked against the stored ones so that none is emitted twice.
func (p *Pipeline) recover(ctx context.Context) error {
	wm, err := p.store.Watermark(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the watermark: %w", err)
	}
	if wm.IsZero() {
		p.gate.open = true
		return nil
	}
	horizon := wm.Add(-(p.dcfg.CorrelationWindow + p.dcfg.VerifyWindow + p.dcfg.Lateness))
	known, err := p.store.FindingIDs(ctx, horizon)
	if err != nil {
		return fmt.Errorf("cannot read stored findings: %w", err)
	}
	p.gate.replayUntil, p.gate.known = wm, known
	n := 0
	err = p.store.ScanCalls(ctx, horizon, func(c *audit.Call) error {
		n++
		p.det.Add(c)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot replay stored calls: %w", err)
	}
	// Calls up to the watermark were all processed before the stop.
	p.det.AdvanceTo(wm)
	if n > 0 {
		// Windows go on closing on the wall clock even if no traffic comes.
		p.lastCall, p.lastEvent = time.Now(), p.det.MaxSeen()
	}
	p.log.Info("correlation state rebuilt from the store", "watermark", wm, "replayed_calls", n, "known_findings", len(known))
	return nil
}

// Ingest stores calls durably and queues them for detection. When it
// returns nil the calls are committed: the caller may acknowledge them.
// ErrQueueFull means nothing was stored and the caller should ask the
// sender to retry later; errors wrapping audit.ErrUnavailable likewise.
func (p *Pipeline) Ingest(ctx context.Context, calls []*audit.Call) error {
	if len(calls) == 0 {
		return nil
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	n := int64(len(calls))
	if p.inflight.Add(n) > int64(p.cfg.QueueCalls) {
		p.inflight.Add(-n)
		return ErrQueueFull
	}
	r := p.readers.Get().(*dialect.Reader)
	recs := make([]audit.CallRecord, len(calls))
	for i, c := range calls {
		recs[i] = r.Record(c)
	}
	p.readers.Put(r)
	if err := p.store.AppendCalls(ctx, recs); err != nil {
		p.inflight.Add(-n)
		return err
	}
	now := time.Now()
	for _, c := range calls {
		c.Received = now
	}
	select {
	case p.queue <- calls:
		return nil
	case <-p.done:
		// Stored but the detector is gone: the calls will be replayed from
		// the store at the next start.
		return nil
	}
}

// Close stops the detector goroutine after committing its output. Calls
// still in the reorder buffer are in the store and are replayed at the next
// start.
func (p *Pipeline) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// run is the detector goroutine.
func (p *Pipeline) run(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(p.cfg.CommitEvery)
	defer tick.Stop()
	for {
		select {
		case calls := <-p.queue:
			p.take(calls)
			p.drain() // what else is queued, before committing
			if p.gate.pending() > 5000 {
				p.commit(ctx)
			}
		case <-tick.C:
			if ctx.Err() != nil {
				continue // stopping: the shutdown branch commits
			}
			p.advanceWallClock()
			p.commit(ctx)
		case <-ctx.Done():
			p.drain()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := p.commit(cctx); err != nil {
				p.log.Error("cannot commit detector output at shutdown; it will be rebuilt from stored calls at the next start", "err", err)
			}
			cancel()
			return
		}
	}
}

// drain takes every batch already queued, without waiting.
func (p *Pipeline) drain() {
	for {
		select {
		case calls := <-p.queue:
			p.take(calls)
		default:
			return
		}
	}
}

func (p *Pipeline) take(calls []*audit.Call) {
	for _, c := range calls {
		p.det.Add(c)
	}
	p.inflight.Add(-int64(len(calls)))
	p.lastCall = time.Now()
	p.lastEvent = p.det.MaxSeen()
}

// advanceWallClock moves the watermark while no calls arrive: from the
// latest event time minus the lateness bound, it gains two seconds of event
// time per second of quiet until it has caught up the lateness, then one
// per second. A write whose window ends with no follow-up is thus found
// unverified within a tick of its window's end in wall-clock time.
func (p *Pipeline) advanceWallClock() {
	if p.lastCall.IsZero() {
		return
	}
	q := time.Since(p.lastCall)
	catch := p.dcfg.Lateness - q
	if catch < 0 {
		catch = 0
	}
	wm := p.lastEvent.Add(q - catch)
	if wm.After(p.det.Watermark()) {
		p.det.AdvanceTo(wm)
	}
}

// commit stores the detector output gathered since the last commit with the
// watermark it was produced at.
func (p *Pipeline) commit(ctx context.Context) error {
	r := p.gate.take()
	r.Watermark = p.det.Watermark()
	if len(r.Writes) == 0 && len(r.Findings) == 0 && !r.Watermark.After(p.gate.committedWM) {
		return nil
	}
	if err := p.store.Commit(ctx, r); err != nil {
		// Keep the output for the next attempt.
		p.gate.putBack(r)
		if ctx.Err() == nil {
			p.log.Warn("cannot commit detector output; retrying", "err", err)
		}
		return err
	}
	p.gate.committedWM = r.Watermark
	return nil
}

type writeKey struct {
	call string
	seq  int
}

// gate sits between the detector and the sinks and the store: it drops
// output caused by replayed calls, drops findings already stored, and
// buffers output for the next commit.
type gate struct {
	sinks       []audit.Sink
	det         *detect.Detector
	open        bool
	replayUntil time.Time
	known       map[string]bool
	announced   map[writeKey]bool // pending writes the sinks have seen
	latency     func(time.Duration)
	committedWM time.Time

	writes   map[writeKey]audit.Write
	findings []audit.Finding
}

// replaying reports whether the detector's output now is caused by a call
// processed before the stop (strictly before the watermark; output at the
// watermark itself is deduplicated by finding ID and write upsert).
func (g *gate) replaying() bool {
	return !g.open && g.det.Now().Before(g.replayUntil)
}

func (g *gate) Call(r *audit.CallReport) {
	if g.replaying() {
		return
	}
	for _, s := range g.sinks {
		s.Call(r)
	}
}

func (g *gate) Write(w *audit.Write, prev audit.WriteState) {
	if g.replaying() {
		return
	}
	k := writeKey{w.CallID, w.Seq}
	if g.writes == nil {
		g.writes = map[writeKey]audit.Write{}
	}
	g.writes[k] = *w
	// Sinks count pending writes in and out: a write replayed as pending
	// and settled now enters their books as new.
	if prev == audit.StatePending && !g.announced[k] {
		prev = ""
	}
	if w.State == audit.StatePending {
		g.announced[k] = true
	} else {
		delete(g.announced, k)
	}
	for _, s := range g.sinks {
		s.Write(w, prev)
	}
}

func (g *gate) Finding(f *audit.Finding) {
	if g.known != nil {
		if g.known[f.ID()] {
			return
		}
	}
	if g.replaying() {
		return
	}
	g.findings = append(g.findings, *f)
	if c := g.det.Current(); c != nil && !c.Received.IsZero() && g.latency != nil {
		g.latency(time.Since(c.Received))
	}
	for _, s := range g.sinks {
		s.Finding(f)
	}
}

func (g *gate) pending() int { return len(g.writes) + len(g.findings) }

func (g *gate) take() audit.Results {
	r := audit.Results{Findings: g.findings}
	for _, w := range g.writes {
		r.Writes = append(r.Writes, w)
	}
	g.writes, g.findings = nil, nil
	return r
}

func (g *gate) putBack(r audit.Results) {
	if g.writes == nil {
		g.writes = map[writeKey]audit.Write{}
	}
	for _, w := range r.Writes {
		k := writeKey{w.CallID, w.Seq}
		if _, newer := g.writes[k]; !newer {
			g.writes[k] = w
		}
	}
	g.findings = append(r.Findings, g.findings...)
}

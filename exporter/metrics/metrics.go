package metrics

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/version"
)

var (
	_ audit.Sink              = (*Metrics)(nil)
	_ audit.FindingWithdrawer = (*Metrics)(nil)
)

// Options configures Metrics. The zero value is usable.
type Options struct {
	// KnownCode reports whether an error code may be a label value; any other
	// code is counted as "other". Default DefaultKnownCode. The rules alert on
	// COMMIT_UNKNOWN and in_flight_unknown, so a replacement should accept them.
	KnownCode func(code string) bool
	// Servers are declared up front: their counters exist at zero before the
	// first event, so that the first finding of a server already shows as an
	// increase to Prometheus. Servers first seen later are initialized then.
	Servers []string
	// Sources are the ingest sources whose result and reason series exist
	// at zero from the start, so that a source's first records already
	// show as an increase (McpAuditIngestRejections divides by them).
	// Other sources are initialized with their first record.
	Sources []Source
	// MaxToolsPerServer caps the distinct tool label values of one server;
	// later tools are counted as "other". Default 64.
	MaxToolsPerServer int
	// MaxServers caps the distinct server label values; later servers are
	// counted as "other". Servers declared up front always have their own.
	// Default 100.
	MaxServers int
	// Build labels mcpaudit_build_info. Default version.Get(), the running
	// binary's.
	Build version.Info
	// FirstScrapeWait, when positive, holds the first counts of a tool's
	// new call, failure and write series until every scraper (Handler,
	// Scraper) seen within this long has shown the series at zero, and
	// for at most this long in any case: Prometheus takes a series' first
	// sample as its baseline, so counts made before it could see the zero
	// never show in rate() or increase(). Default 0: counts show at once,
	// as a one-shot WriteFile needs.
	FirstScrapeWait time.Duration
}

// DefaultFirstScrapeWait is the FirstScrapeWait of serve: longer than the
// scrape intervals in use (Prometheus' default is 1m), short enough that
// counts nobody scrapes do not lag for long.
const DefaultFirstScrapeWait = 2 * time.Minute

// Metrics turns the detector's output and the ingest counts into Prometheus
// metrics. It is safe for concurrent use: the Sink methods come from the
// detector's goroutine, the Ingest methods from any receiver.
type Metrics struct {
	calls        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	failures     *prometheus.CounterVec
	writes       *prometheus.CounterVec
	rejudged     *prometheus.CounterVec
	pending      *prometheus.GaugeVec
	verification *prometheus.HistogramVec
	findings     *prometheus.CounterVec
	withdrawn    *prometheus.CounterVec
	ingest       *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	warned       *prometheus.CounterVec
	storeCommit  prometheus.Histogram
	findingLat   *prometheus.HistogramVec
	findingLast  *prometheus.GaugeVec
	buildInfo    *prometheus.GaugeVec

	knownCode  func(string) bool
	maxTools   int
	maxServers int

	firstScrapeWait time.Duration

	mu      sync.Mutex
	servers map[string]*serverLabels
	// scrapes counts the scrapes begun through Scraper or Handler; held
	// are the series groups whose first counts wait for scrapes to show
	// them; scrapers holds when each scraper last scraped, and whether it
	// scraped more than once.
	scrapes  uint64
	held     map[*heldCounts]struct{}
	scrapers map[string]scraperSeen
	// knocked holds, by a hash of its identity, when a scraper forgotten
	// as a one-off to make room (forgetOneOff) last scraped: back within
	// FirstScrapeWait, it keeps scraping. At most maxKnocked.
	knocked map[uint64]time.Time
	seed    maphash.Seed
	// seen counts the servers given a label of their own since the start,
	// the declared ones apart.
	seen    int
	sources map[string]bool
	// lastFinding is the latest event time set on findingLast, by server
	// and kind.
	lastFinding map[[2]string]time.Time
	// gated is set once the counts that go on across restarts (the
	// findings, calls, failures and write states: saved.go) are shown
	// only after the state file keeps them (GateOnSave); unsaved holds
	// the counts made since the last SaveCounts, not yet on their series.
	gated   bool
	unsaved map[prometheus.Counter]float64
	// countsChanged is set when a count, a release of one or a server's
	// series changed what SaveCounts saves since it last did; countsSaved
	// is what it saved then.
	countsChanged bool
	countsSaved   []byte
	// skip is set while the calls and writes told are ones whose counts
	// the values restored at start already hold (SkipCounts).
	skip bool
}

// serverLabels remembers the label values already seen for one server.
type serverLabels struct {
	tools      map[string]bool         // values given to the tool label
	callTools  map[string]*callSeries  // tools whose call series are initialized
	writeTools map[string]*writeSeries // tools whose WritesTotal series are initialized
	pending    prometheus.Gauge
	// findingsHeld holds the first findings counts of a server first seen
	// after the start, nil once the scrapers have shown its findings
	// series at zero: they are made when its first calls are judged, and
	// the findings of that batch come at once.
	findingsHeld *heldCounts
	// findingSeries are its FindingsTotal and FindingsWithdrawnTotal
	// series, by family, kind and severity: what SaveCounts saves.
	findingSeries map[findingSeriesKey]prometheus.Counter
	// dirty is set when a count of the server's (made, held or released)
	// changed what SaveCounts saves of it: in its findings (findingsDirty)
	// or in the tools dirtyTools names, or, with allDirty, anywhere.
	// saved is what SaveCounts saved of it then (saved.go).
	dirty         bool
	allDirty      bool
	findingsDirty bool
	dirtyTools    map[string]bool
	saved         serverSaved
}

// findingSeriesKey names one findings series of a server: withdrawn for
// FindingsWithdrawnTotal, else FindingsTotal.
type findingSeriesKey struct {
	withdrawn      bool
	kind, severity string
}

// callSeries are the series one call of a tool counts in, looked up once:
// WithLabelValues hashes its labels at every use, and the engine counts
// every call.
type callSeries struct {
	tool     string                           // the tool label
	outcomes map[string]prometheus.Counter    // by outcome label
	failures map[[2]string]prometheus.Counter // CallFailuresTotal, by code and retry_action label
	duration prometheus.Observer              // nil until the first call with a duration
	held     *heldCounts                      // nil once the scrapers have shown the series
}

// writeSeries are a tool's WritesTotal series, by terminal state, and its
// WritesRejudgedTotal series, by move.
type writeSeries struct {
	states map[audit.WriteState]prometheus.Counter
	moves  map[[2]audit.WriteState]prometheus.Counter
	held   *heldCounts // nil once the scrapers have shown the series
}

// heldCounts are the counts made on a group of new series before the
// scrapers had shown them at zero (Options.FirstScrapeWait). Guarded by
// Metrics.mu.
type heldCounts struct {
	scrapes uint64 // Metrics.scrapes when the group's latest series was made
	counts  map[prometheus.Counter]float64
	made    map[prometheus.Counter]bool // the group's series, shown at zero or not
	shown   map[string]bool             // the scrapers that have shown them all at zero
	timer   *time.Timer
	clear   func() // unlinks the group from its series
	// findings is set on a server's findings group; tool is the tool
	// label of a call or write group.
	findings bool
	tool     string
	// owner is the server whose series the group holds.
	owner *serverLabels
}

// add holds one count on c. A series the group did not have yet (a failure
// code first met while the group is held) was shown by no scrape so far:
// the group waits for every scraper again, from now.
func (m *Metrics) add(h *heldCounts, c prometheus.Counter) {
	if !h.made[c] {
		h.made[c] = true
		h.scrapes = m.scrapes
		clear(h.shown)
	}
	h.counts[c]++
}

// uncertainFailures are the failures the rules alert on by rate
// (McpAuditUncertainOutcomes), with their retry actions (findings.md §1).
// Their series start at zero with the tool's first call, so that the first
// such failure already counts as an increase.
var uncertainFailures = []audit.Failure{
	{Code: "COMMIT_UNKNOWN", Action: audit.ActionReplaySameRequest},
	{Code: "in_flight_unknown", Action: audit.ActionVerifyThenDecide},
}

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("cannot create metrics: nil registerer")
	}
	m := &Metrics{
		calls:        counterVec(ToolCallsTotal),
		duration:     histogramVec(ToolCallDurationSeconds, DurationBuckets),
		failures:     counterVec(CallFailuresTotal),
		writes:       counterVec(WritesTotal),
		rejudged:     counterVec(WritesRejudgedTotal),
		pending:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: WritesPending, Help: family(WritesPending).Help}, family(WritesPending).Labels),
		verification: histogramVec(WriteVerificationSeconds, VerificationBuckets),
		findings:     counterVec(FindingsTotal),
		withdrawn:    counterVec(FindingsWithdrawnTotal),
		ingest:       counterVec(IngestRecordsTotal),
		rejected:     counterVec(IngestRejectedTotal),
		warned:       counterVec(IngestWarningsTotal),
		storeCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: StoreCommitSeconds, Help: family(StoreCommitSeconds).Help, Buckets: StoreCommitBuckets,
		}),
		findingLat: histogramVec(FindingLatencySeconds, FindingLatencyBuckets),
		findingLast: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: FindingLastEventTimestampSeconds, Help: family(FindingLastEventTimestampSeconds).Help,
		}, family(FindingLastEventTimestampSeconds).Labels),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: BuildInfo, Help: family(BuildInfo).Help,
		}, family(BuildInfo).Labels),
		knownCode:       opts.KnownCode,
		firstScrapeWait: opts.FirstScrapeWait,
		held:            map[*heldCounts]struct{}{},
		scrapers:        map[string]scraperSeen{},
		knocked:         map[uint64]time.Time{},
		seed:            maphash.MakeSeed(),
		maxTools:        opts.MaxToolsPerServer,
		maxServers:      opts.MaxServers,
		servers:         map[string]*serverLabels{},
		sources:         map[string]bool{},
		lastFinding:     map[[2]string]time.Time{},
	}
	build := opts.Build
	if build == (version.Info{}) {
		build = version.Get()
	}
	m.buildInfo.WithLabelValues(build.Version, build.Revision, build.GoVersion).Set(1)
	// Both series exist from the start, so that their rates read 0, not absent.
	m.findingLat.WithLabelValues(WaitEvidence)
	m.findingLat.WithLabelValues(WaitWindow)
	if m.knownCode == nil {
		m.knownCode = DefaultKnownCode
	}
	if m.maxTools <= 0 {
		m.maxTools = 64
	}
	if m.maxServers <= 0 {
		m.maxServers = 100
	}
	for _, c := range []prometheus.Collector{
		m.calls, m.duration, m.failures, m.writes, m.rejudged, m.pending, m.verification,
		m.findings, m.withdrawn, m.ingest, m.rejected, m.warned, m.storeCommit, m.findingLat, m.findingLast, m.buildInfo,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("cannot register metrics: %w", err)
		}
	}
	for _, src := range opts.Sources {
		m.source(src)
	}
	m.mu.Lock()
	for _, s := range opts.Servers {
		if validLabel(s) {
			// Made before any traffic: nothing to hold.
			m.newServer(s, false)
		}
	}
	m.mu.Unlock()
	return m, nil
}

func counterVec(name string) *prometheus.CounterVec {
	f := family(name)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: f.Help}, f.Labels)
}

func histogramVec(name string, buckets []float64) *prometheus.HistogramVec {
	f := family(name)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.Name, Help: f.Help, Buckets: buckets}, f.Labels)
}

// MaxLabelBytes is the longest server or tool name that is its own label
// value; a longer one is counted as "other".
const MaxLabelBytes = 128

// validLabel reports whether a name may be a label value: valid UTF-8 (the
// exposition format requires it; the client library panics on anything
// else) of at most MaxLabelBytes.
func validLabel(name string) bool {
	return len(name) <= MaxLabelBytes && utf8.ValidString(name)
}

// server returns the label value of a server and the labels seen for it,
// initializing its findings counters and pending gauge at zero the first
// time. A server past the cap, with an invalid or overlong name, is
// "other". m.mu must be held.
func (m *Metrics) server(name string) (string, *serverLabels) {
	if s := m.servers[name]; s != nil {
		return name, s
	}
	if !m.mayLabel(name) {
		return Other, m.newServer(Other, true)
	}
	m.seen++
	return name, m.newServer(name, true)
}

// mayLabel reports whether a server without a label of its own would be
// given one: its name can be a label and the cap is not reached. m.mu must
// be held.
func (m *Metrics) mayLabel(name string) bool {
	return name != Other && validLabel(name) && m.seen < m.maxServers
}

// newServer returns the labels of a label value, making them the first
// time; with hold, the first counts on its findings series wait for the
// scrapers (Options.FirstScrapeWait). m.mu must be held.
func (m *Metrics) newServer(label string, hold bool) *serverLabels {
	if s := m.servers[label]; s != nil {
		return s
	}
	s := &serverLabels{tools: map[string]bool{}, callTools: map[string]*callSeries{}, writeTools: map[string]*writeSeries{},
		findingSeries: map[findingSeriesKey]prometheus.Counter{}}
	m.servers[label] = s
	m.countsChanged = true
	s.dirty, s.allDirty = true, true
	made := make([]prometheus.Counter, 0, 2*len(audit.Kinds))
	for _, k := range audit.Kinds {
		made = append(made, m.findingCounter(label, s, false, string(k), string(k.Severity())),
			// At zero with it, so that findings_total - withdrawn_total
			// has a right-hand side for every series.
			m.findingCounter(label, s, true, string(k), string(k.Severity())))
	}
	if hold {
		s.findingsHeld = m.hold(s, func() { s.findingsHeld = nil }, made...)
		if s.findingsHeld != nil {
			s.findingsHeld.findings = true
		}
	}
	s.pending = m.pending.WithLabelValues(label)
	return s
}

// findingCounter returns the findings (withdrawn: withdrawn) series of
// the server s labelled label, of kind and severity, noting it among the
// server's findings series. m.mu must be held.
func (m *Metrics) findingCounter(label string, s *serverLabels, withdrawn bool, kind, severity string) prometheus.Counter {
	k := findingSeriesKey{withdrawn: withdrawn, kind: kind, severity: severity}
	if c := s.findingSeries[k]; c != nil {
		return c
	}
	vec := m.findings
	if withdrawn {
		vec = m.withdrawn
	}
	c := vec.WithLabelValues(label, kind, severity)
	s.findingSeries[k] = c
	return c
}

// countFinding adds one to c, a findings or withdrawn series of s, as
// count does, while s's first findings counts are held too. m.mu must be
// held.
func (m *Metrics) countFinding(s *serverLabels, c prometheus.Counter) {
	m.count(s, "", s.findingsHeld, c)
}

// count adds one to c, a series of s whose counts go on across restarts
// (saved.go) of the tool labelled tool (empty for a findings series), or
// holds it in h (not nil) while the group's first counts wait for the
// scrapers, or, while the counts are gated (GateOnSave), until the state
// file keeps it. m.mu must be held.
func (m *Metrics) count(s *serverLabels, tool string, h *heldCounts, c prometheus.Counter) {
	m.countsChanged = true
	s.changed(tool)
	if h != nil {
		m.add(h, c)
		return
	}
	if m.gated {
		m.unsaved[c]++
		return
	}
	c.Inc()
}

// ServerLabel returns the label value of a server's series: its name if
// it has a label of its own, else "other". It hands out no label: only
// counting a server's calls, writes or findings does (or a partition's
// counts: serverLabelFor), so that reading the metrics (a scrape, the web
// page's status line) cannot spend the cap on the servers that happen to
// be listed first, such as the partitions a restart restores before
// traffic resumes.
func (m *Metrics) ServerLabel(name string) string {
	label, _ := m.serverLabelFor(name, false)
	return label
}

// serverLabelFor is ServerLabel, and whether the label is the server's
// for good: "other" is, for a server past the cap or whose name cannot be
// a label; not for one whose first call is not counted yet. With counted
// set, a server without a label is given one, as counting its first call
// would: a partition with counts has had traffic since the start (what a
// restart restores has none), so the cap is not spent on a listing.
func (m *Metrics) serverLabelFor(name string, counted bool) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.servers[name] != nil {
		return name, true
	}
	if counted {
		label, _ := m.server(name)
		return label, true
	}
	return Other, !m.mayLabel(name)
}

// tool bounds a tool label: empty is "other", and so is every new tool past
// the per-server cap. m.mu must be held.
func (m *Metrics) tool(s *serverLabels, tool string) string {
	if tool == "" || tool == Other || !validLabel(tool) {
		return Other
	}
	if s.tools[tool] {
		return tool
	}
	if len(s.tools) >= m.maxTools {
		return Other
	}
	s.tools[tool] = true
	return tool
}

func (m *Metrics) code(code string) string {
	if code != "" && m.knownCode(code) {
		return code
	}
	return Other
}

// Call counts one call, its latency and its failures. The first call of a
// tool initializes its outcome series and its COMMIT_UNKNOWN and
// in_flight_unknown failure series at zero; with FirstScrapeWait, the
// tool's first call and failure counts wait until the scrapers have shown
// them at zero (its latencies do not). While SkipCounts is set nothing is
// counted, the latency included (before debt52 it was observed).
func (m *Metrics) Call(r *audit.Record) {
	if r == nil || r.Call == nil {
		return
	}
	m.mu.Lock()
	server, s := m.server(r.Call.Server)
	tool := m.tool(s, r.Tool)
	cs := m.callSeriesOf(server, s, tool, true)
	outcome := outcomeLabel(r.Outcome)
	c := cs.outcomes[outcome]
	if c == nil {
		c = m.calls.WithLabelValues(server, tool, outcome)
		cs.outcomes[outcome] = c
	}
	d := r.Call.Duration
	if d > 0 && cs.duration == nil {
		// Made by the first call with a duration: a tool's histogram is not
		// shown before it has one.
		cs.duration = m.duration.WithLabelValues(server, tool)
	}
	// The replay at start judges again calls the run before observed
	// (SkipCounts): the histogram, which starts at 0 with the process, is
	// read by rate() as a reset followed by them, counted twice (debt52).
	observe := d > 0 && !m.skip
	if !m.skip {
		// The failures held with the calls: the tool's first failures are
		// on series just made, and McpAuditUncertainOutcomes divides them
		// by the calls.
		m.count(s, tool, cs.held, c)
		if r.Failure != nil {
			m.count(s, tool, cs.held, m.failure(server, cs, r.Failure))
		}
		for i := range r.Ops {
			if f := r.Ops[i].Failure; f != nil && f != r.Failure {
				m.count(s, tool, cs.held, m.failure(server, cs, f))
			}
		}
	}
	m.mu.Unlock()
	if observe {
		cs.duration.Observe(d.Seconds())
	}
}

// callSeriesOf returns the call series of tool (its label) of the server
// s labelled server, making them the first time at zero: its outcomes and
// its uncertain failures, held for the scrapers when hold is set. m.mu
// must be held.
func (m *Metrics) callSeriesOf(server string, s *serverLabels, tool string, hold bool) *callSeries {
	cs := s.callTools[tool]
	if cs != nil {
		return cs
	}
	cs = &callSeries{tool: tool, outcomes: map[string]prometheus.Counter{}, failures: map[[2]string]prometheus.Counter{}}
	s.callTools[tool] = cs
	for _, o := range []audit.Outcome{audit.OutcomeOK, audit.OutcomeToolError, audit.OutcomeProtocolError, audit.OutcomeNoResponse} {
		cs.outcomes[string(o)] = m.calls.WithLabelValues(server, tool, string(o))
	}
	made := []prometheus.Counter{}
	for _, c := range cs.outcomes {
		made = append(made, c)
	}
	for _, f := range uncertainFailures {
		if m.knownCode(f.Code) {
			made = append(made, m.failureSeries(server, cs, f.Code, string(f.Action)))
		}
	}
	if hold {
		cs.held = m.hold(s, func() { cs.held = nil }, made...)
		if cs.held != nil {
			cs.held.tool = tool
		}
	}
	return cs
}

// failure returns the CallFailuresTotal series a failure of a tool's
// calls (cs) counts in. m.mu must be held.
func (m *Metrics) failure(server string, cs *callSeries, f *audit.Failure) prometheus.Counter {
	return m.failureSeries(server, cs, m.code(f.Code), actionLabel(f.Action))
}

// failureSeries returns the CallFailuresTotal series of a tool's calls
// (cs) under code and action (label values), noting it among the tool's
// series. m.mu must be held.
func (m *Metrics) failureSeries(server string, cs *callSeries, code, action string) prometheus.Counter {
	k := [2]string{code, action}
	if c := cs.failures[k]; c != nil {
		return c
	}
	c := m.failures.WithLabelValues(server, cs.tool, code, action)
	cs.failures[k] = c
	return c
}

// hold returns the held counts of a group of series just made, or nil when
// counts are not held (Options.FirstScrapeWait). clear unlinks the group
// from its series when its counts are released. m.mu must be held.
func (m *Metrics) hold(owner *serverLabels, clear func(), made ...prometheus.Counter) *heldCounts {
	if m.firstScrapeWait <= 0 {
		return nil
	}
	h := &heldCounts{scrapes: m.scrapes, counts: map[prometheus.Counter]float64{}, made: map[prometheus.Counter]bool{}, shown: map[string]bool{},
		clear: clear, owner: owner}
	for _, c := range made {
		h.made[c] = true
	}
	m.held[h] = struct{}{}
	h.timer = time.AfterFunc(m.firstScrapeWait, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.release(h)
	})
	return h
}

// release adds the held counts of h to their series, unless done already.
// m.mu must be held.
func (m *Metrics) release(h *heldCounts) {
	if _, ok := m.held[h]; !ok {
		return
	}
	delete(m.held, h)
	h.timer.Stop()
	h.clear()
	m.countsChanged = true // no longer saved as held
	h.owner.changed(h.tool)
	if m.gated {
		// Shown once the state file keeps them as shown (SaveCounts): a
		// restart after a crash then makes the series again at zero and
		// holds them, and Prometheus never sees them go down.
		for c, n := range h.counts {
			m.unsaved[c] += n
		}
		return
	}
	for c, n := range h.counts {
		c.Add(n)
	}
}

// Scraper returns g's metrics as a Gatherer whose every successful Gather
// is a scrape by one anonymous scraper (see endScrape). Serve the
// Prometheus endpoint from it or from Handler, and nothing else: a Gather
// that no Prometheus reads would release counts it never saw at zero.
func (m *Metrics) Scraper(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		began := m.beginScrape()
		mfs, err := g.Gather()
		if err == nil {
			m.endScrape("", began)
		}
		return mfs, err
	})
}

// Handler serves g's metrics as promhttp.HandlerFor does, and takes every
// request it answers in full as a scrape by the client's host and
// User-Agent (see endScrape): two Prometheus of an HA pair are two
// scrapers, and so is an operator's curl.
func (m *Metrics) Handler(g prometheus.Gatherer, opts promhttp.HandlerOpts) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		began := m.beginScrape()
		ok := false
		gather := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			mfs, err := g.Gather()
			ok = err == nil // promhttp answers an error with no metrics at all
			return mfs, err
		})
		ew := &errWriter{ResponseWriter: w}
		promhttp.HandlerFor(gather, opts).ServeHTTP(ew, r)
		// A response that did not reach the scraper in full (it gave up at
		// its scrape_timeout and closed the connection) showed it nothing:
		// its next scrape would take the released counts as its baseline.
		if ok && ew.err == nil && r.Context().Err() == nil {
			m.endScrape(host+" "+r.UserAgent(), began)
		}
	})
}

// errWriter keeps the first error of writing a response.
type errWriter struct {
	http.ResponseWriter
	err error
}

func (w *errWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// maxScrapers bounds the scrapers remembered; more are not waited for.
// maxKnocked bounds the one-offs forgotten that are looked out for
// (Metrics.knocked).
const (
	maxScrapers = 16
	maxKnocked  = 1024
)

// scraperSeen is what is remembered of a scraper: when it last scraped,
// and whether it scraped more than once. A scraper that keeps scraping (a
// Prometheus) is what the held counts are for; one seen once (a curl with
// a new User-Agent each time, a one-off health check) makes way for a new
// one when the scrapers remembered are maxScrapers (forgetOneOff).
type scraperSeen struct {
	last   time.Time
	repeat bool
}

// beginScrape returns the number of a scrape beginning: it shows the
// series made before it, held at zero.
func (m *Metrics) beginScrape() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scrapes++
	return m.scrapes
}

// endScrape notes that scraper has shown every series made before its
// scrape began, and releases the held counts of the series that every
// scraper seen within FirstScrapeWait has now shown at zero, so that
// each sees them as an increase at its next scrape. A scraper gone
// quiet is forgotten after FirstScrapeWait, and no count is held longer
// than that anyway.
func (m *Metrics) endScrape(scraper string, began uint64) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, s := range m.scrapers {
		if now.Sub(s.last) > m.firstScrapeWait {
			m.forget(id)
		}
	}
	if _, ok := m.scrapers[scraper]; ok {
		m.scrapers[scraper] = scraperSeen{last: now, repeat: true}
	} else if len(m.scrapers) < maxScrapers || m.forgetOneOff(now) {
		m.scrapers[scraper] = scraperSeen{last: now, repeat: m.seenBefore(scraper, now)}
	}
next:
	for h := range m.held {
		if h.scrapes >= began {
			continue // made during this scrape: maybe not in it
		}
		if _, ok := m.scrapers[scraper]; ok {
			// Only a scraper waited for is marked: the marks stay bounded.
			h.shown[scraper] = true
		}
		for id := range m.scrapers {
			if !h.shown[id] {
				continue next
			}
		}
		m.release(h)
	}
}

// forgetOneOff forgets the scraper seen once that scraped the longest
// ago, to make room for a new one, and reports whether there was one:
// sixteen one-off identities (a curl loop, a health checker) would
// otherwise fill the scrapers remembered until they are quiet for
// FirstScrapeWait, and a Prometheus that came meanwhile would not be
// waited for, its new series' first counts held until then. One seen
// again is kept, so a flood of one-offs does not push out the Prometheus
// that keeps scraping; and one forgotten so is looked out for (knocked):
// back within FirstScrapeWait, it is let in as seen again, so that
// sixteen one-offs between a new Prometheus's first two scrapes do not
// push it out at each (found by review). m.mu must be held.
func (m *Metrics) forgetOneOff(now time.Time) bool {
	oldest, found := "", false
	for id, s := range m.scrapers {
		if !s.repeat && (!found || s.last.Before(m.scrapers[oldest].last)) {
			oldest, found = id, true
		}
	}
	if !found {
		return false
	}
	if len(m.knocked) >= maxKnocked {
		for k, at := range m.knocked {
			if now.Sub(at) > m.firstScrapeWait {
				delete(m.knocked, k)
			}
		}
		for k := range m.knocked {
			if len(m.knocked) < maxKnocked {
				break
			}
			delete(m.knocked, k)
		}
	}
	m.knocked[maphash.String(m.seed, oldest)] = m.scrapers[oldest].last
	m.forget(oldest)
	return true
}

// seenBefore reports whether scraper was forgotten as a one-off within
// FirstScrapeWait (forgetOneOff), and stops looking out for it. m.mu must
// be held.
func (m *Metrics) seenBefore(scraper string, now time.Time) bool {
	h := maphash.String(m.seed, scraper)
	at, ok := m.knocked[h]
	delete(m.knocked, h)
	return ok && now.Sub(at) <= m.firstScrapeWait
}

// forget forgets scraper id, and its marks on the held groups, which
// stay bounded by the scrapers remembered. m.mu must be held.
func (m *Metrics) forget(id string) {
	delete(m.scrapers, id)
	for h := range m.held {
		delete(h.shown, id)
	}
}

// Write follows a write attempt through its states. Entering pending adds one
// to WritesPending and leaving it takes one away. Reaching a terminal state
// counts once in WritesTotal. Moving from a terminal state to another (an
// unverified write a call judged late proved durable or resolved, a durable
// one found double-applied) counts in WritesTotal under the new state and
// in WritesRejudgedTotal under both: the counters stay monotonic, and
// WritesTotal{state} minus WritesRejudgedTotal{from=state} counts each
// write once, by its latest state, as the SLI's rules and the store do (a
// write once weighed twice there, bad then good; found by the lead and
// fx19w). A write that leaves pending as durable or resolved is observed
// in WriteVerificationSeconds; writes durable from their own response are
// not, as nothing was verified. Unknown states are not counted. With
// FirstScrapeWait, a tool's first WritesTotal and WritesRejudgedTotal
// counts wait until the scrapers have shown its series at zero;
// WritesPending does not wait. While SkipCounts is set WritesTotal,
// WritesRejudgedTotal and the verification latency count nothing; the
// pending gauge goes on.
func (m *Metrics) Write(w *audit.Write, prev audit.WriteState) {
	if w == nil || w.State == prev {
		return
	}
	m.mu.Lock()
	server, s := m.server(w.Server)
	tool := m.tool(s, w.Tool)
	ws := m.writeSeriesOf(server, s, tool, true)
	// A move between two terminal states: both are bounded label values.
	var move prometheus.Counter
	if ws.states[prev] != nil && ws.states[w.State] != nil {
		move = m.moveSeries(server, tool, ws, prev, w.State)
	}
	if c := ws.states[w.State]; c != nil && !m.skip { // terminal states only
		m.count(s, tool, ws.held, c)
		if move != nil {
			m.count(s, tool, ws.held, move)
		}
	}
	// A write the run before saw verified is not observed again (Call).
	skip := m.skip
	m.mu.Unlock()

	if prev == audit.StatePending {
		s.pending.Dec()
	}
	if w.State == audit.StatePending {
		s.pending.Inc()
		return
	}
	if prev == audit.StatePending && (w.State == audit.StateDurable || w.State == audit.StateResolved) && !skip {
		if d := w.StateTime.Sub(w.Time); d >= 0 && !w.Time.IsZero() {
			m.verification.WithLabelValues(server).Observe(d.Seconds())
		}
	}
}

// writeSeriesOf returns the write series of tool (its label) of the
// server s labelled server, making them the first time at zero: its
// terminal states and the moves the detector makes, held for the
// scrapers when hold is set. m.mu must be held.
func (m *Metrics) writeSeriesOf(server string, s *serverLabels, tool string, hold bool) *writeSeries {
	ws := s.writeTools[tool]
	if ws != nil {
		return ws
	}
	ws = &writeSeries{states: map[audit.WriteState]prometheus.Counter{}, moves: map[[2]audit.WriteState]prometheus.Counter{}}
	s.writeTools[tool] = ws
	made := make([]prometheus.Counter, 0, len(terminalStates)+len(Rejudgements))
	for _, st := range terminalStates {
		ws.states[st] = m.writes.WithLabelValues(server, tool, string(st))
		made = append(made, ws.states[st])
	}
	for _, mv := range Rejudgements {
		made = append(made, m.moveSeries(server, tool, ws, mv[0], mv[1]))
	}
	if hold {
		ws.held = m.hold(s, func() { ws.held = nil }, made...)
		if ws.held != nil {
			ws.held.tool = tool
		}
	}
	return ws
}

// moveSeries returns the WritesRejudgedTotal series of a tool's writes
// (ws, tool its label) from one terminal state to another. m.mu must be
// held.
func (m *Metrics) moveSeries(server, tool string, ws *writeSeries, from, to audit.WriteState) prometheus.Counter {
	mv := [2]audit.WriteState{from, to}
	c := ws.moves[mv]
	if c == nil {
		c = m.rejudged.WithLabelValues(server, tool, string(from), string(to))
		ws.moves[mv] = c
	}
	return c
}

// Finding counts one finding and moves the last finding time of its server
// and kind forward to the finding's event time; an older finding leaves it.
func (m *Metrics) Finding(f *audit.Finding) {
	if f == nil {
		return
	}
	kind := kindLabel(f.Kind)
	m.mu.Lock()
	defer m.mu.Unlock()
	server, s := m.lastFindingAt(f.Server, kind, f.Time)
	m.countFinding(s, m.findingCounter(server, s, false, kind, severityLabel(f)))
}

// lastFindingAt moves the last finding time of a server and kind forward
// to t, and returns the server's label and labels. m.mu must be held.
func (m *Metrics) lastFindingAt(name, kind string, t time.Time) (string, *serverLabels) {
	server, s := m.server(name)
	if k := [2]string{server, kind}; !t.IsZero() && t.After(m.lastFinding[k]) {
		m.lastFinding[k] = t
		m.findingLast.WithLabelValues(server, kind).Set(float64(t.UnixNano()) / 1e9)
	}
	return server, s
}

// SeedLastFindings sets the last finding time of each server and kind
// from what the store holds (audit.NewestFinder), at start: without it
// the gauge has no series after a restart until each server's next
// finding of the kind, and a dashboard or rule reading it sees nothing
// where the store holds findings (op21's D6). fts should come newest
// first: the servers take their labels in that order, under the same cap
// as a finding of theirs would (Options.MaxServers; past it, or with a
// name that cannot be a label, "other"), so the most recently active get
// one. A later finding moves a series forward as usual; nothing is
// counted in mcpaudit_findings_total.
func (m *Metrics) SeedLastFindings(fts []audit.FindingTime) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ft := range fts {
		m.lastFindingAt(ft.Server, kindLabel(ft.Kind), ft.Time)
	}
}

// WithdrawFinding counts a finding the detector took back
// (audit.FindingWithdrawer) under the labels Finding counted it with:
// mcpaudit_findings_total minus it is what stands. The last finding time
// stays: the finding was announced.
func (m *Metrics) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	if f == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	server, s := m.server(f.Server)
	m.countFinding(s, m.findingCounter(server, s, true, kindLabel(f.Kind), severityLabel(f)))
}

// source bounds an ingest source and, the first time, initializes all its
// result and reason series at zero so that rates over them start at once.
func (m *Metrics) source(src Source) string {
	s := sourceLabel(src)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.sources[s] {
		m.sources[s] = true
		for _, r := range Results {
			m.ingest.WithLabelValues(s, r)
		}
		for _, r := range RejectReasons {
			m.rejected.WithLabelValues(s, string(r))
		}
		for _, r := range WarnReasons {
			m.warned.WithLabelValues(s, r)
		}
	}
	return s
}

// The Ingest methods count every received record under exactly one result:
// a caller counts a record as accepted, duplicate, rejected or ignored, never
// as two of them, so that the results add up to the records received.

// IngestAccepted counts n records from source stored for the first time.
// Records already seen are counted by IngestDuplicate instead.
func (m *Metrics) IngestAccepted(source Source, n int) {
	if n <= 0 {
		return
	}
	m.ingest.WithLabelValues(m.source(source), ResultAccepted).Add(float64(n))
}

// IngestDuplicate counts n records from source acknowledged but not stored
// again, as an exchange already seen.
func (m *Metrics) IngestDuplicate(source Source, n int) {
	if n <= 0 {
		return
	}
	m.ingest.WithLabelValues(m.source(source), ResultDuplicate).Add(float64(n))
}

// IngestIgnored counts n well-formed records from source that are not MCP
// tools/call exchanges: call records of other methods, spans that are not
// MCP spans.
func (m *Metrics) IngestIgnored(source Source, n int) {
	if n <= 0 {
		return
	}
	m.ingest.WithLabelValues(m.source(source), ResultIgnored).Add(float64(n))
}

// IngestRejected counts n records from source refused for reason.
func (m *Metrics) IngestRejected(source Source, reason RejectReason, n int) {
	if n <= 0 {
		return
	}
	s := m.source(source)
	m.ingest.WithLabelValues(s, ResultRejected).Add(float64(n))
	m.rejected.WithLabelValues(s, reasonLabel(reason)).Add(float64(n))
}

// IngestWarned counts n warnings of reason (one of WarnReasons) about
// records from source that were kept all the same: not a result of
// IngestRecordsTotal, as the record counts there as it was taken.
func (m *Metrics) IngestWarned(source Source, reason string, n int) {
	if n <= 0 {
		return
	}
	m.warned.WithLabelValues(m.source(source), warnLabel(reason)).Add(float64(n))
}

// ObserveFindingLatency records the wall time from when a finding could be
// known to its commit: from the acknowledgement of the call that completed
// its evidence, or, with window set, from the end of its verification
// window.
func (m *Metrics) ObserveFindingLatency(d time.Duration, window bool) {
	wait := WaitEvidence
	if window {
		wait = WaitWindow
	}
	m.findingLat.WithLabelValues(wait).Observe(max(d, 0).Seconds())
}

// ObserveStoreCommit records the duration of one commit to the embedded store.
func (m *Metrics) ObserveStoreCommit(d time.Duration) {
	m.storeCommit.Observe(d.Seconds())
}

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Load protocols.
const (
	protoCalls    = "calls"
	protoOTLPHTTP = "otlp-http"
	protoOTLPGRPC = "otlp-grpc"
)

// callsPerSession is about how many calls a generated session makes.
const callsPerSession = 2.9

// liveFlush is how long a live run's batch waits for more calls after its
// first: a batch is sent when its latest call is due, so a batch filling
// slowly (the sessions finished after the end) would send its first calls
// later than allowed_lateness. The OpenTelemetry SDK's batch span
// processor flushes every 5 s.
const liveFlush = 5 * time.Second

// liveTail is the longest a live run goes on past --duration: the
// generator's longest session (a problem session that pauses 3 to 4.5
// minutes between its two writes) begun just before the end.
const liveTail = 5 * time.Minute

// liveWarm is how long before the start of a live load its sessions
// start: most sessions last less (19 s on average), so the load runs at
// its planned rate from the start.
const liveWarm = 30 * time.Second

// loadOptions is what loadgen sends, where and how.
type loadOptions struct {
	// Target is the ingest URL (calls, otlp-http) or gRPC address.
	Target   string
	Protocol string
	// Rate is the calls per second offered; 0 for as fast as the server
	// acknowledges (live: up to the plan, Calls over Duration).
	Rate     int
	Duration time.Duration
	Clients  int
	Batch    int
	// Calls is the most records sent (noise included).
	Calls int
	Seed  int64
	// Live dates calls now, as live traffic is: a call is never sent
	// before its event time.
	Live bool
	// Start is when the calls of a load that is not live begin; they
	// span the hour after it. Zero: the start of the previous hour.
	Start time.Time
	// Token is sent as Authorization: Bearer (gRPC: the authorization
	// metadata) when set.
	Token string
	// TLS is the client's TLS settings for https:// and TLS gRPC targets;
	// nil: plain text for http:// and gRPC, Go's defaults for https://.
	TLS *tls.Config

	// For tests: sender replaces the protocol's sender of a client, and
	// generated is called when a client's next batch is generated.
	sender    func(source string) (sender, error)
	generated func(client int)
	// For tests: due replaces a live load's wait until a batch's latest
	// call is due (so that minutes of event time take no wall time), and
	// expected is told each finding the generated sessions must produce.
	due      func(ctx context.Context, t time.Time) bool
	expected func(capgen.Expected)
	// For tests of the pacing of a live load: cut its sessions at the end
	// of Duration, as before op21b, rather than finish them (minutes).
	cutAtEnd bool
}

// loadReport is what the server acknowledged.
type loadReport struct {
	Protocol string  `json:"protocol"`
	Seed     int64   `json:"seed"`
	Clients  int     `json:"clients"`
	Batch    int     `json:"batch"`
	Seconds  float64 `json:"seconds"`
	Requests int64   `json:"requests"`
	// Sent counts the records sent in requests that were answered.
	Sent int64 `json:"sent"`
	// Generated counts the calls the clients took to send: the batches
	// due by the end of the run (a live run's last ones partly filled);
	// Unsent those of them not in an answered request (a request that
	// failed or was refused to the end, or the run interrupted).
	Generated int64 `json:"generated"`
	Unsent    int64 `json:"unsent"`
	// Accepted counts the records acknowledged: stored, now or before.
	Accepted int64 `json:"accepted"`
	// New counts those stored for the first time; -1 where the protocol
	// does not say (OTLP).
	New int64 `json:"new"`
	// Rejected counts bad records or spans reported back.
	Rejected int64 `json:"rejected"`
	// Refused counts requests answered "retry later" (429, 503, gRPC
	// Unavailable or ResourceExhausted), each sent again after a pause;
	// Failed the other failures, whose calls are not sent again.
	Refused    int64   `json:"refused_requests"`
	Failed     int64   `json:"failed_requests"`
	FirstError string  `json:"first_error,omitempty"`
	AcceptedPS float64 `json:"accepted_per_second"`
	AckP50     float64 `json:"ack_p50_seconds"`
	AckP99     float64 `json:"ack_p99_seconds"`
	AckMax     float64 `json:"ack_max_seconds"`
	// PlannedPS is the live plan's calls per second; LagSeconds how long
	// before the end of the load the latest call acknowledged was dated:
	// how far the load fell behind its plan.
	PlannedPS  float64 `json:"planned_per_second,omitempty"`
	LagSeconds float64 `json:"lag_seconds,omitempty"`
	// TailCalls counts the calls a live load acknowledged past
	// --duration, finishing the sessions under way at its end, and
	// TailSeconds how long that took (at most liveTail). AcceptedPS
	// leaves them out.
	TailCalls   int64   `json:"tail_calls,omitempty"`
	TailSeconds float64 `json:"tail_seconds,omitempty"`
	// MaxHeld is the most generated calls held at once by all clients'
	// generators: what the open sessions hold.
	MaxHeld int `json:"generator_max_held"`
	// CPUSeconds is the CPU loadgen itself used, generating and sending:
	// on a shared machine, CPU the server did not have.
	CPUSeconds float64 `json:"loadgen_cpu_seconds"`

	lat []time.Duration
}

// loadgenCommand drives a running collector (mcpaudit serve, or any OTLP
// receiver) with generated mixed traffic, and reports what it
// acknowledged.
func loadgenCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: mcpaudit loadgen [flags]

Sends generated mixed MCP traffic (Thegram and Oddlynew sessions, about 10 % of them with a
finding or a trap) to a running mcpaudit serve, or to any OTLP receiver, while generating it,
and reports what was acknowledged, the acknowledgement latency and, from the server's /metrics,
what it stored, ingest-to-finding latency and memory. Each client is one source: a poster
(Mcpaudit-Source) or an exporting resource (service.instance.id). Exits 1 when requests were
made and no call was acknowledged (a wrong --target, the server down), after the report.

flags:`)
		fs.PrintDefaults()
	}
	target := fs.String("target", "", "ingest URL (calls, otlp-http; default http://127.0.0.1:4318) or gRPC address (otlp-grpc; default 127.0.0.1:4317)")
	protocol := fs.String("protocol", protoCalls, "calls (NDJSON call records to /v1/calls), otlp-http (protobuf to /v1/traces) or otlp-grpc")
	apiURL := fs.String("api", "http://127.0.0.1:9464", "API URL of the server (for /metrics); empty to skip")
	rate := fs.Int("rate", 0, "calls per second to offer; 0 for as fast as the server acknowledges (live: up to --calls over --duration)")
	duration := fs.Duration("duration", 20*time.Second, fmt.Sprintf("how long to send; a live load then finishes the sessions under way, which takes up to %s more (about a minute for normal sessions, longer for a rare problem session that pauses minutes between two writes)", liveTail))
	clients := fs.Int("clients", 8, "concurrent clients, each a source of its own")
	batch := fs.Int("batch", 200, "calls per request")
	calls := fs.Int("calls", 1_000_000, "most calls to send (sending stops when they run out)")
	seed := fs.Int64("seed", 0, "generator seed; 0 picks one from the clock (printed), so that a second run sends other calls, not the first run's again")
	live := fs.Bool("live", true, "date calls now, as live traffic is: no call is sent before its event time; false dates them in the hour from --start and sends as fast as acknowledged")
	startAt := fs.String("start", "", "with --live=false, when the calls begin (RFC 3339, an hour back at least: they span the hour after it); default the start of the previous hour, so that they are inside any retention. The same --seed and --start send the same calls")
	dataDir := fs.String("data-dir", "", "the server's data dir, to report bytes per stored call")
	format := fs.String("format", "text", "report as text or json")
	token := fs.String("token", os.Getenv("MCPAUDIT_TOKEN"), "bearer token of an ingest credential (and of /metrics when it needs one; default $MCPAUDIT_TOKEN)")
	var ctls clientFlags
	ctls.register(fs)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *seed == 0 {
		// The same seed makes the same sessions, documents and request
		// ids: sent again to the same collector, they are a replay of the
		// first run (its writes applied twice, its keys reused).
		*seed = time.Now().UnixNano() & (1<<48 - 1)
	}
	opts := loadOptions{Target: *target, Protocol: *protocol, Rate: *rate, Duration: *duration, Clients: *clients,
		Batch: *batch, Calls: *calls, Seed: *seed, Live: *live, Token: *token}
	if *startAt != "" {
		if opts.Live {
			return &exitError{code: 2, err: errors.New("loadgen: --start dates a load that is not live: add --live=false")}
		}
		t, err := time.Parse(time.RFC3339Nano, *startAt)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("loadgen: --start: %w", err)}
		}
		if end := t.Add(time.Hour); end.After(time.Now()) {
			return &exitError{code: 2, err: fmt.Errorf("loadgen: --start %s: the calls span the hour after it, so it must be an hour back at least (to date calls now, leave --live on)", *startAt)}
		}
		opts.Start = t
	}
	if opts.Live {
		fmt.Fprintf(stderr, "loadgen: seed %d (--seed %d sends the same calls again)\n", *seed, *seed)
	} else {
		if opts.Start.IsZero() {
			opts.Start = defaultStart(time.Now())
		}
		start := opts.Start.Format(time.RFC3339Nano)
		fmt.Fprintf(stderr, "loadgen: seed %d, calls dated from %s (--seed %d --start %s send the same calls again)\n", *seed, start, *seed, start)
	}
	if err := opts.validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	tc, err := ctls.tlsConfig()
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("loadgen: %w", err)}
	}
	opts.TLS = tc
	scrapeClient, _ := ctls.httpClient(30 * time.Second)
	if *format != "text" && *format != "json" {
		return &exitError{code: 2, err: errors.New("loadgen: --format must be text or json")}
	}
	if opts.Live {
		fmt.Fprintf(stderr, "loadgen: %s, live: calls dated now, planned at %.0f calls/s; after %s it finishes the sessions under way (up to %s more)\n", opts.Protocol, opts.plannedRate(), opts.Duration, liveTail)
	}
	before := scrape(scrapeClient, *apiURL, opts.Token)
	rep, err := runLoad(ctx, opts)
	if err != nil {
		return err
	}
	after := scrape(scrapeClient, *apiURL, opts.Token)
	if *format == "json" {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		printLoadReport(stdout, rep, before, after, *dataDir)
	}
	return nothingAcknowledged(rep)
}

// nothingAcknowledged is the exit of a load that reached nothing: exit 1
// when no call was acknowledged although requests were made (a wrong
// --target or port, the server down), so that a script that runs loadgen
// as a smoke test does not take a load that never arrived for a success.
func nothingAcknowledged(rep *loadReport) error {
	if rep.Accepted > 0 || rep.Requests == 0 {
		return nil
	}
	first := rep.FirstError
	if first == "" {
		first = "none reported"
	}
	return &exitError{code: 1, err: fmt.Errorf("loadgen: no call was acknowledged: %d of %d requests failed, %d refused (first: %s)", rep.Failed, rep.Requests, rep.Refused, first)}
}

func (o *loadOptions) validate() error {
	switch o.Protocol {
	case protoCalls, protoOTLPHTTP:
		if o.Target == "" {
			o.Target = "http://127.0.0.1:4318"
		}
	case protoOTLPGRPC:
		if o.Target == "" {
			o.Target = "127.0.0.1:4317"
		}
		// An address given as a URL, as the OTLP exporters take it.
		o.Target = strings.TrimPrefix(strings.TrimPrefix(o.Target, "http://"), "https://")
	default:
		return fmt.Errorf("loadgen: --protocol must be %s, %s or %s, not %q", protoCalls, protoOTLPHTTP, protoOTLPGRPC, o.Protocol)
	}
	o.Target = strings.TrimRight(o.Target, "/")
	if o.Clients <= 0 || o.Batch <= 0 || o.Calls <= 0 || o.Rate < 0 || o.Duration <= 0 {
		return errors.New("loadgen: --clients, --batch, --calls and --duration must be positive, --rate not negative")
	}
	return nil
}

// plannedRate is the calls per second a live load is dated at.
func (o loadOptions) plannedRate() float64 {
	if o.Rate > 0 {
		return float64(o.Rate)
	}
	return float64(o.Calls) / o.Duration.Seconds()
}

// sender sends one batch and says what became of it.
type sender interface {
	send(ctx context.Context, calls []*capgen.Call) (ack sendResult)
	close()
}

type sendResult struct {
	accepted, new, rejected int64
	// refused: retry later; failed: another error (err says which).
	refused, failed bool
	err             error
}

// genBatch is the calls of one request, generated ahead of its sending, and
// the event time of the latest.
type genBatch struct {
	calls  []*capgen.Call
	latest time.Time
}

// defaultStart is when the calls of a load that is not live begin unless
// told: the start of the hour before now's, so that the hour they span
// is inside any retention and never ahead of the server's clock.
func defaultStart(now time.Time) time.Time {
	return now.UTC().Truncate(time.Hour).Add(-time.Hour)
}

// runLoad sends the load and returns what was acknowledged. Each client
// generates its own sessions while it sends: the calls of its open
// sessions are all it holds.
func runLoad(ctx context.Context, o loadOptions) (*loadReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	start, span := o.Start, time.Hour
	if start.IsZero() {
		start = defaultStart(time.Now())
	}
	// Each client sends its share of the calls, from sessions of its own
	// (with a margin: sessions make 2.9 calls on average).
	share := func(w int) int64 {
		n := o.Calls / o.Clients
		if w < o.Calls%o.Clients {
			n++
		}
		return int64(n)
	}
	sessions := int(math.Ceil(float64(o.Calls)/callsPerSession/float64(o.Clients)*1.1)) + 10
	if o.Live {
		// Sessions start at the planned rate liveWarm before the load,
		// so that it is under way, at its rate, from the first request;
		// the calls dated before the load are left out. The plan is
		// dated when the load starts (shift), however long that took.
		p := o.plannedRate()
		start = time.Now()
		span = liveWarm + time.Duration(1.05*float64(o.Calls)/p*float64(time.Second))
		sessions = int(math.Ceil(span.Seconds()*p/callsPerSession/float64(o.Clients))) + 10
	}
	streams := make([]*capgen.Stream, o.Clients)
	var warm sync.WaitGroup
	for w := range streams {
		streams[w] = capgen.NewStream(capgen.Config{Seed: o.Seed*1_000_003 + int64(w), Sessions: sessions, Start: start, Span: span,
			AnomalyRate: 0.1, NoiseRate: 0.001, NoTail: true})
		if o.expected != nil {
			streams[w].OnExpected = o.expected
		}
		if o.Live {
			warm.Add(1)
			go func() { defer warm.Done(); streams[w].Skip(start.Add(liveWarm)) }()
		}
	}
	warm.Wait()
	senders := make([]sender, o.Clients)
	for w := range senders {
		newSender := newSender
		if o.sender != nil {
			newSender = func(_ loadOptions, source string) (sender, error) { return o.sender(source) }
		}
		s, err := newSender(o, fmt.Sprintf("loadgen-%d", w))
		if err != nil {
			for _, s := range senders[:w] {
				s.close()
			}
			return nil, err
		}
		senders[w] = s
	}
	defer func() {
		for _, s := range senders {
			s.close()
		}
	}()

	rep := &loadReport{Protocol: o.Protocol, Seed: o.Seed, Clients: o.Clients, Batch: o.Batch}
	if o.Live {
		rep.PlannedPS = o.plannedRate()
	}
	var (
		requests, sent, accepted, nw, rejected atomic.Int64
		generatedN                             atomic.Int64
		refused, failed                        atomic.Int64
		mu                                     sync.Mutex
		lastTime                               time.Time
		newUnknown                             atomic.Bool
		tail                                   atomic.Int64
	)
	// The deadline stops new requests; those in flight are answered.
	deadline := time.Now().Add(o.Duration)
	stop, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var pace <-chan time.Time
	if o.Rate > 0 && !o.Live {
		t := time.NewTicker(time.Duration(float64(o.Batch) / float64(o.Rate) * float64(time.Second)))
		defer t.Stop()
		pace = t.C
	}
	begin, cpu0 := time.Now(), procstat.CPU()
	var shift time.Duration
	if o.Live {
		shift = begin.Sub(start.Add(liveWarm))
	}
	var wg sync.WaitGroup
	for w := 0; w < o.Clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := streams[w]
			// The next batch is generated while the request before it
			// waits for its answer, as an SDK's batch processor gathers
			// spans while its exporter sends: one batch ahead, never two
			// requests in flight. Turning it into a request stays on the
			// sending path, as in the SDK's exporter.
			batches, quit, generated := make(chan genBatch), make(chan struct{}), make(chan struct{})
			go func() {
				defer close(generated)
				defer close(batches)
				// A live run stops starting sessions at its end (or when
				// its share is sent) and finishes those begun: their calls
				// after the end are sent when their time comes, each
				// batch closed liveFlush after its first call, as an
				// SDK's batch processor flushes on its timer. Cut, a
				// session leaves a write its read-back never confirms
				// (op21's D3).
				if o.Live {
					st.EndAt(deadline.Add(-shift))
				}
				var carry *capgen.Call
				for left := share(w); left > 0 || o.Live; {
					n := int64(o.Batch)
					if !o.Live {
						n = min(n, left)
						left -= n
					}
					gb := genBatch{calls: make([]*capgen.Call, 0, n)}
					for len(gb.calls) < int(n) {
						c := carry
						carry = nil
						if c == nil {
							var ok bool
							if c, ok = st.Next(); !ok {
								break
							}
							c.Time = c.Time.Add(shift)
						}
						if o.cutAtEnd && c.Time.After(deadline) {
							break
						}
						if o.Live && len(gb.calls) > 0 && c.Time.Sub(gb.calls[0].Time) > liveFlush {
							carry = c
							break
						}
						gb.calls = append(gb.calls, c)
						// Not always the last: a duplicate observation is
						// dated 200 ms after its original, which comes first.
						if c.Time.After(gb.latest) {
							gb.latest = c.Time
						}
						if o.Live {
							if left--; left == 0 {
								st.EndAt(c.Time.Add(-shift))
							}
						}
					}
					if len(gb.calls) == 0 {
						return
					}
					if o.generated != nil {
						o.generated(w)
					}
					select {
					case batches <- gb:
					case <-quit:
						return
					}
				}
			}()
			var mine []time.Duration
			var last time.Time
			defer func() {
				close(quit)
				<-generated
				mu.Lock()
				rep.lat = append(rep.lat, mine...)
				rep.MaxHeld += st.MaxHeld()
				if last.After(lastTime) {
					lastTime = last
				}
				mu.Unlock()
			}()
			// next is the client's next batch; none when its share is sent
			// or the run has ended. A live run's sessions are finished
			// past its end: its batches are sent until they run out. A
			// run that is not live stops at its end.
			next := func() (genBatch, bool) {
				if pace != nil {
					select {
					case <-pace:
					case <-stop.Done():
						return genBatch{}, false
					}
				}
				if o.Live {
					select {
					case gb, ok := <-batches:
						return gb, ok
					case <-ctx.Done():
						return genBatch{}, false
					}
				}
				select {
				case gb, ok := <-batches:
					return gb, ok
				case <-stop.Done():
					return genBatch{}, false
				}
			}
			for {
				gb, ok := next()
				batch, latest := gb.calls, gb.latest
				if !ok || len(batch) == 0 {
					return // the client's share is sent, or the run ended
				}
				if o.Live && accepted.Load() == 0 && requests.Load() > 0 && time.Now().After(deadline) {
					return // nothing reached the server: no session to finish
				}
				generatedN.Add(int64(len(batch)))
				if o.Live {
					// A call is never sent before it happened: the plan's
					// event times, all by the end of the run, pace a live
					// load.
					due := o.due
					if due == nil {
						due = waitUntil
					}
					if !due(ctx, latest) {
						return
					}
				}
				// A refused batch is sent again after a pause that grows,
				// as an exporter retries, until the deadline.
				backoff := 50 * time.Millisecond
				for {
					t0 := time.Now()
					r := senders[w].send(ctx, batch)
					if ctx.Err() != nil {
						return // interrupted: not an answer
					}
					requests.Add(1)
					if r.refused || r.failed {
						if r.refused {
							refused.Add(1)
						} else {
							failed.Add(1)
						}
						if r.err != nil {
							mu.Lock()
							if rep.FirstError == "" {
								rep.FirstError = r.err.Error()
							}
							mu.Unlock()
						}
						// A live run's batch after its end is retried while
						// it would still be in time (allowed lateness).
						until := deadline
						if o.Live && latest.Add(time.Minute).After(until) {
							until = latest.Add(time.Minute)
						}
						if !r.refused || time.Now().Add(backoff).After(until) {
							break
						}
						select {
						case <-time.After(backoff):
						case <-ctx.Done():
							return
						}
						backoff = min(2*backoff, time.Second)
						continue
					}
					mine = append(mine, time.Since(t0))
					if t0.After(deadline) {
						tail.Add(r.accepted)
					}
					last = latest
					sent.Add(int64(len(batch)))
					accepted.Add(r.accepted)
					rejected.Add(r.rejected)
					if r.new < 0 {
						newUnknown.Store(true)
					} else {
						nw.Add(r.new)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	rep.Seconds, rep.CPUSeconds = elapsed.Seconds(), (procstat.CPU() - cpu0).Seconds()
	rep.Requests, rep.Sent, rep.Accepted, rep.Rejected = requests.Load(), sent.Load(), accepted.Load(), rejected.Load()
	rep.Generated = generatedN.Load()
	rep.Unsent = rep.Generated - rep.Sent
	rep.Refused, rep.Failed = refused.Load(), failed.Load()
	rep.New = nw.Load()
	if newUnknown.Load() {
		rep.New = -1
	}
	rep.AcceptedPS = float64(rep.Accepted) / elapsed.Seconds()
	if o.Live && elapsed > o.Duration {
		// The sessions finished past the end are not the rate offered.
		rep.TailCalls, rep.TailSeconds = tail.Load(), (elapsed - o.Duration).Seconds()
		rep.AcceptedPS = float64(rep.Accepted-rep.TailCalls) / o.Duration.Seconds()
	}
	if o.Live && !lastTime.IsZero() {
		rep.LagSeconds = time.Since(lastTime).Seconds()
	}
	sort.Slice(rep.lat, func(i, j int) bool { return rep.lat[i] < rep.lat[j] })
	rep.AckP50, rep.AckP99, rep.AckMax = rep.quantile(0.5).Seconds(), rep.quantile(0.99).Seconds(), rep.quantile(1).Seconds()
	return rep, nil
}

// waitUntil waits until t, and says false when ctx ended first.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// quantile of the acknowledgement latencies, which must be sorted.
func (r *loadReport) quantile(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[max(0, min(len(r.lat)-1, int(math.Ceil(p*float64(len(r.lat))))-1))]
}

func newSender(o loadOptions, source string) (sender, error) {
	switch o.Protocol {
	case protoCalls:
		return &callsSender{url: o.Target + "/v1/calls", source: source, token: o.Token, client: o.httpClient()}, nil
	case protoOTLPHTTP:
		return &otlpHTTPSender{url: o.Target + "/v1/traces", source: source, token: o.Token, client: o.httpClient()}, nil
	default:
		creds := insecure.NewCredentials()
		if o.TLS != nil {
			creds = credentials.NewTLS(o.TLS)
		}
		// One connection per client, as each exporter has its own.
		conn, err := grpc.NewClient(o.Target, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			return nil, fmt.Errorf("cannot connect to %s: %w", o.Target, err)
		}
		return &otlpGRPCSender{conn: conn, client: ptraceotlp.NewGRPCClient(conn), source: source, token: o.Token}, nil
	}
}

// httpClient returns a client of one sender, with o's TLS settings.
func (o loadOptions) httpClient() *http.Client {
	if o.TLS == nil {
		return &http.Client{}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = o.TLS
	return &http.Client{Transport: tr}
}

// callsSender posts call records as NDJSON, naming its source.
type callsSender struct {
	url, source, token string
	client             *http.Client
	body               []byte
}

func (s *callsSender) send(ctx context.Context, calls []*capgen.Call) sendResult {
	s.body = s.body[:0]
	for i, c := range calls {
		if i > 0 {
			s.body = append(s.body, '\n')
		}
		s.body = c.AppendRecord(s.body)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", s.url, bytes.NewReader(s.body))
	if err != nil {
		return sendResult{failed: true, err: err}
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(receiver.SourceHeader, s.source)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return sendResult{failed: true, err: err}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var cr receiver.CallsResponse
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		return sendResult{refused: true, err: fmt.Errorf("POST /v1/calls: %s: %s", resp.Status, strings.TrimSpace(string(body)))}
	case resp.StatusCode == http.StatusOK, resp.StatusCode == http.StatusBadRequest && json.Unmarshal(body, &cr) == nil && cr.Rejected > 0:
		// A request of bad records only is answered 400 with the
		// records it rejected.
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &cr); err != nil {
				return sendResult{failed: true, err: fmt.Errorf("cannot read the answer to POST /v1/calls: %w", err)}
			}
		}
		return sendResult{accepted: int64(cr.Accepted), new: int64(cr.New), rejected: int64(cr.Rejected)}
	default:
		return sendResult{failed: true, err: fmt.Errorf("POST /v1/calls: %s: %s", resp.Status, strings.TrimSpace(string(body)))}
	}
}

func (s *callsSender) close() { s.client.CloseIdleConnections() }

// otlpHTTPSender posts OTLP protobuf, one resource per server and client.
type otlpHTTPSender struct {
	url, source, token string
	client             *http.Client
}

func (s *otlpHTTPSender) send(ctx context.Context, calls []*capgen.Call) sendResult {
	req := ptraceotlp.NewExportRequest()
	capgen.AppendTraces(req.Traces(), s.source, calls)
	body, err := req.MarshalProto()
	if err != nil {
		return sendResult{failed: true, err: err}
	}
	hreq, err := http.NewRequestWithContext(ctx, "POST", s.url, bytes.NewReader(body))
	if err != nil {
		return sendResult{failed: true, err: err}
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	if s.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(hreq)
	if err != nil {
		return sendResult{failed: true, err: err}
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		er := ptraceotlp.NewExportResponse()
		if err := er.UnmarshalProto(rb); err != nil {
			return sendResult{failed: true, err: fmt.Errorf("cannot read the answer to POST /v1/traces: %w", err)}
		}
		rej := er.PartialSuccess().RejectedSpans()
		return sendResult{accepted: int64(len(calls)) - rej, new: -1, rejected: rej}
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return sendResult{refused: true, err: fmt.Errorf("POST /v1/traces: %s: %s", resp.Status, strings.TrimSpace(string(rb)))}
	default:
		return sendResult{failed: true, err: fmt.Errorf("POST /v1/traces: %s: %s", resp.Status, strings.TrimSpace(string(rb)))}
	}
}

func (s *otlpHTTPSender) close() { s.client.CloseIdleConnections() }

// otlpGRPCSender exports over OTLP/gRPC on a connection of its own.
type otlpGRPCSender struct {
	conn          *grpc.ClientConn
	client        ptraceotlp.GRPCClient
	source, token string
}

func (s *otlpGRPCSender) send(ctx context.Context, calls []*capgen.Call) sendResult {
	req := ptraceotlp.NewExportRequest()
	capgen.AppendTraces(req.Traces(), s.source, calls)
	if s.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Export(ctx, req)
	if err != nil {
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted:
			if ctx.Err() == nil {
				return sendResult{refused: true, err: err}
			}
		}
		return sendResult{failed: true, err: err}
	}
	rej := resp.PartialSuccess().RejectedSpans()
	return sendResult{accepted: int64(len(calls)) - rej, new: -1, rejected: rej}
}

func (s *otlpGRPCSender) close() { s.conn.Close() }

// printLoadReport writes the report, with what the server's /metrics say
// happened between the two scrapes.
func printLoadReport(w io.Writer, r *loadReport, before, after map[string]*dto.MetricFamily, dataDir string) {
	fmt.Fprintf(w, "sent %d requests of up to %d calls over %s with %d clients in %.1fs (seed %d)\n", r.Requests, r.Batch, r.Protocol, r.Clients, r.Seconds, r.Seed)
	fmt.Fprintf(w, "accepted calls: %d  (%.0f calls/s, acknowledged)\n", r.Accepted, r.AcceptedPS)
	if r.New >= 0 {
		fmt.Fprintf(w, "new calls: %d  (stored for the first time; the others were stored before)\n", r.New)
	}
	fmt.Fprintf(w, "rejected calls: %d  (bad records or spans, reported back)\n", r.Rejected)
	fmt.Fprintf(w, "refused requests (retry later, sent again): %d  failed requests: %d\n", r.Refused, r.Failed)
	if r.Unsent > 0 {
		fmt.Fprintf(w, "generated calls not sent: %d of %d  (in no answered request: failed, refused to the end of the run, or interrupted)\n", r.Unsent, r.Generated)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, "first refusal or failure: %s\n", r.FirstError)
	}
	fmt.Fprintf(w, "acknowledgement latency per acknowledged request: p50 %s  p99 %s  max %s\n", secs(r.AckP50), secs(r.AckP99), secs(r.AckMax))
	if r.PlannedPS > 0 {
		if r.Sent > 0 {
			fmt.Fprintf(w, "event time: live, planned at %.0f calls/s; the latest call acknowledged was dated %.1fs before the load ended\n", r.PlannedPS, r.LagSeconds)
		} else {
			fmt.Fprintf(w, "event time: live, planned at %.0f calls/s; no call was acknowledged\n", r.PlannedPS)
		}
		if r.TailSeconds > 0 {
			fmt.Fprintf(w, "after --duration: %d calls acknowledged in %.1fs finishing the sessions under way (no session is cut; calls/s above leaves them out)\n", r.TailCalls, r.TailSeconds)
		}
	}
	fmt.Fprintf(w, "loadgen: at most %d generated calls held at once (the open sessions'), %.1f CPU seconds\n", r.MaxHeld, r.CPUSeconds)
	if before != nil && after != nil {
		if why := serverRestarted(before, after); why != "" {
			// Differences across a restart are garbage: op23 D5 printed
			// "-372 stored" and 18446744073709551612 commits. The new
			// process's counters are what it did since it started.
			fmt.Fprintf(w, "server restarted during the load (%s): its counters began again at zero, so what follows is what it counted since the restart, not over the whole load\n", why)
			before = map[string]*dto.MetricFamily{}
		}
		stored := counterDelta(before, after, metrics.IngestRecordsTotal, metrics.LabelResult, metrics.ResultAccepted)
		dup := counterDelta(before, after, metrics.IngestRecordsTotal, metrics.LabelResult, metrics.ResultDuplicate)
		rej := counterDelta(before, after, metrics.IngestRecordsTotal, metrics.LabelResult, metrics.ResultRejected)
		fmt.Fprintf(w, "server counted: %.0f stored, %.0f duplicates, %.0f rejected%s\n", stored, dup, rej, rejectReasons(before, after))
		if p50, p99, n := histQuantiles(before, after, metrics.FindingLatencySeconds, metrics.WaitEvidence); n > 0 {
			fmt.Fprintf(w, "ingest to finding, from the call completing it (server histogram, %d findings): p50 <= %s  p99 <= %s\n", n, p50, p99)
		}
		if p50, p99, n := histQuantiles(before, after, metrics.FindingLatencySeconds, metrics.WaitWindow); n > 0 {
			fmt.Fprintf(w, "window end to finding (server histogram, %d unverified writes): p50 <= %s  p99 <= %s\n", n, p50, p99)
		}
		if p50, p99, n := histQuantiles(before, after, metrics.StoreCommitSeconds, ""); n > 0 {
			fmt.Fprintf(w, "store commit (%d commits): p50 <= %s  p99 <= %s\n", n, p50, p99)
		}
		if rss := gauge(after, "process_resident_memory_bytes"); rss > 0 {
			fmt.Fprintf(w, "server RSS: %.1f MiB\n", rss/(1<<20))
		}
	}
	if dataDir != "" && r.Accepted > 0 {
		size := dirSize(dataDir)
		fmt.Fprintf(w, "store on disk: %.1f MiB, %.0f bytes per accepted call (all of the data dir / this run's calls)\n", float64(size)/(1<<20), float64(size)/float64(r.Accepted))
	}
}

func secs(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond)
}

// dirSize adds up the sizes of the files under dir.
func dirSize(dir string) int64 {
	var size int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return size
}

// scrape reads a server's /metrics; nil when it cannot.
func scrape(client *http.Client, api, token string) map[string]*dto.MetricFamily {
	if api == "" {
		return nil
	}
	req, err := http.NewRequest("GET", strings.TrimRight(api, "/")+"/metrics", nil)
	if err != nil {
		return nil
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	return mfs
}

// serverRestarted says why the server of two scrapes is not the same
// process, or "" when it is: its process_start_time_seconds changed, or
// one of the counters or histograms the report subtracts went down (a
// server without the process metrics).
func serverRestarted(before, after map[string]*dto.MetricFamily) string {
	const start = "process_start_time_seconds"
	if b, a := gauge(before, start), gauge(after, start); b > 0 && a > 0 && a != b {
		return fmt.Sprintf("process started at %s, then at %s UTC", time.Unix(int64(b), 0).UTC().Format(time.TimeOnly), time.Unix(int64(a), 0).UTC().Format(time.TimeOnly))
	}
	total := func(mf *dto.MetricFamily) (n float64) {
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
		return n
	}
	for _, name := range []string{metrics.IngestRecordsTotal, metrics.IngestRejectedTotal, metrics.StoreCommitSeconds, metrics.FindingLatencySeconds} {
		if b, a := before[name], after[name]; b != nil && total(a) < total(b) {
			return name + " went down"
		}
	}
	return ""
}

func gauge(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil || len(mf.Metric) == 0 || mf.Metric[0].Gauge == nil {
		return 0
	}
	return mf.Metric[0].Gauge.GetValue()
}

// counterDelta sums, between two scrapes, the series of a counter whose
// label has the value.
func counterDelta(before, after map[string]*dto.MetricFamily, name, label, value string) float64 {
	sum := func(mfs map[string]*dto.MetricFamily) float64 {
		var s float64
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.Metric {
				for _, lp := range m.Label {
					if lp.GetName() == label && lp.GetValue() == value && m.Counter != nil {
						s += m.Counter.GetValue()
					}
				}
			}
		}
		return s
	}
	return sum(after) - sum(before)
}

// rejectReasons spells out, between two scrapes, the reasons of what the
// server counted rejected, most first: " (bad_time 199; overloaded 1824
// requests, refused unread)". A request refused before its records are
// read (overloaded, timeout) counts once, not once per record, so the
// total is not a number of calls when those are in it.
func rejectReasons(before, after map[string]*dto.MetricFamily) string {
	type reason struct {
		name string
		n    float64
	}
	var rs []reason
	for _, r := range metrics.RejectReasons {
		if n := counterDelta(before, after, metrics.IngestRejectedTotal, metrics.LabelReason, string(r)); n > 0 {
			rs = append(rs, reason{string(r), n})
		}
	}
	if len(rs) == 0 {
		return ""
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].n > rs[j].n })
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s %.0f", r.name, r.n)
		switch metrics.RejectReason(r.name) {
		case metrics.RejectOverloaded, metrics.RejectTimeout:
			parts[i] += " requests, refused unread"
		}
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// histQuantiles estimates the p50 and p99 of what a histogram observed
// between two scrapes, as the upper bound of the bucket holding them; wait,
// when set, picks the series of that LabelWait value.
func histQuantiles(before, after map[string]*dto.MetricFamily, name, wait string) (p50, p99 string, n uint64) {
	get := func(mfs map[string]*dto.MetricFamily) *dto.Histogram {
		mf := mfs[name]
		if mf == nil {
			return nil
		}
		for _, m := range mf.Metric {
			if wait == "" {
				return m.Histogram
			}
			for _, l := range m.Label {
				if l.GetName() == metrics.LabelWait && l.GetValue() == wait {
					return m.Histogram
				}
			}
		}
		return nil
	}
	a, b := get(after), get(before)
	if a == nil {
		return "", "", 0
	}
	counts := make([]uint64, len(a.Bucket))
	for i, bk := range a.Bucket {
		counts[i] = bk.GetCumulativeCount()
		if b != nil && i < len(b.Bucket) {
			counts[i] -= b.Bucket[i].GetCumulativeCount()
		}
	}
	n = a.GetSampleCount()
	if b != nil {
		n -= b.GetSampleCount()
	}
	if n == 0 {
		return "", "", 0
	}
	return bucketQuantile(a.Bucket, counts, n, 0.5), bucketQuantile(a.Bucket, counts, n, 0.99), n
}

// bucketQuantile is the upper bound of the bucket holding the p-quantile
// of n observations with cumulative counts per bucket. Past the last
// finite bound (the +Inf bucket, listed when the histogram was parsed
// from text) it is ">" and that bound: a duration of +Inf seconds is not
// one.
func bucketQuantile(buckets []*dto.Bucket, counts []uint64, n uint64, p float64) string {
	want := uint64(math.Ceil(p * float64(n)))
	last := 0.0
	for i, c := range counts {
		ub := buckets[i].GetUpperBound()
		if math.IsInf(ub, 1) {
			break
		}
		if c >= want {
			return time.Duration(ub * float64(time.Second)).String()
		}
		last = ub
	}
	return ">" + time.Duration(last*float64(time.Second)).String()
}

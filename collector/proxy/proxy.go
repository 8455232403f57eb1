package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// Config sets up a Proxy.
type Config struct {
	// Upstream is the MCP server's base URL; request paths are appended
	// to its path. Required.
	Upstream string `yaml:"upstream"`
	// Server names the upstream in call records. Required.
	Server string `yaml:"server"`
	// ResponseTimeout is how long a tools/call may wait for its response:
	// then the proxy ends the HTTP request that carries it (504, or a cut
	// stream) and records the call as a timeout. 0 disables it. Default 2m.
	ResponseTimeout time.Duration `yaml:"response_timeout"`
	// MaxMessageBytes bounds the messages recorded: a larger body or event
	// passes through but is not recorded. Default 16 MiB.
	MaxMessageBytes int `yaml:"max_message_bytes"`
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	return Config{ResponseTimeout: 2 * time.Minute, MaxMessageBytes: tap.DefaultMaxMessageBytes}
}

// Validate reports every invalid field with its key path.
func (c Config) Validate() error {
	var errs []error
	if c.Upstream == "" {
		errs = append(errs, errors.New("proxy.upstream: required"))
	} else if err := CheckUpstream(c.Upstream); err != nil {
		errs = append(errs, fmt.Errorf("proxy.upstream: %w", err))
	}
	if c.Server == "" {
		errs = append(errs, errors.New("proxy.server: required"))
	}
	if c.ResponseTimeout < 0 {
		errs = append(errs, errors.New("proxy.response_timeout: must not be negative"))
	}
	if c.MaxMessageBytes <= 0 {
		errs = append(errs, errors.New("proxy.max_message_bytes: must be positive"))
	}
	return errors.Join(errs...)
}

// CheckUpstream returns an error when s cannot be an upstream: an http or
// https URL with a host.
func CheckUpstream(s string) error {
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http or https URL", s)
	}
	return nil
}

// Proxy relays MCP Streamable HTTP to one upstream and records its tools/call
// exchanges. It is an http.Handler, safe for concurrent use.
type Proxy struct {
	cfg     Config
	rec     *tap.Recorder
	rp      *httputil.ReverseProxy
	metrics *metrics.Relay
	log     *slog.Logger
	scope   atomic.Uint64

	stopJanitor context.CancelFunc
	janitorDone chan struct{}

	// live holds the exchanges being served, so that a stop whose grace
	// ran out can cut them and wait until their calls are recorded.
	liveMu   sync.Mutex
	live     map[*exchange]struct{}
	cutting  bool
	handlers sync.WaitGroup
	cutCalls atomic.Int64

	// bigSeen holds, by session, when a stream of the session last carried
	// a message too large to record whose id could not be read, outside
	// the POST of its call: a call of the session in flight since then may
	// have been answered by it, and is not recorded as unanswered.
	bigMu   sync.Mutex
	bigSeen map[string]time.Time
}

// errResponseTimeout is the cause of an upstream request the proxy ended.
var errResponseTimeout = errors.New("no response within the response timeout")

// errStopped is the cause of an upstream request that a stop cut when its
// grace ran out.
var errStopped = errors.New("the proxy stopped")

// New returns a Proxy that hands every record to emit. m and log may be nil.
func New(cfg Config, emit func(*tap.Record), m *metrics.Relay, log *slog.Logger) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	target, _ := url.Parse(cfg.Upstream)
	p := &Proxy{cfg: cfg, metrics: m, log: log, live: make(map[*exchange]struct{}), bigSeen: make(map[string]time.Time)}
	p.rec = tap.NewRecorder(cfg.Server, func(r *tap.Record) {
		m.Record(cfg.Server, r.Outcome())
		emit(r)
	})
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// SetURL joins the paths; the query is the client's alone.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
		},
		// SSE must reach the client event by event.
		FlushInterval: -1,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1000,
			MaxIdleConnsPerHost:   1000,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
			ExpectContinueTimeout: time.Second,
			// Compression is the client's to negotiate: the proxy must not
			// add an Accept-Encoding of its own and decode behind its back.
			DisableCompression: true,
		},
		BufferPool:     bufferPool{},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stopJanitor, p.janitorDone = cancel, make(chan struct{})
	go p.janitor(ctx)
	return p, nil
}

// Recorder returns the proxy's recorder.
func (p *Proxy) Recorder() *tap.Recorder { return p.rec }

// Cut ends every exchange still being served, as a stop does when its
// grace ran out: it marks them cut, calls closeClients (the HTTP server's
// Close: a handler cut while its client still listens would answer it
// with an empty 200), then cancels their upstream requests; their calls
// still in flight are recorded canceled (not_sent when no connection to
// the upstream was made yet). It waits until their handlers have
// returned, or ctx ends, and returns how many calls the cuts recorded.
// New requests are cut as they come. Marked before the clients' close, a
// call whose handler sees its client gone first is counted too.
func (p *Proxy) Cut(ctx context.Context, closeClients func()) int {
	p.liveMu.Lock()
	p.cutting = true
	live := make([]*exchange, 0, len(p.live))
	for ex := range p.live {
		ex.cut.Store(true)
		live = append(live, ex)
	}
	p.liveMu.Unlock()
	closeClients()
	for _, ex := range live {
		ex.stop(errStopped)
	}
	done := make(chan struct{})
	go func() {
		p.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return int(p.cutCalls.Load())
}

// OnlyStreamsOpen reports whether no call is in flight and every request
// still being served is a GET stream: what a stop may cut without waiting
// for its grace, since nothing recorded can come on them any more. A
// client of the go-sdk keeps its session's GET stream open for as long as
// the session lives: before px19 every stop with such a client connected
// waited its whole grace.
func (p *Proxy) OnlyStreamsOpen() bool {
	if p.rec.Len() > 0 {
		return false
	}
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	for ex := range p.live {
		if !ex.stream {
			return false
		}
	}
	return true
}

// Close stops the proxy's background work and ends the exchanges still in
// flight as unknown to the proxy (no response, no transport error). Call it
// after the HTTP server has shut down.
func (p *Proxy) Close() int {
	p.stopJanitor()
	<-p.janitorDone
	p.forgetMaybeAnswered(time.Now().Add(time.Hour), time.Time{})
	n := p.rec.Close("", time.Now())
	p.metrics.SetInflight(0)
	return n
}

// janitor ends exchanges whose response never came on any stream (a POST
// stream closed by the server without the response, to be resumed or not)
// once twice the response timeout has passed.
func (p *Proxy) janitor(ctx context.Context) {
	defer close(p.janitorDone)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if p.cfg.ResponseTimeout > 0 {
				// A call in flight for longer than twice the timeout was
				// there before every sighting it could need.
				p.forgetMaybeAnswered(now.Add(-2*p.cfg.ResponseTimeout), now.Add(-4*p.cfg.ResponseTimeout))
				p.rec.Expire(now.Add(-2*p.cfg.ResponseTimeout), tap.ErrTimeout, now)
			}
			p.metrics.SetInflight(p.rec.Len())
		}
	}
}

// forgetMaybeAnswered drops unrecorded the calls in flight that came
// before before, of the sessions that got a message too large to record of
// unknown id since the call came: it may have been their answer, and
// recording them as unanswered (a timeout, or unknown at a stop) could make
// a false finding. It forgets what no call in flight can need any more:
// sightings before keep.
func (p *Proxy) forgetMaybeAnswered(before, keep time.Time) {
	p.bigMu.Lock()
	defer p.bigMu.Unlock()
	if len(p.bigSeen) == 0 {
		return
	}
	p.rec.ForgetIf(func(session string, at time.Time) bool {
		seen, ok := p.bigSeen[session]
		return ok && at.Before(before) && !seen.Before(at)
	})
	for s, seen := range p.bigSeen {
		if seen.Before(keep) {
			delete(p.bigSeen, s)
		}
	}
}

// exchange is one HTTP request through the proxy.
type exchange struct {
	start   time.Time
	session string // from the request; for initialize, from the response
	scope   uint64
	client  string // clientInfo of an initialize in the body
	keys    []tap.Key

	mu          sync.Mutex
	status      int
	headers     time.Time // when the upstream's headers came
	upstreamErr error
	timedOut    atomic.Bool
	untapped    atomic.Bool // the answer is compressed: the proxy cannot read it
	// bigAnswer is set when the exchange's stream carried a message too
	// large to record whose id could not be read: the calls of the POST
	// still pending when the stream ends were answered by it, as far as
	// the proxy can tell.
	bigAnswer atomic.Bool
	stop      context.CancelCauseFunc
	timer     *time.Timer
	// connected is set once the transport has a connection for the
	// upstream request (httptrace GotConn): from then on some of the
	// request may have reached the upstream. Until then nothing did.
	connected atomic.Bool
	// cut is set when a stop cut the exchange (Cut).
	cut atomic.Bool
	// stream is set for a GET of a streamable HTTP session (with its
	// Mcp-Session-Id): a stream of the session that the server may use
	// for its own requests, which the client keeps open for as long as
	// the session lives.
	stream bool
}

type exchangeKey struct{}

// ServeHTTP relays one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{start: time.Now(), session: r.Header.Get("Mcp-Session-Id")}
	// Only a GET of a streamable HTTP session is a stream OnlyStreamsOpen
	// may close: a GET without the session header is the 2024-11-05
	// HTTP+SSE transport's stream, on which the answers to its calls come
	// (their POSTs answered 202, unrecorded), and a stop must not cut an
	// answer due on it (rev19p).
	ex.stream = r.Method == http.MethodGet && ex.session != ""
	if ex.session == "" {
		ex.scope = p.scope.Add(1)
	}
	if r.Method == http.MethodPost && r.Body != nil && r.Body != http.NoBody {
		p.takeRequestBody(r, ex)
	}
	ctx := context.WithValue(r.Context(), exchangeKey{}, ex)
	if len(ex.keys) > 0 {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(httptrace.GotConnInfo) { ex.connected.Store(true) },
		})
	}
	ctx, stop := context.WithCancelCause(ctx)
	ex.stop = stop
	defer stop(nil)
	p.liveMu.Lock()
	if p.cutting {
		ex.cut.Store(true)
		stop(errStopped)
	} else {
		p.live[ex] = struct{}{}
		p.handlers.Add(1)
		defer func() {
			p.liveMu.Lock()
			delete(p.live, ex)
			p.liveMu.Unlock()
			p.handlers.Done()
		}()
	}
	p.liveMu.Unlock()
	if len(ex.keys) > 0 && p.cfg.ResponseTimeout > 0 {
		ex.timer = time.AfterFunc(p.cfg.ResponseTimeout, func() {
			if ex.bigAnswer.Load() {
				// A message too large to record, of unknown id, came on
				// this stream: it may have answered these calls.
				p.rec.Forget(ex.keys)
			}
			if p.rec.Pending(ex.keys) > 0 {
				ex.timedOut.Store(true)
				stop(errResponseTimeout)
			}
		})
		defer ex.timer.Stop()
	}
	// ReverseProxy panics with http.ErrAbortHandler when a stream breaks
	// after its headers went out: the exchange still ends here.
	defer p.finish(r, ex)
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// takeRequestBody reads a POST body to record its messages, then puts the
// same bytes back for the upstream. A body over the bound streams through
// unrecorded.
func (p *Proxy) takeRequestBody(r *http.Request, ex *exchange) {
	max := p.cfg.MaxMessageBytes
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if len(body) > max || err != nil {
		// Too big, or the client's body broke off: relay what came and
		// the rest as they are.
		rest := r.Body
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), errReader{err}, rest), rest}
		if len(body) > max {
			p.metrics.Unrecorded(metrics.UnrecordedOversized)
		}
		return
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	msgs, perr := tap.Parse(body)
	if perr != nil {
		p.metrics.Unrecorded(metrics.UnrecordedInvalid)
	}
	for i := range msgs {
		if c := tap.ClientInfo(&msgs[i]); c != "" {
			ex.client = c
		}
	}
	ex.keys = p.rec.FromClient(ex.session, ex.scope, msgs, ex.start)
	if ex.client != "" && ex.session != "" {
		p.rec.SetClient(ex.session, ex.client)
	}
}

// errReader returns err once, or EOF when err is nil.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	ex, _ := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if ex == nil {
		return nil
	}
	ex.mu.Lock()
	ex.status, ex.headers = resp.StatusCode, time.Now()
	ex.mu.Unlock()
	req := resp.Request
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" && ex.session == "" && ex.client != "" {
		// The initialize response names the session it opens.
		p.rec.SetClient(sid, ex.client)
	}
	if req.Method == http.MethodDelete && ex.session != "" && resp.StatusCode < 300 {
		p.rec.EndSession(ex.session, tap.ErrCanceled, time.Now())
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		// Relayed as it is; the proxy does not decode behind the client.
		ex.untapped.Store(true)
		return nil
	}
	switch {
	case resp.Body == nil || resp.Body == http.NoBody:
	case mt == "text/event-stream":
		b := &tapBody{rc: resp.Body, p: p, ex: ex, sse: &tap.SSE{Max: p.cfg.MaxMessageBytes}}
		b.sse.Big = b.tooBig
		resp.Body = b
	case mt == "application/json":
		resp.Body = &tapBody{rc: resp.Body, p: p, ex: ex}
	}
	return nil
}

func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if ex != nil {
		ex.mu.Lock()
		ex.upstreamErr = err
		ex.mu.Unlock()
	}
	switch {
	case ex != nil && ex.timedOut.Load():
		w.WriteHeader(http.StatusGatewayTimeout)
	case errors.Is(err, context.Canceled):
		// The client went away: nobody reads an answer.
	default:
		p.log.Warn("upstream failed", "method", r.Method, "path", r.URL.Path, "err", err)
		w.WriteHeader(http.StatusBadGateway)
	}
}

// finish ends the exchange: requests it carried that got no response are
// recorded with the reason, unless their stream may still be resumed.
func (p *Proxy) finish(r *http.Request, ex *exchange) {
	now := time.Now()
	ex.mu.Lock()
	status, headers, upErr := ex.status, ex.headers, ex.upstreamErr
	ex.mu.Unlock()
	var upstream time.Duration
	if !headers.IsZero() {
		upstream = headers.Sub(ex.start)
	}
	p.metrics.Request(r.Method, status, upstream)
	if len(ex.keys) == 0 {
		return
	}
	if status == http.StatusAccepted || ex.untapped.Load() {
		// A POST of requests answered 202 is the 2024-11-05 HTTP+SSE
		// transport: the answers come on a GET stream this proxy cannot
		// tie to the session. Recording the calls without them would
		// report outcomes that nobody lost.
		for range p.rec.Forget(ex.keys) {
			p.metrics.Unrecorded(metrics.UnrecordedUnpaired)
		}
		return
	}
	if ex.bigAnswer.Load() {
		// The stream carried a message too large to record whose id
		// could not be read: the calls it may have answered are not
		// recorded, however the stream ended. Recorded as timeouts by the
		// janitor, or with the break that came after their answer, they
		// would read as calls nobody answered (adv23's D2).
		p.rec.Forget(ex.keys)
		return
	}
	reason := ""
	switch {
	case upErr != nil && !ex.connected.Load():
		// No connection was made (refused, DNS, TLS handshake, dial
		// timeout), whatever ended the wait: nothing of the request left
		// the proxy. A failure on a connection it got, even a kept-alive
		// one that was already dead, may have delivered the request.
		reason = tap.ErrNotSent
	case ex.cut.Load():
		// The stop's grace ran out with the call in flight: the client's
		// request was cut, as docs/proxy.md ("Stopping") says.
		reason = tap.ErrCanceled
	case ex.timedOut.Load():
		reason = tap.ErrTimeout
	case r.Context().Err() != nil:
		reason = tap.ErrCanceled
	case upErr != nil:
		reason = transportError(upErr)
	case status >= 300:
		reason = "http_" + strconv.Itoa(status)
	case status == 0:
		reason = tap.ErrConnectionReset
	}
	if reason == "" {
		// The upstream ended the stream cleanly without the response: the
		// client may resume it on another stream; the janitor ends it if
		// nothing comes.
		return
	}
	n := p.rec.Fail(ex.keys, reason, now)
	if ex.cut.Load() {
		p.cutCalls.Add(int64(n))
	}
}

// transportError names what broke an upstream request.
func transportError(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return tap.ErrTimeout
	case errors.Is(err, context.Canceled):
		return tap.ErrCanceled
	}
	return tap.ErrConnectionReset
}

// tapBody passes an upstream response body through and hands a copy of its
// messages to the recorder: each SSE event as it completes, a JSON body at
// its end.
type tapBody struct {
	rc  io.ReadCloser
	p   *Proxy
	ex  *exchange
	sse *tap.SSE // nil for a JSON body
	buf []byte   // a JSON body so far; its first tap.PrefixBytes once big
	big bool     // the JSON body passed the bound
}

func (b *tapBody) Read(q []byte) (int, error) {
	n, err := b.rc.Read(q)
	if n > 0 {
		if b.sse != nil {
			oversized := b.sse.Oversized
			b.sse.Feed(q[:n], b.message)
			if b.sse.Oversized > oversized {
				b.p.metrics.Unrecorded(metrics.UnrecordedOversized)
			}
		} else if !b.big {
			if len(b.buf)+n > b.p.cfg.MaxMessageBytes {
				// Only its start is kept, to read its id from.
				b.big = true
				if len(b.buf) < tap.PrefixBytes {
					b.buf = append(b.buf, q[:min(n, tap.PrefixBytes-len(b.buf))]...)
				}
				b.buf = bytes.Clone(b.buf[:min(len(b.buf), tap.PrefixBytes)])
				b.p.metrics.Unrecorded(metrics.UnrecordedOversized)
			} else {
				b.buf = append(b.buf, q[:n]...)
			}
		}
	}
	switch {
	case err == io.EOF && b.sse == nil && !b.big:
		b.message(b.buf)
		b.buf = nil
	case err == io.EOF && b.sse == nil:
		// A JSON body is the answer to the POST's requests: the one its
		// id names, or all of them when it is not read (a batch, or the
		// id after the result).
		if id, ok, other := tap.ResponseID(b.buf); ok {
			b.p.rec.Unrecordable(b.ex.keys, b.ex.session, b.ex.scope, id)
		} else if !other {
			b.p.rec.Forget(b.ex.keys)
		}
		b.buf = nil
	case err != nil && err != io.EOF:
		b.ex.mu.Lock()
		if b.ex.upstreamErr == nil {
			b.ex.upstreamErr = err
		}
		b.ex.mu.Unlock()
	}
	return n, err
}

// tooBig takes the start of an SSE event too large to record: the call
// its id names is answered, and not recorded.
func (b *tapBody) tooBig(prefix []byte) {
	id, ok, other := tap.ResponseID(prefix)
	switch {
	case ok:
		b.p.rec.Unrecordable(b.ex.keys, b.ex.session, b.ex.scope, id)
		return
	case other:
		return // a server request or notification: it answers nothing
	}
	b.ex.bigAnswer.Store(true)
	if b.ex.session != "" && len(b.ex.keys) == 0 {
		// A GET stream of the session (or a POST without calls).
		b.p.bigMu.Lock()
		b.p.bigSeen[b.ex.session] = time.Now()
		b.p.bigMu.Unlock()
	}
}

func (b *tapBody) message(data []byte) {
	if len(bytes.TrimSpace(data)) == 0 {
		return
	}
	msgs, err := tap.Parse(data)
	if err != nil {
		b.p.metrics.Unrecorded(metrics.UnrecordedInvalid)
	}
	b.p.rec.FromServerOn(b.ex.keys, b.ex.session, b.ex.scope, msgs, time.Now())
}

func (b *tapBody) Close() error { return b.rc.Close() }

// bufferPool reuses the copy buffers of the reverse proxy, which would
// otherwise allocate 32 KiB per response.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

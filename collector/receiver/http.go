package receiver

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// Handler returns the HTTP handler of /v1/traces and /v1/calls.
func (rc *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", rc.traces)
	mux.HandleFunc("POST /v1/calls", rc.calls)
	return mux
}

// fail answers a refused request. Retryable refusals carry Retry-After;
// refusals before the body was read close the connection, so that an
// unread body is not waited for.
func (rc *Receiver) fail(w http.ResponseWriter, src metrics.Source, e *refusal, asProto bool) {
	rc.logRejected(e.logKind(), src, "", e.reason, strconv.Itoa(e.status)+" "+e.msg)
	if e.retryable() {
		w.Header().Set("Retry-After", strconv.Itoa(rc.cfg.RetryAfterSeconds))
		if e.reason == metrics.RejectOverloaded {
			rc.rejected(src, e.reason, 1)
		}
	} else if !e.counted {
		rc.rejected(src, e.reason, 1)
	}
	if e.status == http.StatusRequestTimeout || e.reason == metrics.RejectOverloaded || e.status == http.StatusRequestEntityTooLarge {
		w.Header().Set("Connection", "close")
	}
	if asProto {
		// OTLP/HTTP carries errors as a google.rpc.Status; its message is
		// what matters to a person reading a client's log.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	// http.Error's answer, with its length: refuseBody flushes it before
	// it reads on, and a sender reads it whole then, not at the end of
	// a chunked body once the reading is done.
	body := e.msg + "\n"
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	io.WriteString(w, body)
}

// refuseBody answers a request refused by body (too large, overloaded,
// too slow), then, but for a body too slow (408), reads and drops what the
// sender goes on sending of it, for at most lingerTime and the most bytes
// a request may take, before the connection is closed: a sender that
// writes its body before it reads the answer (Go's net/http client, and
// the OpenTelemetry SDK's exporter through it) otherwise has its writes
// fail on a connection closed with bytes unread ("broken pipe", which the
// exporter retries), and can lose the answer, which RFC 9112 section 9.6
// has a server avoid by reading on. Found by flk23: on a loaded machine a
// 50 MB body declared and refused 413 got "broken pipe" instead.
func (rc *Receiver) refuseBody(w http.ResponseWriter, r *http.Request, src metrics.Source, e *refusal, asProto bool) {
	ctl := http.NewResponseController(w)
	linger := e.status != http.StatusRequestTimeout && r.ContentLength != 0 && ctl.EnableFullDuplex() == nil
	rc.fail(w, src, e, asProto)
	if !linger {
		return
	}
	if ctl.Flush() != nil {
		return
	}
	ctl.SetReadDeadline(time.Now().Add(min(lingerTime, rc.cfg.BodyTimeout)))
	io.CopyN(io.Discard, r.Body, compressedLimit(rc.cfg.MaxBodyBytes))
}

// lingerTime bounds how long the rest of a refused body is read
// (refuseBody).
const lingerTime = 5 * time.Second

// authenticate returns the tenant of an ingest request, or answers it: 401
// without a known credential, 403 for a credential that may not ingest or
// a tenant header naming another tenant. Nothing is read, stored or
// counted for a refused request.
func (rc *Receiver) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	p, ok := rc.auth().Request(r)
	if !ok {
		rc.rlog.Warn("auth_failure", "ingest request refused: missing or unknown credential",
			"remote", r.RemoteAddr, "path", r.URL.Path, "has_authorization", r.Header.Get("Authorization") != "")
		w.Header().Set("Connection", "close")
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcpaudit"`)
		http.Error(w, cmp.Or(access.Repeated(r.Header.Values("Authorization")), "missing or unknown bearer token"), http.StatusUnauthorized)
		return "", false
	}
	if !p.Can(access.ScopeIngest) {
		w.Header().Set("Connection", "close")
		http.Error(w, "credential "+p.Name+" may not send calls (no ingest scope)", http.StatusForbidden)
		return "", false
	}
	if err := access.Conflict(p, r); err != nil {
		w.Header().Set("Connection", "close")
		http.Error(w, err.Error(), http.StatusForbidden)
		return "", false
	}
	return p.Tenant, true
}

// body reads a request body, decompressing gzip, up to the size limit,
// within the body timeout and the bytes in flight. The bytes it holds are
// released by the returned function, once the request is done with.
func (rc *Receiver) body(w http.ResponseWriter, r *http.Request) ([]byte, func(), *refusal) {
	none := func() {}
	if overMemory(rc.cfg.MemorySoftLimit) {
		return nil, none, newRefusal(503, "the collector is near its memory limit; retry later", metrics.RejectOverloaded)
	}
	gz := false
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz = true
	default:
		return nil, none, newRefusal(415, "unsupported Content-Encoding "+strconv.Quote(enc)+": send gzip or nothing", metrics.RejectDecodeError)
	}
	// A declared length over the limit is refused before a byte is read
	// (compressedLimit: what a gzip body within the limit can take).
	if r.ContentLength > compressedLimit(rc.cfg.MaxBodyBytes) {
		return nil, none, newRefusal(413, fmt.Sprintf("body larger than the limit: %d bytes declared, more than %d (serve.receiver.max_body_bytes)", r.ContentLength, rc.cfg.MaxBodyBytes), metrics.RejectTooLarge)
	}
	ctl := http.NewResponseController(w)
	defer ctl.SetReadDeadline(time.Time{})
	body := &waitReader{r: r.Body, deadline: ctl.SetReadDeadline, left: rc.cfg.BodyTimeout}
	var src io.Reader = body
	held := &holding{b: rc.inflight}
	fail := func(re *refusal) ([]byte, func(), *refusal) {
		held.release()
		return nil, none, re
	}
	// read counts the compressed bytes taken from the body, to say where
	// a damaged gzip stream stops (gzip reads ahead through its own
	// buffer: the damage is in the last few KiB before the count).
	var read *countReader
	if gz {
		// The compressed bytes are bounded as a declared length is: zero
		// padding after the last member, or empty members, decompress to
		// nothing and would otherwise be read without end.
		read = &countReader{r: body, max: compressedLimit(rc.cfg.MaxBodyBytes)}
		zr, err := newGzipBody(read)
		if err != nil {
			if re := readRefusal(err, rc.cfg.BodyTimeout); re != nil {
				return fail(re)
			}
			return fail(newRefusal(400, "cannot read gzip body: "+err.Error(), metrics.RejectDecodeError))
		}
		defer zr.Close()
		src = zr
	}
	size := int64(0)
	if !gz && r.ContentLength > 0 {
		size = r.ContentLength
	}
	b, err := rc.readCounted(src, size, held, rc.bodyBuffer())
	// unzipped: the last read was of a gzip stream.
	unzipped := gz
	// layers counts the gzip layers unwrapped, Content-Encoding's
	// included: a body holds as many with the header as without it
	// (adv22: three were taken with it, refused without).
	layers := 0
	if gz {
		layers = 1
	}
	for ; err == nil && len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b; layers++ {
		// A gzip body sent without Content-Encoding (curl --data-binary of
		// a .gz file), or a .gz file sent with it (gzip inside gzip): the
		// capture decoder would unwrap it without any limit, so it is
		// unwrapped here, under the same one, and a few layers at most.
		if layers == maxGzipLayers {
			return fail(newRefusal(400, fmt.Sprintf("body is gzip inside gzip more than %d layers deep (Content-Encoding's included)", maxGzipLayers), metrics.RejectDecodeError))
		}
		var zr *gzipBody
		unzipped = true
		read = &countReader{r: bytes.NewReader(b)}
		if zr, err = newGzipBody(read); err == nil {
			b, err = rc.readCounted(zr, 0, held, nil)
		}
	}
	switch {
	case errors.Is(err, errCompressedTooLarge):
		return fail(newRefusal(413, fmt.Sprintf("body larger than the limit: more than %d compressed bytes (serve.receiver.max_body_bytes %d, with room for gzip's framing)", compressedLimit(rc.cfg.MaxBodyBytes), rc.cfg.MaxBodyBytes), metrics.RejectTooLarge))
	case errors.Is(err, errTooLarge):
		after := ""
		if unzipped {
			// A plain body was told "after decompression" too (adv22).
			after = " after decompression"
		}
		return fail(newRefusal(413, fmt.Sprintf("body larger than %d bytes%s (serve.receiver.max_body_bytes)", rc.cfg.MaxBodyBytes, after), metrics.RejectTooLarge))
	case errors.Is(err, errInFlight):
		return fail(newRefusal(429, fmt.Sprintf("the collector holds %d bytes of requests in flight, its limit (serve.receiver.max_in_flight_bytes); retry later", rc.inflight.Used()), metrics.RejectOverloaded))
	case err != nil:
		if re := readRefusal(err, rc.cfg.BodyTimeout); re != nil {
			return fail(re)
		}
		if unzipped && isGzipDamage(err) {
			return fail(newRefusal(400, fmt.Sprintf("cannot read the gzip body: the compressed stream is cut short or damaged (%v), by compressed byte %d; nothing of the request was taken: send it whole again", err, read.n), metrics.RejectDecodeError))
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// The connection ended before the body did (the sender killed,
			// a proxy cutting it): said with how far it came (adv48: the
			// answer was "cannot read body: unexpected EOF" alone).
			return fail(newRefusal(400, cutBody(body.n, r.ContentLength), metrics.RejectDecodeError))
		}
		return fail(newRefusal(400, "cannot read body: "+err.Error(), metrics.RejectDecodeError))
	}
	return b, held.release, nil
}

// waitReader reads a request's body with the body timeout as a budget of
// the time spent waiting for its bytes: the time the server spends on them
// between reads (decompressing, copying) is not the client's. One deadline
// for the whole body counted that time too: on a loaded machine a gzip
// bomb, whose few kilobytes had arrived at once, was answered 408 instead
// of 413 while the server decompressed it. A body trickling in still uses
// the budget up, waiting.
type waitReader struct {
	r        io.Reader
	deadline func(time.Time) error
	left     time.Duration
	// n counts the bytes read, as they came on the connection (before
	// any decompression).
	n int64
}

// cutBody is why a body that ended early (n bytes read, declared
// by Content-Length, or -1 when chunked) was refused.
func cutBody(n, declared int64) string {
	if declared >= 0 {
		return fmt.Sprintf("cannot read body: it ended after %d of the %d bytes declared (Content-Length): the sender stopped or was cut off; nothing of the request was taken: send it whole again", n, declared)
	}
	return fmt.Sprintf("cannot read body: it ended after %d bytes, before the last chunk of its chunked encoding: the sender stopped or was cut off; nothing of the request was taken: send it whole again", n)
}

func (w *waitReader) Read(p []byte) (int, error) {
	if w.left <= 0 {
		return 0, os.ErrDeadlineExceeded
	}
	start := time.Now()
	w.deadline(start.Add(w.left))
	n, err := w.r.Read(p)
	w.n += int64(n)
	w.left -= time.Since(start)
	// Cleared between reads: over HTTP/2 a read deadline is a timer that
	// runs while the handler works, and once fired it closes the body.
	w.deadline(time.Time{})
	return n, err
}

// compressedLimit is the most bytes a body of at most max bytes takes
// gzipped: stored (level 0) deflate blocks add 5 bytes to every 64 KiB,
// and each member a header and trailer of 18 bytes or more; a 64th of max
// and 64 bytes leave room for those and a few members. (max + 64 refused
// a body of exactly max bytes gzipped at level 0: found by review.)
func compressedLimit(max int64) int64 { return max + max/64 + 64 }

// countReader counts the bytes read through it, and refuses to read more
// than max of them when max is set.
type countReader struct {
	r   io.Reader
	n   int64
	max int64
}

// errCompressedTooLarge is a gzip body's compressed bytes past the limit.
var errCompressedTooLarge = errors.New("compressed body too large")

func (c *countReader) Read(p []byte) (int, error) {
	if c.max > 0 {
		if c.n >= c.max {
			// At the limit: a body that ends here is whole.
			var one [1]byte
			n, err := c.r.Read(one[:])
			if n > 0 {
				err = errCompressedTooLarge
			}
			return 0, err
		}
		if left := c.max - c.n; int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// gzipBody reads the members of a gzip stream one after another, as a
// gzip.Reader does, and takes zero bytes after the last as its end: GNU
// gzip ignores them ("trailing zero bytes ignored"), and some tools pad a
// file to a block. Any other byte after a member that does not begin
// another is the gzip.ErrHeader a gzip.Reader gives.
type gzipBody struct {
	zr *gzip.Reader
	// br is the compressed stream: a gzip.Reader reads an io.ByteReader
	// without reading ahead of it, so what follows a member is here.
	br *bufio.Reader
}

func newGzipBody(r io.Reader) (*gzipBody, error) {
	br := bufio.NewReader(r)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, err
	}
	zr.Multistream(false)
	return &gzipBody{zr: zr, br: br}, nil
}

func (g *gzipBody) Read(p []byte) (int, error) {
	for {
		n, err := g.zr.Read(p)
		if err != io.EOF {
			return n, err
		}
		if n > 0 {
			return n, nil // the member's end is read again next time
		}
		next, err := g.br.Peek(1)
		switch {
		case err == io.EOF:
			return 0, io.EOF
		case err != nil:
			return 0, err
		case next[0] == 0:
			return 0, g.zeros()
		}
		if err := g.zr.Reset(g.br); err != nil {
			return 0, err
		}
		g.zr.Multistream(false)
	}
}

// zeros reads the rest of the stream, which must be zero bytes: io.EOF
// at its end, gzip.ErrHeader at a byte that is not zero.
func (g *gzipBody) zeros() error {
	for {
		c, err := g.br.ReadByte()
		if err != nil {
			return err
		}
		if c != 0 {
			return gzip.ErrHeader
		}
	}
}

// Close closes the member being read.
func (g *gzipBody) Close() error { return g.zr.Close() }

// maxGzipLayers bounds the gzip layers unwrapped in a body, its
// Content-Encoding's included.
const maxGzipLayers = 2

// decodeCost is what one byte of a request costs in memory until the
// request is answered, counted against the bytes in flight: the body, the
// line or document the decoder holds, the parsed values and the copies the
// calls keep. Measured on 14 MiB records: about four times the body.
const decodeCost = 4

// holding is the share of the bytes in flight one request holds.
type holding struct {
	b    *budget
	n    int64
	once bool
}

func (h *holding) take(n int64) bool {
	if !h.b.take(n) {
		return false
	}
	h.n += n
	return true
}

func (h *holding) release() {
	if !h.once {
		h.once = true
		h.b.give(h.n)
	}
}

// maxPooledBody is the largest body buffer kept for the next request: a
// rare large request does not hold its memory after it is answered.
const maxPooledBody = 4 << 20

// bodyBuffer returns a buffer for a request's body, empty, from the pool
// or nil.
func (rc *Receiver) bodyBuffer() []byte {
	if p, ok := rc.bodies.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

// recycleBody gives the body buffer of a request back to the pool once
// nothing refers to it any more: no call taken from it, no decoded value
// and no error holds any of its bytes.
func (rc *Receiver) recycleBody(b []byte) {
	if cap(b) > 0 && cap(b) <= maxPooledBody {
		rc.bodies.Put(&b)
	}
}

var (
	errInFlight = errors.New("bytes in flight at the limit")
	errTooLarge = errors.New("too large")
)

// readCounted reads all of r, up to the body limit, taking from the bytes
// in flight as the bytes arrive (decodeCost per byte): a request that
// would pass them stops with errInFlight. A client holds only what it has
// sent, whatever length it declared. size, when known, sizes the buffer
// up to 1 MiB at once. buf, if not nil, is a buffer to read into.
func (rc *Receiver) readCounted(r io.Reader, size int64, held *holding, buf []byte) ([]byte, error) {
	const chunk = 64 << 10
	if want := int(min(size, 1<<20) + chunk); cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	buf = buf[:0]
	reserved := int64(0) // body bytes covered
	for {
		if int64(len(buf)) > rc.cfg.MaxBodyBytes {
			return nil, errTooLarge
		}
		if need := int64(len(buf) + chunk); need > reserved {
			if !held.take((need - reserved) * decodeCost) {
				return nil, errInFlight
			}
			reserved = need
		}
		buf = slices.Grow(buf, chunk)
		n, err := r.Read(buf[len(buf) : len(buf)+chunk])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) > rc.cfg.MaxBodyBytes {
				return nil, errTooLarge
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readRefusal turns a body that stopped arriving into 408.
func readRefusal(err error, timeout time.Duration) *refusal {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return newRefusal(408, fmt.Sprintf("the body did not arrive within %s (serve.receiver.body_timeout)", timeout), metrics.RejectTimeout)
	}
	return nil
}

// CallsResponse is the answer to POST /v1/calls.
type CallsResponse struct {
	// Accepted counts the records acknowledged: stored now or before.
	Accepted int `json:"accepted"`
	// New counts those stored for the first time; the others were stored
	// by an earlier request (a re-sent batch).
	New      int `json:"new"`
	Rejected int `json:"rejected"`
	// Ignored counts the records of other methods than tools/call
	// (initialize, tools/list...): read, counted and not kept, as the
	// capture format says of them and analyze counts them.
	Ignored int `json:"ignored"`
	// Errors names each rejected record (the first 100) and why.
	Errors []string `json:"errors,omitempty"`
	// Warned counts the warnings about records taken all the same: a name
	// given twice, a member of the wrong type (docs/api.md, "Members read
	// leniently").
	Warned int `json:"warned,omitempty"`
	// Warnings names the first of each kind for each field (the first
	// 100): the line, the field, its byte offset and what was read.
	Warnings []string `json:"warnings,omitempty"`
	// Source is the stream the records were taken on.
	Source string `json:"source"`
}

// callTypes are the content types /v1/calls takes. curl --data-binary
// sends application/x-www-form-urlencoded unless told otherwise: its body
// is taken as NDJSON too.
var callTypes = []string{"", "application/json", "application/x-ndjson", "application/ndjson", "application/jsonl",
	"application/x-jsonlines", "application/json-seq", "application/x-www-form-urlencoded"}

// callsSource names the source of a request of call records: what the
// poster says, else its address.
func callsSource(r *http.Request) (string, error) {
	name, from := r.Header.Get(SourceHeader), SourceHeader
	if name == "" {
		name, from = r.URL.Query().Get("source"), "parameter source"
	}
	if name == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return "calls:" + host, nil
	}
	if why := badSourceName(name); why != "" {
		return "", fmt.Errorf("%s: %s", from, why)
	}
	return "calls:" + name, nil
}

// taker checks, admits, masks and reads the calls of one request, and
// keeps the account of what it rejected.
type taker struct {
	rc     *Receiver
	src    metrics.Source
	tenant string
	reader *dialect.Reader
	recs   []*audit.Record
	srcs   []string
	// wheres names each record taken in errors.
	wheres []string
	// sourceOK is the last source name checkSource passed: the calls of a
	// request mostly come on one source, checked once.
	sourceOK string
}

func (rc *Receiver) newTaker(src metrics.Source, tenant string) *taker {
	return &taker{rc: rc, src: src, tenant: tenant, reader: rc.readers.Get().(*dialect.Reader)}
}

func (t *taker) done() { t.rc.readers.Put(t.reader) }

// take takes one decoded call from source, read by its decoder from its
// one parse (known is what the decoder knew beside its JSON); where names
// it in errors.
func (t *taker) take(rec *audit.Record, known dialect.Known, source, where string) *recordError {
	c := rec.Call
	if err := t.rc.check(c, where, t.timeField()); err != nil {
		return err
	}
	if source != t.sourceOK {
		if err := t.rc.checkSource(source, where); err != nil {
			return err
		}
		t.sourceOK = source
	}
	// The tenant is the credential's, whatever the payload said.
	c.Tenant = t.tenant
	if t.rc.Admit != nil {
		if err := t.rc.Admit(c.Tenant, c.Server); err != nil {
			return reject(metrics.RejectServerLimit, "%s: %v", where, err)
		}
	}
	if t.rc.Redactor.Call(c) > 0 {
		// Masked: the call is read again from what is stored, so that its
		// reading (targets, keys, messages) holds no secret either.
		rec = t.reader.ReadKnown(c, known)
	}
	// Stored, a call names the sender it came on, as status and the
	// watermark's held_by name it: its place in the request (where) has
	// served its errors and means nothing once the request is answered.
	// One string per source and request, shared by its calls.
	c.Source = source
	t.recs = append(t.recs, rec)
	t.srcs = append(t.srcs, source)
	t.wheres = append(t.wheres, where)
	return nil
}

// timeField names the field a call's time came from.
func (t *taker) timeField() string {
	if t.src == metrics.SourceCallsHTTP {
		return "time"
	}
	return "start_time_unix_nano"
}

func (rc *Receiver) calls(w http.ResponseWriter, r *http.Request) {
	src := metrics.SourceCallsHTTP
	tenant, ok := rc.authenticate(w, r)
	if !ok {
		return
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); !slices.Contains(callTypes, ct) {
		rc.fail(w, src, newRefusal(415, "Content-Type "+strconv.Quote(ct)+
			" is not call records: send application/x-ndjson or application/json", metrics.RejectDecodeError), false)
		return
	}
	source, err := callsSource(r)
	if err != nil {
		rc.fail(w, src, newRefusal(400, err.Error(), metrics.RejectInvalidText), false)
		return
	}
	b, release, re := rc.body(w, r)
	if re != nil {
		rc.refuseBody(w, r, src, re, false)
		return
	}
	defer release()
	// The decoder reads the body through a buffer of its own and the
	// records it makes copy what they keep (the ReaderAt it may take is
	// used for OTLP only, refused here), so the body can serve the next
	// request once this one is answered.
	defer rc.recycleBody(b)
	if len(bytes.TrimSpace(b)) == 0 {
		rc.fail(w, src, newRefusal(400, "empty body: send call records, one JSON object per line or a JSON array", metrics.RejectDecodeError), false)
		return
	}
	dec, err := capture.NewDecoder(bytes.NewReader(b), "body")
	if err != nil {
		rc.fail(w, src, newRefusal(400, err.Error(), metrics.RejectDecodeError), false)
		return
	}
	if dec.Format() == capture.FormatOTLP {
		rc.fail(w, src, newRefusal(400, "this is OTLP: send it to /v1/traces", metrics.RejectInvalidJSON), false)
		return
	}
	resp := CallsResponse{Source: source}
	defer func() {
		if rc.metrics != nil {
			rc.metrics.IngestIgnored(src, dec.Ignored)
		}
		rc.logIgnored(src, tenant, dec.Ignored)
	}()
	refuse := func(err error, reason metrics.RejectReason) {
		extra := []any{"source", source}
		if re := (*capture.RecordError)(nil); errors.As(err, &re) && re.Value != "" {
			extra = append(extra, "value", loggedValue(re.Value))
		}
		rc.logRejected("rejected_record", src, tenant, reason, err.Error(), extra...)
		resp.Rejected++
		if len(resp.Errors) < maxRejectsReported {
			resp.Errors = append(resp.Errors, err.Error())
		}
		rc.rejected(src, reason, 1)
	}
	tk := rc.newTaker(src, tenant)
	defer tk.done()
	for {
		c, err := dec.NextRecord(tk.reader)
		if err == io.EOF {
			break
		}
		if err != nil {
			// Counted under the Kind set where the record was rejected,
			// as analyze counts it.
			kind := capture.RejectKind(err)
			if kind == "" {
				rc.fail(w, src, newRefusal(400, err.Error(), metrics.RejectDecodeError), false)
				return
			}
			refuse(err, metrics.RejectReason(kind))
			continue
		}
		if rerr := tk.take(c, dialect.Known{}, source, c.Call.Source); rerr != nil {
			refuse(rerr, rerr.reason)
		}
	}
	tk.retained(func(_ string, rerr *recordError) { refuse(rerr, rerr.reason) })
	resp.Ignored = dec.Ignored
	if len(tk.recs) == 0 {
		if resp.Rejected == 0 {
			resp.Errors = append(resp.Errors, "no call record: the body holds no tools/call exchange")
		}
		writeJSON(w, http.StatusBadRequest, resp)
		return
	}
	stored, re := rc.ingest(r.Context(), src, tk.recs, tk.srcs)
	if re != nil {
		rc.fail(w, src, re, false)
		return
	}
	resp.Accepted, resp.New = len(tk.recs), stored
	// Warnings are told and counted once the records they are about are
	// acknowledged: a request refused (and sent again) is not counted twice.
	for kind, n := range dec.WarnCounts() {
		resp.Warned += n
		if rc.metrics != nil {
			rc.metrics.IngestWarned(src, kind, n)
		}
	}
	for i := range dec.Warnings() {
		w := &dec.Warnings()[i]
		rc.logWarned(src, tenant, w, "source", source)
		resp.Warnings = append(resp.Warnings, w.Error())
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (rc *Receiver) traces(w http.ResponseWriter, r *http.Request) {
	src := metrics.SourceOTLPHTTP
	tenant, ok := rc.authenticate(w, r)
	if !ok {
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var asProto bool
	switch ct {
	case "application/x-protobuf", "application/protobuf":
		asProto = true
	case "application/json":
	default:
		rc.fail(w, src, newRefusal(415, "Content-Type must be application/x-protobuf or application/json, not "+strconv.Quote(ct), metrics.RejectDecodeError), false)
		return
	}
	b, release, re := rc.body(w, r)
	if re != nil {
		rc.refuseBody(w, r, src, re, asProto)
		return
	}
	defer release()
	resp, re := rc.exportBody(r.Context(), src, tenant, b, asProto)
	if re != nil {
		rc.fail(w, src, re, asProto)
		return
	}
	var out []byte
	var err error
	if asProto {
		out, err = resp.MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
	} else {
		out, err = resp.MarshalJSON()
		w.Header().Set("Content-Type", "application/json")
	}
	if err != nil {
		// The response is a count and a message made here: it cannot fail
		// to encode; if it did, the calls are stored and the sender may
		// send them again without harm.
		rc.fail(w, src, newRefusal(503, "cannot encode the response; the calls are stored, send them again", metrics.RejectDecodeError), asProto)
		return
	}
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// partialSuccess turns the rejections of an OTLP request into its
// answer.
func partialSuccess(rejected []otlp.RejectedSpan) ptraceotlp.ExportResponse {
	resp := ptraceotlp.NewExportResponse()
	if n := len(rejected); n > 0 {
		ps := resp.PartialSuccess()
		ps.SetRejectedSpans(int64(n))
		var msgs []string
		for i, r := range rejected {
			if i == 5 {
				msgs = append(msgs, fmt.Sprintf("and %d more", n-5))
				break
			}
			msgs = append(msgs, r.Error())
		}
		ps.SetErrorMessage(strings.Join(msgs, "; "))
	}
	return resp
}

// exportBody decodes and exports the OTLP body b (protobuf or JSON), and
// gives the body back for the next request once it is no longer read.
func (rc *Receiver) exportBody(ctx context.Context, src metrics.Source, tenant string, b []byte, asProto bool) (ptraceotlp.ExportResponse, *refusal) {
	req := ptraceotlp.NewExportRequest()
	// pre are the spans that would not decode, when the request is taken
	// without them (salvageProto, salvageJSON).
	var pre []otlp.RejectedSpan
	if asProto {
		// wire is the body, or the body rebuilt without the spans that
		// hold values nested too deep (salvageDeepProto), which pre names.
		wire := b
		var deep *refusal
		if err := protoValueDepth(b, rc.cfg.MaxDepth); err != nil {
			deep = newRefusal(400, "cannot take OTLP protobuf: "+err.Error(), metrics.RejectTooDeep)
			var ok bool
			if wire, pre, ok = salvageDeep(ctx, b, rc.cfg.MaxDepth); !ok {
				return ptraceotlp.ExportResponse{}, deep
			}
		}
		if m, ok := otlp.CheckProto(wire, rc.cfg.MaxAttributes); ok {
			// Read from the body, as OTLP/gRPC is; the records share
			// nothing with it.
			resp, re := rc.exportWire(ctx, src, tenant, m, pre)
			rc.recycleBody(b)
			return resp, re
		}
		if err := req.UnmarshalProto(wire); err != nil {
			var bad []otlp.RejectedSpan
			var re *refusal
			if req, bad, re = undecoded(ctx, wire, true, deep, err); re != nil {
				return ptraceotlp.ExportResponse{}, re
			}
			pre = append(pre, bad...)
		}
	} else {
		limit := jsonBodyDepth(rc.cfg.MaxDepth)
		d, at, end := jsonScan(b, limit)
		// wire is the body, or the body rebuilt without the spans nested
		// too deep (salvageDeepJSON), which pre names.
		wire := b
		var deep *refusal
		if d > limit {
			deep = newRefusal(400, "cannot take OTLP JSON: "+jsonDeepReason(limit, at), metrics.RejectTooDeep)
			var ok bool
			if wire, pre, ok = salvageDeepJ(ctx, b, limit); !ok {
				return ptraceotlp.ExportResponse{}, deep
			}
			// Nothing follows the request (salvageDeepJSON checks it).
			end = -1
		}
		// pdata decodes the first JSON value and ignores what follows it:
		// a second document (OTLP JSON lines, as a file exporter writes
		// them) would be acknowledged and dropped.
		if end >= 0 && len(bytes.TrimSpace(b[end:])) > 0 {
			return ptraceotlp.ExportResponse{}, newRefusal(400, fmt.Sprintf("cannot decode OTLP JSON: more after the request at byte offset %d; a request carries one ExportTraceServiceRequest (send one document a request, or read a file of them with mcpaudit analyze)", end), metrics.RejectDecodeError)
		}
		if err := req.UnmarshalJSON(wire); err != nil {
			var bad []otlp.RejectedSpan
			var re *refusal
			if req, bad, re = undecoded(ctx, wire, false, deep, err); re != nil {
				return ptraceotlp.ExportResponse{}, re
			}
			pre = append(pre, bad...)
		}
	}
	// pdata copies what it decodes (strings, bytes), protobuf and JSON
	// alike: the body can serve the next request now.
	rc.recycleBody(b)
	return rc.exportCtx(ctx, src, tenant, req, pre)
}

// jsonFault says why body b, which pdata could not decode (err), is not
// OTLP JSON: where its JSON syntax breaks, as a byte offset in the body
// (pdata's decoder counts bytes within the window of the body it quotes,
// "error found in #10 byte of ...|...|", which is no place in the body),
// else pdata's error (valid JSON that is not OTLP).
func jsonFault(b []byte, err error) string {
	var se *json.SyntaxError
	if e := json.Unmarshal(b, new(json.RawMessage)); !errors.As(e, &se) {
		return err.Error()
	}
	if se.Offset >= int64(len(b)) {
		return fmt.Sprintf("%s: the body is cut short at byte offset %d", se, len(b))
	}
	msg := fmt.Sprintf("%s at byte offset %d", se, se.Offset-1) // Offset counts the bad byte
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != ' ' && r != '\t' && r != '\r' && r != '\n' }); i >= 0 && b[i] != '{' && b[i] != '[' {
		msg += " (not JSON: is it protobuf, sent as application/json? Send it as application/x-protobuf)"
	}
	return msg
}

// isGzipDamage reports whether err is a gzip stream's fault (cut short, a
// checksum or header that does not match), not the connection's.
func isGzipDamage(err error) bool {
	var c flate.CorruptInputError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.As(err, &c)
}

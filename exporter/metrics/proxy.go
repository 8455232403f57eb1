package metrics

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Metric names of the capture relays (mcpaudit proxy and mcpaudit wrap) and
// of the forwarder that ships their call records.
const (
	// ProxyRequestsTotal counts HTTP requests relayed by the proxy, by HTTP
	// method and status class.
	ProxyRequestsTotal = "mcpaudit_proxy_requests_total"
	// ProxyUpstreamSeconds is the time from a request's arrival to the
	// upstream's response headers, as the proxy saw it.
	ProxyUpstreamSeconds = "mcpaudit_proxy_upstream_seconds"
	// ProxyRecordsTotal counts tools/call exchanges recorded, by server and
	// outcome.
	ProxyRecordsTotal = "mcpaudit_proxy_records_total"
	// ProxyUnrecordedTotal counts messages relayed but not recorded, by reason.
	ProxyUnrecordedTotal = "mcpaudit_proxy_unrecorded_total"
	// ProxyInflightCalls is the number of tools/call requests waiting for
	// their response.
	ProxyInflightCalls = "mcpaudit_proxy_inflight_calls"
	// ProxyForwardRecordsTotal counts call records by what became of them
	// on the way to the collector.
	ProxyForwardRecordsTotal = "mcpaudit_proxy_forward_records_total"
	// ProxyForwardRequestsTotal counts POSTs to the collector by result.
	ProxyForwardRequestsTotal = "mcpaudit_proxy_forward_requests_total"
	// ProxyBufferBytes is the size of the records buffered on disk, waiting
	// for the collector.
	ProxyBufferBytes = "mcpaudit_proxy_buffer_bytes"
)

// Reasons a relayed message is not recorded.
const (
	UnrecordedOversized = "oversized"    // larger than the relay's message bound
	UnrecordedInvalid   = "invalid_json" // not a JSON-RPC message
	UnrecordedUnpaired  = "unpaired"     // a call whose answer the relay cannot see
)

// UnrecordedReasons lists the reasons of ProxyUnrecordedTotal.
var UnrecordedReasons = []string{UnrecordedOversized, UnrecordedInvalid, UnrecordedUnpaired}

// Results of ProxyForwardRecordsTotal.
const (
	ForwardBuffered = "buffered" // written to the disk buffer
	ForwardSent     = "sent"     // accepted by the collector
	ForwardRejected = "rejected" // refused by the collector as malformed, kept aside on disk
	ForwardDropped  = "dropped"  // not buffered: the buffer was full or failed
	// ForwardUnjournaled counts calls not written to the journal of calls
	// in flight, past its bound: their records are still buffered when
	// their exchanges end, but a crash while they are in flight loses them.
	ForwardUnjournaled = "unjournaled"
)

// ForwardResults lists the results of ProxyForwardRecordsTotal.
var ForwardResults = []string{ForwardBuffered, ForwardSent, ForwardRejected, ForwardDropped, ForwardUnjournaled}

// Results of ProxyForwardRequestsTotal.
const (
	PostOK       = "ok"       // 2xx
	PostRetry    = "retry"    // 429, 5xx or a transport error: retried later
	PostRejected = "rejected" // another 4xx: the batch is set aside
)

// PostResults lists the results of ProxyForwardRequestsTotal.
var PostResults = []string{PostOK, PostRetry, PostRejected}

// ProxyUpstreamBuckets span a local MCP server to a slow remote one.
var ProxyUpstreamBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Label names of the relay metrics.
const (
	LabelMethod = "method"
	LabelStatus = "status"
)

// ProxyFamilies lists every metric of Relay. They are apart from Families
// because the collector does not export them.
var ProxyFamilies = []Family{
	{ProxyRequestsTotal, "counter", "HTTP requests relayed by the proxy, by method and status class.",
		[]string{LabelMethod, LabelStatus}},
	{ProxyUpstreamSeconds, "histogram", "Time from a request's arrival at the proxy to the upstream's response headers.",
		[]string{LabelMethod}},
	{ProxyRecordsTotal, "counter", "tools/call exchanges recorded, by outcome.",
		[]string{LabelServer, LabelOutcome}},
	{ProxyUnrecordedTotal, "counter", "Messages relayed but not recorded, by reason.",
		[]string{LabelReason}},
	{ProxyInflightCalls, "gauge", "tools/call requests relayed and waiting for their response.",
		nil},
	{ProxyForwardRecordsTotal, "counter", "Call records by what became of them on the way to the collector.",
		[]string{LabelResult}},
	{ProxyForwardRequestsTotal, "counter", "POSTs of call records to the collector, by result.",
		[]string{LabelResult}},
	{ProxyBufferBytes, "gauge", "Bytes of call records buffered on disk for the collector.",
		nil},
}

// Relay holds the metrics of a capture relay and its forwarder. Every
// method is safe for concurrent use and does nothing on a nil *Relay.
type Relay struct {
	requests   *prometheus.CounterVec
	upstream   *prometheus.HistogramVec
	records    *prometheus.CounterVec
	unrecorded *prometheus.CounterVec
	inflight   prometheus.Gauge
	forward    *prometheus.CounterVec
	posts      *prometheus.CounterVec
	buffer     prometheus.Gauge
}

// NewRelay registers the relay metrics on reg, every bounded series at zero.
// servers are the server label values of the records counter.
func NewRelay(reg prometheus.Registerer, servers ...string) (*Relay, error) {
	f := func(name string) Family {
		for _, f := range ProxyFamilies {
			if f.Name == name {
				return f
			}
		}
		panic("metrics: no relay family " + name)
	}
	cv := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: f(name).Help}, f(name).Labels)
	}
	r := &Relay{
		requests: cv(ProxyRequestsTotal),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ProxyUpstreamSeconds,
			Help: f(ProxyUpstreamSeconds).Help, Buckets: ProxyUpstreamBuckets}, f(ProxyUpstreamSeconds).Labels),
		records:    cv(ProxyRecordsTotal),
		unrecorded: cv(ProxyUnrecordedTotal),
		inflight:   prometheus.NewGauge(prometheus.GaugeOpts{Name: ProxyInflightCalls, Help: f(ProxyInflightCalls).Help}),
		forward:    cv(ProxyForwardRecordsTotal),
		posts:      cv(ProxyForwardRequestsTotal),
		buffer:     prometheus.NewGauge(prometheus.GaugeOpts{Name: ProxyBufferBytes, Help: f(ProxyBufferBytes).Help}),
	}
	for _, c := range []prometheus.Collector{r.requests, r.upstream, r.records, r.unrecorded, r.inflight, r.forward, r.posts, r.buffer} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("cannot register relay metrics: %w", err)
		}
	}
	for _, s := range servers {
		for _, o := range []audit.Outcome{audit.OutcomeOK, audit.OutcomeToolError, audit.OutcomeProtocolError, audit.OutcomeNoResponse} {
			r.records.WithLabelValues(s, string(o))
		}
	}
	for _, v := range UnrecordedReasons {
		r.unrecorded.WithLabelValues(v)
	}
	for _, v := range ForwardResults {
		r.forward.WithLabelValues(v)
	}
	for _, v := range PostResults {
		r.posts.WithLabelValues(v)
	}
	return r, nil
}

// httpMethod bounds the method label to the methods MCP uses.
func httpMethod(m string) string {
	switch m {
	case "GET", "POST", "DELETE":
		return m
	}
	return Other
}

// statusClass is "2xx".."5xx", or "error" when no response came.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "error"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Request counts one relayed HTTP request; status 0 means the upstream gave
// no response. upstream is the time to its headers, 0 when unknown.
func (r *Relay) Request(method string, status int, upstream time.Duration) {
	if r == nil {
		return
	}
	m := httpMethod(method)
	r.requests.WithLabelValues(m, statusClass(status)).Inc()
	if upstream > 0 {
		r.upstream.WithLabelValues(m).Observe(upstream.Seconds())
	}
}

// Record counts one recorded exchange.
func (r *Relay) Record(server string, o audit.Outcome) {
	if r == nil {
		return
	}
	r.records.WithLabelValues(server, outcomeLabel(o)).Inc()
}

// Unrecorded counts a message relayed but not recorded.
func (r *Relay) Unrecorded(reason string) {
	if r == nil {
		return
	}
	if reason != UnrecordedOversized && reason != UnrecordedUnpaired {
		reason = UnrecordedInvalid
	}
	r.unrecorded.WithLabelValues(reason).Inc()
}

// SetInflight sets the number of exchanges waiting for their response.
func (r *Relay) SetInflight(n int) {
	if r == nil {
		return
	}
	r.inflight.Set(float64(n))
}

// Forward counts n records reaching result (one of ForwardResults).
func (r *Relay) Forward(result string, n int) {
	if r == nil || n == 0 {
		return
	}
	r.forward.WithLabelValues(result).Add(float64(n))
}

// Post counts one POST to the collector by result (one of PostResults).
func (r *Relay) Post(result string) {
	if r == nil {
		return
	}
	r.posts.WithLabelValues(result).Inc()
}

// SetBufferBytes sets the size of the disk buffer.
func (r *Relay) SetBufferBytes(n int64) {
	if r == nil {
		return
	}
	r.buffer.Set(float64(n))
}

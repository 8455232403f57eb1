package store

import (
	"hash/maphash"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// StoredResponse returns the sum of the response c holds as a store keeps
// it (its result, JSON-RPC error and error data, after redaction), and
// whether c says enough of its response to be compared: a call record
// that responded, or a span whose result was recorded. A span that
// recorded only an error code, or no payload, does not, as for the
// detector (audit.Call.RespSum). A store computes it, on both calls, only
// when it skips a call whose id it holds: two responses under one call id
// that differ are an id collision, one sent again is a duplicate.
//
// The sum is seeded per process, as audit.ResponseSum's is: it compares
// two calls read in one process and is never stored.
func StoredResponse(c *audit.Call) (uint64, bool) {
	if !c.Responded || (c.Result == nil && FromSpan(c)) {
		return 0, false
	}
	var data []byte
	if c.Error != nil {
		data = c.Error.Data
	}
	return audit.ResponseSum(c, jsonSum(c.Result), jsonSum(data)), true
}

// FromSpan reports whether c was read from an OTLP span. serve stores a
// call with the name of its sender, and an OTLP sender's name begins
// "otlp:" (otlp.SourceOf) where a poster's begins "calls:"; calls stored
// before, and calls read of files, name their place instead:
// "SOURCE:resourceSpans[i].scopeSpans[j].spans[k]" for a span,
// "SOURCE:LINE" for a call record.
func FromSpan(c *audit.Call) bool {
	return strings.HasPrefix(c.Source, otlpSender) || strings.Contains(c.Source, ":resourceSpans[")
}

// otlpSender begins the name of every OTLP sender (otlp.SourceOf); this
// package does not import collector/otlp, which would bring pdata to
// every store.
const otlpSender = "otlp:"

// jsonSum is canon.Sum of the JSON text raw, 0 for none; text that does
// not parse (a result masked whole is a JSON string, so only a damaged
// row holds such text) sums by its bytes.
func jsonSum(raw []byte) uint64 {
	if raw == nil {
		return 0
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(raw)
	if err != nil {
		return maphash.Bytes(rawSeed, raw) | 1
	}
	return canon.Sum(v)
}

// rawSeed seeds jsonSum for text that is not JSON.
var rawSeed = maphash.MakeSeed()

package dialect

import (
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/valyala/fastjson"
)

// Revisions are what a call says about its document's revision and hash
// before and after it, as far as the payload shows them.
type Revisions struct {
	Before, After         string
	HashBefore, HashAfter string
}

// beforeKeys, hashBeforeKeys, afterKeys and hashAfterKeys name the fields
// that carry them, in the order they are looked for. Thegram sends base_revision and expected_hash and
// answers rev and hash; Oddlynew answers revision in a result or in each
// provider call's outcome.
var (
	beforeKeys     = []string{"base_revision", "baseRevision", "expected_revision"}
	hashBeforeKeys = []string{"expected_hash", "expectedHash"}
	afterKeys      = []string{"rev", "revision", "new_revision"}
	hashAfterKeys  = []string{"hash", "content_hash", "contentHash"}
)

// revisionParsers serve RevisionsOf: a timeline reads the revisions of
// every call it holds (up to 10,000), and decoding each payload into maps
// doubled what a timeline cost (docs/benchmarks.md).
var revisionParsers fastjson.ParserPool

// RevisionsOf reads what call c's payloads say of document doc's
// revision and content hash, before and after it: the values as text
// ("null" for an explicit null), empty where the payload does not say. The
// investigation page and the timeline's call events (the API, mcpaudit
// timeline) show them. A payload that is not a JSON object says nothing;
// of a key given twice, the first is read.
func RevisionsOf(c *audit.Call, doc string) Revisions {
	var rv Revisions
	p := revisionParsers.Get()
	defer revisionParsers.Put(p)
	if args, err := p.ParseBytes(c.Arguments); err == nil && args.Type() == fastjson.TypeObject {
		rv.Before = first(args, beforeKeys)
		rv.HashBefore = first(args, hashBeforeKeys)
	}
	res, err := p.ParseBytes(c.Result)
	if err != nil || res.Type() != fastjson.TypeObject {
		return rv
	}
	sc := object(res.Get("structuredContent"))
	if sc == nil {
		return rv
	}
	for _, m := range []*fastjson.Value{sc, object(sc.Get("result"))} {
		if m == nil || !about(m, doc) {
			continue
		}
		if v := first(m, afterKeys); v != "" {
			rv.After, rv.HashAfter = v, first(m, hashAfterKeys)
			return rv
		}
	}
	// Oddlynew: the outcome of the write provider call on doc (the last,
	// when several name it).
	outcomes := sc.Get("outcomes")
	if outcomes == nil || outcomes.Type() != fastjson.TypeArray {
		return rv
	}
	for _, o := range outcomes.GetArray() {
		var v *fastjson.Value
		if o := object(o); o != nil {
			v = object(o.Get("value"))
		}
		if v != nil && about(v, doc) {
			if a := first(v, afterKeys); a != "" {
				rv.After, rv.HashAfter = a, first(v, hashAfterKeys)
			}
		}
	}
	return rv
}

// object returns v when it is a JSON object, else nil.
func object(v *fastjson.Value) *fastjson.Value {
	if v == nil || v.Type() != fastjson.TypeObject {
		return nil
	}
	return v
}

// about reports whether m describes doc, or names no document at all.
func about(m *fastjson.Value, doc string) bool {
	for _, k := range []string{"path", "documentId"} {
		if v := m.Get(k); v != nil && v.Type() == fastjson.TypeString {
			return string(v.GetStringBytes()) == doc
		}
	}
	return true
}

// first returns the first of keys present in m as text; null reads "null".
func first(m *fastjson.Value, keys []string) string {
	for _, k := range keys {
		v := m.Get(k)
		if v == nil {
			continue
		}
		switch v.Type() {
		case fastjson.TypeNull:
			return "null"
		case fastjson.TypeString:
			return string(v.GetStringBytes())
		case fastjson.TypeNumber:
			// An integer as written: a revision past 2^53 is exact, as
			// the detector reads it, not the nearest float64.
			if n := v.String(); integer(n) {
				return n
			}
			return strconv.FormatFloat(v.GetFloat64(), 'f', -1, 64)
		case fastjson.TypeTrue:
			return "true"
		case fastjson.TypeFalse:
			return "false"
		}
	}
	return ""
}

// integer reports whether a JSON number's text is an integer literal.
func integer(n string) bool {
	n = strings.TrimPrefix(n, "-")
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}

package web

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Revisions are what a call says about its document's revision and hash
// before and after it, as far as the payload shows them.
type Revisions struct {
	Before, After         string
	HashBefore, HashAfter string
}

// revisionKeys and hashKeys name the fields that carry them, in the order
// they are looked for. Thegram sends base_revision and expected_hash and
// answers rev and hash; Oddlynew answers revision in a result or in each
// provider call's outcome.
var (
	beforeKeys     = []string{"base_revision", "baseRevision", "expected_revision"}
	hashBeforeKeys = []string{"expected_hash", "expectedHash"}
	afterKeys      = []string{"rev", "revision", "new_revision"}
	hashAfterKeys  = []string{"hash", "content_hash", "contentHash"}
)

// revisionsOf reads the revisions of a call on document doc.
func revisionsOf(r *audit.Record, doc string) Revisions {
	var rv Revisions
	var args map[string]any
	if json.Unmarshal(r.Call.Arguments, &args) == nil {
		rv.Before = first(args, beforeKeys)
		rv.HashBefore = first(args, hashBeforeKeys)
	}
	var res map[string]any
	if json.Unmarshal(r.Call.Result, &res) != nil {
		return rv
	}
	sc, _ := res["structuredContent"].(map[string]any)
	if sc == nil {
		return rv
	}
	for _, m := range []map[string]any{sc, asMap(sc["result"])} {
		if m == nil || !about(m, doc) {
			continue
		}
		if v := first(m, afterKeys); v != "" {
			rv.After, rv.HashAfter = v, first(m, hashAfterKeys)
			return rv
		}
	}
	// Oddlynew: the outcome of the write provider call on doc.
	outcomes, _ := sc["outcomes"].([]any)
	for _, o := range outcomes {
		v := asMap(asMap(o)["value"])
		if v != nil && about(v, doc) {
			if a := first(v, afterKeys); a != "" {
				rv.After, rv.HashAfter = a, first(v, hashAfterKeys)
			}
		}
	}
	return rv
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// about reports whether m describes doc, or names no document at all.
func about(m map[string]any, doc string) bool {
	for _, k := range []string{"path", "documentId"} {
		if v, ok := m[k].(string); ok {
			return v == doc
		}
	}
	return true
}

// first returns the first of keys present in m as text; null reads "null".
func first(m map[string]any, keys []string) string {
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			continue
		}
		switch v := v.(type) {
		case nil:
			return "null"
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			return strconv.FormatBool(v)
		}
	}
	return ""
}

// redactor hides the values of configured keys in JSON.
type redactor map[string]bool

func newRedactor(keys []string) redactor {
	r := redactor{}
	for _, k := range keys {
		r[strings.ToLower(strings.TrimSpace(k))] = true
	}
	return r
}

// Redacted is what a hidden value reads as.
const Redacted = "[redacted]"

// show returns raw JSON indented for reading, with the configured keys'
// values replaced by Redacted at any depth. Text that is not JSON is
// returned as is when nothing is to be redacted, and withheld otherwise.
func (r redactor) show(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	if len(r) == 0 {
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") == nil {
			return b.String()
		}
		return string(raw)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return "(not JSON; withheld because redaction is configured)"
	}
	out, err := json.MarshalIndent(r.walk(v), "", "  ")
	if err != nil {
		return "(cannot be shown)"
	}
	return string(out)
}

func (r redactor) walk(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if r[strings.ToLower(k)] {
				v[k] = Redacted
			} else {
				v[k] = r.walk(x)
			}
		}
	case []any:
		for i := range v {
			v[i] = r.walk(v[i])
		}
	}
	return v
}

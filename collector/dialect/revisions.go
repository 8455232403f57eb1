package dialect

import (
	"encoding/json"
	"strconv"

	"github.com/mcpaudit/mcpaudit/audit"
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

// RevisionsOf reads what call c's payloads say of document doc's
// revision and content hash, before and after it: the values as text
// ("null" for an explicit null), empty where the payload does not say. The
// investigation page and the timeline's call events (the API, mcpaudit
// timeline) show them.
func RevisionsOf(c *audit.Call, doc string) Revisions {
	var rv Revisions
	var args map[string]any
	if json.Unmarshal(c.Arguments, &args) == nil {
		rv.Before = first(args, beforeKeys)
		rv.HashBefore = first(args, hashBeforeKeys)
	}
	var res map[string]any
	if json.Unmarshal(c.Result, &res) != nil {
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

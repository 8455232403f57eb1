package web

import (
	"bytes"
	"encoding/json"
	"strings"
)

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

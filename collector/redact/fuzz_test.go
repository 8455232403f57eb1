package redact_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzJSON: no input makes the redactor panic; JSON stays JSON, redacting
// twice changes nothing more, and no value of a secret key survives.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{"password":"hunter2","path":"a.gram","content":"mail bob@example.com"}`,
		`{"content":[{"type":"text","text":"{\"token\":\"x\"}"}]}`,
		`[1,"4111 1111 1111 1111",{"auth":{"a":[1,2]}}]`,
		`"Bearer abcdefghijklmnop"`,
		`{"a":"\ud83d\ude00 \u0000 \\"}`,
	} {
		f.Add([]byte(s))
	}
	r := newRedactor(f, "fuzz-secret-key!")
	f.Fuzz(func(t *testing.T, in []byte) {
		out, _ := r.JSON(in)
		if json.Valid(in) && !json.Valid(out) {
			t.Fatalf("JSON in, not JSON out:\n in %q\nout %q", in, out)
		}
		again, n := r.JSON(out)
		if n != 0 || string(again) != string(out) {
			t.Fatalf("a second pass masked %d more:\n once %q\ntwice %q", n, out, again)
		}
		var v any
		if json.Unmarshal(out, &v) == nil {
			checkNoSecretKey(t, v)
		}
	})
}

// checkNoSecretKey fails when a password key holds anything but a mask.
func checkNoSecretKey(t *testing.T, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.EqualFold(k, "password") {
				if s, ok := e.(string); !ok || !strings.HasPrefix(s, "[redacted:") {
					t.Fatalf("password holds %#v after redaction", e)
				}
			}
			checkNoSecretKey(t, e)
		}
	case []any:
		for _, e := range x {
			checkNoSecretKey(t, e)
		}
	}
}

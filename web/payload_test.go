package web

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	f := func(keys []string, raw, want string) {
		t.Helper()
		got := strings.Join(strings.Fields(newRedactor(keys).show([]byte(raw))), "")
		if got != want {
			t.Errorf("show(%v, %s) = %s, want %s", keys, raw, got, want)
		}
	}
	f(nil, `{"a":1}`, `{"a":1}`)
	f(nil, `not json`, `notjson`)
	f([]string{"text", "Code"}, `{"path":"a","operations":[{"op":"append","text":"secret"}],"code":"x"}`,
		`{"code":"[redacted]","operations":[{"op":"append","text":"[redacted]"}],"path":"a"}`)
	f([]string{"text"}, `{"n":12345678901234567890}`, `{"n":12345678901234567890}`)
	f([]string{"text"}, `not json`, `(notJSON;withheldbecauseredactionisconfigured)`)
	f([]string{"text"}, ``, ``)
}

func TestConfigValidate(t *testing.T) {
	f := func(c Config, want string) {
		t.Helper()
		err := c.Validate()
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", c, err, want)
		}
	}
	f(NewDefaultConfig(), "")
	f(Config{BaseURL: "https://audit.example.com/mcp"}, "")
	f(Config{BaseURL: "audit.example.com"}, "base_url")
	f(Config{Redact: []string{"text", " "}}, "redact[1]")
	f(Config{PageSize: 5000}, "page_size")
}

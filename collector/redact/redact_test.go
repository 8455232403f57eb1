package redact_test

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

func newRedactor(t testing.TB, secret string) *redact.Redactor {
	t.Helper()
	r, err := redact.New(redact.NewDefaultConfig(), []byte(secret), "target_path")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// masks matches a mask; the tests replace each by M to compare shapes.
var masks = regexp.MustCompile(`\[redacted:[0-9a-f]{12}\]`)

func TestJSON(t *testing.T) {
	r := newRedactor(t, "k1")
	f := func(in, want string, wantN int) {
		t.Helper()
		out, n := r.JSON([]byte(in))
		got := masks.ReplaceAllString(string(out), "M")
		if got != want || n != wantN {
			t.Errorf("JSON(%s)\n got %s (%d masks)\nwant %s (%d)", in, got, n, want, wantN)
		}
		if !json.Valid(out) {
			t.Errorf("JSON(%s) = %s: not JSON", in, out)
		}
	}
	// Nothing secret: unchanged, byte for byte.
	f(`{"path":"ops/a.gram", "base_revision": 7, "content":"hello"}`, `{"path":"ops/a.gram", "base_revision": 7, "content":"hello"}`, 0)
	// Secret keys, whatever the value's type.
	f(`{"password":"hunter2","apiKey":12345,"auth":{"user":"x"},"client_secret":null}`, `{"password":"M","apiKey":"M","auth":"M","client_secret":"M"}`, 4)
	// The same key twice is masked twice.
	f(`{"token":"a1","token":"b2"}`, `{"token":"M","token":"M"}`, 2)
	// Secret text inside values, the rest of the text kept.
	f(`{"note":"call alice@example.com with Bearer abcdefgh12345678"}`, `{"note":"call M with Bearer M"}`, 2)
	f(`{"cmd":"curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig'"}`, `{"cmd":"curl -H 'Authorization: Bearer M'"}`, 1)
	f(`{"k":"sk-live-4eC39HqLyjWDarjtT1zdp7dc"}`, `{"k":"M"}`, 1)
	f(`{"dsn":"postgres://app:s3cr3tpw@db:5432/x"}`, `{"dsn":"postgres://app:M@db:5432/x"}`, 1)
	f(`{"cfg":"password=hunter2; user=bob"}`, `{"cfg":"password=M; user=bob"}`, 1)
	// Card numbers pass the Luhn check; other long numbers are kept.
	f(`{"card":"4111 1111 1111 1111","order":"4111 1111 1111 1112"}`, `{"card":"M","order":"4111 1111 1111 1112"}`, 1)
	// Kept keys stay, even when they look like secrets: the audit reads them.
	f(`{"path":"users/alice@example.com.gram","request_id":"r-1","planToken":"pt-1","target_path":"bob@example.com"}`,
		`{"path":"users/alice@example.com.gram","request_id":"r-1","planToken":"pt-1","target_path":"bob@example.com"}`, 0)
	// JSON text inside a string, as MCP results carry it.
	f(`{"content":[{"type":"text","text":"{\"password\":\"x\",\"rev\":3}"}]}`, `{"content":[{"type":"text","text":"{\"password\":\"M\",\"rev\":3}"}]}`, 1)
	// Arrays under a secret key are masked whole; under others walked.
	f(`{"tokens":["a","b"],"list":["bob@example.com",1]}`, `{"tokens":"M","list":["M",1]}`, 2)
	// Not JSON: masked whole.
	f(`{"password":`, `"M"`, 1)
	// Redaction is idempotent: masks are left as they are.
	once, _ := r.JSON([]byte(`{"password":"hunter2","note":"alice@example.com"}`))
	if twice, n := r.JSON(once); n != 0 || string(twice) != string(once) {
		t.Errorf("second pass changed %s into %s (%d masks)", once, twice, n)
	}
}

// TestMasksAreKeyed: equal values get equal masks and different values
// different ones under one secret; another secret gives other masks.
func TestMasksAreKeyed(t *testing.T) {
	a, b := newRedactor(t, "secret-a"), newRedactor(t, "secret-b")
	m := func(r *redact.Redactor, v string) string {
		out, _ := r.JSON([]byte(`{"password":"` + v + `"}`))
		return string(out)
	}
	if m(a, "x1") != m(a, "x1") || m(a, "x1") == m(a, "x2") || m(a, "x1") == m(b, "x1") {
		t.Fatalf("masks: a(x1)=%s a(x2)=%s b(x1)=%s", m(a, "x1"), m(a, "x2"), m(b, "x1"))
	}
}

// TestCall: a call's arguments, result, error and transport error are
// masked; its id no longer depends on the secret values nor on the
// redaction secret.
func TestCall(t *testing.T) {
	call := func() *audit.Call {
		args := []byte(`{"path":"a.gram","content":"mail bob@example.com","password":"hunter2"}`)
		c := &audit.Call{Server: "thegram", Session: "s", RPCID: "1", Time: time.Unix(1e9, 0), Tool: "gram_write",
			Arguments: args, Result: []byte(`{"token":"tok-123456"}`), Error: &audit.RPCError{Code: -32000, Message: "bad key sk-live-4eC39HqLyjWDarjtT1zdp7dc"},
			TransportError: "reset by alice@example.com"}
		c.ID = audit.StableID(c.Server, c.Session, c.RPCID, c.Time, c.Tool, canon.Bytes(args))
		return c
	}
	a, b := call(), call()
	raw := a.ID
	if n := newRedactor(t, "k1").Call(a); n != 5 {
		t.Fatalf("%d masks, want 5", n)
	}
	newRedactor(t, "k2").Call(b)
	for _, s := range []string{string(a.Arguments), string(a.Result), a.Error.Message, a.TransportError} {
		for _, secret := range []string{"bob@example.com", "hunter2", "tok-123456", "sk-live", "alice@"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q still holds %q", s, secret)
			}
		}
	}
	if a.ID == raw || a.ID != b.ID || a.Fingerprint != b.Fingerprint {
		t.Errorf("ids: raw %s, redacted %s and %s: want one id, not the raw one", raw, a.ID, b.ID)
	}
	if string(a.Arguments) == string(b.Arguments) {
		t.Errorf("the masks of two secrets are equal: %s", a.Arguments)
	}
	// A call without secrets keeps its id.
	c := call()
	c.Arguments, c.Result, c.Error, c.TransportError = []byte(`{"path":"a.gram"}`), nil, nil, ""
	id := c.ID
	if n := newRedactor(t, "k1").Call(c); n != 0 || c.ID != id {
		t.Errorf("a call without secrets: %d masks, id %s → %s", n, id, c.ID)
	}
}

func TestConfig(t *testing.T) {
	cfg := redact.NewDefaultConfig()
	cfg.Values = []string{"("}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "values[0]") {
		t.Fatalf("Validate: %v, want an error naming values[0]", err)
	}
	if r, err := redact.New(redact.Config{Off: true}, nil); r != nil || err != nil {
		t.Fatalf("off: %v %v, want nil", r, err)
	}
	var r *redact.Redactor // off: a nil redactor changes nothing
	if out, n := r.JSON([]byte(`{"password":"x"}`)); n != 0 || string(out) != `{"password":"x"}` {
		t.Fatal("a nil redactor masked")
	}
}

func BenchmarkJSON(b *testing.B) {
	r := newRedactor(b, "k")
	doc := []byte(`{"path":"team/notes/q3-plan.gram","request_id":"6f1c2a9e-4d3b-4c1a-9e8f-2b7d5a1c3e9f","base_revision":41,` +
		`"content":"## Q3 plan\n\nShip the audit collector, review retention, rotate the ingest tokens.\nOwners: platform team.\n"}`)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		r.JSON(doc)
	}
}

// BenchmarkCall masks the calls of a generated capture (both dialects,
// failures and retries; no secrets), as the receiver does before reading
// each call: the cost redaction adds per call on normal traffic.
func BenchmarkCall(b *testing.B) {
	c := capgen.Generate(capgen.Config{Seed: 3, Sessions: 2000, Span: 30 * time.Minute, AnomalyRate: 0.35})
	dec, err := capture.NewDecoder(bytes.NewReader(bytes.Join(c.Lines, []byte("\n"))), "bench")
	if err != nil {
		b.Fatal(err)
	}
	var calls []audit.Call
	for {
		cl, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err == nil {
			calls = append(calls, *cl)
		}
	}
	r := newRedactor(b, "k")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := calls[i%len(calls)]
		r.Call(&c)
	}
}

// TestCall_MaskedByRelay: a call whose arguments a relay masked under its
// own key (proxy or wrap with --collector) gets, at the collector, the id
// and fingerprint the raw call gets there: ids depend on neither key.
func TestCall_MaskedByRelay(t *testing.T) {
	args := []byte(`{"path":"a.gram","content":"mail bob@example.com","password":"hunter2"}`)
	call := func(args []byte) *audit.Call {
		c := &audit.Call{Server: "thegram", Session: "s", RPCID: "1", Time: time.Unix(1e9, 0), Tool: "gram_write", Arguments: args}
		c.ID = audit.StableID(c.Server, c.Session, c.RPCID, c.Time, c.Tool, canon.Bytes(args))
		return c
	}
	relayed, n := newRedactor(t, "relay-key").JSON(args)
	if n != 2 {
		t.Fatalf("the relay made %d masks, want 2: %s", n, relayed)
	}
	raw, viaRelay := call(args), call(relayed)
	collector := newRedactor(t, "collector-key")
	collector.Call(raw)
	collector.Call(viaRelay)
	if raw.ID != viaRelay.ID || raw.Fingerprint != viaRelay.Fingerprint {
		t.Errorf("id %s / fingerprint %s of the raw call, %s / %s of the call a relay masked: want the same",
			raw.ID, raw.Fingerprint, viaRelay.ID, viaRelay.Fingerprint)
	}
	if string(viaRelay.Arguments) != string(relayed) {
		t.Errorf("the collector changed the relay's masks: %s, want %s", viaRelay.Arguments, relayed)
	}
}

package conf

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

type inner struct {
	Window   time.Duration     `yaml:"window"`
	Lateness time.Duration     `yaml:"lateness"`
	Limit    int               `yaml:"limit"`
	Ratio    float64           `yaml:"ratio"`
	On       bool              `yaml:"on"`
	Tenants  map[string]string `yaml:"tenants"`
	Hook     func()            `yaml:"-"`
}

type tool struct {
	TargetArg string `yaml:"target_arg"`
	KeyArg    string `yaml:"key_arg"`
}

type sample struct {
	Name   string                     `yaml:"name"`
	Inner  inner                      `yaml:"inner"`
	Tools  map[string]map[string]tool `yaml:"tools"`
	Tags   []string                   `yaml:"tags"`
	Levels map[string]time.Duration   `yaml:"levels"`
}

func defaults() sample {
	return sample{Name: "x", Inner: inner{Window: 5 * time.Minute, Limit: 3, Ratio: 0.5}}
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestParseDuration(t *testing.T) {
	f := func(in string, want time.Duration) {
		t.Helper()
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	f("30d", 30*24*time.Hour)
	f("1d", 24*time.Hour)
	f("1d12h", 36*time.Hour)
	f("5m", 5*time.Minute)
	f("30s", 30*time.Second)
	f("500ms", 500*time.Millisecond)
	f("2w", 14*24*time.Hour)
	f("0", 0)
	f("90m", 90*time.Minute)
	f("1.5h", 90*time.Minute)
	f("250us", 250*time.Microsecond)
	f("-5m", -5*time.Minute) // read; Validate refuses it where it matters
	for _, bad := range []string{"", "1x", "d", "5 m", "1.5d", "forever"} {
		if _, err := ParseDuration(bad); err == nil || !strings.Contains(err.Error(), "want a duration such as 30d") {
			t.Errorf("ParseDuration(%q): error %v, want one naming the syntax", bad, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	f := func(d time.Duration, want string) {
		t.Helper()
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(want); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v back", want, back, err, d)
		}
	}
	f(30*24*time.Hour, "30d")
	f(time.Hour, "1h")
	f(90*time.Minute, "1h30m")
	f(200*time.Millisecond, "200ms")
	f(0, "0s")
	f(250*time.Microsecond, "250µs")
}

func TestExpand(t *testing.T) {
	get := env(map[string]string{"TOKEN": "s3cret", "EMPTY": "", "PORT": "9464"})
	f := func(in, want string, missing ...string) {
		t.Helper()
		got, miss, err := Expand(in, get)
		if err != nil || got != want || strings.Join(miss, ",") != strings.Join(missing, ",") {
			t.Errorf("Expand(%q) = %q, missing %v, %v; want %q, missing %v", in, got, miss, err, want, missing)
		}
	}
	f("plain", "plain")
	f("${TOKEN}", "s3cret")
	f("${env:TOKEN}", "s3cret")
	f(":${PORT}", ":9464")
	f("${NOPE:-fallback}", "fallback")
	f("${EMPTY:-fallback}", "fallback")
	f("${EMPTY}", "")
	f("a$$b", "a$b")
	f("pa$sword", "pa$sword")
	f("end$", "end$")
	f("${NOPE}-${ALSO_NOPE}", "-", "NOPE", "ALSO_NOPE")
	for _, bad := range []string{"${TOKEN", "${}", "${1X}", "${a b}"} {
		if _, _, err := Expand(bad, get); err == nil {
			t.Errorf("Expand(%q): want an error", bad)
		}
	}
}

func TestDistance(t *testing.T) {
	f := func(a, b string, want int) {
		t.Helper()
		if got := distance(a, b); got != want {
			t.Errorf("distance(%q, %q) = %d, want %d", a, b, got, want)
		}
	}
	f("", "", 0)
	f("latenes", "lateness", 1)
	f("verify_widow", "verify_window", 1)
	f("abc", "", 3)
	f("kitten", "sitting", 3)
}

func TestDecode(t *testing.T) {
	t.Run("values_over_defaults", func(t *testing.T) {
		got := defaults()
		pos, err := Decode([]byte(`
name: prod
inner:
  window: 1d
  ratio: 0.25
  tenants: {"${TOKEN}": acme}
tools:
  notes: {save: {target_arg: path}}
tags: [a, b]
levels: {acme: 30d}
`), &got, env(map[string]string{"TOKEN": "tok"}))
		if err != nil {
			t.Fatal(err)
		}
		want := defaults()
		want.Name = "prod"
		want.Inner.Window = 24 * time.Hour
		want.Inner.Ratio = 0.25
		want.Inner.Tenants = map[string]string{"tok": "acme"}
		want.Tools = map[string]map[string]tool{"notes": {"save": {TargetArg: "path"}}}
		want.Tags = []string{"a", "b"}
		want.Levels = map[string]time.Duration{"acme": 30 * 24 * time.Hour}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
		if pos["inner.window"] != 4 || pos.Line("inner.tenants.tok") != 6 || pos.Line("inner.lateness") != 3 {
			t.Errorf("positions %v", pos)
		}
	})
	t.Run("empty_file_keeps_defaults", func(t *testing.T) {
		got := defaults()
		if _, err := Decode([]byte("# nothing\n"), &got, nil); err != nil || !reflect.DeepEqual(got, defaults()) {
			t.Errorf("got %+v, %v", got, err)
		}
	})
	t.Run("every_error_at_once", func(t *testing.T) {
		got := defaults()
		_, err := Decode([]byte(`name: prod
inner:
  latenes: 3s
  window: 1x
  limit: lots
  on: maybe
  ratio: [1]
  tenants: {"${MCPAUDIT_TOKEN_ACME}": acme}
colours: red
tags: a
`), &got, env(nil))
		var es Errors
		if !errors.As(err, &es) {
			t.Fatalf("error %v is not Errors", err)
		}
		want := []string{
			`line 3: inner.latenes: unknown key (did you mean inner.lateness?)`,
			`line 4: inner.window: want a duration such as 30d, 1d12h, 5m, 30s or 500ms, not "1x"`,
			`line 5: inner.limit: want a whole number, not "lots"`,
			`line 6: inner.on: want true or false, not "maybe"`,
			`line 7: inner.ratio: want a single value, not a list`,
			`line 8: inner.tenants: environment variable MCPAUDIT_TOKEN_ACME is not set (set it, or give a default: ${MCPAUDIT_TOKEN_ACME:-value})`,
			`line 9: colours: unknown key; the sections are inner, levels, name, tags, tools`,
			`line 10: tags: want a list, not "a"`,
		}
		if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
			t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, e := range es {
			if strings.Contains(e.Msg, "time.Duration") || strings.Contains(e.Msg, "conf.") || strings.Contains(e.Msg, "!!") {
				t.Errorf("%v names a Go or YAML type", e)
			}
		}
	})
	t.Run("key_one_section_too_high", func(t *testing.T) {
		// A block copied without its parent section (docs showing
		// clickhouse: for serve.clickhouse:) names the section it belongs in.
		got := defaults()
		_, err := Decode([]byte("window: 5m\n"), &got, nil)
		want := `line 1: window: unknown key (did you mean inner.window? it belongs in section inner)`
		if err == nil || err.Error() != want {
			t.Errorf("error %v, want %s", err, want)
		}
	})
	t.Run("duplicate_key", func(t *testing.T) {
		got := defaults()
		_, err := Decode([]byte("name: a\nname: b\n"), &got, nil)
		if err == nil || err.Error() != "line 2: name: given twice (first on line 1)" {
			t.Errorf("error %v", err)
		}
	})
	t.Run("syntax_error", func(t *testing.T) {
		got := defaults()
		_, err := Decode([]byte("name: a\ninner: [\n"), &got, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "line ") || !strings.Contains(err.Error(), "not valid YAML") {
			t.Errorf("error %v, want the line and that it is not YAML", err)
		}
	})
	t.Run("section_given_a_value", func(t *testing.T) {
		got := defaults()
		_, err := Decode([]byte("inner: 5\n"), &got, nil)
		if err == nil || err.Error() != `line 1: inner: want a section of keys, not "5"` {
			t.Errorf("error %v", err)
		}
	})
}

func TestLocate(t *testing.T) {
	got := defaults()
	pos, err := Decode([]byte("name: a\ninner:\n  window: 2h\n  limit: 0\n"), &got, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := pos.Locate(errors.Join(
		errors.New("inner.limit: must be positive"),
		errors.New("inner.lateness: must not be negative"), // absent: its section's line
		errors.New("tools: required"),                      // absent section: no line
		errors.New("something without a path"),
	))
	want := []string{"something without a path", "tools: required", "line 2: inner.lateness: must not be negative", "line 4: inner.limit: must be positive"}
	if got := strings.Split(es.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if pos.Locate(nil) != nil {
		t.Error("Locate(nil) is not nil")
	}
}

// TestEncode_RoundTrip: what Encode writes, Decode reads back to the same
// value, over a value that differs from the defaults in every key.
func TestEncode_RoundTrip(t *testing.T) {
	v := sample{
		Name:   "prod: main", // needs quoting
		Inner:  inner{Window: 36 * time.Hour, Lateness: 1500 * time.Millisecond, Limit: 7, Ratio: 0.125, On: true, Tenants: map[string]string{"b": "2", "a": "1"}},
		Tools:  map[string]map[string]tool{"notes": {"save": {TargetArg: "path", KeyArg: "k"}}},
		Tags:   []string{"x", "y"},
		Levels: map[string]time.Duration{"acme": 30 * 24 * time.Hour},
	}
	b, err := Encode(&v)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"window: 1d12h", "lateness: 1s500ms", "levels: {acme: 30d}", "tenants: {a: \"1\", b: \"2\"}"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("encoded config lacks %q:\n%s", want, b)
		}
	}
	var back sample
	if _, err := Decode(b, &back, nil); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("round trip:\n%+v\nwant\n%+v\n%s", back, v, b)
	}
}

func TestKeys(t *testing.T) {
	d := defaults()
	ks := Keys(&d, func(t reflect.Type, name string) string { return t.Name() + "." + name })
	var got []string
	for _, k := range ks {
		got = append(got, k.Path+" | "+k.Type+" | "+k.Default+" | "+k.Doc)
	}
	want := []string{
		"name | string | x | sample.Name",
		"inner.window | duration | 5m | inner.Window",
		"inner.lateness | duration | 0s | inner.Lateness",
		"inner.limit | integer | 3 | inner.Limit",
		"inner.ratio | number | 0.5 | inner.Ratio",
		"inner.on | boolean | false | inner.On",
		"inner.tenants | map of names to strings |  | inner.Tenants",
		"tools | map of names to maps |  | sample.Tools",
		"tools.<name>.<name>.target_arg | string |  | tool.TargetArg",
		"tools.<name>.<name>.key_arg | string |  | tool.KeyArg",
		"tags | list of string |  | sample.Tags",
		"levels | map of names to durations |  | sample.Levels",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("keys:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSourceDocs reads the field comments of a real package of the module.
func TestSourceDocs(t *testing.T) {
	s := &SourceDocs{Root: "../..", Module: "github.com/mcpaudit/mcpaudit"}
	got := s.Doc(reflect.TypeFor[detect.Config](), "VerifyWindow")
	if !strings.HasPrefix(got, "How long an uncertain or unconfirmed write may stay pending") || !strings.HasSuffix(got, "Default 5m.") {
		t.Errorf("doc %q", got)
	}
	if s.Err != nil {
		t.Fatal(s.Err)
	}
	s.Doc(reflect.TypeFor[strings.Builder](), "buf")
	if s.Err == nil {
		t.Error("a package outside the module: want an error")
	}
}

// TestShareAsPercentage: a share key takes a fraction or a percentage; a
// number key that is not a share takes no percentage.
func TestShareAsPercentage(t *testing.T) {
	var s struct {
		Ratio Share   `yaml:"ratio"`
		Rate  float64 `yaml:"rate"`
	}
	if _, err := Decode([]byte("ratio: 5%\n"), &s, env(nil)); err != nil {
		t.Fatal(err)
	}
	if s.Ratio != 0.05 {
		t.Errorf("ratio: 5%% read as %v, want 0.05", s.Ratio)
	}
	if _, err := Decode([]byte("ratio: 0.25\n"), &s, env(nil)); err != nil || s.Ratio != 0.25 {
		t.Errorf("ratio: 0.25 read as %v, %v", s.Ratio, err)
	}
	_, err := Decode([]byte("ratio: 5 percent\nrate: 5%\n"), &s, env(nil))
	for _, want := range []string{`line 1: ratio: want a fraction such as 0.05 or a percentage such as 5%, not "5 percent"`, `line 2: rate: want a number, not "5%"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %s, got %v", want, err)
		}
	}
}

// TestDecode_SyntaxErrorLine: a YAML syntax error names the line it is on.
// yaml.v3 reports its parser's errors (a flow sequence or mapping left
// open, a key or node missing) with the line counted from 0, and its
// scanner's (a quote left open, a tab, a bad indicator) from 1: the
// parser's are moved one on. Found by op19 (D2): `api_listen: [a` on line
// 5 was reported on line 4.
func TestDecode_SyntaxErrorLine(t *testing.T) {
	f := func(yamlText string, wantLine int, wantMsg string) {
		t.Helper()
		var got struct {
			A any `yaml:"a"`
			B any `yaml:"b"`
			C any `yaml:"c"`
			D any `yaml:"d"`
			E any `yaml:"e"`
		}
		_, err := Decode([]byte(yamlText), &got, nil)
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 {
			t.Fatalf("%q: error %v, want one syntax error", yamlText, err)
		}
		if errs[0].Line != wantLine || !strings.Contains(errs[0].Msg, wantMsg) {
			t.Errorf("%q: line %d %q, want line %d %q", yamlText, errs[0].Line, errs[0].Msg, wantLine, wantMsg)
		}
	}
	// Parser errors (yaml.v3's parserc.go), counted from 0 by yaml.v3.
	f("a: 1\nb: 2\nc: 3\nd: 4\ne: [x\n", 5, "did not find expected ',' or ']'")
	f("a: 1\nb: [x,\n  y\nc: 3\n", 2, "did not find expected ',' or ']'")
	f("a: 1\nb: {x: 1\nc: 3\n", 2, "did not find expected ',' or '}'")
	f("a: 1\nb:\n  - x\n  y: 2\n", 3, "did not find expected '-' indicator")
	f("a: 1\nb:\n  c: 1\n d: 2\n", 4, "did not find expected key")
	f("a: 1\nb: 2\nc: [x, ]]\n", 3, "did not find expected key")
	f("a: 1\nb: !x!y 2\n", 2, "found undefined tag handle")
	// Where the context began on the first line, yaml.v3 names the line
	// of the problem, or none (it omits a line 0); at the end of the
	// stream, the last line.
	f("a: [x\n", 1, "did not find expected ',' or ']'")
	f("a: [x", 1, "did not find expected ',' or ']'")
	f("- a\nb: 1\n", 2, "did not find expected '-' indicator")
	f("]\n", 1, "did not find expected node content")
	// Scanner errors (scannerc.go), counted from 1 already.
	f("a: 1\nb: 2\nc: \"open\n", 3, "found unexpected end of stream")
	f("a: 1\nb: 2\nc: @x\n", 3, "found character that cannot start any token")
	f("a: 1\nb:\n\t- x\n", 3, "found character that cannot start any token")
}

// Package conf reads and writes mcpaudit's YAML configuration over Go
// structs with yaml tags: strictly, reporting every problem of a file at once
// with its line and key path and no Go type names, suggesting the nearest key
// for a misspelt one, expanding ${VAR} environment references, and with one
// duration syntax for every duration key. It also prints the effective
// configuration and lists every key for the reference documentation.
//
// The rules follow the OpenTelemetry Collector's confmap: unknown keys are
// errors, ${env:VAR} and ${VAR} are expanded in values after parsing (so an
// expanded value never changes the YAML structure), and $$ is a literal $.
// Durations use Prometheus' syntax ("30d", "1d12h", "5m", "30s", "500ms"),
// also accepting Go's ("1.5h", "250us"); sizes (Size) are bytes with an
// optional unit ("384MiB", "1GiB", "400MB").
package conf

import (
	"bytes"
	"encoding"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Error is one problem of a configuration file.
type Error struct {
	// Line is the 1-based line of the offending key or value; 0 when the
	// problem has no place in the file (a value taken from the defaults).
	Line int
	// Path is the key path, e.g. "detect.lateness".
	Path string
	// Msg says what is wrong and what is wanted.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in line order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Path < es[j].Path
	})
	return es
}

// Positions maps each key path of a decoded file to its line.
type Positions map[string]int

// Line returns the line of path or, when path itself is not in the file
// (a default that failed validation), of its nearest ancestor that is; 0 if
// none is.
func (p Positions) Line(path string) int {
	for path != "" {
		if l, ok := p[path]; ok {
			return l
		}
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// Locate turns validation errors into Errors with lines: each error's text
// must start with its key path and ": ", as every Validate of mcpaudit
// writes them. Errors joined with errors.Join are split.
func (p Positions) Locate(err error) Errors {
	if err == nil {
		return nil
	}
	var out Errors
	for _, e := range flatten(err) {
		msg := e.Error()
		path, rest, ok := strings.Cut(msg, ": ")
		if !ok || strings.ContainsAny(path, " \t") {
			out = append(out, &Error{Msg: msg})
			continue
		}
		out = append(out, &Error{Line: p.Line(path), Path: path, Msg: rest})
	}
	return out.sorted()
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Decode reads the YAML document data into out, a pointer to a struct that
// already holds the defaults: keys in the file replace them, keys absent keep
// them. It returns the line of every key path and, when anything is wrong,
// Errors listing all of it. Environment references are expanded with
// getenv (os.Getenv when nil).
func Decode(data []byte, out any, getenv func(string) (string, bool)) (Positions, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	pos := Positions{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return pos, Errors{syntaxError(err, data)}
	}
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return pos, fmt.Errorf("cannot decode config: want a pointer to a struct, not %T", out)
	}
	if len(doc.Content) == 0 {
		return pos, nil // an empty file: every default
	}
	d := &decoder{getenv: getenv, pos: pos}
	d.value(doc.Content[0], v.Elem(), "")
	if len(d.errs) > 0 {
		return pos, d.errs.sorted()
	}
	return pos, nil
}

// syntaxError turns a YAML parse error of data into an Error with its
// line.
func syntaxError(err error, data []byte) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, tail := 0, msg
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, t, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, tail = l, t
			}
		}
	}
	if parserProblems[tail] {
		// Counted from 0 (and left out when 0); a problem met at the end
		// of the stream is on a line past the last, which names the last.
		line = min(line+1, max(lines(data), 1))
	}
	return &Error{Line: line, Msg: "not valid YAML: " + tail}
}

// lines returns how many lines data has, a last one without a line break
// included.
func lines(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// parserProblems are the messages of yaml.v3's parser errors (parserc.go,
// yaml_parser_set_parser_error*). yaml.v3's parser.fail adds one to the
// 0-based line of its scanner's errors only, so a parser error names the
// line before the one meant (`api_listen: [a` on line 5 as line 4; op19
// D2), and none at all on the first line; its line is where the open
// context began (the '[') or, on the first line, where the problem was
// met. Scanner errors (a quote left open, a tab) are right as given.
// TestDecode_SyntaxErrorLine pins both kinds.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

type decoder struct {
	getenv func(string) (string, bool)
	pos    Positions
	errs   Errors
}

func (d *decoder) fail(n *yaml.Node, path, format string, a ...any) {
	d.errs = append(d.errs, &Error{Line: n.Line, Path: path, Msg: fmt.Sprintf(format, a...)})
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value decodes n into v, which is settable.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with nothing keeps the default
	}
	t := v.Type()
	if reflect.PointerTo(t).Implements(textUnmarshalerType) && t != durationType {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	switch {
	case t == durationType:
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		dur, err := ParseDuration(s)
		if err != nil {
			d.fail(n, path, "%v", err)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "want a list, not %s", describe(n))
			return
		}
		if len(n.Content) == 0 {
			v.Set(reflect.Zero(t)) // "[]" is no items: nil, as the defaults have it
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.value(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.String:
		if s, ok := d.scalar(n, path); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		switch strings.ToLower(s) {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			d.fail(n, path, "want true or false, not %q", s)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		i, err := strconv.ParseInt(s, 0, t.Bits())
		if err != nil {
			d.fail(n, path, "want a whole number, not %q", s)
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		u, err := strconv.ParseUint(s, 0, t.Bits())
		if err != nil {
			d.fail(n, path, "want a whole number not below 0, not %q", s)
			return
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(s, t.Bits())
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, "want a number, not %q", s)
			return
		}
		v.SetFloat(f)
	default:
		d.fail(n, path, "cannot be set in a file")
	}
}

// scalar returns the expanded text of a scalar node.
func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a single value, not %s", describe(n))
		return "", false
	}
	return d.expand(n, path)
}

// expand replaces the environment references in a scalar's text.
func (d *decoder) expand(n *yaml.Node, path string) (string, bool) {
	s, missing, err := Expand(n.Value, d.getenv)
	if err != nil {
		d.fail(n, path, "%v", err)
		return "", false
	}
	if len(missing) > 0 {
		for _, name := range missing {
			d.fail(n, path, "environment variable %s is not set (set it, or give a default: ${%s:-value})", name, name)
		}
		return "", false
	}
	return s, true
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "this"
}

// field is one settable key of a struct.
type field struct {
	name  string
	index []int
	// owner is the struct type that declares the field: the outer one, or
	// an embedded one whose keys are inline.
	owner reflect.Type
}

// fields lists the keys of a struct type: fields with a yaml name, skipping
// those tagged "-" and unexported ones. The keys of an embedded struct
// tagged ",inline" are the outer struct's, as yaml.v3 reads them.
func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Anonymous && f.Type.Kind() == reflect.Struct && name == "" && strings.Contains(opts, "inline") {
			for _, in := range fields(f.Type) {
				in.index = append(append([]int{}, f.Index...), in.index...)
				out = append(out, in)
			}
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, field{name, f.Index, t})
	}
	return out
}

// EachKey calls fn with the name and field index of every key of struct
// type t, as the decoder reads them (fields): for walks of a configuration
// by key path that must agree with how it is read.
func EachKey(t reflect.Type, fn func(name string, index []int)) {
	for _, f := range fields(t) {
		fn(f.name, f.index)
	}
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a section of keys, not %s", describe(n))
		return
	}
	fs := fields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		p := join(path, key)
		if line, dup := seen[key]; dup {
			d.fail(k, p, "given twice (first on line %d)", line)
			continue
		}
		seen[key] = k.Line
		var f *field
		for j := range fs {
			if fs[j].name == key {
				f = &fs[j]
				break
			}
		}
		if f == nil {
			d.fail(k, p, "unknown key%s", suggest(key, v.Type(), fs, path))
			continue
		}
		d.pos[p] = k.Line
		d.value(val, v.FieldByIndex(f.index), p)
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a map of names to values, not %s", describe(n))
		return
	}
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		d.fail(n, path, "cannot be set in a file")
		return
	}
	if len(n.Content) == 0 {
		return // "{}" adds nothing: the default, nil or not, stays
	}
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(t, len(n.Content)/2))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "want a name as the key, not %s", describe(k))
			continue
		}
		key, ok := d.expand(k, path)
		if !ok {
			continue
		}
		// Keys may be secrets (tokens): a path names the map, not the key.
		if line, dup := seen[key]; dup {
			d.fail(k, path, "a key is given twice (first on line %d)", line)
			continue
		}
		seen[key] = k.Line
		p := join(path, key)
		d.pos[p] = k.Line
		e := reflect.New(t.Elem()).Elem()
		d.value(val, e, p)
		kv := reflect.New(t.Key()).Elem()
		kv.SetString(key)
		v.SetMapIndex(kv, e)
	}
}

// suggest names the nearest known key, if one is near enough, or else the
// section one level down that has the key (a block copied one level too
// high, such as clickhouse: for serve.clickhouse:).
func suggest(key string, t reflect.Type, fs []field, path string) string {
	best, bestDist := "", math.MaxInt
	for _, f := range fs {
		if d := distance(key, f.name); d < bestDist {
			best, bestDist = f.name, d
		}
	}
	if best != "" && bestDist <= max(2, len(key)/3) {
		return fmt.Sprintf(" (did you mean %s?)", join(path, best))
	}
	for _, f := range fs {
		st := t.FieldByIndex(f.index).Type
		if st.Kind() == reflect.Pointer {
			st = st.Elem()
		}
		if st.Kind() != reflect.Struct {
			continue
		}
		for _, in := range fields(st) {
			if in.name == key {
				return fmt.Sprintf(" (did you mean %s? it belongs in section %s)", join(join(path, f.name), key), join(path, f.name))
			}
		}
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	sort.Strings(names)
	if path == "" {
		return "; the sections are " + strings.Join(names, ", ")
	}
	return "; " + path + " takes " + strings.Join(names, ", ")
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Expand replaces ${VAR}, ${env:VAR} and ${VAR:-default} in s with the
// environment's values, and $$ with $. A $ followed by anything else is kept
// as it is. It returns the names of the variables that are not set and
// have no default; an unterminated ${ is an error.
func Expand(s string, getenv func(string) (string, bool)) (string, []string, error) {
	if !strings.Contains(s, "$") {
		return s, nil, nil
	}
	var b strings.Builder
	var missing []string
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated ${ in %q (write $$ for a literal $)", s)
			}
			ref := s[i+2 : i+2+end]
			i += 2 + end
			name, def, hasDef := strings.Cut(ref, ":-")
			name = strings.TrimPrefix(name, "env:")
			if !validEnvName(name) {
				return "", nil, fmt.Errorf("${%s} does not name an environment variable (write $$ for a literal $)", ref)
			}
			if v, ok := getenv(name); ok && (v != "" || !hasDef) {
				b.WriteString(v)
			} else if hasDef {
				b.WriteString(def)
			} else {
				missing = append(missing, name)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), missing, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// ParseDuration reads a duration in Prometheus' syntax ("30d", "1d12h",
// "5m", "30s", "500ms", "2w", "0"), or in Go's ("1.5h", "250us").
func ParseDuration(s string) (time.Duration, error) {
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	return 0, fmt.Errorf("want a duration such as 30d, 1d12h, 5m, 30s or 500ms, not %q", s)
}

// FormatDuration writes d as ParseDuration reads it, in the largest units
// that divide it: "30d", "1h30m", "200ms".
func FormatDuration(d time.Duration) string {
	if d%time.Millisecond != 0 || d < 0 {
		return d.String()
	}
	return model.Duration(d).String()
}

package conf

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Key is one configuration key, for the reference documentation.
type Key struct {
	// Path is the key path; a name chosen by the user is written <name>.
	Path string
	// Type is the kind of value: duration, size, string, integer,
	// number, boolean, a list or a map of them.
	Type string
	// Default is the value when the key is absent, as a file would write it;
	// empty when it is empty.
	Default string
	// Doc is the field's doc comment.
	Doc string
}

// DocFunc returns the doc comment of field name of struct type t.
type DocFunc func(t reflect.Type, name string) string

// Keys lists every key of defaults, a struct or a pointer to one holding the
// default values, in declaration order. The keys of structs inside maps are
// listed under the map's path and <name>.
func Keys(defaults any, doc DocFunc) []Key {
	v := reflect.ValueOf(defaults)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var out []Key
	keys(v.Type(), v, "", doc, &out)
	return out
}

func keys(t reflect.Type, v reflect.Value, path string, doc DocFunc, out *[]Key) {
	for _, f := range fields(t) {
		sf := t.FieldByIndex(f.index)
		p := join(path, f.name)
		var fv reflect.Value
		if v.IsValid() {
			fv = v.FieldByIndex(f.index)
		}
		ft := sf.Type
		switch {
		case ft == durationType || reflect.PointerTo(ft).Implements(textUnmarshalerType):
		case ft.Kind() == reflect.Struct:
			keys(ft, fv, p, doc, out)
			continue
		case ft.Kind() == reflect.Map && elemStruct(ft.Elem()) != nil:
			k := Key{Path: p, Type: typeName(ft), Doc: doc(f.owner, sf.Name)}
			*out = append(*out, k)
			inner := ft.Elem()
			mp := p + ".<name>"
			for inner.Kind() == reflect.Map {
				inner = inner.Elem()
				mp += ".<name>"
			}
			keys(inner, reflect.Value{}, mp, doc, out)
			continue
		}
		*out = append(*out, Key{Path: p, Type: typeName(ft), Default: defaultOf(fv), Doc: doc(f.owner, sf.Name)})
	}
}

// elemStruct returns the struct type inside nested maps, or nil.
func elemStruct(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t != durationType {
		return t
	}
	return nil
}

func typeName(t reflect.Type) string {
	if t == sizeType {
		return "size"
	}
	if t == shareType {
		return "share"
	}
	if t == durationType || t.Kind() == reflect.Int64 && t.ConvertibleTo(durationType) && reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return "duration"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		if t.Elem().Kind() == reflect.Struct {
			return "map of names to sections"
		}
		if t.Elem().Kind() == reflect.Map {
			return "map of names to maps"
		}
		return "map of names to " + typeName(t.Elem()) + "s"
	case reflect.Struct:
		return "section"
	}
	return t.Kind().String()
}

func defaultOf(v reflect.Value) string {
	if !v.IsValid() {
		return ""
	}
	n, err := node(v)
	if err != nil {
		return ""
	}
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	if len(n.Content) == 0 {
		return ""
	}
	n.Style = yaml.FlowStyle
	b, err := yaml.Marshal(n)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SourceDocs reads doc comments of struct fields from the Go source of a
// module: root is the module's directory, module its path. Packages are
// found from the reflect package path of each type; aliases maps a package
// path that is not under the module (such as "main") to a directory
// relative to root.
type SourceDocs struct {
	Root, Module string
	Aliases      map[string]string
	pkgs         map[string]map[string]string // package path → "Type.Field" → doc
	Err          error                        // the first error met while reading sources
}

// Doc implements DocFunc.
func (s *SourceDocs) Doc(t reflect.Type, field string) string {
	pkg := t.PkgPath()
	if s.pkgs == nil {
		s.pkgs = map[string]map[string]string{}
	}
	docs, ok := s.pkgs[pkg]
	if !ok {
		dir, ok := s.Aliases[pkg]
		if !ok {
			rel, under := strings.CutPrefix(pkg, s.Module)
			if !under {
				s.fail(fmt.Errorf("cannot find the source of package %s", pkg))
				return ""
			}
			dir = strings.TrimPrefix(rel, "/")
		}
		var err error
		docs, err = fieldDocs(filepath.Join(s.Root, dir))
		if err != nil {
			s.fail(err)
		}
		s.pkgs[pkg] = docs
	}
	return clean(field, docs[t.Name()+"."+field])
}

func (s *SourceDocs) fail(err error) {
	if s.Err == nil {
		s.Err = err
	}
}

// fieldDocs parses the non-test Go files of dir and returns the doc comment
// of every struct field, keyed "Type.Field".
func fieldDocs(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read sources: %w", err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("cannot parse sources: %w", err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				text := ""
				if fl.Doc != nil {
					text = fl.Doc.Text()
				} else if fl.Comment != nil {
					text = fl.Comment.Text()
				}
				for _, id := range fl.Names {
					out[ts.Name.Name+"."+id.Name] = text
				}
			}
			return false
		})
	}
	return out, nil
}

// clean makes a field comment read as a description of the key: one line,
// without the leading field name ("VerifyWindow is how long..." becomes
// "How long...").
func clean(field, doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if rest, ok := strings.CutPrefix(doc, field+" "); ok {
		for _, verb := range []string{"is ", "are "} {
			rest = strings.TrimPrefix(rest, verb)
		}
		doc = rest
	}
	if r, n := utf8.DecodeRuneInString(doc); n > 0 {
		doc = string(unicode.ToUpper(r)) + doc[n:]
	}
	return doc
}

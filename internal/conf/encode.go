package conf

import (
	"bytes"
	"encoding"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Encode writes v, a struct or a pointer to one, as the YAML that Decode
// reads back to the same value: every key, durations in the syntax of
// ParseDuration, maps in key order.
func Encode(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	n, err := node(rv)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("cannot encode config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("cannot encode config: %w", err)
	}
	return buf.Bytes(), nil
}

var textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()

func scalarNode(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

func node(v reflect.Value) (*yaml.Node, error) {
	t := v.Type()
	if t == durationType {
		return scalarNode("!!str", FormatDuration(time.Duration(v.Int()))), nil
	}
	if t.Implements(textMarshalerType) {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, fmt.Errorf("cannot encode config: %w", err)
		}
		return scalarNode("!!str", string(b)), nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, f := range fields(t) {
			c, err := node(v.FieldByIndex(f.index))
			if err != nil {
				return nil, err
			}
			m.Content = append(m.Content, scalarNode("!!str", f.name), c)
		}
		return m, nil
	case reflect.Map:
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			c, err := node(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			if c.Kind == yaml.MappingNode {
				m.Style = 0
			}
			m.Content = append(m.Content, scalarNode("!!str", k.String()), c)
		}
		return m, nil
	case reflect.Slice:
		s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for i := range v.Len() {
			c, err := node(v.Index(i))
			if err != nil {
				return nil, err
			}
			s.Content = append(s.Content, c)
		}
		return s, nil
	case reflect.Pointer:
		if v.IsNil() {
			return scalarNode("!!null", "null"), nil
		}
		return node(v.Elem())
	case reflect.String:
		return scalarNode("!!str", v.String()), nil
	case reflect.Bool:
		return scalarNode("!!bool", strconv.FormatBool(v.Bool())), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalarNode("!!int", strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalarNode("!!int", strconv.FormatUint(v.Uint(), 10)), nil
	case reflect.Float32, reflect.Float64:
		return scalarNode("!!float", strconv.FormatFloat(v.Float(), 'g', -1, t.Bits())), nil
	}
	return nil, fmt.Errorf("cannot encode config: a %s cannot be written", t.Kind())
}

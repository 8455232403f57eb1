package otlp_test

import (
	"bytes"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestReadProto_HandMade holds ReadProto to pdata on messages made by
// hand that an SDK does not send: fields repeated, out of order, of the
// wrong size or wire type, values of odd kinds, events and links. Each either is read as
// pdata would read it or is left to pdata (accepted false), never read
// otherwise.
func TestReadProto_HandMade(t *testing.T) {
	msg := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	varint := func(num protowire.Number, x uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), x)
	}
	fixed := func(num protowire.Number, x uint64) []byte {
		return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), x)
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	str := func(s string) []byte { return msg(1, []byte(s)) } // AnyValue{string_value}
	kv := func(num protowire.Number, k string, v []byte) []byte {
		return msg(num, cat(msg(1, []byte(k)), msg(2, v)))
	}
	span := func(extra ...[]byte) []byte {
		const t0 = uint64(1793610019992000000)
		fields := [][]byte{
			msg(1, bytes.Repeat([]byte{7}, 16)), msg(2, bytes.Repeat([]byte{8}, 8)),
			msg(5, []byte("tools/call gram_patch")), varint(6, 2), fixed(7, t0), fixed(8, t0+6e8),
			kv(9, "mcp.method.name", str("tools/call")), kv(9, "gen_ai.tool.name", str("gram_patch")),
			kv(9, "jsonrpc.request.id", str("1")), kv(9, "mcp.session.id", str("s-hand")),
			kv(9, "gen_ai.tool.call.arguments", str(`{"path": "a/h.gram", "base_revision": 22, "expected_hash": "1a704ca17c18", "request_id": "req-h", "operations": [{"op": "append_block", "target": "h4-12", "text": "x"}]}`)),
			kv(9, "gen_ai.tool.call.result", str(`{"isError": false, "structuredContent": {"path": "a/h.gram", "rev": 23, "hash": "2eddac40e01a", "request_id": "req-h", "replayed": false, "sync": {"state": "synced"}}}`)),
		}
		return cat(append(fields, extra...)...)
	}
	resource := msg(1, kv(1, "service.name", str("thegram")))
	request := func(rs ...[]byte) []byte {
		var b []byte
		for _, r := range rs {
			b = append(b, msg(1, r)...)
		}
		return b
	}
	oneSpan := func(extra ...[]byte) []byte {
		return request(cat(resource, msg(2, cat(msg(1, msg(1, []byte("scope"))), msg(2, span(extra...))))))
	}
	deep := func(d int) []byte {
		v := str("leaf")
		for range d {
			v = msg(5, msg(1, v))
		}
		return v
	}
	f := func(name string, b []byte, accepted bool) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			if got := sameAsPdata(t, b); got != accepted {
				t.Errorf("CheckProto accepted %v, want %v", got, accepted)
			}
		})
	}
	f("plain", oneSpan(), true)
	f("empty_request", nil, true)
	f("resource_after_spans", request(cat(msg(2, msg(2, span())), resource)), true)
	f("trace_id_twice", oneSpan(msg(1, bytes.Repeat([]byte{9}, 16))), true)
	f("session_twice_first_kept", oneSpan(kv(9, "mcp.session.id", str("s-other"))), true)
	f("request_id_empty_then_set", request(cat(resource, msg(2, msg(2, cat(kv(9, "jsonrpc.request.id", str("")), span()))))), true)
	f("request_id_int", request(cat(resource, msg(2, msg(2, cat(kv(9, "jsonrpc.request.id", varint(3, 77)), span()))))), true)
	f("session_without_value", request(cat(resource, msg(2, msg(2, cat(msg(9, msg(1, []byte("mcp.session.id"))), span()))))), true)
	f("session_bytes", request(cat(resource, msg(2, msg(2, cat(kv(9, "mcp.session.id", msg(7, []byte("abc"))), span()))))), true)
	f("kind_huge", oneSpan(varint(6, 1<<40)), true)
	f("status_code_huge", oneSpan(msg(15, varint(3, 1<<33+2))), true)
	f("status_error_message", oneSpan(msg(15, cat(varint(3, 2), msg(2, []byte("timeout"))))), true)
	f("flags", oneSpan(protowire.AppendFixed32(protowire.AppendTag(nil, 16, protowire.Fixed32Type), 1)), true)
	f("deep_30", oneSpan(kv(9, "d", deep(30))), true)
	f("invalid_utf8_session", oneSpan(kv(9, "mcp.session.id", str("s-\xc3\x28"))), true)
	event := cat(fixed(1, 1793610020000000000), msg(2, []byte("exception")), kv(3, "exception.message", str("boom")), varint(4, 1))
	link := cat(msg(1, bytes.Repeat([]byte{5}, 16)), msg(2, bytes.Repeat([]byte{6}, 8)), kv(4, "n", varint(3, 1)), varint(5, 2))
	f("event_and_link", oneSpan(msg(11, event), msg(11, event), msg(13, link)), true)
	f("event_empty_link_empty", oneSpan(msg(11, nil), msg(13, nil)), true)

	f("event_unknown_field", oneSpan(msg(11, cat(event, varint(9, 1)))), false)
	f("event_time_varint", oneSpan(msg(11, varint(1, 5))), false)
	f("event_value_of_two_kinds", oneSpan(msg(11, kv(3, "x", cat(str("a"), varint(3, 9))))), false)
	f("link_trace_id_short", oneSpan(msg(13, msg(1, []byte{1, 2}))), false)
	f("link_span_id_long", oneSpan(msg(13, msg(2, make([]byte, 9)))), false)
	f("event_deep_70", oneSpan(msg(11, kv(3, "d", deep(70)))), false)
	f("status_twice", oneSpan(msg(15, varint(3, 2)), msg(15, msg(2, []byte("second")))), false)
	f("status_deprecated_code", oneSpan(msg(15, varint(1, 2))), false)
	f("resource_twice", request(cat(resource, msg(1, kv(1, "host.name", str("h"))), msg(2, msg(2, span())))), false)
	f("unknown_span_field", oneSpan(varint(99, 1)), false)
	f("trace_id_short", oneSpan(msg(1, []byte{1, 2, 3})), false)
	f("parent_id_short", oneSpan(msg(4, []byte{1})), false)
	f("kind_wrong_wire_type", oneSpan(msg(6, []byte{2})), false)
	f("value_of_two_kinds", oneSpan(kv(9, "x", cat(str("a"), varint(3, 9)))), false)
	f("value_string_twice", request(cat(resource, msg(2, msg(2, cat(kv(9, "mcp.session.id", cat(str("s-one"), str("s-two"))), span()))))), false)
	f("key_twice", oneSpan(msg(9, cat(msg(1, []byte("a")), msg(1, []byte("b")), msg(2, str("v"))))), false)
	f("request_id_bool", request(cat(resource, msg(2, msg(2, cat(kv(9, "jsonrpc.request.id", varint(2, 1)), span()))))), false)
	f("deep_70", oneSpan(kv(9, "d", deep(70))), false)
	f("instrumentation_library_spans", request(cat(resource, msg(1000, msg(2, span())))), false)
	full := oneSpan()
	for _, cut := range []int{1, 2, 7, 40, 200} {
		f("truncated_"+strconv.Itoa(cut), full[:len(full)-cut], false)
	}
}

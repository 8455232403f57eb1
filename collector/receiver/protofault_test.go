package receiver_test

import (
	"strings"
	"testing"
)

// TestOTLPProto_FaultAtBodyOffset: an OTLP/HTTP protobuf body whose
// framing breaks is refused with where, as byte offsets in the body, as a
// JSON body is (TestOTLPJSON_FaultAtBodyOffset). A body cut short says so,
// where it ends and inside which field; a length inside the request that
// runs past its message says that message's end. Found from outside: the
// answer was pdata's "unexpected EOF" alone, wherever the body broke.
func TestOTLPProto_FaultAtBodyOffset(t *testing.T) {
	e := newEnv(t, nil)
	pb, err := traces("thegram", 3, nil).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	// The request is one resource_spans (field 1: 0x0a, a 2-byte length,
	// at byte offset 0) whose scope_spans (field 2: 0x12, a 2-byte
	// length) starts at byte offset 3.
	if pb[0] != 0x0a || pb[3] != 0x12 || len(pb) < 300 {
		t.Fatalf("the request's encoding changed: % x", pb[:6])
	}
	long := append([]byte{}, pb...)
	long[4], long[5] = 0xff, 0x04 // 639 bytes, more than resource_spans holds
	f := func(name string, body []byte, want ...string) {
		t.Run(name, func(t *testing.T) {
			a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, body)
			if a.status != 400 {
				t.Fatalf("%d %s, want 400", a.status, a.body)
			}
			for _, w := range append([]string{"cannot decode OTLP protobuf: unexpected EOF: "}, want...) {
				if !strings.Contains(a.body, w) {
					t.Errorf("answer %q lacks %q", a.body, w)
				}
			}
		})
	}
	f("cut_in_a_length", pb[:2], "the body is cut short at byte offset 2, inside the length of field 1 at byte offset 0")
	f("cut_in_a_span", pb[:300], "the body is cut short at byte offset 300, inside field 1 at byte offset 0 (616 bytes long, 297 left)")
	f("cut_before_the_end", pb[:len(pb)-1], "the body is cut short at byte offset 618, inside field 1 at byte offset 0")
	f("length_past_its_message", long, "field 2 at byte offset 3 (639 bytes long, 613 left) runs past the end of the message that holds it, at byte offset 619")
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored from refused requests", n)
	}
	// A good body still goes in.
	if a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, pb); a.status != 200 {
		t.Fatalf("good body: %d %s", a.status, a.body)
	}
}

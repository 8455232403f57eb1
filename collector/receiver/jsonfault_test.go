package receiver_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestOTLPJSON_FaultAtBodyOffset: an OTLP/HTTP JSON body that is not JSON
// is refused with where it breaks as a byte offset in the body: a body cut
// short says so and where, and protobuf sent as application/json is named
// as such. Found from outside: the answer gave pdata's "error found in #10
// byte of ...|...|", an offset within the window it quotes (here 10, for
// a body cut at 600 bytes), and quoted binary for protobuf.
func TestOTLPJSON_FaultAtBodyOffset(t *testing.T) {
	e := newEnv(t, nil)
	js, err := traces("thegram", 3, nil).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := traces("thegram", 3, nil).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body []byte
		want []string
	}{
		{"cut_short", js[:300], []string{"cannot decode OTLP JSON: ", "the body is cut short at byte offset 300"}},
		{"protobuf", pb, []string{"cannot decode OTLP JSON: ", "at byte offset ", "application/x-protobuf"}},
		{"bad_byte", append(append([]byte{}, js[:117]...), append([]byte("?"), js[117:]...)...), []string{fmt.Sprintf("at byte offset %d", 117)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.post(t, "/v1/traces", "application/json", tokAcme, tc.body)
			if a.status != 400 {
				t.Fatalf("%d %s, want 400", a.status, a.body)
			}
			for _, w := range tc.want {
				if !strings.Contains(a.body, w) {
					t.Errorf("answer %q lacks %q", a.body, w)
				}
			}
			if strings.Contains(a.body, "more after the request") {
				t.Errorf("answer %q takes it for two documents", a.body)
			}
			if strings.Contains(a.body, "bigger context") {
				t.Errorf("answer %q counts bytes in a quoted window", a.body)
			}
		})
	}
	// A good body still goes in.
	if a := e.post(t, "/v1/traces", "application/json", tokAcme, js); a.status != 200 {
		t.Fatalf("good body: %d %s", a.status, a.body)
	}
}

// TestOTLPJSON_SecondDocumentRefused: an OTLP/HTTP JSON body with more
// after its document (a second document, as OTLP JSON lines hold them, or
// trailing bytes) is refused whole with where the first one ends, rather
// than acknowledged with the rest dropped. Found from outside: two
// documents, one a line, were answered 200 with no span rejected, and only
// the first one's spans were stored.
func TestOTLPJSON_SecondDocumentRefused(t *testing.T) {
	e := newEnv(t, nil)
	one, err := traces("thegram", 2, nil).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	two, err := traces("oddlynew", 2, nil).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"two_documents": append(append(append([]byte{}, one...), '\n'), two...),
		"trailing":      append(append([]byte{}, one...), []byte("\ngarbage")...),
	} {
		t.Run(name, func(t *testing.T) {
			a := e.post(t, "/v1/traces", "application/json", tokAcme, body)
			want := fmt.Sprintf("more after the request at byte offset %d", len(one))
			if a.status != 400 || !strings.Contains(a.body, want) {
				t.Fatalf("%d %s; want 400 naming %q", a.status, a.body, want)
			}
		})
	}
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored from refused requests", n)
	}
	// One document, with the newline a file ends with, goes in whole.
	if a := e.post(t, "/v1/traces", "application/json", tokAcme, append(append([]byte{}, one...), '\n')); a.status != 200 {
		t.Fatalf("one document: %d %s", a.status, a.body)
	}
	if n := len(e.stored(t)); n != 2 {
		t.Errorf("%d calls stored, want 2", n)
	}
}

package detect

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// TestWriteTexts checks that a write gives back the texts it was made
// with, short, empty and longer than a one-byte length, and its tool,
// listed or not.
func TestWriteTexts(t *testing.T) {
	long := strings.Repeat("x/", 200) + "doc.gram"
	f := func(callID, doc, key, actorID string) {
		t.Helper()
		var w writeRec
		w.setTexts(callID, doc, key, "", actorID)
		if w.callID() != callID || w.doc() != doc || w.key() != key || w.actorID() != actorID || w.text(3) != "" {
			t.Errorf("setTexts(%q, %q, %q, %q): got %q %q %q %q", callID, doc, key, actorID, w.callID(), w.doc(), w.key(), w.actorID())
		}
	}
	f("c_0123456789abcdef0123", "a.gram", "req-1", "s-1")
	f("", "", "", "")
	f("c1", long, "", "s-"+long)
	f("c1", "", long, "")

	d := newDetector(NewDefaultConfig(), &emitter{}, PartitionKey{})
	for i := range maxTools {
		if got := d.tool(fmt.Sprint("tool-", i)); got != uint16(i) {
			t.Fatalf("tool %d: listed at %d", i, got)
		}
	}
	if got := d.tool("tool-7"); got != 7 {
		t.Errorf("a listed tool again: %d, want 7", got)
	}
	w := &writeRec{tool: d.tool("one-more")}
	if w.tool != unlisted {
		t.Fatalf("a tool past the list: %d, want unlisted", w.tool)
	}
	w.setTexts("c1", "d", "k", "one-more", "s")
	if d.toolOf(w) != "one-more" || w.actorID() != "s" || w.key() != "k" {
		t.Errorf("an unlisted tool: got %q, actor %q, key %q", d.toolOf(w), w.actorID(), w.key())
	}
	w = &writeRec{tool: d.tool("tool-3")}
	if d.toolOf(w) != "tool-3" {
		t.Errorf("a listed tool: got %q", d.toolOf(w))
	}
}

// TestUvarintLen checks the length setTexts sizes its text by against
// binary.AppendUvarint's.
func TestUvarintLen(t *testing.T) {
	f := func(v uint64) {
		t.Helper()
		if got, want := uvarintLen(v), len(binary.AppendUvarint(nil, v)); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", v, got, want)
		}
	}
	f(0)
	f(1)
	f(127)
	f(128)
	f(16383)
	f(16384)
	f(1<<63 - 1)
	f(1<<64 - 1)
}

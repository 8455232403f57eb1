package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strings"
	"testing"
	"time"
)

// TestIDs pins StableID and Fingerprint to their definition, streamed
// through one digest, for arguments short and long: stored ids must never
// change.
func TestIDs(t *testing.T) {
	f := func(server, session, rpcID, tool, args string) {
		t.Helper()
		at := time.Date(2026, 11, 2, 9, 0, 0, 123456789, time.UTC)
		parts := func() hash.Hash {
			h := sha256.New()
			var n [8]byte
			for _, s := range []string{server, session, rpcID, tool} {
				binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
				h.Write(n[:])
				h.Write([]byte(s))
			}
			return h
		}
		h, fp := parts(), parts()
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(at.Round(time.Millisecond).UnixMilli()))
		h.Write(n[:])
		h.Write([]byte(args))
		fp.Write([]byte(args))
		wantID := "c_" + hex.EncodeToString(h.Sum(nil)[:10])
		if got := StableID(server, session, rpcID, at, tool, []byte(args)); got != wantID {
			t.Errorf("StableID(..., %d bytes) = %s, want %s", len(args), got, wantID)
		}
		if got, want := Fingerprint(server, session, rpcID, tool, []byte(args)), string(fp.Sum(nil)[:16]); got != want {
			t.Errorf("Fingerprint(..., %d bytes) = %x, want %x", len(args), got, want)
		}
	}
	f("thegram", "s1", "7", "gram_read", `{"path":"a"}`)
	f("", "", "", "", "")
	f("oddlynew", "s", "1", "run", `{"code":"`+strings.Repeat("x", 470)+`"}`)
	f("oddlynew", "s", "1", "run", `{"code":"`+strings.Repeat("x", 5000)+`"}`)
	f(strings.Repeat("s", 600), "", "", "t", `{}`)
}

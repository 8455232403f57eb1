package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// StableID derives the identity of an exchange from what both carriers hold:
// the server, the session, the JSON-RPC id, the time rounded to the
// millisecond (OTLP nanoseconds and RFC 3339 milliseconds agree there), the
// tool and the canonical JSON of its arguments. It is deterministic, so a
// replayed or re-sent capture maps to the same ids.
func StableID(server, session, rpcID string, t time.Time, tool string, canonicalArgs []byte) string {
	h := sha256.New()
	var buf [8]byte
	for _, s := range []string{server, session, rpcID, tool} {
		binary.LittleEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	binary.LittleEndian.PutUint64(buf[:], uint64(t.Round(time.Millisecond).UnixMilli()))
	h.Write(buf[:])
	h.Write(canonicalArgs)
	var sum [sha256.Size]byte
	return "c_" + hex.EncodeToString(h.Sum(sum[:0])[:10])
}

// Fingerprint identifies a request regardless of when it was sent: the
// server, session, JSON-RPC id, tool and canonical arguments. Two
// observations of one exchange share it; the detector uses it to drop the
// second.
func Fingerprint(server, session, rpcID, tool string, canonicalArgs []byte) string {
	h := sha256.New()
	var buf [8]byte
	for _, s := range []string{server, session, rpcID, tool} {
		binary.LittleEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	h.Write(canonicalArgs)
	var sum [sha256.Size]byte
	return string(h.Sum(sum[:0])[:16])
}

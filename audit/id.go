package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// idStack is how much input an id hashes from a stack buffer in one call;
// longer arguments stream through a digest rather than being copied.
const idStack = 512

// StableID derives the identity of an exchange from what both carriers hold:
// the server, the session, the JSON-RPC id, the time rounded to the
// millisecond (OTLP nanoseconds and RFC 3339 milliseconds agree there), the
// tool and the canonical JSON of its arguments. It is deterministic, so a
// replayed or re-sent capture maps to the same ids.
func StableID(server, session, rpcID string, t time.Time, tool string, canonicalArgs []byte) string {
	var stack [idStack]byte
	b := appendIDParts(stack[:0], server, session, rpcID, tool)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Round(time.Millisecond).UnixMilli()))
	sum := sumWith(b, canonicalArgs)
	var out [2 + 2*10]byte
	copy(out[:], "c_")
	hex.Encode(out[2:], sum[:10])
	return string(out[:])
}

// Fingerprint identifies a request regardless of when it was sent: the
// server, session, JSON-RPC id, tool and canonical arguments. Two
// observations of one exchange share it; the detector uses it to drop the
// second.
func Fingerprint(server, session, rpcID, tool string, canonicalArgs []byte) string {
	var stack [idStack]byte
	b := appendIDParts(stack[:0], server, session, rpcID, tool)
	sum := sumWith(b, canonicalArgs)
	return string(sum[:16])
}

// appendIDParts appends each part with its length before it, so that no
// two part lists hash alike by concatenation.
func appendIDParts(b []byte, parts ...string) []byte {
	for _, s := range parts {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// sumWith returns the SHA-256 of head followed by tail. Short inputs are
// hashed in one call from head's buffer, which costs no allocation; long
// ones stream.
func sumWith(head, tail []byte) [sha256.Size]byte {
	if len(head)+len(tail) <= cap(head) {
		return sha256.Sum256(append(head, tail...))
	}
	h := sha256.New()
	h.Write(head)
	h.Write(tail)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

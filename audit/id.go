package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// IdentityRPC returns the JSON-RPC id a call's ids (StableID, Fingerprint)
// are taken over: rpcID itself, or, for an exchange without one that was
// traced (spanID set), "span:" and its trace and span ids. Spans of one
// tool with equal arguments in one second are then told apart, and an OTLP
// span and a call record of one exchange (the same trace_id and span_id,
// neither with a JSON-RPC id) get one call id (docs/detection.md,
// "Duplicates").
func IdentityRPC(rpcID, traceID, spanID string) string {
	if rpcID != "" || spanID == "" {
		return rpcID
	}
	return "span:" + traceID + spanID
}

// idStack is how much input an id hashes from a stack buffer in one call;
// longer arguments stream through a digest rather than being copied.
const idStack = 512

// StableID derives the identity of an exchange from what both carriers hold:
// the server, the session, the JSON-RPC id, the time rounded to the
// millisecond (OTLP nanoseconds and RFC 3339 milliseconds agree there), the
// tool and the canonical JSON of its arguments. It is deterministic, so a
// replayed or re-sent capture maps to the same ids.
func StableID(server, session, rpcID string, t time.Time, tool string, canonicalArgs []byte) string {
	var out [stableIDLen]byte
	return string(AppendStableID(out[:0], server, session, rpcID, t, tool, canonicalArgs))
}

// stableIDLen is the length of a stable id: "c_" and 20 hex digits.
const stableIDLen = 2 + 2*10

// AppendStableID appends StableID's text to dst, so that a decoder can keep
// it in one allocation with the call's other texts. The parts may be views
// of dst: they are hashed before dst grows.
func AppendStableID(dst []byte, server, session, rpcID string, t time.Time, tool string, canonicalArgs []byte) []byte {
	var stack [idStack]byte
	b := appendIDParts(stack[:0], server, session, rpcID, tool)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Round(time.Millisecond).UnixMilli()))
	sum := sumWith(b, canonicalArgs)
	dst = append(dst, "c_"...)
	return hex.AppendEncode(dst, sum[:10])
}

// Fingerprint identifies a request regardless of when it was sent: the
// server, session, JSON-RPC id, tool and canonical arguments. Two
// observations of one exchange share it; the detector uses it to drop the
// second.
func Fingerprint(server, session, rpcID, tool string, canonicalArgs []byte) string {
	var out [fingerprintLen]byte
	return string(AppendFingerprint(out[:0], server, session, rpcID, tool, canonicalArgs))
}

// fingerprintLen is the length of a fingerprint: 16 bytes of a SHA-256.
const fingerprintLen = 16

// AppendFingerprint appends Fingerprint's bytes to dst; the parts may be
// views of dst, as for AppendStableID.
func AppendFingerprint(dst []byte, server, session, rpcID, tool string, canonicalArgs []byte) []byte {
	var stack [idStack]byte
	b := appendIDParts(stack[:0], server, session, rpcID, tool)
	sum := sumWith(b, canonicalArgs)
	return append(dst, sum[:fingerprintLen]...)
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

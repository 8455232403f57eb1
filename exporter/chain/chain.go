package chain

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Kinds of entries: what rows an entry covers.
const (
	KindCalls    = "calls"    // call rows First..Last of the tenant
	KindFindings = "findings" // the findings committed with this entry's seq
	KindChanges  = "changes"  // finding state changes First..Last
	// KindAnswers covers the answers of stored unanswered calls kept aside
	// (the embedded store's answers_late), which carry the entry's Seq.
	KindAnswers = "answers"
	// KindPruned records the hashes of rows one transaction removed from
	// entry First (= Last): retention's deletions, and the rows an answer
	// replaced or took out of answers_late.
	KindPruned = "pruned"
	// KindCut records a retention cut (the chain goes on from entry First
	// = Last) in the chain itself, so that the order of the cut and of the
	// checkpoints is on record.
	KindCut = "cut"
	// KindBlocks covers blocks of the tenant's call log (the embedded
	// store's chain_blocks records, which carry the entry's Seq): First
	// and Last are the segments of its first and last block.
	KindBlocks = "blocks"
	// KindLogCut records a retention cut of the tenant's call log, made
	// before any segment goes: First = Last = the cutoff, unix ns.
	KindLogCut = "logcut"
)

// Hash is a SHA-256 sum.
type Hash [sha256.Size]byte

// String returns the hash in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash reads a hash written by String.
func ParseHash(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("cannot parse hash %q: want %d hex digits", s, 2*len(h))
	}
	copy(h[:], b)
	return h, nil
}

// Entry is one link of a tenant's chain.
type Entry struct {
	Tenant string
	// Replica names the collector replica whose chain this is, in stores
	// that keep one chain per tenant and replica (ClickHouse); empty in the
	// embedded store, and then not hashed, so that its chains keep their
	// hashes.
	Replica string
	Seq     int64 // 1, 2, 3... per tenant
	Kind    string
	// First and Last bound the row ids the entry covers (calls, changes);
	// for findings both are 0: they carry the entry's Seq.
	First, Last int64
	// N is how many rows the entry covers.
	N int64
	// Digest is Digest() of the rows' hashes in row order.
	Digest Hash
	// Prev is the hash of the previous entry (zero for the first).
	Prev Hash
	// Time is the wall time of the commit.
	Time time.Time
}

// Hash returns the entry's hash, which the next entry names as Prev.
func (e *Entry) Hash() Hash {
	b := []byte("mcpaudit chain v1\x00")
	b = appendString(b, e.Tenant)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Seq))
	b = appendString(b, e.Kind)
	b = binary.BigEndian.AppendUint64(b, uint64(e.First))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Last))
	b = binary.BigEndian.AppendUint64(b, uint64(e.N))
	b = append(b, e.Digest[:]...)
	b = append(b, e.Prev[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.UnixNano()))
	if e.Replica != "" {
		b = append(b, "\x00replica"...)
		b = appendString(b, e.Replica)
	}
	return sha256.Sum256(b)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// RowHash hashes one stored row from its fields, each length-prefixed so
// that no two field lists hash alike.
func RowHash(fields ...[]byte) Hash {
	h := sha256.New()
	var n [4]byte
	for _, f := range fields {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// Int returns the bytes RowHash takes for an integer field.
func Int(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// Digest hashes the row hashes of an entry, in order.
func Digest(rows []Hash) Hash {
	h := sha256.New()
	for i := range rows {
		h.Write(rows[i][:])
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// CutDigest is the digest of a cut entry (KindCut): where the chain goes
// on (seq), that entry's prev, and the retention cutoff in Unix seconds.
// Both stores write it, so that verify can match a cut entry to the cut
// it records.
func CutDigest(seq int64, prev []byte, before int64) Hash {
	return RowHash([]byte("cut"), Int(seq), prev, Int(before))
}

// Head is where one tenant's chain stands.
type Head struct {
	Tenant string `json:"tenant"`
	// Replica is the chain's replica, where a store keeps one per replica.
	Replica string `json:"replica,omitempty"`
	Seq     int64  `json:"seq"`
	Hash    string `json:"hash"`
}

// Cut records that retention removed the entries of a tenant before Seq:
// the chain goes on from Seq, whose Prev is Prev.
type Cut struct {
	Tenant  string    `json:"tenant"`
	Replica string    `json:"replica,omitempty"`
	Seq     int64     `json:"seq"`
	Prev    string    `json:"prev"`
	Before  time.Time `json:"before"` // the retention cutoff
}

// Body is what a checkpoint signs: every tenant's head and every cut made
// so far, at a time.
type Body struct {
	// Replica names the collector replica that signed, where a store
	// keeps one chain per tenant and replica.
	Replica string    `json:"replica,omitempty"`
	Time    time.Time `json:"time"`
	Heads   []Head    `json:"heads"`
	Cuts    []Cut     `json:"cuts,omitempty"`
	// Key is the KeyID of the key that signed, set by Sign (empty in the
	// checkpoints of a release before it): a verifier given several
	// public keys, one per signing key the collector had, says which one
	// signed each checkpoint, and names the key of one none of them
	// verifies. It is signed with the rest, so it cannot be swapped.
	Key string `json:"key,omitempty"`
}

// Checkpoint is a signed Body.
type Checkpoint struct {
	Seq  int64 // 1, 2, 3... in the store
	Body []byte
	Sig  []byte
}

// Encode returns the canonical bytes of b: tenants and cuts in order.
func (b Body) Encode() []byte {
	sort.Slice(b.Heads, func(i, j int) bool { return b.Heads[i].Tenant < b.Heads[j].Tenant })
	sort.Slice(b.Cuts, func(i, j int) bool {
		if b.Cuts[i].Tenant != b.Cuts[j].Tenant {
			return b.Cuts[i].Tenant < b.Cuts[j].Tenant
		}
		return b.Cuts[i].Seq < b.Cuts[j].Seq
	})
	b.Time = b.Time.UTC()
	out, _ := json.Marshal(b) // plain fields: cannot fail
	return out
}

// Sign makes a checkpoint of b, naming key's KeyID in it.
func Sign(seq int64, b Body, key ed25519.PrivateKey) Checkpoint {
	b.Key = KeyID(key.Public().(ed25519.PublicKey))
	body := b.Encode()
	return Checkpoint{Seq: seq, Body: body, Sig: ed25519.Sign(key, body)}
}

// ErrBadSignature is returned by Open for a checkpoint the key did not
// sign, and by Keys.Open for one none of the keys signed.
var ErrBadSignature = errors.New("bad checkpoint signature")

// Claimed returns the KeyID the body of c names as its signer, read
// without checking the signature (empty when it names none, or cannot be
// read): only a hint to tell an operator which public key to look for.
func (c *Checkpoint) Claimed() string {
	var b struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(c.Body, &b) != nil {
		return ""
	}
	return b.Key
}

// Open checks the signature of c and decodes its body.
func (c *Checkpoint) Open(pub ed25519.PublicKey) (Body, error) {
	var b Body
	if !ed25519.Verify(pub, c.Body, c.Sig) {
		return b, fmt.Errorf("checkpoint %d: %w", c.Seq, ErrBadSignature)
	}
	dec := json.NewDecoder(bytes.NewReader(c.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, fmt.Errorf("checkpoint %d: cannot decode: %w", c.Seq, err)
	}
	return b, nil
}

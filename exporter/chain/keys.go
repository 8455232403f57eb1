package chain

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// KeyID names a public key by its fingerprint: "ed25519:" and the first
// 16 hex digits of the SHA-256 of the key's 32 bytes. mcpaudit keygen
// prints it, checkpoints carry it (Body.Key) and verify reports it.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// PublicKey is a public key a verifier was given, with where it was read.
type PublicKey struct {
	Key ed25519.PublicKey
	// ID is KeyID(Key).
	ID string
	// Source names where it came from (a file), for the report.
	Source string
}

func (k PublicKey) String() string {
	if k.Source == "" {
		return k.ID
	}
	return k.ID + " (" + k.Source + ")"
}

// Keys are the public keys a verifier checks checkpoints with: every key
// the collector signed with, across rotations. A checkpoint is good when
// one of them verifies it.
type Keys []PublicKey

// KeysOf returns pubs as Keys, without sources.
func KeysOf(pubs ...ed25519.PublicKey) Keys {
	var ks Keys
	for _, p := range pubs {
		if p != nil {
			ks = ks.add(PublicKey{Key: p, ID: KeyID(p)})
		}
	}
	return ks
}

// add appends k unless a key with its bytes is in ks already.
func (ks Keys) add(k PublicKey) Keys {
	if slices.ContainsFunc(ks, func(x PublicKey) bool { return x.Key.Equal(k.Key) }) {
		return ks
	}
	return append(ks, k)
}

// Add appends the keys of more that ks does not hold yet, in order.
func (ks Keys) Add(more ...PublicKey) Keys {
	for _, k := range more {
		ks = ks.add(k)
	}
	return ks
}

// String lists the keys.
func (ks Keys) String() string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

// SignatureError is returned by Keys.Open for a checkpoint none of the
// keys verifies; it wraps ErrBadSignature.
type SignatureError struct {
	Seq int64
	// Claimed is the KeyID the checkpoint names as its signer (empty in
	// a checkpoint of a release before it), unchecked.
	Claimed string
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("checkpoint %d: %v", e.Seq, ErrBadSignature)
}

func (e *SignatureError) Unwrap() error { return ErrBadSignature }

// Open checks c's signature with each key, the one it names first, and
// returns its body and the key that verified it. A checkpoint none of the
// keys verifies is a *SignatureError; one verified whose body names
// another key is refused too (a signer names its own key).
func (ks Keys) Open(c *Checkpoint) (Body, *PublicKey, error) {
	claimed := c.Claimed()
	order := make([]int, 0, len(ks))
	for i := range ks {
		if ks[i].ID == claimed {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	for _, i := range order {
		b, err := c.Open(ks[i].Key)
		if errors.Is(err, ErrBadSignature) {
			continue
		}
		if err != nil {
			return b, nil, err
		}
		if b.Key != "" && b.Key != ks[i].ID {
			return b, nil, fmt.Errorf("checkpoint %d: verified by key %s, but it names key %s as its signer", c.Seq, ks[i].ID, b.Key)
		}
		return b, &ks[i], nil
	}
	return Body{}, nil, &SignatureError{Seq: c.Seq, Claimed: claimed}
}

// BadSignature says why a checkpoint none of keys verifies fails, for a
// report: err is what Keys.Open returned.
func BadSignature(keys Keys, err error) string {
	var se *SignatureError
	if !errors.As(err, &se) {
		return err.Error()
	}
	s := "its signature does not verify with the given public key " + keys.String()
	if len(keys) > 1 {
		s = fmt.Sprintf("its signature verifies with none of the %d public keys given (%s)", len(keys), keys.String())
	}
	s += ": forged, altered, or signed by a key not given"
	if se.Claimed != "" && !slices.ContainsFunc(keys, func(k PublicKey) bool { return k.ID == se.Claimed }) {
		s += fmt.Sprintf("; it names key %s as its signer (if that key is one of the collector's, give its public key too: --public-key, once per key)", se.Claimed)
	}
	return s
}

// ReadPublicKeys reads every Ed25519 public key of a PEM file (PKIX): one
// file may hold the public keys of successive signing keys, one PEM block
// after another. A file with no PUBLIC KEY block, or with a block of
// another type, is an error, so that no key in it is skipped silently.
func ReadPublicKeys(path string) (Keys, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read key: %w", err)
	}
	var ks Keys
	for n := 1; ; n++ {
		var block *pem.Block
		block, raw = pem.Decode(raw)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("cannot read key %s: block %d is a %q block, want %q", path, n, block.Type, "PUBLIC KEY")
		}
		pub, err := parsePublicKey(path, block.Bytes)
		if err != nil {
			return nil, err
		}
		ks = ks.add(PublicKey{Key: pub, ID: KeyID(pub), Source: path})
	}
	if len(ks) == 0 {
		return nil, errors.New("cannot read key " + path + ": no PEM block")
	}
	if rest := strings.TrimSpace(string(raw)); rest != "" {
		return nil, fmt.Errorf("cannot read key %s: text after its last PEM block", path)
	}
	return ks, nil
}

func parsePublicKey(path string, der []byte) (ed25519.PublicKey, error) {
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("cannot parse public key %s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("cannot use public key %s: it is a %T, not Ed25519", path, k)
	}
	return pub, nil
}

// Signers tallies which of the keys given verified which checkpoints, so
// that the report says where a history changed keys.
type Signers struct {
	keys   Keys
	scopes []string
	seqs   map[signed][]int64
	// current is the key of each scope's last checkpoint, and since the
	// checkpoint it took over at.
	current map[string]signer
}

type signer struct {
	id    string
	since int64
}

type signed struct{ key, scope string }

// NewSigners returns a tally for keys.
func NewSigners(keys Keys) *Signers {
	return &Signers{keys: keys, seqs: map[signed][]int64{}, current: map[string]signer{}}
}

// Add records that k verified checkpoint seq of scope (a store's
// checkpoints, or one replica's: " of replica \"r1\""), given in seq
// order. It returns a problem when k is a retired key: one that signed
// earlier checkpoints of the scope before another key took over. A
// collector signs with one key at a time and a rotation goes forward, so
// only someone holding a retired key (the reason to rotate is often that
// it leaked) signs with it again.
func (s *Signers) Add(k *PublicKey, scope string, seq int64) (problem string) {
	if !slices.Contains(s.scopes, scope) {
		s.scopes = append(s.scopes, scope)
	}
	key := signed{k.ID, scope}
	cur := s.current[scope]
	if cur.id != "" && cur.id != k.ID && len(s.seqs[key]) > 0 {
		problem = fmt.Sprintf("signed by key %s, which key %s replaced at checkpoint %d: a retired key signing after the rotation (whoever holds it can sign; a collector signs with its current key only)", k, cur.id, cur.since)
	}
	s.seqs[key] = append(s.seqs[key], seq)
	if cur.id != k.ID {
		s.current[scope] = signer{k.ID, seq}
	}
	return problem
}

// Note writes one note per key: the checkpoints it signed, as runs of
// seqs, or that it signed none.
func (s *Signers) Note(r *Report) {
	for _, k := range s.keys {
		var parts []string
		for _, scope := range s.scopes {
			seqs := s.seqs[signed{k.ID, scope}]
			if len(seqs) == 0 {
				continue
			}
			slices.Sort(seqs)
			var runs []string
			for i := 0; i < len(seqs); {
				j := i
				for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
					j++
				}
				runs = append(runs, Span("checkpoint", "checkpoints", seqs[i], seqs[j]))
				i = j + 1
			}
			parts = append(parts, strings.Join(runs, ", ")+scope)
		}
		if len(parts) == 0 {
			r.Note("key %s signed none of the checkpoints", k)
			continue
		}
		r.Note("key %s signed %s", k, strings.Join(parts, "; "))
	}
}

package chain

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEntryHash_EveryField(t *testing.T) {
	base := Entry{Tenant: "acme", Seq: 3, Kind: KindCalls, First: 10, Last: 20, N: 6,
		Digest: Digest([]Hash{RowHash([]byte("a"))}), Prev: RowHash([]byte("p")), Time: time.Unix(100, 5)}
	h := base.Hash()
	f := func(name string, edit func(e *Entry)) {
		t.Helper()
		e := base
		edit(&e)
		if e.Hash() == h {
			t.Errorf("changing %s leaves the entry's hash as it was", name)
		}
	}
	f("tenant", func(e *Entry) { e.Tenant = "acmf" })
	f("seq", func(e *Entry) { e.Seq++ })
	f("kind", func(e *Entry) { e.Kind = KindChanges })
	f("first", func(e *Entry) { e.First++ })
	f("last", func(e *Entry) { e.Last++ })
	f("n", func(e *Entry) { e.N++ })
	f("digest", func(e *Entry) { e.Digest[0] ^= 1 })
	f("prev", func(e *Entry) { e.Prev[31] ^= 1 })
	f("time", func(e *Entry) { e.Time = e.Time.Add(1) })
	f("replica", func(e *Entry) { e.Replica = "r2" })
	// An entry without a replica hashes as before replicas were known, so
	// that the chains already stored keep their hashes.
	if got, want := base.Hash().String(), "b92c1425de47c41d522b00905a8742e3b4b4e0cb8184d88f95b0bb33ba5aa950"; got != want {
		t.Errorf("hash of an entry without a replica: %s, want %s (the hash of stored chains changed)", got, want)
	}
}

func TestRowHash_Boundaries(t *testing.T) {
	// Fields are length-prefixed: moving a byte across a boundary changes
	// the hash.
	if RowHash([]byte("ab"), []byte("c")) == RowHash([]byte("a"), []byte("bc")) {
		t.Fatal("RowHash does not separate fields")
	}
	if Digest([]Hash{RowHash([]byte("x")), RowHash([]byte("y"))}) == Digest([]Hash{RowHash([]byte("y")), RowHash([]byte("x"))}) {
		t.Fatal("Digest does not depend on the order of rows")
	}
}

func TestCheckpoint_SignOpen(t *testing.T) {
	dir := t.TempDir()
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	privFile, pubFile := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	os.WriteFile(privFile, privPEM, 0o600)
	os.WriteFile(pubFile, pubPEM, 0o600)
	priv, err := ReadPrivateKey(privFile)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ReadPublicKey(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPublicKey(privFile); err == nil {
		t.Error("a private key file read as a public key")
	}
	body := Body{Time: time.Unix(1000, 0), Heads: []Head{{Tenant: "b", Seq: 2, Hash: "x"}, {Tenant: "a", Seq: 1, Hash: "y"}}}
	cp := Sign(1, body, priv)
	got, err := cp.Open(pub)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Heads) != 2 || got.Heads[0].Tenant != "a" {
		t.Errorf("opened body %+v: want both heads, in tenant order", got)
	}
	cp.Body[len(cp.Body)-3] ^= 1
	if _, err := cp.Open(pub); !errors.Is(err, ErrBadSignature) {
		t.Errorf("an altered body opened: %v", err)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	cp2 := Sign(2, body, priv)
	if _, err := cp2.Open(other); !errors.Is(err, ErrBadSignature) {
		t.Errorf("opened with another key: %v", err)
	}
}

// TestReportCounts: the report names one of a thing in the singular.
func TestReportCounts(t *testing.T) {
	f := func(r Report, want ...string) {
		t.Helper()
		var b strings.Builder
		r.Print(&b)
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("report:\n%s\nwant %q", b.String(), w)
			}
		}
	}
	f(Report{Tenants: 1, Entries: 1, Calls: 1, Findings: 1, Changes: 1, Checkpoints: 1},
		"checked 1 tenant, 1 chain entry, 1 call, 1 finding, 1 finding change, 1 checkpoint\n", "ok: ")
	f(Report{Tenants: 2, Entries: 3, Calls: 0, Findings: 2, Changes: 2, Checkpoints: 2, Problems: []Problem{{Tenant: "acme"}}},
		"checked 2 tenants, 3 chain entries, 0 calls, 2 findings, 2 finding changes, 2 checkpoints\n", "FAILED: 1 problem\n")
	f(Report{Problems: []Problem{{Tenant: "acme"}, {Tenant: "acme"}}}, "FAILED: 2 problems\n")
	if got := Span("row", "rows", 5, 5) + ", " + Span("row", "rows", 5, 7); got != "row 5, rows 5 to 7" {
		t.Errorf("Span: %q", got)
	}
	if got := MissingEntries(4, 4) + "; " + MissingEntries(4, 6); got != "entry 4 is missing from the chain; entries 4 to 6 are missing from the chain" {
		t.Errorf("MissingEntries: %q", got)
	}
}

// TestKeys_Rotation (op23's D1): checkpoints signed by successive keys open
// with the keys given, each naming its signer; one signed by a key not
// given fails and names that key; a retired key signing after its
// successor is a problem.
func TestKeys_Rotation(t *testing.T) {
	dir := t.TempDir()
	newKey := func(name string) (ed25519.PrivateKey, string) {
		t.Helper()
		privPEM, pubPEM, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), privPEM, 0o600)
		os.WriteFile(filepath.Join(dir, name+".pub"), pubPEM, 0o600)
		priv, err := ReadPrivateKey(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return priv, filepath.Join(dir, name+".pub")
	}
	priv1, pub1 := newKey("k1")
	priv2, pub2 := newKey("k2")
	_, pub3 := newKey("k3")
	a, _ := os.ReadFile(pub1)
	b, _ := os.ReadFile(pub2)
	both := filepath.Join(dir, "both.pem")
	os.WriteFile(both, append(a, b...), 0o600)
	ks, err := ReadPublicKeys(both)
	if err != nil || len(ks) != 2 {
		t.Fatalf("ReadPublicKeys of a file of two keys: %v, %v", ks, err)
	}
	body := Body{Time: time.Unix(1000, 0), Heads: []Head{{Tenant: "a", Seq: 1, Hash: "x"}}}
	cp1, cp2 := Sign(1, body, priv1), Sign(2, body, priv2)
	for _, c := range []struct {
		cp Checkpoint
		id string
	}{{cp1, ks[0].ID}, {cp2, ks[1].ID}} {
		got, key, err := ks.Open(&c.cp)
		if err != nil || key.ID != c.id || got.Key != c.id {
			t.Errorf("checkpoint %d: key %v, body key %q, err %v; want key %s", c.cp.Seq, key, got.Key, err, c.id)
		}
	}
	only3, err := ReadPublicKeys(pub3)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = only3.Open(&cp2)
	var se *SignatureError
	if !errors.As(err, &se) || !errors.Is(err, ErrBadSignature) || se.Claimed != ks[1].ID {
		t.Fatalf("a checkpoint of a key not given: %v, want a SignatureError naming %s", err, ks[1].ID)
	}
	if msg := BadSignature(only3, err); !strings.Contains(msg, "it names key "+ks[1].ID) {
		t.Errorf("BadSignature: %s", msg)
	}
	// The key named in the body is signed: changing it breaks the
	// signature.
	forged := cp1
	forged.Body = []byte(strings.Replace(string(cp1.Body), ks[0].ID, ks[1].ID, 1))
	if _, _, err := ks.Open(&forged); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a checkpoint whose signer was renamed opened: %v", err)
	}

	s := NewSigners(ks)
	if p := s.Add(&ks[0], "", 1) + s.Add(&ks[0], "", 2) + s.Add(&ks[1], "", 3); p != "" {
		t.Errorf("a rotation forward is a problem: %s", p)
	}
	if p := s.Add(&ks[0], "", 4); !strings.Contains(p, "retired key") {
		t.Errorf("the retired key signing after its successor: %q, want a problem", p)
	}
	var r Report
	s.Note(&r)
	if want := "key " + ks[0].String() + " signed checkpoints 1 to 2, checkpoint 4"; len(r.Notes) != 2 || r.Notes[0] != want {
		t.Errorf("notes %q, want first %q", r.Notes, want)
	}

	f := func(content, wantErr string) {
		t.Helper()
		p := filepath.Join(dir, "bad.pem")
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := ReadPublicKeys(p); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ReadPublicKeys(%q): %v, want %q", content, err, wantErr)
		}
	}
	f("", "no PEM block")
	priv, _ := os.ReadFile(filepath.Join(dir, "k1"))
	f(string(a)+string(priv), `block 2 is a "PRIVATE KEY" block`)
	f(string(a)+"trailing", "text after its last PEM block")
}

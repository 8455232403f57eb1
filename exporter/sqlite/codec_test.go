package sqlite

import (
	"bytes"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

func TestCompressRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 5000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	f := func(name string, rec []byte, codec byte) {
		t.Helper()
		blob := compress(rec)
		if blob[0] != codec {
			t.Errorf("%s: codec %d, want %d", name, blob[0], codec)
		}
		got, err := decompress(nil, blob)
		if err != nil || !bytes.Equal(got, rec) {
			t.Errorf("%s: round trip = %v, %v", name, len(got), err)
		}
	}
	f("empty", []byte{}, codecRaw)
	f("short", []byte("x"), codecRaw)
	f("random", random, codecRaw)
	f("json", []byte(strings.Repeat(`{"isError":false,"structuredContent":{"path":"a.gram"}}`, 3)), codecS2Dv2)
	f("large", bytes.Repeat([]byte(`{"op":"insert_after","target":"h1-30","text":"note"},`), 20000), codecS2Dv2)
}

func TestDecompressCorrupt(t *testing.T) {
	f := func(name string, blob []byte) {
		t.Helper()
		if _, err := decompress(nil, blob); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	f("empty", nil)
	f("unknown codec", []byte{9, 1, 2})
	f("truncated", compress([]byte(strings.Repeat(`{"isError":false}`, 10)))[:5])
	// A length far beyond maxRecord must be refused before allocating.
	f("huge length", append([]byte{codecS2Dv2}, 0xff, 0xff, 0xff, 0xff, 0x7f))
}

// TestCompressionHeldOut logs what the dictionary is worth on calls it has
// not seen: a dictionary built from half of the captures, measured on calls
// generated from the other half, against the shipped one and none. It
// guards only that a held-out dictionary still beats none.
func TestCompressionHeldOut(t *testing.T) {
	var train, test []string
	for i, name := range storetest.CaptureNames() {
		if i%2 == 0 {
			train = append(train, name)
		} else {
			test = append(test, name)
		}
	}
	var dict []byte
	r := dialect.NewReader(dialect.Config{})
	for _, name := range train {
		calls, err := storetest.Capture(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			rec := *r.Read(c)
			dict = appendRecord(dict, &rec)
		}
	}
	held := s2.MakeDict(dict, nil)
	g, err := storetest.NewGenerator(3, storetest.T0, test...)
	if err != nil {
		t.Fatal(err)
	}
	var raw, shipped, heldOut, none int
	const n = 2000
	for _, rec := range g.Records(n) {
		b := appendRecord(nil, &rec)
		raw += len(b)
		shipped += len(compress(b))
		heldOut += 1 + len(held.Encode(nil, b))
		none += 1 + len(s2.Encode(nil, b))
	}
	t.Logf("record %d B; compressed: shipped dictionary %d B, held-out dictionary %d B, no dictionary %d B",
		raw/n, shipped/n, heldOut/n, none/n)
	if heldOut >= none {
		t.Errorf("a held-out dictionary (%d B) does not beat none (%d B)", heldOut/n, none/n)
	}
}

// TestEncodeCalls_Blobs checks that the blobs encodeCalls packs into one
// allocation are each what compress makes of the call's record, that none
// can be appended to over the next, and that the scratch space it reuses
// for the next request leaves the rows of the first as they were.
func TestEncodeCalls_Blobs(t *testing.T) {
	g, err := storetest.NewGenerator(5, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	recs := g.Records(300)
	first, err := encodeCalls(recs[:200])
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]byte, len(first))
	for i := range first {
		want[i] = compress(appendRecord(nil, &recs[i]))
		if !bytes.Equal(first[i].rec, want[i]) {
			t.Fatalf("call %d: blob of %d bytes differs from compress's %d", i, len(first[i].rec), len(want[i]))
		}
		if cap(first[i].rec) != len(first[i].rec) {
			t.Fatalf("call %d: blob capacity %d beyond its length %d", i, cap(first[i].rec), len(first[i].rec))
		}
	}
	if _, err := encodeCalls(recs[200:]); err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if !bytes.Equal(first[i].rec, want[i]) {
			t.Fatalf("call %d: blob changed by the next request's encoding", i)
		}
	}
}

func TestDocHash(t *testing.T) {
	f := func(doc string) {
		t.Helper()
		h := fnv.New32a()
		h.Write([]byte(doc))
		if got, want := docHash(doc), int32(h.Sum32()); got != want {
			t.Errorf("docHash(%q) = %d, want FNV-1a's %d", doc, got, want)
		}
	}
	f("")
	f("a")
	f("notes/a.gram")
	f("h1-30 \xff\x00 é")
	f(strings.Repeat("doc/", 100))
}

// TestRecordHead: the head read without decoding a record is the server,
// session and tenant appendRecord wrote, for every length of them; a
// record cut short says so instead of naming a wrong session.
func TestRecordHead(t *testing.T) {
	f := func(server, session, client, tenant string) {
		t.Helper()
		r := audit.Record{Call: &audit.Call{ID: "c_1", Server: server, Session: session, Client: client, Tenant: tenant,
			Arguments: []byte(`{"path":"a.gram"}`)}}
		b := appendRecord(nil, &r)
		sv, se, te, ok := recordHead(b)
		if !ok || string(sv) != server || string(se) != session || string(te) != tenant {
			t.Errorf("recordHead(%q, %q, %q, %q) = %q, %q, %q, %v", server, session, client, tenant, sv, se, te, ok)
		}
		cut := 1 + len(server) + 1 + len(session) + 1 + len(client) // short of the tenant's length
		if _, _, _, ok := recordHead(b[:cut]); ok {
			t.Errorf("recordHead of a record cut before its tenant: ok")
		}
	}
	f("thegram", "s-1", "agent", "")
	f("", "", "", "")
	f("oddlynew", strings.Repeat("s", 300), "", "acme")
}

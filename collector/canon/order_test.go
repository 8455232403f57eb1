package canon

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// appendBefore is Append as it was up to main ced7fc0: a linear look for a
// repeated key per key. Fingerprints made with it are stored, so Append
// must give its bytes for every value; it stays here as the reference.
func appendBefore(dst []byte, v *fastjson.Value) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		type kv struct {
			k string
			v *fastjson.Value
		}
		kvs := make([]kv, 0, o.Len())
		o.Visit(func(k []byte, v *fastjson.Value) {
			for i := range kvs {
				if kvs[i].k == string(k) {
					kvs[i].v = v
					return
				}
			}
			kvs = append(kvs, kv{string(k), v})
		})
		slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		dst = append(dst, '{')
		for i, e := range kvs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, []byte(e.k))
			dst = append(dst, ':')
			dst = appendBefore(dst, e.v)
		}
		return append(dst, '}')
	case fastjson.TypeArray:
		a, _ := v.Array()
		dst = append(dst, '[')
		for i, e := range a {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendBefore(dst, e)
		}
		return append(dst, ']')
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		return appendString(dst, s)
	default:
		return v.MarshalTo(dst)
	}
}

// checkSameAsBefore fails when Append and appendBefore differ on raw.
func checkSameAsBefore(t *testing.T, raw []byte) {
	t.Helper()
	var p1, p2 fastjson.Parser
	v1, err := p1.ParseBytes(raw)
	if err != nil {
		return
	}
	v2, _ := p2.ParseBytes(raw)
	if got, want := Append(nil, v1), appendBefore(nil, v2); !bytes.Equal(got, want) {
		t.Fatalf("Append(%s)\n = %s\nwant %s (as before)", raw, got, want)
	}
}

// keyPool holds the keys random objects are made of: few, so that they
// repeat within an object, with escapes and non-ASCII text written in
// several ways (the same key escaped and not must count as one).
var keyPool = []string{
	`a`, `b`, `A`, `aa`, `ab`, ``, `z`, `key`, `k1`, `k10`, `k2`,
	`\u0061`, `\n`, `\u000a`, `\"`, `\\`, `\/`, `/`, `\u0000`, `\t`,
	`é`, `\u00e9`, `e\u0301`, `日本`, `\u65e5\u672c`, `😀`, `\ud83d\ude00`, `\u007f`, `~`, ` `,
}

// randValue writes a random JSON value to b, objects and arrays nested up
// to depth.
func randValue(r *rand.Rand, b *strings.Builder, depth int) {
	k := r.IntN(8)
	if depth == 0 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		fmt.Fprintf(b, "%d", r.IntN(1000)-500)
	case 1:
		b.WriteString([]string{`1.50`, `-0`, `1e3`, `2E-2`}[r.IntN(4)])
	case 2:
		b.WriteString(`"` + keyPool[r.IntN(len(keyPool))] + `"`)
	case 3:
		b.WriteString([]string{`true`, `false`, `null`}[r.IntN(3)])
	case 4:
		b.WriteString(`{}`)
	case 5:
		b.WriteByte('[')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(", ")
			}
			randValue(r, b, depth-1)
		}
		b.WriteByte(']')
	default:
		b.WriteByte('{')
		for i := range r.IntN(12) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + keyPool[r.IntN(len(keyPool))] + `" : `)
			randValue(r, b, depth-1)
		}
		b.WriteByte('}')
	}
}

// TestAppend_SameAsBefore: on random objects, with repeated keys (the
// last value wins), nested objects and keys escaped or not, ASCII or not,
// the n log n Append writes the bytes the quadratic one wrote, so stored
// fingerprints still match.
func TestAppend_SameAsBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 22))
	for range 20000 {
		var b strings.Builder
		randValue(r, &b, 4)
		checkSameAsBefore(t, []byte(b.String()))
	}
	// Many keys: every ordering path (sorted, reversed, repeated).
	var b strings.Builder
	b.WriteByte('{')
	for i := range 3000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, (i*7919)%1000, i)
	}
	b.WriteByte('}')
	checkSameAsBefore(t, []byte(b.String()))
}

// TestAppend_SameAsBeforeOnCorpus: every JSON value of the project's
// captures and examples (each line of each file under the repository's
// testdata folders, and each whole file) canonicalizes as before.
func TestAppend_SameAsBeforeOnCorpus(t *testing.T) {
	n := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.Contains(filepath.ToSlash(path), "/testdata/") {
			return nil
		}
		switch filepath.Ext(path) {
		case ".json", ".jsonl", ".ndjson", ".txt", "":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checkSameAsBefore(t, data)
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			checkSameAsBefore(t, line)
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("only %d lines of corpus found", n)
	}
	t.Logf("%d lines compared", n)
}

// FuzzAppendSameAsBefore: what TestAppend_SameAsBefore checks, on the
// fuzzer's inputs.
func FuzzAppendSameAsBefore(f *testing.F) {
	f.Add([]byte(`{"b":1,"a":2,"b":3,"\u0062":4}`))
	f.Add([]byte(`{"z":{"y":1,"x":[{"b":1,"a":1,"a":2}]},"é":1,"\u00e9":2}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkSameAsBefore(t, raw)
	})
}

// BenchmarkAppendManyKeys: one object of n keys not in byte order
// ("k0".."k99999" for the 100,000 keys, about 2 MB, that adv22 sent),
// canonicalized by Append and, at 20,000 keys (it takes seconds per
// object beyond), by the quadratic Append it replaced.
func BenchmarkAppendManyKeys(b *testing.B) {
	for _, n := range []int{20000, 40000, 100000} {
		var sb strings.Builder
		sb.WriteByte('{')
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"k%d":"value number %d"`, i, i)
		}
		sb.WriteByte('}')
		raw := []byte(sb.String())
		for _, impl := range []struct {
			name string
			f    func([]byte, *fastjson.Value) []byte
		}{{"now", Append}, {"before", appendBefore}} {
			if impl.name == "before" && n > 20000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/keys=%d", impl.name, n), func(b *testing.B) {
				var p fastjson.Parser
				var dst []byte
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					v, err := p.ParseBytes(raw)
					if err != nil {
						b.Fatal(err)
					}
					dst = impl.f(dst[:0], v)
				}
			})
		}
	}
}

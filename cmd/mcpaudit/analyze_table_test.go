package main

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestWriteTable_AsTabwriter: the findings table writes what
// text/tabwriter wrote, byte for byte through printable, for cells that
// are empty, wide, multi-byte, invalid UTF-8, control and bidi
// characters, and cells tabwriter reads as more than text (which it then
// writes itself).
func TestWriteTable_AsTabwriter(t *testing.T) {
	f := func(rows [][tableCols]string) {
		t.Helper()
		var got, want bytes.Buffer
		writeTable(printable(&got), rows)
		writeTabwriter(printable(&want), rows)
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("rows %q:\nwriteTable wrote\n%q\ntabwriter\n%q", rows, got.Bytes(), want.Bytes())
		}
	}
	header := [tableCols]string{"TIME", "SEVERITY", "KIND", "SERVER", "DOCUMENT / KEY", "SUMMARY"}
	f([][tableCols]string{header})
	f([][tableCols]string{header, {"2026-12-05 01:02:03", "critical", "double_apply", "thegram", "reports/q3.gram / k1", "applied twice"}})
	f([][tableCols]string{header, {"", "", "", "", "", ""}, {"a", "", "ccc", "", "é€😀", ""}})
	pieces := []string{"", "a", "bb", "é", "€", "😀", "\x1b[31m", "\u202e", "\xff", "\xe2\x80", "\x80", "\t", "\n", "\v", "\f", " ", "reports/q3.gram / k"}
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 2000 {
		rows := [][tableCols]string{header}
		for range 1 + rng.IntN(5) {
			var r [tableCols]string
			for j := range r {
				var b strings.Builder
				for range rng.IntN(4) {
					p := pieces[rng.IntN(len(pieces))]
					// Mostly text the fast path writes; some rows go
					// through tabwriter.
					if n%4 != 0 && (strings.ContainsAny(p, "\t\n\v\f") || strings.IndexByte(p, 0xff) >= 0) {
						continue
					}
					b.WriteString(p)
				}
				r[j] = b.String()
			}
			rows = append(rows, r)
		}
		f(rows)
	}
}

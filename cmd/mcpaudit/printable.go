package main

import (
	"bytes"
	"io"
	"unicode"
)

// printable returns a writer for text meant for a terminal that shows each
// control character (but newline and tab), bidirectional control and
// invisible format character (a zero-width space or joiner) as
// '?'. The tables print what senders chose: document names and keys come
// from tool arguments, and an escape sequence in one would be run by the
// terminal of whoever lists the findings (set its title, write its
// clipboard, rewrite what was printed before).
func printable(w io.Writer) io.Writer { return printableWriter{w} }

type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	if bytes.IndexFunc(b, unsafeRune) < 0 {
		return p.w.Write(b)
	}
	out := bytes.Map(func(r rune) rune {
		if unsafeRune(r) {
			return '?'
		}
		return r
	}, b)
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

func unsafeRune(r rune) bool {
	// Unicode's format characters (Cf) hold every bidirectional control.
	return r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r))
}

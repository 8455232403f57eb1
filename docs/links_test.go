package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// anchors returns the anchors a Markdown file offers: GitHub's anchors of
// its headings (lowercase, punctuation dropped, spaces to hyphens, a repeated
// heading suffixed -1, -2...; headings inside code fences are not headings)
// and the ids of its <a id="..."> tags.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		h = strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")
		a := h
		for i := 1; out[a]; i++ {
			a = h + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// docRef is a reference to a section of docs/ as the code prints it to an
// operator: "docs/detection.md#time", or "runbooks.md#name" in a runbook URL.
var docRef = regexp.MustCompile(`(?:docs/)?\b([a-z]+\.md)#([a-z0-9_-]+)`)

// TestCodeDocLinks: every section of docs/ that the code names in what it
// prints or serves (log and status lines, errors, help, the page) exists, so
// that an operator who follows one lands on it. nop48 found
// api/statuslines.go sending them to docs/detection.md#sources, which no
// heading makes.
func TestCodeDocLinks(t *testing.T) {
	const root = ".."
	cache := map[string]map[string]bool{}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range docRef.FindAllStringSubmatch(line, -1) {
				file := filepath.Join(root, "docs", m[1])
				if _, err := os.Stat(file); err != nil {
					continue // another Markdown file (findings.md, a README)
				}
				if cache[file] == nil {
					cache[file] = anchors(t, file)
				}
				checked++
				if !cache[file][m[2]] {
					t.Errorf("%s:%d names docs/%s#%s, which no heading or <a id> of docs/%s makes", path, i+1, m[1], m[2], m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Errorf("only %d references to docs/ sections found in the code: is the pattern still right?", checked)
	}
}

// mdLink is a Markdown link: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// codeSpan is an inline code span: `...`.
var codeSpan = regexp.MustCompile("`[^`]*`")

// TestMarkdownLinks: every relative link of the README, docs/ and deploy/'s
// READMEs points at a file that exists and, with a #fragment into a Markdown
// file, at a section of it.
func TestMarkdownLinks(t *testing.T) {
	files := []string{"../README.md"}
	for _, g := range []string{"*.md", "../deploy/*/README.md"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	cache := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fence := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
			}
			if fence {
				continue
			}
			// A link in an inline code span is code (a regular expression), not a link.
			line = codeSpan.ReplaceAllString(line, "")
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				p, frag, _ := strings.Cut(target, "#")
				file := f
				if p != "" {
					file = filepath.Join(filepath.Dir(f), p)
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d links %s: no such file", f, i+1, target)
					continue
				}
				if frag == "" || !strings.HasSuffix(file, ".md") {
					continue
				}
				if cache[file] == nil {
					cache[file] = anchors(t, file)
				}
				if !cache[file][frag] {
					t.Errorf("%s:%d links %s: %s has no section #%s", f, i+1, target, file, frag)
				}
			}
		}
	}
}

package report

import (
	"embed"
	"encoding/json"
	"fmt"
	htmltemplate "html/template"
	"io"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

//go:embed templates
var templates embed.FS

// Formats of Render.
var Formats = []string{"html", "md", "json"}

// breakdown is one "bad events by" table.
type breakdown struct {
	Title string
	Rows  []Row
}

func funcs() map[string]any {
	return map[string]any{
		"f4":       func(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) },
		"raw":      func(f *float64) string { return strconv.FormatFloat(*f, 'g', -1, 64) },
		"pct":      Percent,
		"left":     BudgetLeft,
		"deref":    func(f *float64) float64 { return *f },
		"date":     func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
		"datetime": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 MST") },
		"states":   func() []audit.WriteState { return audit.WriteStates },
		"counted":  Counted,
		"formula":  func() string { return Formula },
		"good":     func(m map[audit.WriteState]int64) int64 { return m[audit.StateDurable] + m[audit.StateResolved] },
		"count":    func(m map[audit.WriteState]int64, s audit.WriteState) int64 { return m[s] },
		"met":      func(r *Report) bool { return r.SLI != nil && *r.SLI >= r.Target },
		"share": func(n, total int64) string {
			if total == 0 {
				return ""
			}
			return Percent(float64(n) / float64(total))
		},
		"breakdowns": func(r *Report) []breakdown {
			return []breakdown{{"server", r.ByServer}, {"tool", r.ByTool}, {"client", r.ByClient}, {"document", r.ByDocument}}
		},
		"bars": BarsSVG,
		"burndown": func(r *Report) htmltemplate.HTML {
			if r.Target >= 1 && Counted(r.Counts) > 0 {
				return NoBudgetSVG(r.BadEvents)
			}
			start := r.Since
			if len(r.Days) > 0 {
				start = r.Days[0].Start
			}
			return BurnDownSVG(r.BurnDown, start, r.Until)
		},
		"daysvg": func(r *Report) htmltemplate.HTML { return DaysSVG(r.Days) },
		"md":     markdownText,
		// nowrite: the window holds no write at all (Report.Stored says
		// where the stored ones are, if any).
		"nowrite": func(r *Report) bool { return api.NoWrite(r.Counts) },
		"stamp":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
	}
}

// markdownText returns s as literal text for one line of Markdown, such as a
// table cell. Names in the report (documents, servers, tools, clients, tenants)
// come from the agents' payloads: CommonMark passes raw HTML through (a
// document named "<script>..." ran in whatever renders the report) and reads
// *, _, `, [ ] and entities (&lt;) as markup, and a | ends a table cell. Each of
// those characters is backslash-escaped, which every CommonMark renderer shows
// as the character itself; an underscore between two letters or digits opens
// no emphasis and stays as it is, so that ids such as doc_3446f79a read
// plainly. Line breaks become spaces.
func markdownText(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch r {
		case '\\', '`', '*', '[', ']', '<', '>', '|', '&':
			b.WriteByte('\\')
		case '_':
			if i == 0 || i == len(s)-1 || !isAlnum(s[i-1]) || !isAlnum(s[i+1]) {
				b.WriteByte('\\')
			}
		case '\n', '\r':
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

var (
	htmlTmpl = htmltemplate.Must(htmltemplate.New("report.html").Funcs(funcs()).ParseFS(templates, "templates/report.html"))
	mdTmpl   = texttemplate.Must(texttemplate.New("report.md").Funcs(funcs()).ParseFS(templates, "templates/report.md"))
)

// Render writes r in format: html (one self-contained file), md or json.
func Render(w io.Writer, r *Report, format string) error {
	var err error
	switch format {
	case "html":
		err = htmlTmpl.Execute(w, r)
	case "md":
		err = mdTmpl.Execute(w, r)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	default:
		return fmt.Errorf("cannot render report: unknown format %q (want html, md or json)", format)
	}
	if err != nil {
		return fmt.Errorf("cannot render report: %w", err)
	}
	return nil
}

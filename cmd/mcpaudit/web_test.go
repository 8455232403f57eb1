package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/chromedp"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/report"
)

// sampleWithTail is the bundled sample capture and a call two hours after
// its last one, so that every verification window has closed in event time
// and the server's findings are final as soon as they are committed.
func sampleWithTail(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../testdata/sample/mixed.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	// The sample's deliberately bad lines are left out: analyze, which the
	// test compares with, stops at them in a single input.
	var out []byte
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) != nil || m["request"] == nil {
			continue
		}
		if ts, ok := m["time"].(string); !ok {
			continue
		} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			continue
		}
		out = append(append(out, l...), '\n')
	}
	tail := `{"time":"2026-11-02T12:00:00.000Z","server":"thegram","session":"s-tail","request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"duration_ms":5,"response":{"jsonrpc":"2.0","id":1,"result":{"isError":false,"structuredContent":{"projects":[]}}}}`
	return append(out, tail+"\n"...)
}

// loadedServer starts a server and loads the sample capture into it; it
// returns once the API holds exactly analyze's findings of that capture.
func loadedServer(t *testing.T) (*server, []audit.Finding) {
	t.Helper()
	cfg := testConfig(t, t.TempDir())
	s := startTest(t, cfg)
	data := sampleWithTail(t)
	resp := postCalls(t, s, data, false)
	resp.Body.Close()
	want := analyzeFindings(t, cfg, data)
	waitFindings(t, s, want)
	return s, want
}

// browser starts headless Chromium (Debian's chromium package), with the
// flags that work on this kind of machine.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: scripts/test.sh installs Debian's chromium package")
		}
		t.Skip("SKIPPING the page tests: chromium is not installed (apt-get install chromium, or run make test)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	// The first action starts the browser, which lives as long as ctx.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("cannot start chromium: %v", err)
	}
	return ctx
}

// screenshotDir is where the page tests leave their screenshots:
// $MCPAUDIT_SCREENSHOTS when set, else a directory under the test's temp
// dir (logged).
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("MCPAUDIT_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	// A page still loading after a form's redirect has no layout yet:
	// Chromium answers "Cannot take screenshot with 0 width" (seen under
	// load right after the ack button). Wait for the load to complete and
	// ask again for a while before failing.
	var png []byte
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready, rerr := chromedp.Run(timed(t, ctx), chromedp.Evaluate[string](`document.readyState`))
		if rerr == nil && ready == "complete" {
			if png, err = chromedp.Run(timed(t, ctx), chromedp.FullScreenshot(100)); err == nil {
				break
			}
		} else if rerr != nil {
			err = rerr
		} else {
			err = fmt.Errorf("document.readyState %q", ready)
		}
		if time.Now().After(deadline) {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// timed bounds one browser action: the context of the browser itself must
// not time out.
func timed(t *testing.T, ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// do runs browser steps in order.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(timed(t, ctx), steps...); err != nil {
		t.Fatal(err)
	}
}

// click clicks the element sel, asking again while Chromium answers that
// the node chromedp found is gone ("No node with given id found", "Node is
// detached from document"): after a form's POST and its redirect, chromedp
// may still hold the node ids of the page left, and the element found by
// the selector is then one of it (TestWeb/ack_button_changes_the_state
// failed so under load, flk49, clicking #btn-resolve right after the ack
// button's redirect). Those errors come before any mouse event is sent
// (chromedp's nodeCenter), so a click is never made twice.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := chromedp.Do(timed(t, ctx), chromedp.Click(css(sel)))
		if err == nil {
			return
		}
		var e *cdproto.Error
		if !errors.As(err, &e) || (e.Message != "No node with given id found" && e.Message != "Node is detached from document") ||
			time.Now().After(deadline) {
			t.Fatalf("click %s: %v", sel, err)
		}
	}
}

// get runs one browser action and returns its value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(timed(t, ctx), a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitText waits until the text of the element sel starts with prefix, and
// returns it (the last text read when it never does). It reads through
// JavaScript, by selector each time: after a form's POST and its redirect,
// chromedp's node ids of the page left may be stale for a moment ("No node
// with given id found", seen once in CI), and the old page answers with its
// old text until the new one is loaded.
func waitText(t *testing.T, ctx context.Context, sel, prefix string) string {
	t.Helper()
	var text string
	js := `(document.querySelector(` + strconv.Quote(sel) + `) || {}).textContent || ""`
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		v, err := chromedp.Run(timed(t, ctx), chromedp.Evaluate[string](js))
		if err != nil {
			continue
		}
		if text = v; strings.HasPrefix(text, prefix) {
			break
		}
	}
	return text
}

// waitLocation waits until the browser's URL holds part.
func waitLocation(t *testing.T, ctx context.Context, part string) string {
	t.Helper()
	var loc string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// While the browser navigates, the page being left may answer
		// "target navigated or closed": asked again, the new one answers.
		l, err := chromedp.Run(timed(t, ctx), chromedp.Location())
		if err != nil {
			continue
		}
		if loc = l; !strings.Contains(loc, part) {
			continue
		}
		// The new page has loaded before the caller looks at it.
		if state, err := chromedp.Run(timed(t, ctx), chromedp.Evaluate[string](`document.readyState`)); err == nil && state == "complete" {
			return loc
		}
	}
	t.Fatalf("the browser is at %s, not at a loaded page with %q in its URL", loc, part)
	return ""
}

// css is a CSS selector.
func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// ofKind returns the findings of one kind.
func ofKind(fs []audit.Finding, k audit.Kind) []audit.Finding {
	var out []audit.Finding
	for _, f := range fs {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

func TestWeb(t *testing.T) {
	s, want := loadedServer(t)
	base := "http://" + s.apiAddr
	doubles := ofKind(want, audit.KindDoubleAppliedWrite)
	if len(doubles) < 2 {
		t.Fatalf("the sample capture has %d double-applied writes; the test needs two", len(doubles))
	}

	// The first done-when, as it is written: chromium's own
	// --dump-dom of / lists the double-applied documents.
	t.Run("dump-dom lists the double-applied documents", func(t *testing.T) {
		path, err := exec.LookPath("chromium")
		if err != nil {
			browser(t) // skips or fails as the other page tests do
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--no-first-run", "--user-data-dir="+t.TempDir(), "--dump-dom", base+"/").Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom: %v", err)
		}
		dom := html.UnescapeString(string(out))
		for _, f := range doubles {
			if f.Document != "" && !strings.Contains(dom, ">"+f.Document+"</a>") {
				t.Errorf("the dumped DOM of / does not list %s", f.Document)
			}
		}
	})

	ctx := browser(t)
	shots := screenshotDir(t)

	t.Run("index renders with counts and status", func(t *testing.T) {
		do(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#findings")))
		kinds := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#findings tr.finding")].map(r => r.dataset.kind)`))
		counts := get(t, ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#counts tr[data-kind]")].map(r => [r.dataset.kind, r.cells[5].textContent]))`))
		sli := get(t, ctx, chromedp.Text(css("#sli")))
		screenshot(t, ctx, shots, "index")
		if len(kinds) != min(len(want), 50) {
			t.Errorf("/ lists %d findings, want %d", len(kinds), min(len(want), 50))
		}
		for _, k := range audit.Kinds {
			n := len(ofKind(want, k))
			if got := counts[string(k)]; (n == 0 && got != "") || (n > 0 && got != strconv.Itoa(n)) {
				t.Errorf("count of %s = %q, want %d", k, got, n)
			}
		}
		if sli == "" {
			t.Error("no SLI at the top of /")
		}
	})

	t.Run("filters", func(t *testing.T) {
		do(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#filters")),
			chromedp.SetValue(css(`#filters select[name=kind]`), string(audit.KindDoubleAppliedWrite)),
			chromedp.Click(css(`#filters button`)))
		loc := waitLocation(t, ctx, "kind=")
		do(t, ctx, chromedp.WaitVisible(css("#findings")))
		kinds := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#findings tr.finding")].map(r => r.dataset.kind)`))
		screenshot(t, ctx, shots, "index-filtered")
		if !strings.Contains(loc, "kind=double_applied_write") || len(kinds) != len(doubles) {
			t.Fatalf("after filtering by kind at %s: %d rows %v, want %d double_applied_write", loc, len(kinds), kinds, len(doubles))
		}
		for _, k := range kinds {
			if k != string(audit.KindDoubleAppliedWrite) {
				t.Errorf("a %s row passed the kind filter", k)
			}
		}
		// Severity, server and document filters from the URL agree with
		// the API.
		for _, q := range []string{"severity=critical", "server=oddlynew", "document=" + url.QueryEscape(doubles[0].Document),
			"session=" + url.QueryEscape(doubles[0].Session), "since=" + url.QueryEscape(doubles[1].Time.Format(time.RFC3339Nano))} {
			do(t, ctx, chromedp.Navigate(base+"/?"+q), chromedp.WaitVisible(css("#findings")))
			ids := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#findings tr.finding")].map(r => r.dataset.id)`))
			var apiIDs []string
			for _, f := range apiFindings(t, s, q) {
				apiIDs = append(apiIDs, f.ID())
			}
			slices.Sort(ids)
			slices.Sort(apiIDs)
			if len(apiIDs) == 0 || !slices.Equal(ids, apiIDs) {
				t.Errorf("/?%s shows %v, the API %v", q, ids, apiIDs)
			}
		}
	})

	t.Run("document timeline highlights both applications", func(t *testing.T) {
		for i, f := range doubles {
			do(t, ctx, chromedp.Navigate(base+"/documents/"+url.PathEscape(f.Document)), chromedp.WaitVisible(css("#timeline")))
			evidence := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline tr.call.evidence")].filter(r => r.dataset.kinds.split(" ").includes("double_applied_write")).map(r => r.dataset.call)`))
			body := get(t, ctx, chromedp.Evaluate[string](`document.body.innerText`))
			if i == 0 {
				screenshot(t, ctx, shots, "document")
			}
			if !strings.Contains(body, "double_applied_write") {
				t.Errorf("/documents/%s does not name double_applied_write", f.Document)
			}
			for _, c := range f.Calls {
				if !slices.Contains(evidence, c) {
					t.Errorf("/documents/%s: application %s is not highlighted (highlighted: %v)", f.Document, c, evidence)
				}
			}
		}
	})

	t.Run("timeline shows revisions and hashes as mcpaudit timeline", func(t *testing.T) {
		// A dash for a side the payloads do not tell, one alone when
		// neither is told: the CLI's "-" is the page's "—".
		want := func(before, after string) string {
			if before == "" && after == "" {
				return "—"
			}
			return cmp.Or(before, "—") + " → " + cmp.Or(after, "—")
		}
		for _, f := range doubles {
			code, out, errs := cliRun("timeline", "--api-url", base, "--format", "json", f.Document)
			var tl api.Timeline
			if code != 0 || json.Unmarshal([]byte(out), &tl) != nil {
				t.Fatalf("mcpaudit timeline %s: exit %d: %s%s", f.Document, code, errs, out)
			}
			do(t, ctx, chromedp.Navigate(base+"/documents/"+url.PathEscape(f.Document)), chromedp.WaitVisible(css("#timeline")))
			cells := get(t, ctx, chromedp.Evaluate[map[string][]string](`Object.fromEntries([...document.querySelectorAll("#timeline tr.call")].map(r => [r.dataset.call, [r.cells[5].textContent, r.cells[6].textContent]]))`))
			calls, told := 0, 0
			for _, e := range tl.Events {
				if e.Type != audit.EventCall {
					continue
				}
				calls++
				if e.RevisionBefore+e.RevisionAfter+e.HashBefore+e.HashAfter != "" {
					told++
				}
				rev, hash := want(e.RevisionBefore, e.RevisionAfter), want(e.HashBefore, e.HashAfter)
				if got := cells[e.CallID]; len(got) != 2 || got[0] != rev || got[1] != hash {
					t.Errorf("%s: call %s shows revision and hash %q, mcpaudit timeline %q and %q", f.Document, e.CallID, got, rev, hash)
				}
			}
			if calls != len(cells) || told == 0 {
				t.Errorf("%s: the page shows %d calls, mcpaudit timeline %d (%d with a revision or hash)", f.Document, len(cells), calls, told)
			}
		}
	})

	t.Run("status bar says what mcpaudit status says", func(t *testing.T) {
		// mcpaudit status's first two lines: "...; every acknowledged call
		// judged: yes|no" and the line on the judged writes still pending.
		// Read before and after the page, so that a change between them
		// is not taken for a difference.
		cli := func() (judged, pending string) {
			code, out, errs := cliRun("status", "--api-url", base)
			lines := strings.SplitN(out, "\n", 3)
			if code != 0 || len(lines) < 3 {
				t.Fatalf("mcpaudit status: exit %d: %s%s", code, errs, out)
			}
			_, judged, _ = strings.Cut(lines[0], api.JudgedLabel+": ")
			return judged, lines[1]
		}
		var judged, title, items string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			j1, p1 := cli()
			do(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#status")))
			judged = get(t, ctx, chromedp.Text(css("#judged")))
			title = get(t, ctx, chromedp.AttributeValue(css("#pending"), "title")).Value
			items = get(t, ctx, chromedp.Text(css("#status")))
			j2, p2 := cli()
			if j1 == j2 && p1 == p2 && judged == j1 && title == p1 || time.Now().After(deadline) {
				if judged != j1 || title != p1 || j1 != j2 || p1 != p2 {
					t.Errorf("the page says judged %q, pending %q; mcpaudit status %q then %q, %q then %q", judged, title, j1, j2, p1, p2)
				}
				break
			}
		}
		screenshot(t, ctx, shots, "status-bar")
		if !strings.Contains(items, api.JudgedLabel+" "+judged) || !strings.Contains(items, "judged writes pending") {
			t.Errorf("the status bar reads %q", items)
		}
	})

	t.Run("raw payload on demand", func(t *testing.T) {
		f := doubles[0]
		do(t, ctx, chromedp.Navigate(base+"/documents/"+url.PathEscape(f.Document)), chromedp.WaitVisible(css("#timeline")),
			chromedp.Click(css(`#timeline tr.evidence details summary`)), chromedp.WaitVisible(css(`#timeline details[open] pre.arguments`)))
		args := get(t, ctx, chromedp.Text(css(`#timeline details[open] pre.arguments`)))
		screenshot(t, ctx, shots, "document-payload")
		if !strings.Contains(args, "path") && !strings.Contains(args, "code") {
			t.Errorf("the opened payload shows %q", args)
		}
	})

	t.Run("session timeline", func(t *testing.T) {
		f := doubles[0]
		do(t, ctx, chromedp.Navigate(base+"/sessions/"+url.PathEscape(f.Session)), chromedp.WaitVisible(css("#timeline")))
		times := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline tr.call")].map(r => r.cells[0].firstChild.textContent)`))
		evidence := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline tr.call.evidence")].map(r => r.dataset.call)`))
		screenshot(t, ctx, shots, "session")
		if len(times) == 0 || !slices.IsSorted(times) {
			t.Errorf("session %s: calls %v, want some, in time order", f.Session, times)
		}
		for _, c := range f.Calls {
			if !slices.Contains(evidence, c) {
				t.Errorf("session %s: evidence call %s not highlighted", f.Session, c)
			}
		}
	})

	t.Run("ack button changes the state", func(t *testing.T) {
		f := doubles[0]
		do(t, ctx, chromedp.Navigate(base+"/findings/"+f.ID()), chromedp.WaitVisible(css("#lifecycle")))
		next := get(t, ctx, chromedp.Text(css("#next-step")))
		do(t, ctx, chromedp.SendKeys(css(`#lifecycle input[name=note]`), "checked the document by hand"),
			chromedp.SendKeys(css(`#lifecycle input[name=by]`), "tester"),
			chromedp.Click(css("#btn-ack")))
		state := waitText(t, ctx, "#state", "acknowledged")
		screenshot(t, ctx, shots, "finding-acknowledged")
		if !strings.HasPrefix(state, "acknowledged by tester") || !strings.Contains(state, "checked the document by hand") {
			t.Errorf("state after the ack button: %q", state)
		}
		if next == "" {
			t.Error("no safe next step on the finding's page")
		}
		var d api.FindingDetail
		getJSON(t, base+"/api/v1/findings/"+f.ID(), &d)
		if d.Finding.StateOf() != audit.FindingAcknowledged || len(d.History) != 1 || d.History[0].By != "tester" {
			t.Errorf("the API after the ack button: %+v", d)
		}
		// Resolve with the button the page now shows; then only reopen is
		// offered.
		click(t, ctx, "#btn-resolve")
		do(t, ctx, chromedp.WaitVisible(css("#btn-reopen")))
		state = get(t, ctx, chromedp.Text(css("#state")))
		buttons := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#lifecycle button")].map(b => b.id)`))
		if !strings.HasPrefix(state, "resolved") || !slices.Equal(buttons, []string{"btn-reopen"}) {
			t.Errorf("after resolve: state %q, buttons %v", state, buttons)
		}
	})

	t.Run("slo view", func(t *testing.T) {
		until := doubles[len(doubles)-1].Time.Add(3 * time.Hour).UTC().Format(time.RFC3339Nano)
		do(t, ctx, chromedp.Navigate(base+"/slo?until="+url.QueryEscape(until)), chromedp.WaitVisible(css("#windows")))
		windows := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#windows tr[data-window]")].map(r => r.dataset.window)`))
		sli30 := get(t, ctx, chromedp.Text(css(`#windows tr[data-window="30d"] td.sli`)))
		svgs := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart").length`))
		screenshot(t, ctx, shots, "slo")
		if !slices.Equal(windows, []string{"1h", "1d", "7d", "30d"}) || svgs < 2 {
			t.Errorf("/slo shows windows %v and %d charts", windows, svgs)
		}
		var slo api.SLO
		getJSON(t, base+"/api/v1/slo?window=30d&until="+url.QueryEscape(until), &slo)
		if slo.SLI == nil || sli30 != strconv.FormatFloat(*slo.SLI, 'f', 4, 64) {
			t.Errorf("/slo 30d SLI %q, the API's %v", sli30, slo.SLI)
		}
	})

	t.Run("no broken internal links", func(t *testing.T) {
		checkLinks(t, base, "/", 400)
	})
}

// hrefs finds the links of a page.
var hrefs = regexp.MustCompile(`(?:href|action|formaction|src)="([^"]*)"`)

// checkLinks crawls the page's own links from start, fetching up to limit
// pages, and fails on any that does not answer 200.
func checkLinks(t *testing.T, base, start string, limit int) {
	t.Helper()
	seen := map[string]bool{start: true}
	queue := []string{start}
	fetched := 0
	for len(queue) > 0 && fetched < limit {
		p := queue[0]
		queue = queue[1:]
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fetched++
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", p, resp.Status)
			continue
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			continue
		}
		for _, m := range hrefs.FindAllSubmatch(b, -1) {
			u := html.UnescapeString(string(m[1]))
			if strings.HasPrefix(u, "?") {
				u = strings.SplitN(p, "?", 2)[0] + u
			}
			if !strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") || seen[u] ||
				strings.Contains(u, "/ack") || strings.Contains(u, "/resolve") || strings.Contains(u, "/reopen") || u == "/logout" || u == "/login" {
				continue // external, seen, or a form that changes state
			}
			seen[u] = true
			queue = append(queue, u)
		}
	}
	if fetched < 20 {
		t.Errorf("the crawl reached only %d pages", fetched)
	}
	t.Logf("checked %d pages, %d links", fetched, len(seen))
}

// TestReportMatchesAPI is the last done-when, and the report's
// numbers against /api/v1/slo and /api/v1/findings for the same window.
func TestReportMatchesAPI(t *testing.T) {
	s, want := loadedServer(t)
	base := "http://" + s.apiAddr
	var slo api.SLO
	getJSON(t, base+"/api/v1/slo?window=3650d", &slo)
	if slo.SLI == nil {
		t.Fatal("the API has no SLI for the sample")
	}
	report1 := func(args ...string) []byte {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"report"}, args...), nil, &out, &errb); code != 0 {
			t.Fatalf("mcpaudit report %v: exit %d: %s", args, code, errb.String())
		}
		return out.Bytes()
	}
	t.Run("html SLI equals the API's to 4 decimals", func(t *testing.T) {
		page := report1("--window", "3650d", "--format", "html", "--data-dir", s.cfg.Serve.DataDir)
		m := regexp.MustCompile(`id="sli"[^>]*>([0-9.]+)<`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no SLI in the HTML report:\n%.2000s", page)
		}
		if got, w := string(m[1]), strconv.FormatFloat(*slo.SLI, 'f', 4, 64); got != w {
			t.Errorf("report SLI %s, /api/v1/slo?window=3650d %s", got, w)
		}
		// One self-contained file: nothing to fetch.
		if regexp.MustCompile(`(?i)<(script|link|img)\b|src=|url\(`).Match(page) {
			t.Error("the HTML report references something outside itself")
		}
		if !bytes.Contains(page, []byte("<svg")) {
			t.Error("the HTML report has no inline SVG chart")
		}
	})
	for _, src := range []struct{ name, flag, value string }{{"data dir", "--data-dir", s.cfg.Serve.DataDir}, {"server", "--server", base}} {
		t.Run("json numbers equal the API's from the "+src.name, func(t *testing.T) {
			var r report.Report
			if err := json.Unmarshal(report1("--window", "3650d", "--format", "json", src.flag, src.value), &r); err != nil {
				t.Fatal(err)
			}
			for _, st := range audit.WriteStates {
				if r.Counts[st] != slo.Counts[st] {
					t.Errorf("report counts %s = %d, API %d", st, r.Counts[st], slo.Counts[st])
				}
			}
			if *r.SLI != *slo.SLI || *r.ErrorBudgetRemaining != *slo.ErrorBudgetRemaining {
				t.Errorf("report SLI %v budget %v, API %v %v", *r.SLI, *r.ErrorBudgetRemaining, *slo.SLI, *slo.ErrorBudgetRemaining)
			}
			fs := apiFindings(t, s, "since="+url.QueryEscape(r.Since.Format(time.RFC3339Nano))+"&until="+url.QueryEscape(r.Until.Format(time.RFC3339Nano)))
			if int(r.FindingsTotal) != len(fs) || len(fs) != len(want) {
				t.Errorf("report has %d findings, the API %d, analyze %d", r.FindingsTotal, len(fs), len(want))
			}
			for _, k := range r.Findings {
				if n := len(ofKind(fs, k.Kind)); int(k.Total) != n || k.Open != k.Total {
					t.Errorf("report: %d %s (%d open), the API %d", k.Total, k.Kind, k.Open, n)
				}
			}
			if r.BadEvents != slo.Counts[audit.StateUnverified]+slo.Counts[audit.StateDoubleApplied] {
				t.Errorf("bad events %d, API unverified+double_applied %d", r.BadEvents, slo.Counts[audit.StateUnverified]+slo.Counts[audit.StateDoubleApplied])
			}
			var byCause int64
			for _, c := range r.ByCause {
				byCause += c.Count
			}
			if byCause != r.BadEvents || len(r.ByClient) == 0 || len(r.RetryMix) == 0 || len(r.WorstDays) == 0 {
				t.Errorf("breakdowns: %d by cause of %d bad, %d clients, %d retry actions, %d worst days",
					byCause, r.BadEvents, len(r.ByClient), len(r.RetryMix), len(r.WorstDays))
			}
		})
	}
	t.Run("markdown", func(t *testing.T) {
		md := string(report1("--window", "3650d", "--format", "md", "--data-dir", s.cfg.Serve.DataDir))
		if !strings.Contains(md, fmt.Sprintf("| SLI (target 0.9990) | %.4f", *slo.SLI)) {
			t.Errorf("the Markdown report does not state the SLI %.4f:\n%.600s", *slo.SLI, md)
		}
	})
}

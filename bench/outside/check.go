package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// tailCmd writes, after each server's last call in the call records of
// -in (what `mcpaudit export` wrote), one read this much later (session
// s-tail), so that `mcpaudit analyze` of both files closes the windows
// serve closed by its clock: analyze has only event time.
func tailCmd(args []string) error {
	fs := flag.NewFlagSet("tail", flag.ExitOnError)
	in := fs.String("in", "calls.ndjson", "call records (mcpaudit export)")
	out := fs.String("out", "tail.ndjson", "the reads are written here")
	tail := fs.Duration("tail", 10*time.Minute, "after each server's last call, one read this much later")
	fs.Parse(args)
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	last := map[string]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	n := 0
	for sc.Scan() {
		var r struct {
			Time   time.Time `json:"time"`
			Server string    `json:"server"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s:%d: %w", *in, n+1, err)
		}
		n++
		if r.Time.After(last[r.Server]) {
			last[r.Server] = r.Time
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var servers []string
	for s := range last {
		servers = append(servers, s)
	}
	sort.Strings(servers)
	o, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(o)
	for i, s := range servers {
		tool := "gram_projects"
		if strings.HasPrefix(s, "oddlynew") {
			tool = "guide"
		}
		json.NewEncoder(w).Encode(map[string]any{"time": last[s].Add(*tail).UTC().Format(time.RFC3339Nano), "server": s, "session": "s-tail",
			"request":  map[string]any{"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": map[string]any{}}},
			"response": map[string]any{"jsonrpc": "2.0", "id": i + 1, "result": map[string]any{"content": []any{}}}})
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d calls read, %d tail reads written\n", n, len(servers))
	return o.Close()
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

func readLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var x T
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

type apiCall struct {
	Time    time.Time `json:"time"`
	CallID  string    `json:"call_id"`
	Server  string    `json:"server"`
	Session string    `json:"session"`
	Tool    string    `json:"tool"`
	Outcome string    `json:"outcome"`
	Source  string    `json:"source"`
}

func allCalls(api string) ([]apiCall, error) {
	var all []apiCall
	cursor := ""
	for {
		var page struct {
			Calls      []apiCall `json:"calls"`
			NextCursor string    `json:"next_cursor"`
		}
		if err := getJSON(api+"/api/v1/calls?limit=1000&cursor="+url.QueryEscape(cursor), &page); err != nil {
			return nil, err
		}
		all = append(all, page.Calls...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

func allFindings(api string) ([]map[string]any, error) {
	var all []map[string]any
	cursor := ""
	for {
		var page struct {
			Findings   []map[string]any `json:"findings"`
			NextCursor string           `json:"next_cursor"`
		}
		if err := getJSON(api+"/api/v1/findings?limit=1000&cursor="+url.QueryEscape(cursor), &page); err != nil {
			return nil, err
		}
		all = append(all, page.Findings...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// checkCmd prints the pass's figures: stored once, findings against
// analyze, alerts, pages.
func checkCmd(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	dir := fs.String("dir", ".", "directory of sent.ndjson, spans*.ndjson and analyze.json (one or more, comma-separated)")
	api := fs.String("api", "http://127.0.0.1:21364", "serve's API")
	prom := fs.String("prom", "", "Prometheus URL (empty: no alert check)")
	since := fs.String("since", "", "RFC 3339 start of the pass, for the alert check")
	chromium := fs.String("chromium", "/usr/bin/chromium", "Chromium binary (empty: no page check)")
	what := fs.String("what", "stored,findings,alerts,web", "checks to run")
	fs.Parse(args)
	do := func(s string) bool { return strings.Contains(*what, s) }
	calls, err := allCalls(*api)
	if err != nil {
		return err
	}
	fmt.Printf("stored calls (API): %d\n", len(calls))
	if do("stored") {
		checkStored(strings.Split(*dir, ","), calls)
	}
	findings, err := allFindings(*api)
	if err != nil {
		return err
	}
	fmt.Printf("served findings: %d\n", len(findings))
	if do("findings") {
		if err := checkFindings(filepath.Join(strings.Split(*dir, ",")[0], "analyze.json"), findings); err != nil {
			return err
		}
	}
	if do("alerts") && *prom != "" {
		storedBy := map[string]int{}
		for _, c := range calls {
			storedBy[c.Server]++
		}
		if err := checkAlerts(*prom, *since, findings, storedBy); err != nil {
			return err
		}
	}
	if do("web") && *chromium != "" {
		if err := checkWeb(*api, *chromium, findings); err != nil {
			return err
		}
	}
	return nil
}

func checkStored(dirs []string, calls []apiCall) {
	ids := map[string]int{}
	byKey := map[string]int{}
	bySrvTool := map[string]int{}
	for _, c := range calls {
		ids[c.CallID]++
		byKey[fmt.Sprintf("%s|%s|%s|%d", c.Server, c.Session, c.Tool, c.Time.UnixMilli())]++
		bySrvTool[c.Server+"|"+c.Tool]++
	}
	dup := 0
	for _, n := range ids {
		if n > 1 {
			dup++
		}
	}
	fmt.Printf("  call ids listed more than once: %d\n", dup)
	var acked, failed []spanRef
	var sentAll []sent
	for _, d := range dirs {
		a, _ := readLines[spanRef](filepath.Join(d, "spans.ndjson"))
		f, _ := readLines[spanRef](filepath.Join(d, "spans-failed.ndjson"))
		s, _ := readLines[sent](filepath.Join(d, "sent.ndjson"))
		acked, failed, sentAll = append(acked, a...), append(failed, f...), append(sentAll, s...)
	}
	count := func(refs []spanRef) (once, missing, twice int, miss []string) {
		for _, r := range refs {
			switch n := byKey[fmt.Sprintf("%s|%s|%s|%d", r.Server, r.Session, r.Tool, r.TimeMS)]; {
			case n == 1:
				once++
			case n == 0:
				missing++
				if len(miss) < 10 {
					miss = append(miss, fmt.Sprintf("%s %s %s %s", r.Provider, r.Session, r.Tool, time.UnixMilli(r.TimeMS).UTC().Format("15:04:05.000")))
				}
			default:
				twice++
			}
		}
		return
	}
	o, m, t, miss := count(acked)
	fmt.Printf("  OTel spans acknowledged: %d; stored once %d, missing %d, more than once %d\n", len(acked), o, m, t)
	for _, s := range miss {
		fmt.Printf("    missing: %s\n", s)
	}
	o, m, t, _ = count(failed)
	fmt.Printf("  OTel spans refused (export error): %d; stored once %d (sent again by a later batch or stored before the error), missing %d, more than once %d\n", len(failed), o, m, t)
	made := map[string]int{}
	for _, s := range sentAll {
		if s.Path != "otel" {
			made[s.Server+"|"+s.Tool]++
		}
	}
	keys := make([]string, 0, len(made))
	for k := range made {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	totalMade, totalStored := 0, 0
	for _, k := range keys {
		totalMade += made[k]
		totalStored += bySrvTool[k]
		if made[k] != bySrvTool[k] {
			fmt.Printf("  %s: %d calls made, %d stored\n", k, made[k], bySrvTool[k])
		}
	}
	fmt.Printf("  proxy and wrap: %d tools/call made, %d stored under their servers and tools\n", totalMade, totalStored)
}

// strip removes the fields of a served finding that analyze does not print
// (its lifecycle).
func strip(api, ref map[string]any) (map[string]any, []string) {
	out := map[string]any{}
	var dropped []string
	for k, v := range api {
		if _, ok := ref[k]; ok {
			out[k] = v
		} else {
			dropped = append(dropped, k)
		}
	}
	return out, dropped
}

func checkFindings(analyzeFile string, served []map[string]any) error {
	ref, err := readLines[map[string]any](analyzeFile)
	if err != nil {
		return err
	}
	byID := map[string]map[string]any{}
	for _, f := range ref {
		byID[fmt.Sprint(f["id"])] = f
	}
	seen := map[string]bool{}
	equal, differ, extra := 0, 0, 0
	droppedKeys := map[string]bool{}
	kinds := map[string][2]int{}
	for _, f := range served {
		id := fmt.Sprint(f["id"])
		seen[id] = true
		k := fmt.Sprint(f["kind"])
		c := kinds[k]
		c[0]++
		kinds[k] = c
		r, ok := byID[id]
		if !ok {
			extra++
			if extra <= 10 {
				b, _ := json.Marshal(f)
				fmt.Printf("    served, not by analyze: %s\n", b)
			}
			continue
		}
		s, dropped := strip(f, r)
		for _, d := range dropped {
			droppedKeys[d] = true
		}
		if reflect.DeepEqual(s, r) {
			equal++
		} else {
			differ++
			if differ <= 10 {
				a, _ := json.Marshal(s)
				b, _ := json.Marshal(r)
				fmt.Printf("    differs:\n      served  %s\n      analyze %s\n", a, b)
			}
		}
	}
	missing := 0
	for id, f := range byID {
		k := fmt.Sprint(f["kind"])
		c := kinds[k]
		c[1]++
		kinds[k] = c
		if !seen[id] {
			missing++
			if missing <= 10 {
				b, _ := json.Marshal(f)
				fmt.Printf("    analyze, not served: %s\n", b)
			}
		}
	}
	var dk []string
	for k := range droppedKeys {
		dk = append(dk, k)
	}
	sort.Strings(dk)
	fmt.Printf("  findings: served %d, analyze %d; same id and equal %d, same id differing %d, served only %d, analyze only %d (served fields not compared: %v)\n",
		len(served), len(ref), equal, differ, extra, missing, dk)
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Printf("    %-22s served %3d  analyze %3d\n", k, kinds[k][0], kinds[k][1])
	}
	return nil
}

var alertOf = map[string]string{
	"double_applied_write": "McpAuditDoubleAppliedWrite",
	"duplicate_create":     "McpAuditDuplicateCreate",
	"integrity_failure":    "McpAuditIntegrityFailure",
	"unsafe_retry":         "McpAuditUnsafeRetries",
	"unverified_write":     "McpAuditUnverifiedWrites",
	"wasted_retry":         "McpAuditWastedRetries",
	"premature_retry":      "McpAuditWastedRetries",
	"request_id_reuse":     "",
}

func checkAlerts(prom, since string, findings []map[string]any, storedBy map[string]int) error {
	start, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return fmt.Errorf("-since: %w", err)
	}
	rng := time.Since(start).Round(time.Second) + time.Minute
	state := map[string]string{} // alertname|server -> firing|pending
	for _, st := range []string{"pending", "firing"} {
		q := fmt.Sprintf(`max by (alertname, server) (max_over_time(ALERTS{alertstate=%q}[%ds]))`, st, int(rng.Seconds()))
		var r struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := getJSON(prom+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
			return err
		}
		for _, s := range r.Data.Result {
			state[s.Metric["alertname"]+"|"+s.Metric["server"]] = st
		}
	}
	pairs := map[string]int{}
	for _, f := range findings {
		pairs[fmt.Sprint(f["kind"])+"|"+fmt.Sprint(f["server"])]++
	}
	var ks []string
	for k := range pairs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	fired, pending, never, none := 0, 0, 0, 0
	for _, k := range ks {
		kind, server, _ := strings.Cut(k, "|")
		a := alertOf[kind]
		st := "no alert for this kind"
		switch {
		case a == "":
			none++
		case state[a+"|"+server] == "firing":
			st, fired = "fired", fired+1
		case state[a+"|"+server] == "pending":
			st, pending = "pending only (its for: not elapsed)", pending+1
		default:
			st, never = "never pending or firing", never+1
		}
		fmt.Printf("    %-20s %-22s %3d findings  %-28s %s\n", server, kind, pairs[k], a, st)
	}
	fmt.Printf("  alerts: %d server and kind pairs with findings: fired %d, pending only %d, never %d, no alert %d\n", len(ks), fired, pending, never, none)
	// The active alerts' values (the findings counted) against the
	// findings served, for the alerts that count findings.
	var active struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
				Value  string            `json:"value"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := getJSON(prom+"/api/v1/alerts", &active); err == nil {
		kindOf := map[string]string{}
		for k, a := range alertOf {
			if a != "" && a != "McpAuditWastedRetries" {
				kindOf[a] = k
			}
		}
		same, differ := 0, 0
		for _, a := range active.Data.Alerts {
			k, ok := kindOf[a.Labels["alertname"]]
			if !ok {
				continue
			}
			var v float64
			fmt.Sscan(a.Value, &v)
			if n := pairs[k+"|"+a.Labels["server"]]; float64(n) == v {
				same++
			} else {
				differ++
				fmt.Printf("    %s %s %s: value %s, findings served %d\n", a.Labels["alertname"], a.Labels["server"], a.State, a.Value, n)
			}
		}
		fmt.Printf("  active alerts counting findings: value = findings served %d, differs %d\n", same, differ)
	}
	// McpAuditWastedRetries is a ratio: its two sides as Prometheus has
	// them, beside the findings served and the calls stored.
	side := func(q string) map[string]string {
		var r struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		out := map[string]string{}
		if getJSON(prom+"/api/v1/query?query="+url.QueryEscape(q), &r) == nil {
			for _, s := range r.Data.Result {
				out[s.Metric["server"]] = fmt.Sprint(s.Value[1])
			}
		}
		return out
	}
	num := side(`sum by (server) (increase(mcpaudit_findings_total{kind=~"wasted_retry|premature_retry"}[30m]))`)
	den := side(`sum by (server) (increase(mcpaudit_tool_calls_total[30m]))`)
	cnt := map[string]int{}
	for _, f := range findings {
		if k := fmt.Sprint(f["kind"]); k == "wasted_retry" || k == "premature_retry" {
			cnt[fmt.Sprint(f["server"])]++
		}
	}
	var ss []string
	for s := range den {
		ss = append(ss, s)
	}
	sort.Strings(ss)
	for _, s := range ss {
		fmt.Printf("    McpAuditWastedRetries %-20s increase(findings)[30m] %s / increase(tool_calls)[30m] %s; served wasted+premature findings %d, stored calls %d\n", s, num[s], den[s], cnt[s], storedBy[s])
	}
	return nil
}

// checkWeb loads the pages in headless Chromium, checks that every link on
// them answers 200 and that every finding is listed on its kind's and
// server's page (the alerts' investigation_url).
func checkWeb(api, chromium string, findings []map[string]any) error {
	profile, err := os.MkdirTemp("", "outside-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	opts := append([]chromedp.ExecAllocatorOption{chromedp.Headless, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true)}, chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(profile))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel2 := chromedp.NewContext(actx)
	defer cancel2()
	// The browser starts with the first action: on ctx, not on a page's
	// timed context, which would end it with the page.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		return fmt.Errorf("cannot start chromium: %w", err)
	}
	pages := []string{"/", "/calls/", "/slo"}
	docs := map[string]bool{}
	pairs := map[string][]string{}
	for _, f := range findings {
		pages = append(pages, "/findings/"+fmt.Sprint(f["id"]))
		if d, ok := f["document"].(string); ok && d != "" && !docs[d] {
			docs[d] = true
			pages = append(pages, "/documents/"+d)
		}
		k := "/?kind=" + url.QueryEscape(fmt.Sprint(f["kind"])) + "&server=" + url.QueryEscape(fmt.Sprint(f["server"]))
		pairs[k] = append(pairs[k], fmt.Sprint(f["id"]))
	}
	var pk []string
	for k := range pairs {
		pk = append(pk, k)
	}
	sort.Strings(pk)
	pages = append(pages, pk...)
	links := map[string]bool{}
	loaded, failedLoads := 0, 0
	notListed := 0
	for _, p := range pages {
		tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
		var hrefs []string
		var html string
		err := chromedp.Do(tctx, chromedp.Navigate(api+p), chromedp.WaitReady(chromedp.CSS("body")))
		if err == nil {
			hrefs, err = chromedp.Run(tctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('a[href]')).map(a => a.href)`))
		}
		if err == nil {
			html, err = chromedp.Run(tctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		}
		tcancel()
		if err != nil {
			failedLoads++
			fmt.Printf("    page %s: %v\n", p, err)
			continue
		}
		loaded++
		for _, h := range hrefs {
			if strings.HasPrefix(h, api) {
				links[strings.SplitN(h, "#", 2)[0]] = true
			}
		}
		for _, id := range pairs[p] {
			if !strings.Contains(html, id) {
				notListed++
				if notListed <= 10 {
					fmt.Printf("    finding %s not on %s\n", id, p)
				}
			}
		}
	}
	var ls []string
	for l := range links {
		ls = append(ls, l)
	}
	sort.Strings(ls)
	var mu sync.Mutex
	bad := map[string]int{}
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		sem <- struct{}{}
		go func(l string) {
			defer wg.Done()
			defer func() { <-sem }()
			code := 0
			if resp, err := http.Get(l); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			if code != 200 {
				mu.Lock()
				bad[l] = code
				mu.Unlock()
			}
		}(l)
	}
	wg.Wait()
	fmt.Printf("  web: %d pages loaded in Chromium (%d failed): %d finding pages, %d document pages, %d kind and server pages; %d distinct links, %d not 200; findings not listed on their kind and server page: %d\n",
		loaded, failedLoads, len(findings), len(docs), len(pairs), len(ls), len(bad), notListed)
	n := 0
	for l, c := range bad {
		if n++; n <= 10 {
			fmt.Printf("    link %s: %d\n", l, c)
		}
	}
	return nil
}

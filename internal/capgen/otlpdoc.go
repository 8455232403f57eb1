package capgen

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WriteOTLP writes call records (NDJSON lines, a capture's Lines) as one
// OTLP JSON document of spans that follow the MCP semantic conventions, as
// an exporter would send them: one resourceSpans block per server and pod
// (a session stays on one of pods pods), each block's spans in the order
// they ended. Lines that are not call records (a capture's bad lines) are
// left out. The document holds every span in memory while it is written.
func WriteOTLP(w io.Writer, lines [][]byte, pods int) error {
	type span struct {
		end  int64
		json []byte
	}
	if pods < 1 {
		pods = 1
	}
	blocks := map[string][]span{}
	for i, l := range lines {
		var r map[string]any
		if json.Unmarshal(l, &r) != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
		if err != nil {
			continue
		}
		server, _ := r["server"].(string)
		req, _ := r["request"].(map[string]any)
		if server == "" || req == nil {
			continue
		}
		params, _ := req["params"].(map[string]any)
		tool, _ := params["name"].(string)
		if tool == "" {
			continue
		}
		sess, _ := r["session"].(string)
		h := fnv.New32a()
		h.Write([]byte(sess))
		block := server + "\x00pod-" + strconv.Itoa(int(h.Sum32()%uint32(pods)))
		ms, _ := r["duration_ms"].(float64)
		end := t.Add(time.Duration(ms * float64(time.Millisecond)))
		attrs := [][2]string{{"mcp.method.name", "tools/call"}, {"gen_ai.tool.name", tool},
			{"gen_ai.operation.name", "execute_tool"}, {"jsonrpc.request.id", fmt.Sprint(req["id"])}}
		args, _ := json.Marshal(params["arguments"])
		attrs = append(attrs, [2]string{"gen_ai.tool.call.arguments", string(args)})
		if sess != "" {
			attrs = append(attrs, [2]string{"mcp.session.id", sess})
		}
		if tenant, _ := r["tenant"].(string); tenant != "" {
			attrs = append(attrs, [2]string{"mcpaudit.tenant", tenant})
		}
		status := ""
		switch resp, _ := r["response"].(map[string]any); {
		case r["transport_error"] != nil:
			te := fmt.Sprint(r["transport_error"])
			attrs = append(attrs, [2]string{"error.type", te})
			status = `{"code":2,"message":` + quote(te) + `}`
		case resp != nil && resp["result"] != nil:
			res, _ := json.Marshal(resp["result"])
			attrs = append(attrs, [2]string{"gen_ai.tool.call.result", string(res)})
			if m, _ := resp["result"].(map[string]any); m["isError"] == true {
				attrs = append(attrs, [2]string{"error.type", "tool_error"})
				status = `{"code":2,"message":"tool error"}`
			}
		case resp != nil && resp["error"] != nil:
			e, _ := resp["error"].(map[string]any)
			attrs = append(attrs, [2]string{"rpc.response.status_code", fmt.Sprint(e["code"])},
				[2]string{"rpc.jsonrpc.error_message", fmt.Sprint(e["message"])})
			status = `{"code":2,"message":` + quote(fmt.Sprint(e["message"])) + `}`
		}
		id := fnv.New64a()
		id.Write(l)
		fmt.Fprint(id, i)
		b := fmt.Appendf(nil, `{"traceId":"%032x","spanId":"%s","name":%s,"kind":2,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[`,
			i+1, hex.EncodeToString(id.Sum(nil)), quote("tools/call "+tool), t.UnixNano(), end.UnixNano())
		for j, a := range attrs {
			if j > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"key":%s,"value":{"stringValue":%s}}`, quote(a[0]), quote(a[1]))
		}
		b = append(b, ']')
		if status != "" {
			b = append(b, `,"status":`...)
			b = append(b, status...)
		}
		b = append(b, '}')
		blocks[block] = append(blocks[block], span{end: end.UnixNano(), json: b})
	}
	names := make([]string, 0, len(blocks))
	for n := range blocks {
		names = append(names, n)
	}
	sort.Strings(names)
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString(`{"resourceSpans":[`)
	for i, n := range names {
		if i > 0 {
			bw.WriteByte(',')
		}
		spans := blocks[n]
		sort.SliceStable(spans, func(a, b int) bool { return spans[a].end < spans[b].end })
		sep := strings.IndexByte(n, 0)
		fmt.Fprintf(bw, "\n"+`{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":%s}},{"key":"service.instance.id","value":{"stringValue":%s}}]},"scopeSpans":[{"scope":{"name":"mcp-server"},"spans":[`,
			quote(n[:sep]), quote(n[sep+1:]))
		for j, s := range spans {
			if j > 0 {
				bw.WriteByte(',')
			}
			bw.WriteByte('\n')
			bw.Write(s.json)
		}
		bw.WriteString("]}]}")
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// quote quotes s as JSON does.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

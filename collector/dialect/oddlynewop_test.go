package dialect

import (
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/valyala/fastjson"
)

// TestOddlynewOp_Texts: an operation's texts (target, key, identity,
// binding, intent), gathered in one string, are those that a reading
// making each text apart gives (oddlynewOpApart, the reading before they
// were gathered), for every provider call of a generated capture's runs,
// each with no value and with every value its run returned, with no code
// and with its own, and for calls written by hand for the branches a
// capture seldom takes.
func TestOddlynewOp_Texts(t *testing.T) {
	gathered, apart := NewReader(Config{}), NewReader(Config{})
	var p fastjson.Parser
	n, tools := 0, map[string]int{}
	check := func(code string, values []*fastjson.Value) {
		t.Helper()
		strip := appendStripped(nil, code, "writeBasis", true)
		collapsed := canon.AppendCollapsed(nil, strip)
		calls := extractCalls(code)
		for i := range calls {
			for _, v := range values {
				for _, withCode := range []bool{true, false} {
					pc := providerCall{seq: i + 1, tool: calls[i].Tool, value: v}
					if withCode {
						cc := calls[i]
						pc.code = &cc
					}
					want := apart.oddlynewOpApart(&pc, collapsed)
					pc2 := pc
					if withCode {
						cc := calls[i]
						pc2.code = &cc
					}
					got := gathered.oddlynewOp(&pc2, collapsed)
					if got != want {
						t.Fatalf("call %s in %q, value %v, code %v:\n got %+v\nwant %+v", calls[i].Tool, code, v, withCode, got, want)
					}
					n++
					tools[calls[i].Tool]++
				}
			}
		}
	}
	c := capgen.Generate(capgen.Config{Seed: 11, Sessions: 3000, AnomalyRate: 0.4, NoiseRate: 0.001})
	for _, line := range c.Lines {
		v, err := p.ParseBytes(line)
		if err != nil || string(v.GetStringBytes("server")) != "oddlynew" {
			continue
		}
		code := string(v.GetStringBytes("request", "params", "arguments", "code"))
		values := []*fastjson.Value{nil}
		if r := v.Get("response", "result", "structuredContent", "result"); r != nil {
			values = append(values, r)
			for _, e := range r.GetArray() {
				values = append(values, e)
			}
			if o, err := r.Object(); err == nil {
				o.Visit(func(_ []byte, e *fastjson.Value) { values = append(values, e) })
			}
		}
		check(code, values)
	}
	var vp fastjson.Parser
	byHand := []struct{ code, value string }{
		{`documents.createDocument({ creationId: "c1", title: "T", type: "note" })`, `{"creationId":"c2","documentId":"d9"}`},
		{`documents.createDocument({ creationId: "c1" })`, `{"title":"from value","type":"sheet"}`},
		{`documents.createDocument({ body: "no key, no title" })`, `{}`},
		{`organizations.planDocumentCopy({ copyId: "k", sourceDocumentId: "s1", documentId: "d1" })`, `{"sourceDocumentId":"s2"}`},
		{`organizations.planDocumentCopy({ documentId: "d1" })`, `{}`},
		{`organizations.applyDocumentCopy({ operationId: "o1", planToken: "p1" })`, `{"destinationDocumentId":"dest","planToken":"p2"}`},
		{`organizations.applyDocumentCopy({ planToken: "p1" })`, `{"operationId":"o2"}`},
		{`organizations.getDocumentCopyReceipt({ copyId: "k2" })`, `{"operationId":""}`},
		{`organizations.getDocumentCopyReceipt({ operationId: "o3", copyId: "k3" })`, `{}`},
		{`documents.archiveDocument({ documentId: "d2" })`, `{"documentId":"d3"}`},
		{`documents.restoreDocument({ documentId: "d2" })`, `{}`},
		{`documents.editDocument({ documentId: "d4", edits: [] })`, `{"documentId":"d4"}`},
		{`documents.patchSettings({ documentId: "` + strings.Repeat("x", 600) + `" })`, `{}`},
		{`documents.getDocument({ documentId: "d5" })`, `{"documentId":"d6"}`},
		{`documents.editDocument({ edits: [] })`, `{}`},
	}
	for _, h := range byHand {
		v, err := vp.Parse(h.value)
		if err != nil {
			t.Fatal(err)
		}
		check(h.code, []*fastjson.Value{nil, v})
	}
	for _, tool := range []string{toolCreate, toolEdit, toolArchive, toolPlan, toolApply, toolReceipt, toolGet} {
		if tools[tool] == 0 {
			t.Errorf("no %s checked", tool)
		}
	}
	t.Logf("%d operations checked: %v", n, tools)
}

// oddlynewOpApart is oddlynewOp as it was before the operation's texts
// were gathered in one string: each text made apart.
func (r *Reader) oddlynewOpApart(pc *providerCall, collapsed []byte) audit.Op {
	op := audit.Op{Seq: pc.seq, Tool: word(pc.tool), Kind: oddlynewKind(pc.tool)}
	cc := pc.code
	if cc == nil {
		cc = &codeCall{read: true}
	}
	pick := func(k string) string {
		lit := cc.literal(k)
		if b := pc.value.GetStringBytes(k); len(b) > 0 && string(b) != lit {
			return string(b)
		}
		return strings.Clone(lit)
	}
	withoutKey := func(key string) []byte {
		r.p.strip = appendStripped(r.p.strip[:0], cc.Args, key, false)
		r.p.text = canon.AppendCollapsed(r.p.text[:0], r.p.strip)
		return r.p.text
	}
	tool := []byte(pc.tool)
	op.Target = pick("documentId")
	switch pc.tool {
	case toolCreate:
		op.Key, op.KeyKind = pick("creationId"), "creationId"
		op.KeyProtected = op.Key != ""
		title, typ := cc.literal("title"), cc.literal("type")
		if title == "" && typ == "" {
			title, typ = str(pc.value, "title"), str(pc.value, "type")
		}
		args := withoutKey("creationId")
		if title != "" || typ != "" {
			op.Identity = canon.Hash([]byte(title), []byte(typ))
		} else {
			op.Identity = canon.Hash(args)
		}
		var hs [2 * canon.HashLen]byte
		h := canon.AppendHash(canon.AppendHash(hs[:0], tool, args), tool, []byte(op.Key), collapsed)
		s := string(h)
		op.Binding, op.Intent = s[:canon.HashLen], s[canon.HashLen:]
	case toolPlan:
		op.Key, op.KeyKind = pick("copyId"), "copyId"
		op.Target = pick("sourceDocumentId")
		op.Binding = canon.Hash(tool, withoutKey("copyId"))
	case toolApply:
		op.Key, op.KeyKind = pick("operationId"), "operationId"
		op.KeyProtected = op.Key != ""
		op.Binding = canon.Hash(tool, []byte(op.Key), []byte(pick("planToken")))
		if d := str(pc.value, "destinationDocumentId"); d != "" {
			op.Target = d
		}
	case toolReceipt:
		op.Key, op.KeyKind = pick("operationId"), "operationId"
		if op.Key == "" {
			op.Key, op.KeyKind = pick("copyId"), "copyId"
		}
	case toolArchive, toolRestore:
		op.Protected = true
		op.Intent = canon.Hash(tool, []byte(op.Target), collapsed)
	case toolEdit, toolSettings, toolEnvelope, toolRepair:
		op.Intent = canon.Hash(tool, []byte(op.Target), collapsed)
	}
	return op
}

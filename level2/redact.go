package level2

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/policy"
)

// Redaction: a redact rule that matched a message hides what its paths select and what its
// patterns match in the message's string values, replaced by the rule's marker. The message is
// rebuilt by splicing the changed strings only; the record names the rule and where, never what.

// redactHit is one string a rule changed.
type redactHit struct {
	rule, path string
}

// maxHitsRecorded bounds the locations a record lists.
const maxHitsRecorded = 8

// redactJSON applies reds to the validated JSON-RPC message raw. Paths select anywhere but in
// the envelope (jsonrpc, id, method); patterns scan the strings of scope ("params" for a request
// or notification, "result" for a response) except the members that identify or carry protocol
// state (params name, uri, _meta, requestState; result requestState, resultType). It returns raw
// itself when nothing changed.
func redactJSON(raw []byte, reds []*policy.Redaction, scope string) ([]byte, []redactHit, int) {
	if len(reds) == 0 || !isObject(raw) {
		return raw, nil, 0
	}
	w := redactWalker{raw: raw, reds: reds, scope: scope}
	for _, r := range reds {
		if len(r.Patterns) > 0 {
			w.patterns = true
		}
	}
	w.loc = make([]policy.PathSeg, 0, 16)
	w.object(0, true)
	if len(w.edits) == 0 {
		return raw, nil, 0
	}
	return splice(raw, w.edits), w.hits, w.count
}

type redactWalker struct {
	raw      []byte
	reds     []*policy.Redaction
	scope    string
	patterns bool
	loc      []policy.PathSeg
	edits    []edit
	hits     []redactHit
	count    int
}

// value walks the value at i and returns the index after it.
func (w *redactWalker) value(i int) int {
	switch w.raw[i] {
	case '{':
		return w.object(i, false)
	case '[':
		return w.array(i)
	case '"':
		end := skipString(w.raw, i)
		w.str(i, end)
		return end
	}
	return skipValue(w.raw, i)
}

func (w *redactWalker) object(i int, top bool) int {
	b := w.raw
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for i < len(b) {
		ks := i
		ke := skipString(b, i)
		i = skipWS(b, ke)
		i = skipWS(b, i+1) // ':'
		key := keyText(b[ks:ke])
		if top && (key == "jsonrpc" || key == "id" || key == "method") {
			i = skipValue(b, i) // the envelope is never redacted
		} else {
			w.loc = append(w.loc, policy.PathSeg{Key: key, Index: -1})
			i = w.value(i)
			w.loc = w.loc[:len(w.loc)-1]
		}
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = skipWS(b, i+1)
	}
	return i + 1 // '}'
}

func (w *redactWalker) array(i int) int {
	b := w.raw
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for n := 0; i < len(b); n++ {
		w.loc = append(w.loc, policy.PathSeg{Index: n})
		i = w.value(i)
		w.loc = w.loc[:len(w.loc)-1]
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = skipWS(b, i+1)
	}
	return i + 1 // ']'
}

func (w *redactWalker) str(start, end int) {
	for _, r := range w.reds {
		for _, p := range r.Paths {
			if p.Match(w.loc) {
				w.edits = append(w.edits, edit{start, end, quoteJSON(r.Marker)})
				w.hit(r.Rule)
				return
			}
		}
	}
	if !w.patterns || !w.patternScope() {
		return
	}
	if inner := w.raw[start+1 : end-1]; bytes.IndexByte(inner, '\\') < 0 {
		// No escape: the bytes are the string; most strings match nothing, so look before
		// copying.
		any := false
		for _, r := range w.reds {
			for _, re := range r.Patterns {
				if re.Match(inner) {
					any = true
				}
			}
		}
		if !any {
			return
		}
	}
	s := unquote(w.raw[start:end])
	changed := false
	for _, r := range w.reds {
		for _, re := range r.Patterns {
			if re.MatchString(s) {
				s = re.ReplaceAllLiteralString(s, r.Marker)
				changed = true
				w.hit(r.Rule)
			}
		}
	}
	if changed {
		w.edits = append(w.edits, edit{start, end, quoteJSON(s)})
	}
}

func (w *redactWalker) patternScope() bool {
	if len(w.loc) < 2 || w.loc[0].Key != w.scope || w.loc[0].Index >= 0 {
		return false
	}
	k := w.loc[1].Key
	switch w.scope {
	case "params":
		return k != "name" && k != "uri" && k != "_meta" && k != "requestState"
	case "result":
		return k != "requestState" && k != "resultType"
	}
	return true
}

func (w *redactWalker) hit(rule string) {
	w.count++
	if len(w.hits) < maxHitsRecorded {
		w.hits = append(w.hits, redactHit{rule: rule, path: policy.FormatPath(w.loc)})
	}
}

func keyText(quoted []byte) string {
	if len(quoted) >= 2 && strings.IndexByte(string(quoted), '\\') < 0 {
		return string(quoted[1 : len(quoted)-1])
	}
	return unquote(quoted)
}

// describeHits is the record's account of a redaction: rules and locations, never values.
func describeHits(hits []redactHit, count int) string {
	var b strings.Builder
	b.WriteString("redacted")
	for i, h := range hits {
		if i == 0 || h.rule != hits[i-1].rule {
			if i > 0 {
				b.WriteString(";")
			}
			b.WriteString(" by rule ")
			b.WriteString(h.rule)
			b.WriteString(" at ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(h.path)
	}
	if count > len(hits) {
		fmt.Fprintf(&b, " (+%d more)", count-len(hits))
	}
	return b.String()
}

// syncMCPHeaders keeps a redacted request's Mcp-Name and Mcp-Param-* headers consistent with its
// new body (SEP-2243: the server may compare them, and a header must not carry what the body no
// longer does).
func syncMCPHeaders(x *exchange.Exchange, before, after *Message, reds []*policy.Redaction) {
	h := x.Req
	if _, ok := h.Get("Mcp-Name"); ok {
		if n := after.Name(); n != before.Name() {
			x.SetRequestHeader("Mcp-Name", encodeHeaderValue(n))
		}
	}
	var oldArgs, newArgs map[string]any
	for _, hd := range h.Headers {
		if len(hd.Name) <= len("Mcp-Param-") || !strings.EqualFold(hd.Name[:len("Mcp-Param-")], "Mcp-Param-") {
			continue
		}
		suffix := hd.Name[len("Mcp-Param-"):]
		if oldArgs == nil {
			oldArgs, newArgs = before.Arguments(), after.Arguments()
		}
		val, err := level1.DecodeHeaderValue(hd.Value)
		if err != nil {
			val = hd.Value
		}
		nv := val
		for k, v := range newArgs {
			if strings.EqualFold(k, suffix) {
				if ns, ok := v.(string); ok {
					if os, _ := oldArgs[k].(string); os != ns {
						nv = ns
					}
				}
			}
		}
		for _, r := range reds {
			for _, re := range r.Patterns {
				nv = re.ReplaceAllLiteralString(nv, r.Marker)
			}
		}
		if nv != val {
			x.SetRequestHeader(hd.Name, encodeHeaderValue(nv))
		}
	}
}

// encodeHeaderValue writes v as an MCP header value: as is when it is printable ASCII without
// surrounding space, else =?base64?…?= (SEP-2243).
func encodeHeaderValue(v string) string {
	plain := v != "" && v[0] != ' ' && v[len(v)-1] != ' '
	for i := 0; plain && i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			plain = false
		}
	}
	if plain && !strings.HasPrefix(v, "=?") {
		return v
	}
	return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(v)) + "?="
}

package level2

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Redaction: a redact rule that matched a message hides what its paths select and what its
// patterns match, replaced by the rule's marker. The message is rebuilt by splicing the changed
// spans only, so everything else goes out byte for byte; the record names the rule and where,
// never what.
//
// What is replaced, and with what:
//   - A value a path selects, whatever its type (string, number, boolean, null, object, array),
//     becomes the marker as a JSON string. A string and not a look-alike of the same type (0000
//     for a PIN, false, {}) because the receiver must never act on a fabricated value as if it
//     were the sender's: a peer whose schema wants a number fails visibly on "[REDACTED]",
//     where it would quietly charge, log in or compare with 0. An object or array is replaced
//     whole, keys included (a key can hold a secret as well as a value can). Two members keep
//     their shape because the strict decoder and every peer need it: top-level params (an
//     object or array) and error (an object) have their members replaced instead; error.code,
//     like the envelope (jsonrpc, id, method), is never redacted.
//   - A pattern match inside a string is replaced in place (the rest of the string kept).
//   - A number whose JSON text, as sent, a pattern matches (a card number) becomes the marker as
//     a JSON string: a number cannot hold the marker, and a partly masked number is no number.
//     The same number spelled otherwise (4.111111111111111e15) is not the same text: a path is
//     what catches a value whatever its spelling.
//   - An object key a pattern matches is rewritten with the matches replaced, and made unique in
//     its object (marker, marker-1, marker-2, …; never fold-equal to another key, never a
//     member name Level 2 reads there, never itself a match), so the output stays one strict
//     JSON document; if no such name can be found the member is removed. Paths match the key
//     as sent, and the record shows a matching key as the marker.
//
// Patterns scan only the scope member ("params", "result" or "error") and skip its members that
// identify or carry protocol state (see patternScope).

// redactHit is one place a rule changed.
type redactHit struct {
	rule, path string
}

// maxHitsRecorded bounds the locations a record lists.
const maxHitsRecorded = 8

// maxKeyTries bounds the spellings tried for a unique rewritten key, per form.
const maxKeyTries = 64

// redactJSON applies reds to the validated JSON-RPC message raw. Paths select anywhere but in
// the envelope (jsonrpc, id, method, error.code); patterns scan the keys, strings and numbers of
// scope ("params" for a request or notification, "result" for a response, "error" for an error
// response) except the members that identify or carry protocol state (params name, uri, _meta,
// requestState; result requestState, resultType; error code). It returns raw itself when
// nothing changed.
func redactJSON(raw []byte, reds []*policy.Redaction, scope string) ([]byte, []redactHit, int) {
	if len(reds) == 0 || !mcp.IsObject(raw) {
		return raw, nil, 0
	}
	w := redactWalker{raw: raw, reds: reds, scope: scope}
	for _, r := range reds {
		w.patterns = w.patterns || len(r.Patterns) > 0
		w.paths = w.paths || len(r.Paths) > 0
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
	paths    bool
	loc      []policy.PathSeg
	edits    []edit
	hits     []redactHit
	count    int
}

// value walks the value at i and returns the index after it.
func (w *redactWalker) value(i int) int {
	if r := w.selected(); r != nil {
		if !w.keepShape() {
			end := mcp.SkipValue(w.raw, i)
			w.replace(i, end, r)
			return end
		}
		// params or error: its members are selected in turn and replaced one by one.
	}
	switch c := w.raw[i]; {
	case c == '{':
		return w.object(i, false)
	case c == '[':
		return w.array(i)
	case c == '"':
		end := mcp.SkipString(w.raw, i)
		w.str(i, end)
		return end
	case c == '-' || ('0' <= c && c <= '9'):
		end := mcp.SkipValue(w.raw, i)
		w.number(i, end)
		return end
	}
	return mcp.SkipValue(w.raw, i)
}

// selected returns the first redaction with a path that selects the value at w.loc (or one
// containing it), or nil.
func (w *redactWalker) selected() *policy.Redaction {
	if !w.paths || w.envelope() {
		return nil
	}
	for _, r := range w.reds {
		for _, p := range r.Paths {
			if p.Match(w.loc) {
				return r
			}
		}
	}
	return nil
}

// envelope reports a location that is never redacted: error.code (the top-level jsonrpc, id and
// method are skipped by object).
func (w *redactWalker) envelope() bool {
	return len(w.loc) == 2 && w.loc[0].Key == "error" && w.loc[0].Index < 0 && w.loc[1].Key == "code"
}

// keepShape reports a member whose type the message's validity depends on.
func (w *redactWalker) keepShape() bool {
	if len(w.loc) != 1 || w.loc[0].Index >= 0 {
		return false
	}
	return w.loc[0].Key == "params" || w.loc[0].Key == "error"
}

// replace puts r's marker, as a JSON string, over raw[start:end].
func (w *redactWalker) replace(start, end int, r *policy.Redaction) {
	q := mcp.Quote(r.Marker)
	w.hit(r.Rule)
	if bytes.Equal(w.raw[start:end], q) {
		w.count-- // already hidden: nothing changes, nothing to splice
		if len(w.hits) > 0 && w.hits[len(w.hits)-1].rule == r.Rule {
			w.hits = w.hits[:len(w.hits)-1]
		}
		return
	}
	w.edits = append(w.edits, edit{start, end, q})
}

// keyMember is a key an object walk found, kept while the object has a rewritten key.
type keyMember struct {
	ks, ke, ve int
	key        string
	newKey     string // what the patterns made of key
}

func (w *redactWalker) object(i int, top bool) int {
	b := w.raw
	start := i
	i = mcp.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	var rewritten []keyMember
	for i < len(b) {
		ks := i
		ke := mcp.SkipString(b, i)
		i = mcp.SkipSpace(b, ke)
		i = mcp.SkipSpace(b, i+1) // ':'
		key := keyText(b[ks:ke])
		if top && (key == "jsonrpc" || key == "id" || key == "method") {
			i = mcp.SkipValue(b, i) // the envelope is never redacted
		} else {
			w.loc = append(w.loc, policy.PathSeg{Key: key, Index: -1})
			newKey, changed := w.key(key)
			i = w.value(i)
			w.loc = w.loc[:len(w.loc)-1]
			if changed {
				rewritten = append(rewritten, keyMember{ks: ks, ke: ke, ve: i, key: key, newKey: newKey})
			}
		}
		i = mcp.SkipSpace(b, i)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = mcp.SkipSpace(b, i+1)
	}
	if len(rewritten) > 0 {
		w.renameKeys(start, rewritten)
	}
	return i + 1 // '}'
}

func (w *redactWalker) array(i int) int {
	b := w.raw
	i = mcp.SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for n := 0; i < len(b); n++ {
		w.loc = append(w.loc, policy.PathSeg{Index: n})
		i = w.value(i)
		w.loc = w.loc[:len(w.loc)-1]
		i = mcp.SkipSpace(b, i)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = mcp.SkipSpace(b, i+1)
	}
	return i + 1 // ']'
}

// anyMatch reports whether some pattern of reds matches b.
func (w *redactWalker) anyMatch(b []byte) bool {
	for _, r := range w.reds {
		for _, re := range r.Patterns {
			if re.Match(b) {
				return true
			}
		}
	}
	return false
}

// anyMatchString is anyMatch for a string (a key), without copying it.
func (w *redactWalker) anyMatchString(s string) bool {
	for _, r := range w.reds {
		for _, re := range r.Patterns {
			if re.MatchString(s) {
				return true
			}
		}
	}
	return false
}

func (w *redactWalker) str(start, end int) {
	if !w.patterns || !w.patternScope() {
		return
	}
	if inner := w.raw[start+1 : end-1]; bytes.IndexByte(inner, '\\') < 0 && !w.anyMatch(inner) {
		// No escape: the bytes are the string; most strings match nothing, so look before
		// copying.
		return
	}
	s, changed := w.rewrite(mcp.Unquote(w.raw[start:end]))
	if changed {
		w.edits = append(w.edits, edit{start, end, mcp.Quote(s)})
	}
}

// rewrite replaces every pattern match in s with its rule's marker, noting a hit per rule.
func (w *redactWalker) rewrite(s string) (string, bool) {
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
	return s, changed
}

// number hides a number whose text a pattern matches.
func (w *redactWalker) number(start, end int) {
	if !w.patterns || !w.patternScope() {
		return
	}
	text := w.raw[start:end]
	for _, r := range w.reds {
		for _, re := range r.Patterns {
			if re.Match(text) {
				w.replace(start, end, r)
				return
			}
		}
	}
}

// key returns the key at the top of w.loc rewritten by the patterns, when one matches it.
func (w *redactWalker) key(key string) (string, bool) {
	if !w.patterns || !w.keyScope() || !w.anyMatchString(key) {
		return "", false
	}
	nk, _ := w.rewrite(key)
	if w.anyMatchString(nk) {
		// The replacements made a new match (markers next to each other): use a marker alone.
		nk = w.firstMarker(key)
	}
	return nk, true
}

// firstMarker is the marker of the first rule with a pattern matching s.
func (w *redactWalker) firstMarker(s string) string {
	for _, r := range w.reds {
		for _, re := range r.Patterns {
			if re.MatchString(s) {
				return r.Marker
			}
		}
	}
	return policy.DefaultMarker
}

// renameKeys gives the rewritten keys of the object at start names unique in it, or removes
// their members when none can be found.
func (w *redactWalker) renameKeys(start int, rewritten []keyMember) {
	all := objectMembers(w.raw, start)
	taken := w.keptKeys(all, rewritten)
	var dropped []int // key starts
	for _, m := range rewritten {
		name, ok := w.uniqueKey(m.newKey, taken)
		if !ok {
			dropped = append(dropped, m.ks)
			continue
		}
		taken[string(mcp.AppendFolded(nil, []byte(name)))] = true
		w.edits = append(w.edits, edit{m.ks, m.ke, mcp.Quote(name)})
	}
	if len(dropped) > 0 {
		w.dropMembers(all, dropped)
	}
}

// objectMembers lists the members of the validated object at start (ve: the end of each value).
func objectMembers(b []byte, start int) []keyMember {
	var out []keyMember
	i := mcp.SkipSpace(b, start+1)
	for i < len(b) && b[i] == '"' {
		ke := mcp.SkipString(b, i)
		ve := mcp.SkipValue(b, mcp.SkipSpace(b, mcp.SkipSpace(b, ke)+1))
		out = append(out, keyMember{ks: i, ke: ke, ve: ve, key: keyText(b[i:ke])})
		i = mcp.SkipSpace(b, ve)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = mcp.SkipSpace(b, i+1)
	}
	return out
}

// keptKeys returns the folded keys of the object that stay as they are, and the member names
// Level 2 reads in that object, which a rewritten key must not become.
func (w *redactWalker) keptKeys(all, rewritten []keyMember) map[string]bool {
	taken := map[string]bool{}
	if c := w.objectCtx(); c != mcp.ScopeNone {
		for _, n := range c.Members() {
			taken[string(mcp.AppendFolded(nil, []byte(n)))] = true
		}
	}
	for _, m := range all {
		if !slices.ContainsFunc(rewritten, func(r keyMember) bool { return r.ks == m.ks }) {
			taken[string(mcp.AppendFolded(nil, []byte(m.key)))] = true
		}
	}
	return taken
}

// dropMembers removes the members of the object (all) whose keys start at dropped, with the
// edits inside them and their commas: a member followed by another goes up to the next key;
// the members after the last kept one go from the end of its value (from the first key when
// none is kept), so that no two removals overlap.
func (w *redactWalker) dropMembers(all []keyMember, dropped []int) {
	isDropped := func(m keyMember) bool { return slices.Contains(dropped, m.ks) }
	w.edits = slices.DeleteFunc(w.edits, func(e edit) bool {
		for _, m := range all {
			if isDropped(m) && e.start >= m.ks && e.start < m.ve {
				return true
			}
		}
		return false
	})
	lastKept := -1
	for i, m := range all {
		if !isDropped(m) {
			lastKept = i
		}
	}
	for i, m := range all {
		if isDropped(m) && i < lastKept {
			w.edits = append(w.edits, edit{m.ks, all[i+1].ks, nil})
		}
	}
	if tail := lastKept + 1; tail < len(all) {
		from := all[0].ks
		if lastKept >= 0 {
			from = all[lastKept].ve
		}
		w.edits = append(w.edits, edit{from, all[len(all)-1].ve, nil})
	}
}

// objectCtx is the decoder's scope of the object at w.loc, for the member names it reads there.
func (w *redactWalker) objectCtx() mcp.Scope {
	if len(w.loc) != 1 || w.loc[0].Index >= 0 {
		return mcp.ScopeNone
	}
	switch w.loc[0].Key {
	case "params":
		return mcp.ScopeParams
	case "error":
		return mcp.ScopeError
	}
	return mcp.ScopeNone
}

// uniqueKey returns base, or base-N / base-letters, whichever first is free in taken and
// matches no pattern.
func (w *redactWalker) uniqueKey(base string, taken map[string]bool) (string, bool) {
	free := func(k string) bool {
		// Never a protocol member's name in any spelling: the strict decoder refuses a case
		// variant of one where peers decode into structs, and an exact one means something.
		return !taken[string(mcp.AppendFolded(nil, []byte(k)))] && !w.anyMatchString(k) && !mcp.FoldsToMember(k)
	}
	if free(base) {
		return base, true
	}
	for n := 1; n <= maxKeyTries; n++ {
		if k := base + "-" + strconv.Itoa(n); free(k) {
			return k, true
		}
	}
	for n := 1; n <= maxKeyTries; n++ {
		if k := base + "-" + letters(n); free(k) {
			return k, true
		}
	}
	return "", false
}

// letters spells n >= 1 as a, b, …, z, aa, ab, …
func letters(n int) string {
	var b []byte
	for ; n > 0; n = (n - 1) / 26 {
		b = append([]byte{byte('a' + (n-1)%26)}, b...)
	}
	return string(b)
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
	case "error":
		return k != "code"
	}
	return true
}

// keyScope reports whether the key at the top of w.loc may be rewritten: it is in pattern scope
// and is not one of the members of params or error that Level 2 reads (a rewritten "arguments"
// would no longer be the call's arguments).
func (w *redactWalker) keyScope() bool {
	if !w.patternScope() {
		return false
	}
	if len(w.loc) == 2 {
		if c := map[string]mcp.Scope{"params": mcp.ScopeParams, "error": mcp.ScopeError}[w.scope]; c != mcp.ScopeNone {
			if c.Reads(w.loc[1].Key) {
				return false
			}
		}
	}
	return true
}

// hit notes a change by rule at w.loc. The location shows keys that a pattern matches as the
// marker: a key can be the secret.
func (w *redactWalker) hit(rule string) {
	w.count++
	if len(w.hits) < maxHitsRecorded {
		w.hits = append(w.hits, redactHit{rule: rule, path: policy.FormatPath(w.shownLoc())})
	}
}

func (w *redactWalker) shownLoc() []policy.PathSeg {
	if !w.patterns {
		return w.loc
	}
	var out []policy.PathSeg
	for i, s := range w.loc {
		if s.Index >= 0 || !w.anyMatchString(s.Key) {
			continue
		}
		if out == nil {
			out = append([]policy.PathSeg(nil), w.loc...)
		}
		out[i].Key = w.firstMarker(s.Key)
	}
	if out == nil {
		return w.loc
	}
	return out
}

// redactText applies the patterns of reds to s, a string that came from a message and goes into
// a log or a record (an error message, a reason): whatever a rule hides in the message must not
// reappear there.
func redactText(s string, reds []*policy.Redaction) string {
	for _, r := range reds {
		for _, re := range r.Patterns {
			s = re.ReplaceAllLiteralString(s, r.Marker)
		}
	}
	return s
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

// redactTextAll applies the patterns of every redact rule of rs to s: for a string from a
// message that goes into a record before (or without) a decision, such as the strict decoder's
// error quoting a key, where which redact rules would match is not known.
func redactTextAll(s string, rs Evaluator) string {
	if rs == nil {
		return s
	}
	return redactText(s, rs.Needs().Redactions)
}

// syncMCPHeaders keeps a redacted request's Mcp-Name and Mcp-Param-* headers consistent with its
// new body (SEP-2243: the server may compare them, and a header must not carry what the body no
// longer does).
func syncMCPHeaders(x *exchange.Exchange, before, after *mcp.Message, reds []*policy.Redaction) {
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
		val, err := mcp.DecodeHeaderValue(hd.Value)
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

// inCall judges a server message sent on the stream (or in the body) that answers this
// exchange's requests, a notification or a server→client request, also as a message of each of
// those calls: the rules see it with the call's method, name and id (as they see the call's
// result), so that a redact rule on tools/call covers the call's log and progress notifications
// and the sampling or elicitation requests the server makes while answering it, not only its
// result. The redactions of the call are added to d's; a call's denial drops the message as a
// denial of its own would (its result would be withheld too). d is the message's own decision.
//
// A call's messages do not always come on its own stream, so the calls judged are also the
// session's requests still pending elsewhere (relatedPending): every one of them on a GET stream,
// and on any stream the one whose progressToken a progress notification names.
func inCall(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, d policy.Decision) policy.Decision {
	if d.Action != policy.ActionAllow {
		return d
	}
	if rs := s.rules(); rs == nil || !rs.Needs().ServerMessages {
		return d // no rule judges server messages: no call's rule can either (nor the registry be asked)
	}
	for _, req := range st.reqs {
		if req.key == "" || req.Direction != ClientToServer {
			continue // a notification of the client's has no answer, and so no stream
		}
		if d = judgeAsPartOf(s, x, st, m, d, req); d.Action != policy.ActionAllow {
			return d
		}
	}
	for _, p := range relatedPending(s, x, st, m) {
		if slices.ContainsFunc(st.reqs, func(r *Record) bool { return r.key != "" && r.ID == p.ID && r.Method == p.Method }) {
			continue // this exchange's own call, judged above
		}
		r := &Record{Direction: ClientToServer, Kind: mcp.KindRequest.String(), Method: p.Method, Name: p.Name, ID: p.ID}
		if d = judgeAsPartOf(s, x, st, m, d, r); d.Action != policy.ActionAllow {
			return d
		}
	}
	return d
}

// judgeAsPartOf adds to d what the rules decide for m seen as a message of the call req.
func judgeAsPartOf(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, d policy.Decision, req *Record) policy.Decision {
	cd := evaluate(s, x, st, m, req, ServerToClient, req, nil)
	for _, red := range cd.Redactions {
		if !slices.Contains(d.Redactions, red) {
			d.Redactions = append(d.Redactions, red)
		}
	}
	if cd.Action == policy.ActionDeny {
		d.Action, d.Rule = cd.Action, cd.Rule
		d.Reason = "judged as part of " + req.Method + " " + req.Name + ": " + cd.Reason
	}
	return d
}

// relatedPending returns the session's requests, answered on other connections, that the server
// message m may belong to:
//   - On a GET stream (the 2024-11-05 HTTP+SSE stream, where every call's messages and results
//     come; a 2025-x standalone or resumed stream), every pending request. A notification there
//     names no request (notifications/message has no id at all), and neither does a request the
//     server makes while answering one, so which call it belongs to cannot be told: it is judged
//     as part of each. One pending call is that call; with several, a redact rule on any of them
//     applies and a deny rule on any drops it. Anything else would let a server answering a call
//     a rule covers put what the rule hides in a log or progress notification on the shared
//     stream instead of the result. The cost of the union falls only on the messages of calls
//     running beside a covered one (redacted, or a notification dropped; never a result, which
//     is paired with its request by id), and it is bounded by maxPending per session.
//   - On any stream, for notifications/progress, the pending requests whose progressToken it
//     names as clients match it: the TypeScript SDK routes progress by token whatever the
//     stream, so a call's progress sent on another call's stream still reaches that call.
func relatedPending(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message) []Pending {
	if st.session == "" {
		return nil
	}
	get := x.Req.Method == "GET"
	tok := ""
	if m.Kind == mcp.KindNotification && m.Method == mcp.NotificationProgress {
		tok = progressKey(m)
	}
	if !get && tok == "" {
		return nil
	}
	ps := s.f.Sessions.PendingOf(s.owner, st.session)
	if get {
		return ps
	}
	return slices.DeleteFunc(ps, func(p Pending) bool { return p.Progress != tok })
}

// progressKey is the progress token m carries, as clients match it: a request's
// params._meta.progressToken, a progress notification's params.progressToken; "" when there is
// none or it is neither a string nor a number (the TypeScript SDK's schema refuses those). Like
// idKey (jsonKey), a string JavaScript reads as an integer is that integer: the TypeScript SDK
// looks the token up by Number(token).
func progressKey(m *mcp.Message) string {
	var v []byte
	var ok bool
	if m.Kind == mcp.KindNotification {
		v, ok = m.Param("progressToken")
	} else {
		if meta, has := m.Param("_meta"); has && meta[0] == '{' {
			v, ok = mcp.Member(meta, "progressToken")
		}
	}
	if !ok || len(v) == 0 {
		return ""
	}
	if c := v[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
		return ""
	}
	return jsonKey(v)
}

// redact applies the redact rules of d to msg (scope: the member patterns scan). It notes on r
// what was redacted (rules and paths, never values).
func redact(s *conn, msg []byte, d policy.Decision, scope string, r *Record) ([]byte, bool) {
	if len(d.Redactions) == 0 {
		return nil, false
	}
	out, hits, n := redactJSON(msg, d.Redactions, scope)
	if n == 0 {
		return nil, false
	}
	appendReason(r, describeHits(hits, n))
	if r.Decision == "" || r.Decision == policy.ActionAllow {
		r.Rule = hits[0].rule
	}
	return out, true
}

func appendReason(r *Record, s string) {
	if r.Reason == "" || r.Reason == policy.ReasonNoMatch {
		r.Reason = s
		return
	}
	r.Reason += "; " + s
}

// redactMessage is the response step of the redact rules of the message's decision: a result's,
// an error's, or a server request's or notification's params (one not dropped).
func redactMessage(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if sm.out == nil {
		return false
	}
	scope := "params"
	switch sm.m.Kind {
	case mcp.KindResponse:
		scope = "result"
	case mcp.KindError:
		scope = "error"
	}
	if o, ok := redact(s, sm.out, sm.d, scope, sm.rec); ok {
		sm.out, sm.changed = o, true
	}
	return false
}

package integrity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gowebpki/jcs"

	"mcpintercept/mcp"
)

// Bounds of one definition Canonical accepts.
const (
	maxDefSize  = 4 << 20 // bytes of one entry's JSON
	maxDefDepth = 64      // nesting levels, the entry's own object included
)

// allFields are the members that define a definition of some kind, sorted (RFC 8785 orders
// members by UTF-16 code units; for these ASCII names that is byte order), so that a field's
// index orders fields as the canonical object does.
var allFields = [...]string{
	"annotations", "arguments", "description", "execution", "icons", "inputSchema",
	"mimeType", "name", "outputSchema", "title", "uriTemplate",
}

func init() {
	if !slices.IsSorted(allFields[:]) {
		panic("integrity: allFields not sorted")
	}
}

// kindFields are, per kind, the indexes into allFields of the members that define it. Every
// other member (_meta, unknown members, members spelt in another case: names are compared
// exactly) is not part of the hash; Scan still reads them.
var kindFields = map[Kind][]uint8{
	KindTool:     fieldIdx("annotations", "description", "execution", "icons", "inputSchema", "name", "outputSchema", "title"),
	KindPrompt:   fieldIdx("arguments", "description", "icons", "name", "title"),
	KindTemplate: fieldIdx("annotations", "description", "icons", "mimeType", "name", "title", "uriTemplate"),
}

func fieldIdx(names ...string) []uint8 {
	out := make([]uint8, len(names))
	for i, n := range names {
		j := slices.Index(allFields[:], n)
		if j < 0 {
			panic("integrity: unknown field " + n)
		}
		out[i] = uint8(j)
	}
	slices.Sort(out)
	return out
}

// fieldOf is the index of name among kind's defining fields, or -1.
func fieldOf(kind Kind, name string) int {
	for _, i := range kindFields[kind] {
		if allFields[i] == name {
			return int(i)
		}
	}
	return -1
}

func validKind(k Kind) bool { _, ok := kindFields[k]; return ok }

// digest is a SHA-256.
type digest [32]byte

func (d digest) String() string {
	var b [7 + 64]byte
	copy(b[:], "sha256:")
	hex.Encode(b[7:], d[:])
	return string(b[:])
}

// short is the digest abbreviated for a one-line detail: "sha256:" and 8 hex digits.
func (d digest) short() string {
	var b [7 + 8]byte
	copy(b[:], "sha256:")
	hex.Encode(b[7:], d[:4])
	return string(b[:]) + "…"
}

// prefix is the digest's first 8 bytes, enough to remember "an event was recorded for this hash".
func (d digest) prefix() uint64 {
	var p uint64
	for _, b := range d[:8] {
		p = p<<8 | uint64(b)
	}
	return p | 1 // never 0, which means "none"
}

// parseDigest reads "sha256:" and 64 lower-case hex digits.
func parseDigest(s string) (digest, error) {
	var d digest
	const pfx = "sha256:"
	if len(s) != len(pfx)+64 || s[:len(pfx)] != pfx {
		return d, fmt.Errorf("%q is not sha256:<64 hex digits>", truncate(s, 80))
	}
	for _, c := range []byte(s[len(pfx):]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return d, fmt.Errorf("%q is not sha256:<64 lower-case hex digits>", truncate(s, 80))
		}
	}
	if _, err := hex.Decode(d[:], []byte(s[len(pfx):])); err != nil {
		return d, err
	}
	return d, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// fieldSum is the hash of one defining field's canonical form.
type fieldSum struct {
	idx uint8 // into allFields
	sum digest
}

// fieldVal is one defining field's canonical form.
type fieldVal struct {
	idx   uint8
	canon []byte
}

// Canonical is the canonical form of a definition (RFC 8785 of the fields that define it) and
// each defining field's own canonical form, by field name.
//
// raw must be one JSON object of at most 4 MiB and 64 levels, by the strict rules of Level 2's
// codec (mcp.ValidateJSON: no duplicate keys nor keys differing only in case, valid UTF-8, no
// escaped lone surrogate). Members are chosen by their exact name: a server that sends
// "Description" sends an unknown member, which is not hashed. Defining fields: for a tool name,
// title, description, inputSchema, outputSchema, annotations, icons and execution (the last two
// change what a user is shown and how a call runs); for a prompt name, title, description,
// arguments and icons; for a template uriTemplate, name, title, description, mimeType,
// annotations and icons. _meta is never part of it.
func Canonical(kind Kind, raw json.RawMessage) (canon []byte, fields map[string][]byte, err error) {
	canon, fv, err := canonical(kind, raw)
	if err != nil {
		return nil, nil, err
	}
	fields = make(map[string][]byte, len(fv))
	for _, f := range fv {
		fields[allFields[f.idx]] = f.canon
	}
	return canon, fields, nil
}

var errNotObject = errors.New("not a JSON object")

func canonical(kind Kind, raw []byte) ([]byte, []fieldVal, error) {
	set, ok := kindFields[kind]
	if !ok {
		return nil, nil, fmt.Errorf("unknown definition kind %q", truncate(string(kind), 40))
	}
	if len(raw) > maxDefSize {
		return nil, nil, fmt.Errorf("%s definition of %d bytes exceeds %d", kind, len(raw), maxDefSize)
	}
	if err := mcp.ValidateJSON(raw, maxDefDepth); err != nil {
		return nil, nil, fmt.Errorf("%s definition: %w", kind, err)
	}
	i := mcp.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, nil, fmt.Errorf("%s definition: %w", kind, errNotObject)
	}
	var fv []fieldVal
	i++
	for {
		i = mcp.SkipSpace(raw, i)
		if i >= len(raw) || raw[i] != '"' {
			break // '}'
		}
		ke := mcp.SkipString(raw, i)
		key := raw[i:ke]
		i = mcp.SkipSpace(raw, ke)
		i = mcp.SkipSpace(raw, i+1) // ':'
		ve := mcp.SkipValue(raw, i)
		if idx, ok := memberField(set, key); ok {
			c, err := jcs.Transform(raw[i:ve])
			if err != nil {
				return nil, nil, fmt.Errorf("%s definition: %s: %w", kind, allFields[idx], err)
			}
			fv = append(fv, fieldVal{idx: idx, canon: c})
		}
		i = mcp.SkipSpace(raw, ve)
		if i >= len(raw) || raw[i] != ',' {
			break
		}
		i++
	}
	slices.SortFunc(fv, func(a, b fieldVal) int { return int(a.idx) - int(b.idx) })
	n := 2
	for _, f := range fv {
		n += len(allFields[f.idx]) + 4 + len(f.canon)
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for k, f := range fv {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, allFields[f.idx]...)
		out = append(out, '"', ':')
		out = append(out, f.canon...)
	}
	out = append(out, '}')
	return out, fv, nil
}

// memberField says whether the quoted key is one of set's fields, compared unescaped and
// exactly.
func memberField(set []uint8, quoted []byte) (uint8, bool) {
	var name string
	if slices.Contains(quoted, '\\') {
		name = mcp.Unquote(quoted)
	} else {
		name = string(quoted[1 : len(quoted)-1]) // no allocation: compared, not kept
	}
	for _, i := range set {
		if allFields[i] == name {
			return i, true
		}
	}
	return 0, false
}

// hashOf is "sha256:<hex>" of a canonical form.
func hashOf(canon []byte) digest { return sha256.Sum256(canon) }

// sumFields hashes each field's canonical form.
func sumFields(fv []fieldVal) []fieldSum {
	if len(fv) == 0 {
		return nil
	}
	out := make([]fieldSum, len(fv))
	for i, f := range fv {
		out[i] = fieldSum{idx: f.idx, sum: sha256.Sum256(f.canon)}
	}
	return out
}

// diffFields is the names of the fields whose hashes differ between a and b (both sorted by
// index), a field present in one only included.
func diffFields(a, b []fieldSum) []string {
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(a) && a[i].idx < b[j].idx):
			out = append(out, allFields[a[i].idx])
			i++
		case i >= len(a) || b[j].idx < a[i].idx:
			out = append(out, allFields[b[j].idx])
			j++
		default:
			if a[i].sum != b[j].sum {
				out = append(out, allFields[a[i].idx])
			}
			i++
			j++
		}
	}
	return out
}

// fieldSumOf is the entry of fs for field idx.
func fieldSumOf(fs []fieldSum, idx uint8) (digest, bool) {
	for _, f := range fs {
		if f.idx == idx {
			return f.sum, true
		}
	}
	return digest{}, false
}

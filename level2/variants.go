package level2

import (
	"fmt"
	"strings"

	"mcpintercept/mcp"
)

// Case-variant argument keys. The strict scan refuses two keys of one object that fold equal and
// lone keys folding to the envelope and params members Level 2 reads, but inside
// params.arguments which keys matter depends on the rules: a rule on mcp.arguments.path reads
// Level 2's exact map, where {"PATH": "/etc/passwd"} has no "path", while a server decoding the
// arguments into a struct with encoding/json matches keys case-insensitively (Unicode simple
// folding: ſ U+017F is s, K U+212A is k) and acts on PATH as on path. So a key that folds
// equal to a key some rule reads at that position, without being that key, is refused.

// argumentCaseVariant checks the arguments of m against the argument keys the rules of rs read
// (see caseVariant). A rule set that cannot list them, or whose rules read none, finds nothing.
func argumentCaseVariant(m *mcp.Message, rs Evaluator) (string, bool) {
	if rs == nil {
		return "", false
	}
	paths := rs.Needs().ArgumentPaths
	if len(paths) == 0 {
		return "", false
	}
	args, ok := m.Param("arguments")
	if !ok {
		return "", false
	}
	return caseVariant(args, paths)
}

// caseVariant reports the first key of args (params.arguments, validated by the strict scan) that
// folds equal to the key a path of paths reads at that position but is spelled otherwise, with a
// reason for the record. A path is a chain of keys from the arguments object (["a", "b"] for
// mcp.arguments.a.b); arrays on the way are transparent, so every element is checked. Only
// the members a path leads into are walked: the cost is that of the keys at the read positions.
func caseVariant(args []byte, paths [][]string) (string, bool) {
	if len(paths) == 0 || !mcp.IsObject(args) {
		return "", false
	}
	return variantIn(args, paths, 0, nil)
}

// variantIn checks v, reached through the exact keys at, against the paths whose first depth keys
// are at.
func variantIn(v []byte, paths [][]string, depth int, at []string) (string, bool) {
	switch v[0] {
	case '[':
		for _, e := range mcp.Elements(v) {
			if why, ok := variantIn(v[e[0]:e[1]], paths, depth, at); ok {
				return why, true
			}
		}
	case '{':
		return variantInObject(v, paths, depth, at)
	}
	return "", false
}

func variantInObject(obj []byte, paths [][]string, depth int, at []string) (string, bool) {
	i := mcp.SkipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		ke := mcp.SkipString(obj, i)
		key := keyText(obj[i:ke])
		i = mcp.SkipSpace(obj, ke)
		vs := mcp.SkipSpace(obj, i+1) // ':'
		ve := mcp.SkipValue(obj, vs)
		var deeper [][]string
		for _, p := range paths {
			if len(p) <= depth {
				continue
			}
			switch want := p[depth]; {
			case key == want:
				if len(p) > depth+1 {
					deeper = append(deeper, p)
				}
			case strings.EqualFold(key, want):
				return variantReason(key, want, at), true
			}
		}
		if len(deeper) > 0 {
			if why, ok := variantIn(obj[vs:ve], deeper, depth+1, append(at, key)); ok {
				return why, true
			}
		}
		i = mcp.SkipSpace(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			break
		}
		i = mcp.SkipSpace(obj, i+1)
	}
	return "", false
}

// variantReason names the key and the key it stands for; both fold equal to a key of the
// configuration, so neither is a value the client could smuggle into the record. The key is
// quoted in ASCII (%+q), so that a look-alike such as the Kelvin sign shows as \u212a in the log.
func variantReason(key, want string, at []string) string {
	where := ""
	if len(at) > 0 {
		where = " (in arguments." + strings.Join(at, ".") + ")"
	}
	return fmt.Sprintf("argument key %+q%s is a case variant of %q, which a rule reads", key, where, want)
}

// keyText is the text of a JSON object key as a peer decodes it (quoted: the key with its quotes).
func keyText(quoted []byte) string {
	if len(quoted) >= 2 && strings.IndexByte(string(quoted), '\\') < 0 {
		return string(quoted[1 : len(quoted)-1])
	}
	return mcp.Unquote(quoted)
}

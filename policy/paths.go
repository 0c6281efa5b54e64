package policy

import (
	"slices"
	"strconv"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// fieldPath is a chain of constant keys from one of the four variables, such as mcp.method or
// http.headers["x-api-key"]. CEL reports a missing key only by its last segment ("no such key:
// method"); matching that against the paths a rule reads, and against the Input, recovers which
// field was absent.
type fieldPath struct {
	root  string
	segs  []string
	names []string // names[i]: the path up to and including segs[i], formatted once at compile time
	// dyn marks an index with a computed key into the map the path leads to, such as
	// http.headers[mcp.name]; base is that map's name ("http.headers"). A missing key there is
	// an absent field too, named after the key the request looked up.
	dyn  bool
	base string
	// fast, for a one-segment path to a string field (client.address), reads that field
	// from typed facts without boxing it.
	fast *field
}

func fastField(p fieldPath) *field {
	if o := rootObject(p.root); o != nil && len(p.segs) == 1 && !p.dyn {
		if f := o.byName[p.segs[0]]; f != nil && f.str != nil {
			return f
		}
	}
	return nil
}

func appendPaths(paths []fieldPath, a *cel.Ast) []fieldPath {
	if a == nil {
		return paths
	}
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		seen[p.id()] = true
	}
	add := func(p fieldPath) {
		if id := p.id(); !seen[id] {
			seen[id] = true
			paths = append(paths, p)
		}
	}
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if p, ok := chain(e); ok {
			add(p)
			return
		}
		if p, ok := dynIndex(e); ok {
			add(p)
		}
	}))
	return paths
}

func (p *fieldPath) id() string {
	if p.dyn {
		return p.base + "[*]"
	}
	return p.names[len(p.names)-1]
}

// dynIndex recognises m[k] where m is one of the four variables or a constant path under one,
// and k is not a constant.
func dynIndex(e ast.Expr) (fieldPath, bool) {
	if e.Kind() != ast.CallKind {
		return fieldPath{}, false
	}
	call := e.AsCall()
	args := call.Args()
	if call.FunctionName() != operators.Index || len(args) != 2 || args[1].Kind() == ast.LiteralKind {
		return fieldPath{}, false
	}
	op := args[0]
	if op.Kind() == ast.IdentKind {
		switch root := op.AsIdent(); root {
		case varClient, varConn, varHTTP, varMCP, varAuth, varDownstream:
			return fieldPath{root: root, dyn: true, base: root}, true
		}
		return fieldPath{}, false
	}
	p, ok := chain(op)
	if !ok {
		return fieldPath{}, false
	}
	p.dyn, p.base = true, p.names[len(p.names)-1]
	return p, true
}

// chain returns the path e reads if e is a select or constant-string index whose operands lead
// down to one of the four variables. Presence tests (has()) are skipped: they never fail.
func chain(e ast.Expr) (fieldPath, bool) {
	var rev []string
	cur := e
	for {
		switch cur.Kind() {
		case ast.SelectKind:
			sel := cur.AsSelect()
			if sel.IsTestOnly() {
				return fieldPath{}, false
			}
			rev = append(rev, sel.FieldName())
			cur = sel.Operand()
			continue
		case ast.CallKind:
			call := cur.AsCall()
			args := call.Args()
			if call.FunctionName() != operators.Index || len(args) != 2 || args[1].Kind() != ast.LiteralKind {
				return fieldPath{}, false
			}
			key, ok := args[1].AsLiteral().(types.String)
			if !ok {
				return fieldPath{}, false
			}
			rev = append(rev, string(key))
			cur = args[0]
			continue
		case ast.IdentKind:
			root := cur.AsIdent()
			switch root {
			case varClient, varConn, varHTTP, varMCP, varAuth, varDownstream:
			default:
				return fieldPath{}, false
			}
			if len(rev) == 0 {
				return fieldPath{}, false
			}
			p := fieldPath{root: root, segs: make([]string, len(rev)), names: make([]string, len(rev))}
			name := root
			for i := range rev {
				seg := rev[len(rev)-1-i]
				p.segs[i] = seg
				if isIdent(seg) {
					name += "." + seg
				} else {
					name += "[" + strconv.Quote(seg) + "]"
				}
				p.names[i] = name
			}
			return p, true
		default:
			return fieldPath{}, false
		}
	}
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}

// root is what a variable resolves to: the map of an Input built the old way, else the view of
// its typed facts.
func (in *Input) root(name string) any {
	switch name {
	case varClient:
		if in.Client != nil {
			return in.Client
		}
		return (*clientView)(in)
	case varConn:
		if in.Conn != nil {
			return in.Conn
		}
		return (*connView)(in)
	case varHTTP:
		if in.HTTP != nil {
			return in.HTTP
		}
		return (*httpView)(in)
	case varMCP:
		if in.MCP != nil {
			return in.MCP
		}
		return (*mcpView)(in)
	case varAuth:
		return (*authView)(in)
	case varDownstream:
		return (*downstreamView)(in)
	}
	return nil
}

// addAbsent records in d every path of the rule whose first missing segment in the Input is key,
// and reports whether there was one. Usually exactly one path qualifies; when two could have
// produced the same error (mcp.name and client.name both absent) both are named, since CEL does
// not say which it tried first.
func addAbsent(d *Decision, paths []fieldPath, in *Input, key string) bool {
	found := false
	for i := range paths {
		p := &paths[i]
		var cur any = in.root(p.root)
		complete := true
		for j, seg := range p.segs {
			v, present, isMap := lookup(cur, seg)
			if !isMap || !present {
				complete = false
				if isMap && seg == key && !p.dyn {
					found = true
					appendUnique(&d.Absent, p.names[j])
				}
				break
			}
			cur = v
		}
		if p.dyn && complete {
			if _, present, isMap := lookup(cur, key); isMap && !present {
				found = true
				appendUnique(&d.Absent, p.base+"["+strconv.Quote(truncate(key, 64))+"]")
			}
		}
	}
	return found
}

// resolveString reads a path whose value is a string. absent is the index of the first missing
// segment, or -1; ok is false when the path is absent or does not lead to a string.
func (p *fieldPath) resolveString(in *Input) (s string, absent int, ok bool) {
	if len(in.Vars.Unknown) > 0 {
		// An unknown field is not absent: CEL reads it and fails (unknownField).
		return "", -1, false
	}
	var cur any = in.root(p.root)
	if _, isMap := cur.(map[string]any); p.fast != nil && !isMap {
		if s, ok := p.fast.str(cur); ok {
			return s, -1, true
		}
		return "", 0, false
	}
	for j, seg := range p.segs {
		v, present, isMap := lookup(cur, seg)
		if !isMap {
			return "", -1, false
		}
		if !present {
			return "", j, false
		}
		cur = v
	}
	switch v := cur.(type) {
	case string:
		return v, -1, true
	case types.String:
		return string(v), -1, true
	}
	return "", -1, false
}

// keyed is a typed value read by key: the views of an Input and *RPCError.
type keyed interface {
	FindStringKey(string) (any, bool)
}

func lookup(m any, key string) (v any, present, isMap bool) {
	switch m := m.(type) {
	case map[string]any:
		v, ok := m[key]
		return v, ok, true
	case map[string]string:
		v, ok := m[key]
		return v, ok, true
	case keyed:
		v, ok := m.FindStringKey(key)
		return v, ok, true
	}
	return nil, false, false
}

func appendUnique(list *[]string, s string) {
	for _, have := range *list {
		if have == s {
			return
		}
	}
	*list = append(*list, s)
}

// argKeysOf returns the keys under mcp.arguments that e reads as a constant chain, arguments
// excluded: mcp.arguments.a.b gives ["a", "b"], mcp.arguments gives []. Unlike chain, a presence
// test (has(mcp.arguments.admin)) counts as a read, since a peer that folds keys acts on ADMIN
// while has() sees nothing; and an integer index (mcp.arguments.files[0].path) is dropped, so
// that arrays on the way are transparent to whoever checks the keys (it then checks the keys of
// every element, never fewer).
func argKeysOf(e ast.Expr) ([]string, bool) {
	var rev []string
	for cur := e; ; {
		switch cur.Kind() {
		case ast.SelectKind:
			sel := cur.AsSelect()
			rev = append(rev, sel.FieldName())
			cur = sel.Operand()
			continue
		case ast.CallKind:
			call := cur.AsCall()
			args := call.Args()
			if call.FunctionName() != operators.Index || len(args) != 2 || args[1].Kind() != ast.LiteralKind {
				return nil, false
			}
			switch key := args[1].AsLiteral().(type) {
			case types.String:
				rev = append(rev, string(key))
			case types.Int, types.Uint:
				// An element of an array: no key of its own.
			default:
				return nil, false
			}
			cur = args[0]
			continue
		case ast.IdentKind:
			if cur.AsIdent() != varMCP || len(rev) == 0 || rev[len(rev)-1] != "arguments" {
				return nil, false
			}
			keys := make([]string, 0, len(rev)-1)
			for i := len(rev) - 2; i >= 0; i-- {
				keys = append(keys, rev[i])
			}
			return keys, true
		default:
			return nil, false
		}
	}
}

// appendArgPaths adds to paths every chain of keys under mcp.arguments that the expression of a
// reads: selections, constant indexes, presence tests and `"key" in mcp.arguments…`. A read with
// a computed key (mcp.arguments[x]) or of the whole map names no key and adds nothing.
func appendArgPaths(paths [][]string, a *cel.Ast) [][]string {
	if a == nil {
		return paths
	}
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if keys, ok := argKeysOf(e); ok && len(keys) > 0 {
			paths = appendUniqueKeys(paths, keys)
			return
		}
		if e.Kind() != ast.CallKind {
			return
		}
		call := e.AsCall()
		args := call.Args()
		if call.FunctionName() != operators.In || len(args) != 2 || args[0].Kind() != ast.LiteralKind {
			return
		}
		key, ok := args[0].AsLiteral().(types.String)
		if !ok {
			return
		}
		if keys, ok := argKeysOf(args[1]); ok {
			paths = appendUniqueKeys(paths, append(keys, string(key)))
		}
	}))
	return paths
}

func appendUniqueKeys(paths [][]string, keys []string) [][]string {
	for _, p := range paths {
		if slices.Equal(p, keys) {
			return paths
		}
	}
	return append(paths, keys)
}

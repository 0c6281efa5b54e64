package policy

import (
	"fmt"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// Needs is what a rule set reads, so that a caller builds only that: Level 2 decodes arguments
// or a result into maps only when a rule reads them, and skips evaluating a server message when
// no rule judges one.
type Needs struct {
	// Level is the lowest awareness level at which every field the set reads can be present.
	Level Level
	// Headers, Arguments, Result and ClientInfo say whether some rule reads http.headers,
	// mcp.arguments, mcp.result and mcp.client_info (a rule using a variable as a whole, such
	// as mcp[k], reads all of its fields).
	Headers, Arguments, Result, ClientInfo bool
	// ServerMessages says whether some rule judges messages from the server (see
	// Input.ServerMessage); when none does, evaluating one cannot decide anything.
	ServerMessages bool
	// ArgumentPaths is Set.ArgumentPaths; Redactions is Set.Redactions. The caller must not
	// modify them.
	ArgumentPaths [][]string
	Redactions    []*Redaction
}

// Needs returns what the set reads. A nil Set reads nothing.
func (s *Set) Needs() Needs {
	if s == nil {
		return Needs{}
	}
	return s.needs
}

// fieldUse is one place a rule reads a variable: a declared field, or the whole variable
// (field "") through a computed key, membership, size() or the bare name.
type fieldUse struct {
	root  *object
	field *field // nil: the whole variable
	pos   Pos
}

func (u fieldUse) level() Level {
	if u.field == nil {
		return u.root.maxLevel()
	}
	return u.field.level
}

func (u fieldUse) name() string {
	if u.field == nil {
		return u.root.varName
	}
	return u.root.varName + "." + u.field.name
}

// fieldUses lists every read of a variable in the expression of a, presence tests included (at
// a level that cannot see a field, has() of it is always false, which is as much a mistake). A
// constant key that names no field (mcp["tool_name"]) is reported in errs: the checker sees
// only a map-like index there.
func fieldUses(a *cel.Ast, at func(id int64) Pos) (uses []fieldUse, errs []string, errPos []Pos) {
	nat := a.NativeRep()
	qualified := map[int64]bool{}
	var idents []ast.Expr
	ast.PostOrderVisit(nat.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.IdentKind:
			if rootObject(e.AsIdent()) != nil {
				idents = append(idents, e)
			}
		case ast.SelectKind:
			sel := e.AsSelect()
			if o := rootOf(sel.Operand()); o != nil {
				qualified[sel.Operand().ID()] = true
				if f := o.byName[sel.FieldName()]; f != nil {
					uses = append(uses, fieldUse{root: o, field: f, pos: at(sel.Operand().ID())})
				}
				// An unknown field is the checker's error.
			}
		case ast.CallKind:
			c := e.AsCall()
			args := c.Args()
			if c.FunctionName() != operators.Index || len(args) != 2 {
				return
			}
			o := rootOf(args[0])
			if o == nil {
				return
			}
			qualified[args[0].ID()] = true
			key, isConst := constString(args[1])
			if !isConst {
				uses = append(uses, fieldUse{root: o, pos: at(args[0].ID())})
				return
			}
			f := o.byName[key]
			if f == nil {
				errs = append(errs, fmt.Sprintf("undefined field '%s'", key))
				errPos = append(errPos, at(args[1].ID()))
				return
			}
			uses = append(uses, fieldUse{root: o, field: f, pos: at(args[0].ID())})
		}
	}))
	for _, id := range idents {
		if !qualified[id.ID()] {
			uses = append(uses, fieldUse{root: rootObject(id.AsIdent()), pos: at(id.ID())})
		}
	}
	return uses, errs, errPos
}

func rootOf(e ast.Expr) *object {
	if e.Kind() != ast.IdentKind {
		return nil
	}
	return rootObject(e.AsIdent())
}

func constString(e ast.Expr) (string, bool) {
	if e.Kind() != ast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// exprPos maps an expression id of a to its position in the configuration file.
func exprPos(a *cel.Ast, start Pos) func(int64) Pos {
	info := a.NativeRep().SourceInfo()
	return func(id int64) Pos {
		loc := info.GetStartLocation(id)
		return start.offset(loc.Line(), loc.Column())
	}
}

// reads reports whether the use reads mcp.<name> (or the whole mcp).
func (u fieldUse) reads(root, name string) bool {
	return u.root.varName == root && (u.field == nil || u.field.name == name)
}

func (s *Set) computeNeeds() {
	n := Needs{ArgumentPaths: s.argPaths, Redactions: s.Redactions()}
	for _, r := range s.rules {
		for _, u := range r.uses {
			n.Level = max(n.Level, u.level())
			n.Headers = n.Headers || u.reads(varHTTP, "headers")
			n.Arguments = n.Arguments || u.reads(varMCP, "arguments")
			n.Result = n.Result || u.reads(varMCP, "result")
			n.ClientInfo = n.ClientInfo || u.reads(varMCP, "client_info")
		}
		n.ServerMessages = n.ServerMessages || r.readsServer
	}
	s.needs = n
}

// CheckLevel reports every field the set reads that a route of level l cannot see — mcp.arguments
// on a Level 1 route, http.path on an opaque one — as CompileErrors at the field's position: such
// a rule would never match there. A rule using a variable as a whole (mcp[k], size(mcp)) reads
// every field of it, so mcp used that way needs Level 2.
func (s *Set) CheckLevel(l Level) error {
	if s == nil {
		return nil
	}
	var errs CompileErrors
	for _, r := range s.rules {
		for _, u := range r.uses {
			if ul := u.level(); ul > l {
				msg := fmt.Sprintf("%s needs awareness level %d, the route has level %d", u.name(), ul, l)
				if u.field == nil {
					msg = fmt.Sprintf("%s used as a whole reads every field, which needs awareness level %d; the route has level %d",
						u.name(), ul, l)
				}
				errs = append(errs, &CompileError{Pos: u.pos, Rule: r.name, Msg: msg})
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

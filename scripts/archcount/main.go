// Command archcount is scripts/archcount.sh's parser: the figures that grep cannot count
// exactly.
//
//	archcount literals  the string literals, in non-test Go files outside package mcp, whose
//	                    value is an MCP method name (a value of a constant in mcp/methods.go);
//	                    one file:line: "value" per literal
//	archcount methods DIR [N]
//	                    the methods of each named type declared in DIR's non-test files, most
//	                    first (the first N): count type (files)
//
// Both run from the module's root.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: archcount literals | methods DIR [N]")
	}
	switch os.Args[1] {
	case "literals":
		literals()
	case "methods":
		n := 0
		if len(os.Args) == 4 {
			n, _ = strconv.Atoi(os.Args[3])
		} else if len(os.Args) != 3 {
			fail("usage: archcount methods DIR [N]")
		}
		methods(os.Args[2], n)
	default:
		fail("unknown command " + os.Args[1])
	}
}

// methodNames are the values of mcp/methods.go's string constants.
func methodNames() map[string]bool {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("mcp", "methods.go"), nil, 0)
	if err != nil {
		fail(err.Error())
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						names[s] = true
					}
				}
			}
		}
	}
	if len(names) == 0 {
		fail("no method constants in mcp/methods.go")
	}
	return names
}

func literals() {
	names := methodNames()
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "mcp" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && names[s] {
					p := fset.Position(lit.Pos())
					fmt.Printf("%s:%d: %q\n", p.Filename, p.Line, s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		fail(err.Error())
	}
}

func methods(dir string, n int) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.SkipObjectResolution)
	if err != nil {
		fail(err.Error())
	}
	count := map[string]int{}
	files := map[string]map[string]bool{}
	for _, p := range pkgs {
		for name, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
					continue
				}
				t := recvName(fd.Recv.List[0].Type)
				count[t]++
				if files[t] == nil {
					files[t] = map[string]bool{}
				}
				files[t][filepath.Base(name)] = true
			}
		}
	}
	types := make([]string, 0, len(count))
	for t := range count {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool {
		if count[types[i]] != count[types[j]] {
			return count[types[i]] > count[types[j]]
		}
		return types[i] < types[j]
	})
	if n > 0 && n < len(types) {
		types = types[:n]
	}
	for _, t := range types {
		fs := make([]string, 0, len(files[t]))
		for f := range files[t] {
			fs = append(fs, f)
		}
		sort.Strings(fs)
		fmt.Printf("%d %s (%d files: %s)\n", count[t], t, len(fs), strings.Join(fs, " "))
	}
}

func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "archcount:", msg)
	os.Exit(1)
}

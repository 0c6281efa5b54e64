package policy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
	"go.yaml.in/yaml/v3"
)

// legacyEnv declares the variables as they were before they were typed: maps of dyn. It is the
// oracle of TestRulesInTreeStillCompile.
func legacyEnv(t *testing.T) *cel.Env {
	t.Helper()
	env, err := cel.NewEnv(
		cel.Variable(varClient, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varConn, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varHTTP, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varMCP, cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
		cel.Function("cidr_contains", cel.Overload("cc", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType)),
		cel.Function("prefix",
			cel.Overload("p2", []*cel.Type{cel.StringType, cel.IntType}, cel.StringType),
			cel.Overload("p3", []*cel.Type{cel.StringType, cel.IntType, cel.IntType}, cel.StringType)),
	)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestRulesInTreeStillCompile compiles every rule expression the repository holds — examples,
// packaging, e2e and scripts configurations, the README, and the rule literals and embedded
// configurations of every package's tests — with the typed variables. Whatever compiled when
// the variables were maps of dyn must still compile; the deliberately broken expressions of
// tests fail under both.
func TestRulesInTreeStillCompile(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	old := legacyEnv(t)
	type found struct{ file, kind, expr string }
	var all []found
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "vendor", "fuzz":
				return filepath.SkipDir
			}
			// policy's own tests hold the unit cases, broken ones on purpose.
			if rel == "policy" {
				return filepath.SkipDir
			}
			return nil
		}
		var exprs map[string][]string
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".md", ".sh":
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			exprs = exprsInText(string(src))
		case ".go":
			exprs = exprsInGo(t, path)
		default:
			return nil
		}
		for kind, list := range exprs {
			for _, e := range list {
				all = append(all, found{rel, kind, e})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 50 {
		t.Fatalf("found only %d rule expressions in the tree: the extraction is broken", len(all))
	}
	compiled := 0
	for _, f := range all {
		if _, iss := old.Compile(f.expr); iss.Err() != nil {
			continue // broken on purpose, or not a rule after all
		}
		spec := RuleSpec{Name: "r", Action: RuleDeny, When: f.expr}
		if f.kind == "key" {
			spec = RuleSpec{Name: "r", Action: RuleRateLimit, RateLimit: &RateLimit{Key: f.expr, Rate: 1, Burst: 1}}
		}
		if _, err := Compile([]RuleSpec{spec}); err != nil {
			if strings.Contains(err.Error(), "want bool") || strings.Contains(err.Error(), "want a value convertible") {
				// The old checker could not tell: a dyn when is checked at run time.
				continue
			}
			t.Errorf("%s: %s %q no longer compiles: %v", f.file, f.kind, f.expr, err)
			continue
		}
		compiled++
	}
	t.Logf("%d expressions found, %d compiled under both declarations", len(all), compiled)
}

var (
	whenLine = regexp.MustCompile(`(?m)^[\s\-{]*when:\s*(.+)$`)
	keyLine  = regexp.MustCompile(`rate_limit:\s*(\{.*\})`)
	fence    = regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
)

// exprsInText finds rule expressions in a YAML document, the YAML blocks of a Markdown file, or
// the configuration lines of a script.
func exprsInText(src string) map[string][]string {
	out := map[string][]string{}
	docs := []string{src}
	for _, m := range fence.FindAllStringSubmatch(src, -1) {
		docs = append(docs, m[1])
	}
	for _, d := range docs {
		var n yaml.Node
		if yaml.Unmarshal([]byte(d), &n) == nil {
			walkYAML(&n, out)
		}
	}
	// Fragments that are not a whole document: one line at a time.
	for _, m := range whenLine.FindAllStringSubmatch(src, -1) {
		var v string
		if yaml.Unmarshal([]byte(strings.TrimRight(m[1], "}, ")), &v) == nil && v != "" && v != "|" && v != ">-" {
			out["when"] = append(out["when"], v)
		}
	}
	for _, m := range keyLine.FindAllStringSubmatch(src, -1) {
		var rl struct{ Key string }
		if yaml.Unmarshal([]byte(m[1]), &rl) == nil && rl.Key != "" {
			out["key"] = append(out["key"], rl.Key)
		}
	}
	return out
}

func walkYAML(n *yaml.Node, out map[string][]string) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "when" && v.Kind == yaml.ScalarNode {
				out["when"] = append(out["when"], v.Value)
			}
			if k.Value == "rate_limit" && v.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(v.Content); j += 2 {
					if v.Content[j].Value == "key" && v.Content[j+1].Value != "" {
						out["key"] = append(out["key"], v.Content[j+1].Value)
					}
				}
			}
		}
	}
	for _, c := range n.Content {
		walkYAML(c, out)
	}
}

// exprsInGo finds the When and Key of rule literals, and the configurations in string literals.
func exprsInGo(t *testing.T, path string) map[string][]string {
	out := map[string][]string{}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			k, ok := n.Key.(*ast.Ident)
			lit, isLit := n.Value.(*ast.BasicLit)
			if !ok || !isLit || lit.Kind != token.STRING || (k.Name != "When" && k.Name != "Key") {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && s != "" {
				out[strings.ToLower(k.Name)] = append(out[strings.ToLower(k.Name)], s)
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || !strings.Contains(n.Value, "when:") && !strings.Contains(n.Value, "rate_limit:") {
				return true
			}
			if s, err := strconv.Unquote(n.Value); err == nil {
				for kind, list := range exprsInText(s) {
					out[kind] = append(out[kind], list...)
				}
			}
		}
		return true
	})
	return out
}

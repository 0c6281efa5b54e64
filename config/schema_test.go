package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSchemaCoversEveryField: every field the file can set has exactly one
// entry in its table, with a doc, so that a field added to a struct without
// a table entry (it would never be read from a file) fails here.
func TestSchemaCoversEveryField(t *testing.T) {
	for _, tt := range []struct {
		name  string
		typ   reflect.Type
		paths []string
		docs  []string
	}{
		{"config", reflect.TypeFor[Config](), paths(configTable), docs(configTable)},
		{"route", reflect.TypeFor[Route](), paths(routeTable), docs(routeTable)},
		{"rule", reflect.TypeFor[Rule](), paths(ruleTable), docs(ruleTable)},
		{"rate_limit", reflect.TypeFor[RateLimit](), paths(rateLimitTable), docs(rateLimitTable)},
		{"redact", reflect.TypeFor[Redact](), paths(redactTable), docs(redactTable)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := yamlPaths(tt.typ, "")
			got := slices.Clone(tt.paths)
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("table keys\n%v\nstruct fields\n%v", got, want)
			}
			for i, d := range tt.docs {
				if strings.TrimSpace(d) == "" {
					t.Errorf("%s has no doc", tt.paths[i])
				}
			}
		})
	}
}

// TestDefaultRouteTable: default_route takes the route keys less name, match
// and credentials (it names no destination), in the same order.
func TestDefaultRouteTable(t *testing.T) {
	var want []string
	for _, p := range paths(routeTable) {
		if p != "name" && !strings.HasPrefix(p, "match.") && !strings.HasPrefix(p, "credentials.") {
			want = append(want, p)
		}
	}
	if got := paths(defaultRouteTable); !slices.Equal(got, want) {
		t.Errorf("default_route keys %v, want %v", got, want)
	}
}

func paths[S any](t table[S]) []string {
	var out []string
	for _, s := range t {
		out = append(out, s.keyPath())
	}
	return out
}

func docs[S any](t table[S]) []string {
	var out []string
	for _, s := range t {
		out = append(out, s.keyDoc())
	}
	return out
}

// yamlPaths lists the dotted keys of typ's yaml-tagged fields, descending
// into this package's section structs (not into values such as Duration).
func yamlPaths(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || name == "" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath() && ft != reflect.TypeFor[Duration]() && ft != reflect.TypeFor[PortRange]() {
			out = append(out, yamlPaths(ft, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes (and an arbitrary --mechanism) to Parse.
// Parse must never panic; a failure must be a non-empty, ordered Errors of
// one-line messages; a success must re-validate cleanly and survive being
// written back out as YAML.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
	}
	f.Fuzz(func(t *testing.T, data []byte, mechanism string) {
		c, err := Parse("fuzz.yaml", data, Overrides{Mechanism: Mechanism(mechanism)})
		if err != nil {
			if c != nil {
				t.Fatal("returned a config together with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error is %T %v, want a non-empty Errors", err, err)
			}
			for i, e := range errs {
				if e.Msg == "" || e.Line < 0 || e.Column < 0 {
					t.Fatalf("malformed error %#v", e)
				}
				if strings.Contains(e.Error(), "\n") {
					t.Fatalf("error spans lines: %q", e.Error())
				}
				if i > 0 && e.Line < errs[i-1].Line {
					t.Fatalf("errors out of order:\n%v", err)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v\ninput:\n%s", err, data)
		}
		roundTrip(t, c)
	})
}

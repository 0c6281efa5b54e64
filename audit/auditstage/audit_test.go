package auditstage

import (
	"testing"

	"mcpintercept/stage"
)

// TestAuditWriterNilWhenNotAudited: an unaudited flow hands Level 2 a nil interface, not a nil
// pointer inside one (which a nil check would take for a writer); an audited one gets the same
// writer every time it asks (Level 1 and Level 2 of one connection share it).
func TestAuditWriterNilWhenNotAudited(t *testing.T) {
	a := New(nil)
	if w := a.Writer(&stage.Conn{}); w != nil {
		t.Fatalf("Writer() = %#v, want nil", w)
	}
	c := &stage.Conn{Options: stage.Options{Name: &Options{}}}
	w1, w2 := a.Writer(c), a.Writer(c)
	if w1 == nil || w1 != w2 {
		t.Fatalf("audited connection: writers %p and %p, want one non-nil", w1, w2)
	}
}

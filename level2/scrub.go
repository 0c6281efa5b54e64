package level2

import "mcpintercept/policy"

// scrubText applies the patterns of reds to a plain string taken from a message (an error
// message, a reason), so that a value redacted for the client never reaches a record or a log.
func scrubText(s string, reds []*policy.Redaction) string {
	for _, r := range reds {
		marker := r.Marker
		if marker == "" {
			marker = policy.DefaultMarker
		}
		for _, p := range r.Patterns {
			s = p.ReplaceAllLiteralString(s, marker)
		}
	}
	return s
}

package level2

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"mcpintercept/mcp"
)

// decodeProblem describes why a server's bytes did not decode without quoting them: a reason goes
// to the client and the record, and what the server sent may hold a value a rule redacts.
func decodeProblem(err error) string {
	var je *mcp.JSONError
	if errors.As(err, &je) {
		return fmt.Sprintf("json: %v at offset %d", je.Err, je.Offset)
	}
	return oneLine(err.Error())
}

func resultString(result json.RawMessage, key string) string {
	if v, ok := mcp.Member(result, key); ok {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return ""
}

func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

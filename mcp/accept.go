package mcp

import (
	"strings"

	"mcpintercept/exchange/httptok"
)

// Accepts reports whether any Accept line of a head admits one of the media ranges (q=0
// excluded), the one reading of Accept that Level 1 and Level 2 share. It takes the head's header
// lines as they are (any struct of Name and Value), so that this package needs no framing type.
func Accepts[H ~struct{ Name, Value string }](headers []H, ranges ...string) bool {
	for _, hd := range headers {
		h := struct{ Name, Value string }(hd)
		if equalFold(h.Name, "Accept") && AcceptsValue(h.Value, ranges...) {
			return true
		}
	}
	return false
}

// AcceptsValue reports whether one Accept field value lists one of ranges with a q-value other
// than 0 (RFC 9110 §12.5.1: q=0 means "not acceptable").
func AcceptsValue(v string, ranges ...string) bool {
	ok := false
	forEachToken(v, func(t string) {
		if ok {
			return
		}
		mt, params, _ := strings.Cut(t, ";")
		mt = strings.TrimSpace(mt)
		listed := false
		for _, r := range ranges {
			listed = listed || equalFold(mt, r)
		}
		if !listed {
			return
		}
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			k, val, _ := strings.Cut(p, "=")
			if equalFold(strings.TrimSpace(k), "q") && qZero(strings.TrimSpace(val)) {
				return
			}
		}
		ok = true
	})
	return ok
}

// AcceptsEventStream reports whether one Accept field value admits text/event-stream: the media
// range text/event-stream, text/* or */*.
func AcceptsEventStream(v string) bool {
	return AcceptsValue(v, "text/event-stream", "text/*", "*/*")
}

// qZero reports a q-value of 0 ("0", "0.", "0.000").
func qZero(q string) bool {
	if q == "" || q[0] != '0' {
		return false
	}
	for i := 1; i < len(q); i++ {
		if q[i] != '.' && q[i] != '0' {
			return false
		}
	}
	return true
}

func forEachToken(v string, fn func(string)) { httptok.ForEachToken(v, fn) }

func equalFold(a, b string) bool { return httptok.EqualFold(a, b) }

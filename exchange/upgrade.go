package exchange

import (
	"slices"
	"strings"
)

// UpgradeProtocols lists what a request asks to switch to: each protocol named by its Upgrade
// headers (lower-cased, without "/version"), "h2c" when it carries HTTP2-Settings (an h2c upgrade
// whatever its Upgrade header says), and "connect" for CONNECT. asked reports an Upgrade header,
// HTTP2-Settings or CONNECT even when no protocol could be named.
func (h *Head) UpgradeProtocols() (protos []string, asked bool) {
	add := func(p string) {
		if !slices.Contains(protos, p) {
			protos = append(protos, p)
		}
	}
	if h.Method == "CONNECT" {
		asked = true
		add("connect")
	}
	for _, hd := range h.Headers {
		switch {
		case equalFold(hd.Name, "upgrade"):
			asked = true
			forEachToken(hd.Value, func(t string) {
				if i := strings.IndexByte(t, '/'); i >= 0 {
					t = t[:i]
				}
				if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
					add(t)
				}
			})
		case equalFold(hd.Name, "http2-settings"):
			asked = true
			add("h2c")
		}
	}
	return protos, asked
}

// switchedTo names the protocol a switching response chose, if the request asked for it: the
// first protocol of the 101's Upgrade header, or the only one asked for when it names none.
func switchedTo(resp *Head, protos []string) (string, bool) {
	if len(protos) == 1 && protos[0] == "connect" {
		return "connect", true
	}
	var chosen []string
	for _, hd := range resp.Headers {
		if equalFold(hd.Name, "upgrade") {
			forEachToken(hd.Value, func(t string) {
				if i := strings.IndexByte(t, '/'); i >= 0 {
					t = t[:i]
				}
				chosen = append(chosen, strings.ToLower(strings.TrimSpace(t)))
			})
		}
	}
	switch {
	case len(chosen) == 0 && len(protos) == 1:
		return protos[0], true
	case len(chosen) == 0:
		return "", false
	}
	for _, c := range chosen {
		if !slices.Contains(protos, c) {
			return c, false
		}
	}
	return chosen[0], true
}

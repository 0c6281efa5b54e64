package auth

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// CanonicalURI is the MCP server's canonical URI as the MCP authorization
// spec (RFC 8707 resource) defines it: lowercase scheme and host, port only
// when not the default, path without a trailing slash, no query or
// fragment. host is the SNI or Host the client used; a port in it is used
// when port is 0.
func CanonicalURI(scheme, host string, port int, path string) string {
	scheme = strings.ToLower(scheme)
	host, port = splitPort(host, port)
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != 0 && port != defaultPort(scheme) {
		host += ":" + strconv.Itoa(port)
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimRight(path, "/")
	if path != "" && path[0] != '/' {
		path = "/" + path
	}
	return scheme + "://" + host + path
}

// splitPort takes a port out of host ("a.example:8443", "[::1]:443") and
// the brackets off an IPv6 literal.
func splitPort(host string, port int) (string, int) {
	if h, p, err := net.SplitHostPort(host); err == nil {
		if n, err := strconv.Atoi(p); err == nil && port == 0 {
			port = n
		}
		return h, port
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), port
}

func defaultPort(scheme string) int {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// canonicalize brings an audience URI to the form CanonicalURI gives, so
// "https://A.example:443/mcp/" and "https://a.example/mcp" compare equal.
// What is not an absolute URI (an audience like "api://x" keeps its form,
// "my-api" is not a URI) is compared as written. A query or user info is
// kept so that it cannot be normalized into a match.
func canonicalize(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return s
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery {
		return s
	}
	port, _ := strconv.Atoi(u.Port())
	return CanonicalURI(u.Scheme, u.Hostname(), port, u.EscapedPath())
}

func canonicalAll(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, canonicalize(s))
	}
	return out
}

// TargetPath is the path of a request target, for its canonical URI (the token check and the
// credentials stage name the server alike): origin-form up to the query, or the path of an
// absolute-form target.
func TargetPath(target string) string {
	if i := strings.Index(target, "://"); i >= 0 {
		rest := target[i+3:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return "/"
		}
		target = rest[j:]
	}
	if i := strings.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	return target
}

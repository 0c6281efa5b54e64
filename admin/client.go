package admin

import (
	"errors"
	"net"
	"net/url"
	"strings"
)

// The client side: how the CLI's commands (tools, observe) name the listener.

// URLOf is the URL a local client reaches admin.listen at: a wildcard address is reached on
// loopback.
func URLOf(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// NormalizeURL accepts http(s)://host:port[/prefix] or a bare host:port (--admin).
func NormalizeURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", errors.New("want http://HOST:PORT")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

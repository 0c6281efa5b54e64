//go:build !linux

package nodeagent

import (
	"context"
	"errors"
	"net"

	"mcpintercept/intercept/upstream"
)

var errNotLinux = errors.New("node agent: network namespaces need Linux")

// NS is a network namespace; there are none outside Linux.
type NS struct{ Path string }

// OpenNS needs Linux.
func OpenNS(string) (*NS, error) { return nil, errNotLinux }

func (n *NS) Close() error          { return nil }
func (n *NS) Inode() uint64         { return 0 }
func (n *NS) Do(func() error) error { return errNotLinux }

type nsDialer struct {
	ns   *NS
	base upstream.ContextDialer
}

func (d *nsDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errNotLinux
}

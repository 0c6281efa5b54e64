//go:build !linux

package upstream

import (
	"context"
	"errors"
	"net"
	"time"
)

// BypassDialer has no mark off Linux, where nothing steers the appliance's own connections.
func BypassDialer(mark uint32, timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout}
}

// TransparentDialer needs Linux (IP_TRANSPARENT); off Linux every dial fails.
func TransparentDialer(mark uint32, timeout time.Duration) ContextDialer { return noTransparent{} }

type noTransparent struct{}

func (noTransparent) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("inbound dial: transparent sockets need Linux")
}

//go:build !linux

package upstream

import (
	"net"
	"time"
)

// BypassDialer has no mark off Linux, where nothing steers the appliance's own connections.
func BypassDialer(mark uint32, timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout}
}

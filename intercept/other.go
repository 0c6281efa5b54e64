//go:build !linux

package intercept

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"mcpintercept/config"
	"mcpintercept/origin"
)

var errNotLinux = errors.New("transparent interception needs Linux (netfilter, policy routing, IP_TRANSPARENT)")

func newNftables(cfg *config.Config) Mechanism { return unsupported{config.NftablesTProxy} }
func newIptables(cfg *config.Config) Mechanism { return unsupported{config.IptablesRedirect} }

func newEBPFFromConfig(cfg *config.Config) (Mechanism, error) { return nil, errNotLinux }

func newDNSFromConfig(cfg *config.Config) (Mechanism, error) { return nil, errNotLinux }

func listenTargets(cfg *config.Config) (v4, v6 netip.Addr) { return }

type unsupported struct{ name config.Mechanism }

func (u unsupported) Name() config.Mechanism        { return u.name }
func (u unsupported) Install(context.Context) error { return errNotLinux }
func (u unsupported) Remove(context.Context) error  { return nil }
func (u unsupported) Origin(*net.TCPConn) (origin.Origin, error) {
	return origin.Origin{}, errNotLinux
}

func soOriginalDst(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errNotLinux }

// Listen is unavailable off Linux.
func Listen(context.Context, []netip.Addr, uint16, bool) ([]*net.TCPListener, error) {
	return nil, errNotLinux
}

// BypassDialer has no mark off Linux.
func BypassDialer(mark uint32, timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout}
}

// Cleanup has nothing to remove off Linux.
func Cleanup(context.Context) ([]string, error) { return nil, nil }

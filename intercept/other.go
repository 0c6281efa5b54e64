//go:build !linux

package intercept

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"mcpintercept/origin"
)

var errNotLinux = errors.New("transparent interception needs Linux (netfilter, policy routing, IP_TRANSPARENT)")

func newNftables(Options) Mechanism { return unsupported{origin.NftablesTProxy} }
func newIptables(Options) Mechanism { return unsupported{origin.IptablesRedirect} }

func newEBPFFromOptions(Options) (Mechanism, error) { return nil, errNotLinux }

func newDNS(Options) (Mechanism, error) { return nil, errNotLinux }

type unsupported struct{ name origin.Mechanism }

func (u unsupported) Name() origin.Mechanism        { return u.name }
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

// Nothing of ours can be installed off Linux, so the sweeps find nothing.
func deleteNftTables() ([]string, error) { return nil, nil }
func removeRouting() ([]string, error)   { return nil, nil }
func removeIptables() ([]string, error)  { return nil, nil }
func CleanupEBPF() ([]string, error)     { return nil, nil }

// CheckNftTable needs Linux.
func CheckNftTable() error { return errNotLinux }

func deleteNftTablesNamed(...string) ([]string, error) { return nil, nil }

// Install needs Linux.
func (in *Inbound) Install(context.Context) error { return errNotLinux }

// Remove has nothing to remove off Linux.
func (in *Inbound) Remove(context.Context) error { return nil }

// Beat has nothing to refresh off Linux.
func (in *Inbound) Beat() error { return nil }

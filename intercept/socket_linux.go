package intercept

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listen binds one TCP listener per address on port. With transparent set the sockets get
// IP_TRANSPARENT / IPV6_TRANSPARENT, which TPROXY needs to hand them packets for foreign addresses.
// IPv6 listeners are V6ONLY so that an IPv4 and an IPv6 wildcard can share the port. On error every
// listener already opened is closed again.
func Listen(ctx context.Context, addrs []netip.Addr, port uint16, transparent bool) ([]*net.TCPListener, error) {
	var out []*net.TCPListener
	for _, a := range addrs {
		network := "tcp4"
		if a.Is6() && !a.Is4In6() {
			network = "tcp6"
		}
		lc := net.ListenConfig{Control: func(network, address string, rc syscall.RawConn) error {
			if !transparent {
				return nil
			}
			var serr error
			err := rc.Control(func(fd uintptr) {
				if network == "tcp6" {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
				} else {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
				}
			})
			if err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("set IP_TRANSPARENT (needs CAP_NET_ADMIN): %w", serr)
			}
			return nil
		}}
		addr := netip.AddrPortFrom(a.Unmap(), port).String()
		l, err := lc.Listen(ctx, network, addr)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			if errors.Is(err, unix.EADDRINUSE) {
				return nil, fmt.Errorf("listen %s: address already in use (another mcpintercept, or change listen.port)", addr)
			}
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		out = append(out, l.(*net.TCPListener))
	}
	return out, nil
}

// soOriginalDst reads the pre-NAT destination from conntrack: SO_ORIGINAL_DST for IPv4 and
// IP6T_SO_ORIGINAL_DST (same option number, SOL_IPV6) for IPv6.
func soOriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	local, err := AddrPortOf(c.LocalAddr())
	if err != nil {
		return netip.AddrPort{}, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if local.Addr().Is4() {
			// sockaddr_in is 16 bytes; IPv6Mreq is a 20-byte buffer the kernel fills from the front.
			var m *unix.IPv6Mreq
			m, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if serr != nil {
				return
			}
			b := m.Multiaddr
			port := binary.BigEndian.Uint16(b[2:4])
			out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
			return
		}
		// sockaddr_in6 is 28 bytes; IPv6MTUInfo starts with a RawSockaddrInet6.
		var mi *unix.IPv6MTUInfo
		mi, serr = unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst)
		if serr != nil {
			return
		}
		p := (*[2]byte)(unsafePointer(&mi.Addr.Port))
		port := binary.BigEndian.Uint16(p[:])
		out = netip.AddrPortFrom(netip.AddrFrom16(mi.Addr.Addr).Unmap(), port)
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		if errors.Is(serr, unix.ENOENT) {
			return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: no NAT entry for this connection (was it redirected?): %w", serr)
		}
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", serr)
	}
	return out, nil
}

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h; x/sys/unix
// does not export it.
const ip6tSOOriginalDst = 80

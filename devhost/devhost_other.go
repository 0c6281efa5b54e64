//go:build !linux

package devhost

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"

	"mcpintercept/appliance"
	"mcpintercept/intercept"
)

// User is who the command runs as (Linux only).
type User struct{}

// Options are what Run needs.
type Options struct {
	NewAppliance func(context.Context, appliance.Options) (*appliance.Appliance, error)
	Steering     intercept.Options
	ZeroConfig   bool
	Level        int
	Argv         []string
	User         User
	Stderr       io.Writer
	Log          *slog.Logger
	// CgroupCreated is told the command's cgroup (Linux only).
	CgroupCreated func(path string)
	// NoLoopback leaves loopback destinations alone (Linux only).
	NoLoopback bool
}

// AllowLoopback is deny unchanged off Linux (nothing is steered there).
func AllowLoopback(deny []netip.Prefix) []netip.Prefix { return deny }

// ResolveUser needs Linux.
func ResolveUser(string, bool) (User, error) {
	return User{}, fmt.Errorf("exec %w", appliance.ErrNeedsLinux)
}

// Run needs Linux.
func Run(context.Context, Options) (int, error) {
	return 0, fmt.Errorf("exec %w", appliance.ErrNeedsLinux)
}

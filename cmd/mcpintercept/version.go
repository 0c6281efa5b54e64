package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"mcpintercept/telemetry"
)

// version is the build's version, set by `make build` and packaging/build.sh with
// -ldflags "-X main.version=V", V being the .deb's version (packaging/build.sh version, from `git
// describe --tags --always --dirty`). A plain `go build` leaves it empty: buildVersion then says
// devel and the VCS stamp Go records.
var version string

// buildVersion is the version `version`, `--version`, `declare` and /declaration report.
func buildVersion() string {
	if version != "" {
		return version
	}
	return develVersion(debug.ReadBuildInfo())
}

// develVersion is "devel" plus the module's VCS revision (12 hex digits), its time and
// "+dirty", as far as info has them.
func develVersion(info *debug.BuildInfo, ok bool) string {
	v := "devel"
	if !ok || info == nil {
		return v
	}
	var rev, at string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev
		if dirty {
			v += "+dirty"
		}
		if at != "" {
			v += " (" + at + ")"
		}
	} else if mv := info.Main.Version; mv != "" && mv != "(devel)" {
		v += " " + mv
	}
	return v
}

func init() {
	// declare and the admin /declaration carry the same string.
	telemetry.Version = buildVersion()
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "mcpintercept version: unexpected argument %q\n", args[0])
		return exitUsage
	}
	fmt.Fprintf(stdout, "mcpintercept %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"mcpintercept/admin"
	"mcpintercept/config"
	"mcpintercept/integrity"
)

const toolsUsageText = `usage: mcpintercept tools list    [--json] [CONNECTION]
       mcpintercept tools diff    [--pins FILE] [CONNECTION]
       mcpintercept tools approve SERVER NAME [--kind tool|prompt|template] [--hash SEEN] [CONNECTION]
       mcpintercept tools pin     --from-live [--out FILE] [CONNECTION]

  list     every definition the running appliance knows, per server: SERVER KIND NAME STATE PIN SEEN
           FINDINGS (hashes shortened); --json prints the whole snapshot
  diff     what is not pinned and unchanged (changed, pending, quarantined, removed), with the fields that
           changed and the pinned → seen hashes; --pins FILE compares the live definitions with that pin file
           instead. Exit 0: no difference; 1: differences (or the appliance cannot be reached); 2: usage
  approve  pin the definition SERVER (as list shows it) lists now under NAME, ending its quarantine; needs the
           admin token
  pin      write a pin file of every definition seen, pinned at the hash seen last, to FILE (mode 0644) or
           stdout, for an operator to review, commit and name in tool_integrity.pin_file

CONNECTION (the appliance's admin listener):
  --config FILE      the appliance's configuration: the admin URL from admin.listen, the token from
                     tool_integrity.dir/admin.token
  --admin URL        the admin listener (default http://127.0.0.1:9464)
  --token-file FILE  the admin token (default /var/lib/mcpintercept/tools/admin.token)
`

func toolsUsage(w io.Writer) { fmt.Fprint(w, toolsUsageText) }

// cmdTools is `tools list|diff|approve|pin`: the running appliance's tool-integrity state, over
// its admin listener.
func cmdTools(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		toolsUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "list":
		return cmdToolsList(args[1:], stdout, stderr)
	case "diff":
		return cmdToolsDiff(args[1:], stdout, stderr)
	case "approve":
		return cmdToolsApprove(args[1:], stdout, stderr)
	case "pin":
		return cmdToolsPin(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		toolsUsage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "mcpintercept tools: unknown command %q\n", args[0])
	toolsUsage(stderr)
	return exitUsage
}

// toolsConn is how a tools command reaches the appliance: its connection flags, then the
// admin client they name.
type toolsConn struct {
	name      string // "tools list", for messages
	config    string
	admin     string
	tokenFile string
	stderr    io.Writer
	*admin.Client
}

func newToolsFlags(name string, stderr io.Writer) (*flag.FlagSet, *toolsConn) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { toolsUsage(stderr) }
	c := &toolsConn{name: name, stderr: stderr}
	fs.StringVar(&c.config, "config", "", "the appliance's configuration file")
	fs.StringVar(&c.admin, "admin", "", "the admin listener's URL (default from --config, else http://"+config.DefaultAdminListen+")")
	fs.StringVar(&c.tokenFile, "token-file", "", "the admin token file (default from --config)")
	return fs, c
}

// parseArgs parses flags placed before, between or after the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// resolve makes the admin client from the flags and the configuration; false (after saying
// why) is a usage error.
func (c *toolsConn) resolve() bool {
	var cfg *config.Config
	if c.config != "" {
		var ok bool
		if cfg, ok = loadConfig(&commonFlags{config: c.config}, c.stderr); !ok {
			return false
		}
	}
	if c.admin == "" {
		listen := config.DefaultAdminListen
		if cfg != nil {
			listen = cfg.Admin.Listen
		}
		if listen == config.Off || listen == "" {
			fmt.Fprintf(c.stderr, "mcpintercept %s: admin.listen is off in %s; the tools commands talk to the running appliance's admin listener: turn it on, or pass --admin URL\n", c.name, c.config)
			return false
		}
		u, err := admin.URLOf(listen)
		if err != nil {
			fmt.Fprintf(c.stderr, "mcpintercept %s: admin.listen %q: %v\n", c.name, listen, err)
			return false
		}
		c.admin = u
	} else {
		u, err := admin.NormalizeURL(c.admin)
		if err != nil {
			fmt.Fprintf(c.stderr, "mcpintercept %s: --admin %q: %v\n", c.name, c.admin, err)
			return false
		}
		c.admin = u
	}
	if c.tokenFile == "" {
		dir := filepath.Join(filepath.Dir(config.DefaultCADir), "tools")
		if cfg != nil {
			dir = cfg.ToolIntegrity.Dir
		}
		c.tokenFile = filepath.Join(dir, config.AdminTokenFile)
	}
	c.Client = admin.NewClient(c.admin, c.tokenFile, config.AdminTokenFile)
	return true
}

// failed prints a client call's error; the command exits with exitRuntime.
func (c *toolsConn) failed(err error) int {
	fmt.Fprintf(c.stderr, "mcpintercept %s: %v\n", c.name, err)
	return exitRuntime
}

func cmdToolsList(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("tools list", stderr)
	asJSON := fs.Bool("json", false, "print the snapshot as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "mcpintercept tools list: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	if !c.resolve() {
		return exitUsage
	}
	snap, raw, err := c.Tools()
	if err != nil {
		return c.failed(err)
	}
	if *asJSON {
		var out bytes.Buffer
		if json.Indent(&out, raw, "", "  ") != nil {
			out.Reset()
			out.Write(raw)
		}
		out.WriteByte('\n')
		stdout.Write(out.Bytes())
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tKIND\tNAME\tSTATE\tPIN\tSEEN\tFINDINGS")
	n := 0
	for _, s := range snap {
		for _, d := range s.Defs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(s.Server), safe(string(d.Kind)), safe(d.Name), safe(d.State),
				short(d.Pin), short(d.Seen), orDash(safe(strings.Join(d.Findings, ","))))
			n++
		}
	}
	tw.Flush()
	if n == 0 {
		fmt.Fprintln(stderr, "no definitions seen yet")
	}
	return exitOK
}

func cmdToolsDiff(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("tools diff", stderr)
	pins := fs.String("pins", "", "compare the live definitions with this pin file")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "mcpintercept tools diff: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	if *pins != "" {
		if _, err := os.Stat(*pins); err != nil {
			fmt.Fprintf(stderr, "mcpintercept tools diff: %v\n", err)
			return exitUsage
		}
	}
	if !c.resolve() {
		return exitUsage
	}
	if *pins != "" {
		return diffPinFile(c, *pins, stdout, stderr)
	}
	snap, _, err := c.Tools()
	if err != nil {
		return c.failed(err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	n := 0
	for _, s := range snap {
		for _, d := range s.Defs {
			if d.State == "pinned" && len(d.Changed) == 0 {
				continue
			}
			if n == 0 {
				fmt.Fprintln(tw, "SERVER\tKIND\tNAME\tSTATE\tCHANGED\tPIN → SEEN")
			}
			n++
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s → %s\n", safe(s.Server), safe(string(d.Kind)), safe(d.Name), safe(d.State),
				orDash(safe(strings.Join(d.Changed, ","))), short(d.Pin), short(d.Seen))
		}
	}
	tw.Flush()
	if n > 0 {
		fmt.Fprintf(stderr, "%d definition(s) not pinned and unchanged; approve with `mcpintercept tools approve SERVER NAME --hash SEEN`\n", n)
		return exitRuntime
	}
	fmt.Fprintln(stdout, "no differences: every definition seen is pinned and unchanged")
	return exitOK
}

// diffPinFile compares the pin file the appliance would write now (GET /tools/pins: every
// definition seen, at the hash seen last) with file.
func diffPinFile(c *toolsConn, file string, stdout, stderr io.Writer) int {
	want, err := integrity.PinsOf(file)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept tools diff: %s is not a pin file the appliance reads: %v\n", file, err)
		return exitUsage
	}
	got, err := c.LivePins()
	if err != nil {
		return c.failed(err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	n := 0
	for _, d := range integrity.DiffPins(want, got) {
		var what string
		switch {
		case d.InA && d.InB:
			what = "differs"
		case d.InB:
			what = "not in " + filepath.Base(file)
		default:
			what = "not seen live"
		}
		if n == 0 {
			fmt.Fprintf(tw, "SERVER\tKIND\tNAME\tDIFFERENCE\tCHANGED\tFILE → LIVE\n")
		}
		n++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s → %s\n", safe(d.Server), safe(string(d.Kind)), safe(d.Name), safe(what), orDash(safe(strings.Join(d.Changed, ","))), short(d.PinA), short(d.PinB))
	}
	tw.Flush()
	if n > 0 {
		fmt.Fprintf(stderr, "%d definition(s) differ between %s and the live appliance\n", n, file)
		return exitRuntime
	}
	fmt.Fprintf(stdout, "the live definitions match %s (%d definition(s))\n", file, len(want))
	return exitOK
}

func cmdToolsApprove(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("tools approve", stderr)
	kind := fs.String("kind", string(integrity.KindTool), "what NAME is: tool, prompt or template (a template's name is its uriTemplate)")
	hash := fs.String("hash", "", "approve only if the definition seen last has this hash (as `tools list` or `tools diff` shows it: 12 hex digits or more)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "usage: mcpintercept tools approve SERVER NAME [--kind tool|prompt|template] [--hash SEEN] [--config FILE | --admin URL --token-file FILE]")
		return exitUsage
	}
	switch k := integrity.Kind(*kind); k {
	case integrity.KindTool, integrity.KindPrompt, integrity.KindTemplate:
	default:
		fmt.Fprintf(stderr, "mcpintercept tools approve: --kind %q: want tool, prompt or template\n", *kind)
		return exitUsage
	}
	if !c.resolve() {
		return exitUsage
	}
	ev, err := c.Approve(admin.ToolApproval{Server: pos[0], Kind: integrity.Kind(*kind), Name: pos[1], Hash: *hash})
	if err != nil {
		return c.failed(err)
	}
	fmt.Fprintf(stdout, "approved %s %s on %s: pinned %s", safe(string(ev.Kind)), safe(ev.Name), safe(ev.Server), orDash(ev.NewHash))
	if ev.OldHash != "" && ev.OldHash != ev.NewHash {
		fmt.Fprintf(stdout, " (was %s)", ev.OldHash)
	}
	fmt.Fprintln(stdout)
	return exitOK
}

func cmdToolsPin(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("tools pin", stderr)
	fromLive := fs.Bool("from-live", false, "take the pins from the running appliance (every definition seen, at the hash seen last)")
	out := fs.String("out", "", "write the pin file here (mode 0644; default stdout)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "mcpintercept tools pin: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	if !*fromLive {
		fmt.Fprintln(stderr, "mcpintercept tools pin: --from-live is required (the pins are what the running appliance has seen)")
		return exitUsage
	}
	if !c.resolve() {
		return exitUsage
	}
	b, err := c.PinFile()
	if err != nil {
		return c.failed(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	if *out == "" {
		stdout.Write(b)
		return exitOK
	}
	if err := writeFileAtomic(*out, b, 0o644); err != nil {
		fmt.Fprintf(stderr, "mcpintercept tools pin: %v\n", err)
		return exitRuntime
	}
	fmt.Fprintf(stderr, "wrote %s (%d bytes); review it, then name it in tool_integrity.pin_file\n", *out, len(b))
	return exitOK
}

// writeFileAtomic replaces path with data: a reader sees the old file or the new one, never a
// part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// short is a hash for a table: its first 12 hex digits ("-" when there is none).
func short(h string) string {
	if h == "" {
		return "-"
	}
	hex := strings.TrimPrefix(h, "sha256:")
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return safe(hex)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// safe keeps what a server named from reaching the operator's terminal as it is (see
// admin.Printable).
func safe(s string) string { return admin.Printable(s) }

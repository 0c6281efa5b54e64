package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

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

// toolsConn is how a tools command reaches the appliance.
type toolsConn struct {
	name      string // "tools list", for messages
	config    string
	admin     string
	tokenFile string
	stderr    io.Writer
	client    *http.Client
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

// resolve fills the admin URL and the token file from the flags and the configuration; false
// (after saying why) is a usage error.
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
	c.client = &http.Client{Timeout: 30 * time.Second}
	return true
}

// errReported is an error already printed; the command exits with exitRuntime.
var errReported = errors.New("reported")

// do sends one request to the admin listener and returns the body of a 2xx answer; anything
// else is printed and errReported.
func (c *toolsConn) do(method, path string, body []byte, token bool) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.admin+path, rd)
	if err != nil {
		fmt.Fprintf(c.stderr, "mcpintercept %s: %v\n", c.name, err)
		return nil, errReported
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token {
		tok, err := os.ReadFile(c.tokenFile)
		if err != nil {
			fmt.Fprintf(c.stderr, "mcpintercept %s: cannot read the admin token: %v (the appliance makes it in tool_integrity.dir when it starts; pass --config or --token-file)\n", c.name, err)
			return nil, errReported
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		fmt.Fprintf(c.stderr, "mcpintercept %s: cannot reach the appliance's admin listener at %s: %v (is `mcpintercept run` running? admin.listen)\n", c.name, c.admin, unwrapURLError(err))
		return nil, errReported
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		fmt.Fprintf(c.stderr, "mcpintercept %s: reading the admin listener's answer: %v\n", c.name, err)
		return nil, errReported
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		hint := ""
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			hint = fmt.Sprintf(" (the token in %s is not the appliance's: pass --config or --token-file with its tool_integrity.dir/%s)", c.tokenFile, config.AdminTokenFile)
		case http.StatusNotFound:
			if path == "/tools" || path == "/tools/pins" {
				hint = " (an appliance that predates tool integrity, or no route sets tool_pins)"
			}
		}
		fmt.Fprintf(c.stderr, "mcpintercept %s: the admin listener at %s answered %s: %s%s\n", c.name, c.admin, resp.Status, safe(msg), hint)
		return nil, errReported
	}
	return b, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// snapshot is GET /tools.
func (c *toolsConn) snapshot() ([]integrity.ServerState, []byte, error) {
	b, err := c.do(http.MethodGet, "/tools", nil, false)
	if err != nil {
		return nil, nil, err
	}
	var snap []integrity.ServerState
	if err := json.Unmarshal(b, &snap); err != nil {
		fmt.Fprintf(c.stderr, "mcpintercept %s: the admin listener's /tools is not a snapshot: %v\n", c.name, err)
		return nil, nil, errReported
	}
	return snap, b, nil
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
	snap, raw, err := c.snapshot()
	if err != nil {
		return exitRuntime
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
	snap, _, err := c.snapshot()
	if err != nil {
		return exitRuntime
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
	live, err := c.do(http.MethodGet, "/tools/pins", nil, false)
	if err != nil {
		return exitRuntime
	}
	tmp, err := os.CreateTemp("", "mcpintercept-live-pins-*.json")
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept tools diff: %v\n", err)
		return exitRuntime
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(live)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		fmt.Fprintf(stderr, "mcpintercept tools diff: %v\n", werr)
		return exitRuntime
	}
	got, err := integrity.PinsOf(tmp.Name())
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept tools diff: the admin listener's /tools/pins does not read as a pin file: %v\n", err)
		return exitRuntime
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
	body, _ := json.Marshal(admin.ToolApproval{Server: pos[0], Kind: integrity.Kind(*kind), Name: pos[1], Hash: *hash})
	b, err := c.do(http.MethodPost, "/tools/approve", body, true)
	if err != nil {
		return exitRuntime
	}
	var ev admin.ToolEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		fmt.Fprintf(stderr, "mcpintercept tools approve: the admin listener's answer is not an event: %v\n", err)
		return exitRuntime
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
	b, err := c.do(http.MethodGet, "/tools/pins", nil, false)
	if err != nil {
		return exitRuntime
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

// safe keeps what a server named from reaching the operator's terminal as it is: a string with
// a control, format (zero-width, bidi, tag) or other non-printing character is printed
// quoted with escapes. Definitions are exactly where hidden characters are planted.
func safe(s string) string {
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

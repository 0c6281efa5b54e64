package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"mcpintercept/admin"
	"mcpintercept/inventory"
)

const inventoryUsageText = `usage: mcpintercept inventory [--uncovered] [-o text|json] [CONNECTION]

Every MCP server the running appliance has seen, from its admin listener's GET /inventory (which
needs the admin token), the most recently seen first: destination, server name (SNI/Host), path,
MCP versions, tool count, clients, first and last seen, and whether a route at Level 1 or 2
covers it. A server on a flow no route inspects (forwarded opaque, Level 0) is recognised from its
first request's bytes and listed as uncovered (COVERED no). TOOLS is known for the servers of
routes with tool_pins ("-" otherwise). The table is the appliance's memory since it started
(bounded: servers, clients per server).

  --uncovered      only the servers no Level 1 or 2 route covers
  -o text|json     a table (default), or GET /inventory's JSON as it came (with --uncovered: the
                   servers only, as a JSON array)

CONNECTION (the appliance's admin listener):
  --config FILE      the appliance's configuration: the admin URL from admin.listen, the token from
                     tool_integrity.dir/admin.token
  --admin URL        the admin listener (default http://127.0.0.1:9464)
  --token-file FILE  the admin token (default /var/lib/mcpintercept/tools/admin.token)
`

// cmdInventory lists the MCP servers a running appliance has seen (`mcpintercept inventory`).
func cmdInventory(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("inventory", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, inventoryUsageText) }
	var output string
	var uncovered bool
	fs.StringVar(&output, "o", "text", "text or json")
	fs.BoolVar(&uncovered, "uncovered", false, "only the servers no Level 1 or 2 route covers")
	if code, ok := parseNoArgs(fs, "inventory", args, inventoryUsageText, stdout, stderr); !ok {
		return code
	}
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "mcpintercept inventory: -o %q: want text or json\n", output)
		return exitUsage
	}
	if !c.resolve() {
		return exitUsage
	}
	snap, raw, err := c.Inventory()
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept inventory: %v\n", err)
		var re *admin.RequestError
		if errors.As(err, &re) {
			return exitUsage
		}
		return exitRuntime
	}
	if uncovered {
		keep := snap.Servers[:0]
		for _, s := range snap.Servers {
			if !s.Covered {
				keep = append(keep, s)
			}
		}
		snap.Servers = keep
	}
	if output == "json" {
		if uncovered {
			writeJSONTo(stdout, snap.Servers)
		} else {
			stdout.Write(raw)
		}
		return exitOK
	}
	printInventory(stdout, snap, time.Now())
	return exitOK
}

// printInventory is the table: a line per server, the most recently seen first (as the appliance
// sorts them), then what the table could not keep.
func printInventory(w io.Writer, snap inventory.Snapshot, now time.Time) {
	if len(snap.Servers) == 0 {
		fmt.Fprintln(w, "no MCP server seen yet")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "LAST SEEN\tDESTINATION\tHOST\tPATH\tCOVERED\tLEVEL\tVERSIONS\tTOOLS\tCLIENTS\tFIRST SEEN")
		for _, s := range snap.Servers {
			covered := "no"
			if s.Covered {
				covered = "yes"
			}
			tools := "-"
			if s.Tools != nil {
				tools = strconv.Itoa(*s.Tools)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
				ago(now, s.LastSeen), safe(s.Destination), dashed(s.Host), dashed(s.Path), covered, s.Level,
				dashed(strings.Join(s.Versions, ",")), tools, clientsCell(s), stamp(s.FirstSeen))
		}
		tw.Flush()
	}
	if snap.ServersNotKept > 0 {
		fmt.Fprintf(w, "%d sightings of further servers not kept (the table holds %d servers, %d per destination)\n",
			snap.ServersNotKept, snap.Limits.MaxServers, snap.Limits.MaxPerDestination)
	}
}

// clientsCell is the number of distinct clients and the first two of them.
func clientsCell(s inventory.Server) string {
	n := strconv.Itoa(len(s.Clients))
	if s.ClientsNotKept > 0 {
		n += "+"
	}
	shown := s.Clients
	if len(shown) > 2 {
		shown = shown[:2]
	}
	for i := range shown {
		shown[i] = safe(shown[i])
	}
	out := n
	if len(shown) > 0 {
		out += " (" + strings.Join(shown, ",")
		if len(s.Clients) > 2 {
			out += ",…"
		}
		out += ")"
	}
	return out
}

func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return safe(s)
}

// ago is how long before now t was ("-" for none).
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

// stamp is a time in UTC to the second ("-" for none).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeJSONTo prints v as indented JSON.
func writeJSONTo(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// parseNoArgs parses a command's flags that takes no positional argument: -h/--help prints usage
// on stdout (exit 0); a flag error or an argument is a usage error (exit 2). ok is false when the
// command must return code.
func parseNoArgs(fs *flag.FlagSet, name string, args []string, usage string, stdout, stderr io.Writer) (code int, ok bool) {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, usage)
			return exitOK, false
		}
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return exitOK, false
		}
		return exitUsage, false
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "mcpintercept %s: unexpected argument %q\n", name, pos[0])
		return exitUsage, false
	}
	return 0, true
}

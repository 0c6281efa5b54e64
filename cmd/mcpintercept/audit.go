package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"mcpintercept/admin"
	"mcpintercept/audit"
)

// Exit codes of `audit verify`: 1 says the log was tampered with, which is
// a finding rather than a failure to run.
const (
	exitIntact   = 0
	exitTampered = 1
)

// cmdAudit is `audit verify DIR [--pubkey FILE] [--checkpoint FILE]` and
// `audit show DIR [--client X] [--tool T] [--decision D] [--since T] [--until T] [--json]`.
func cmdAudit(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "verify":
			return cmdAuditVerify(args[1:], stdout, stderr)
		case "show":
			return cmdAuditShow(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, "usage: mcpintercept audit verify DIR [--pubkey FILE] [--checkpoint FILE]\n"+
		"       mcpintercept audit show DIR [--client IP[:PORT]] [--tool T] [--decision D] [--since DUR|RFC3339] [--until DUR|RFC3339] [--json]")
	return exitUsage
}

// parseWithDir parses flags placed before or after the one DIR argument.
func parseWithDir(fs *flag.FlagSet, args []string, stderr io.Writer) (string, bool) {
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "mcpintercept %s: DIR is required\n", fs.Name())
		return "", false
	}
	dir := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpintercept %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return "", false
	}
	return dir, true
}

func cmdAuditVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pubkey := fs.String("pubkey", "", "verifier key file kept off the box (default: DIR/audit.pub)")
	checkpoint := fs.String("checkpoint", "", "a signed checkpoint kept off the box")
	dir, ok := parseWithDir(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	var opts audit.VerifyOptions
	if *pubkey != "" {
		data, err := os.ReadFile(*pubkey)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept audit verify: %v\n", err)
			return exitUsage
		}
		opts.PublicKey = string(data)
	}
	if *checkpoint != "" {
		data, err := os.ReadFile(*checkpoint)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept audit verify: %v\n", err)
			return exitUsage
		}
		opts.Checkpoint = data
	}
	rep, err := audit.Verify(dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept audit verify: %v\n", err)
		return exitUsage
	}
	if rep.Problem != nil {
		fmt.Fprintf(stdout, "TAMPERED: %s\n", rep.Problem)
		return exitTampered
	}
	fmt.Fprintf(stdout, "OK: %d records (seq %d to %d) in %d segment(s), head %s, %d checkpoint(s) checked",
		rep.Records, rep.Start, rep.End, rep.Segments, rep.Head, rep.Checkpoints)
	if rep.Skipped > 0 {
		fmt.Fprintf(stdout, ", %d older than the retained records", rep.Skipped)
	}
	fmt.Fprintln(stdout)
	printVerifyCoverage(stdout, &rep, len(opts.Checkpoint) > 0)
	return exitIntact
}

// printVerifyCoverage says what an intact verify proves: from which seq the
// log is complete (the start the trusted checkpoint commits to), and which
// records no checkpoint covers yet, since among those a cut tail or a cut
// newline cannot be told from a crash.
func printVerifyCoverage(w io.Writer, rep *audit.Report, given bool) {
	if rep.FromSource == "" {
		fmt.Fprintln(w, "  start: no signed checkpoint found; nothing proves that records were not cut from the end")
	} else {
		fmt.Fprintf(w, "  start: every record from seq %d is present, as the %s commits to\n", rep.From, rep.FromSource)
	}
	switch {
	case rep.Records == 0:
	case rep.Uncovered == 0:
		fmt.Fprintln(w, "  coverage: every record is covered by a signed checkpoint")
	default:
		fmt.Fprintf(w, "  coverage: %d record(s) (seq %d to %d) are covered by no checkpoint: a cut among them cannot be told from a crash\n",
			rep.Uncovered, rep.End-rep.Uncovered+1, rep.End)
	}
	if given && rep.Covered > rep.GivenCovers && rep.Covered > rep.Start-1 {
		from := max(rep.GivenCovers, rep.Start-1) + 1
		fmt.Fprintf(w, "  off the box: the given checkpoint covers %d record(s); seq %d to %d are proven only by checkpoints on the box\n",
			rep.GivenCovers, from, rep.Covered)
	}
	if rep.TornBytes > 0 {
		fmt.Fprintf(w, "  an incomplete final line of %d bytes, which no checkpoint covers (a crash, never acknowledged), was ignored\n", rep.TornBytes)
	}
	if rep.StrayBytes > 0 {
		fmt.Fprintf(w, "  %d stray bytes inside the final segment's zero padding, past its last complete line (a write a crash tore, never acknowledged), were ignored\n", rep.StrayBytes)
	}
}

func cmdAuditShow(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f audit.Filter
	fs.StringVar(&f.Client, "client", "", "client ip or ip:port")
	fs.StringVar(&f.Tool, "tool", "", "tool, prompt or resource")
	decision := fs.String("decision", "", "allow, deny or rate_limited (rate_limit and ratelimited taken for it)")
	since := fs.String("since", "", "records at or after this time: a duration back from now (10m) or an RFC 3339 time")
	until := fs.String("until", "", "records before this time: a duration back from now (10m) or an RFC 3339 time")
	asJSON := fs.Bool("json", false, "print the records as JSON lines")
	dir, ok := parseWithDir(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if *decision != "" {
		d, err := audit.ParseDecision(*decision)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept audit show: --%v\n", err)
			return exitUsage
		}
		f.Decision = d
	}
	now := time.Now()
	for _, t := range []struct {
		flag string
		val  string
		dst  *time.Time
	}{{"since", *since, &f.Since}, {"until", *until, &f.Until}} {
		if t.val == "" {
			continue
		}
		v, err := admin.ParseSince(t.val, now)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept audit show: --%s %q: want an RFC 3339 time or a duration such as 10m\n", t.flag, t.val)
			return exitUsage
		}
		*t.dst = v
	}
	if *asJSON {
		return showJSON(dir, f, stdout, stderr)
	}
	return showTable(dir, f, stdout, stderr)
}

func showJSON(dir string, f audit.Filter, stdout, stderr io.Writer) int {
	for r, err := range audit.Query(dir, f) {
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept audit show: %v\n", err)
			return exitRuntime
		}
		r.Decision = r.Decision.Canonical()
		line, _ := r.MarshalJSON()
		fmt.Fprintf(stdout, "%s\n", line)
	}
	return exitOK
}

func showTable(dir string, f audit.Filter, stdout, stderr io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tCLIENT\tSERVER\tMETHOD\tTOOL\tDECISION\tOUTCOME\tRULE")
	for r, err := range audit.Query(dir, f) {
		if err != nil {
			tw.Flush()
			fmt.Fprintf(stderr, "mcpintercept audit show: %v\n", err)
			return exitRuntime
		}
		outcome := r.Outcome
		if r.Reason != "" {
			outcome += " (" + r.Reason + ")"
		} else if r.ErrorCode != 0 {
			outcome += " (" + strconv.FormatInt(r.ErrorCode, 10) + ")"
		}
		server := r.Server
		if server == "" {
			server = r.Destination // no SNI or Host: the address it went to
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Format("2006-01-02T15:04:05.000Z"),
			r.Kind, dash(r.Client), dash(server), dash(r.Method), dash(r.Tool), dash(string(r.Decision.Canonical())), dash(outcome), dash(r.Rule))
	}
	tw.Flush()
	return exitOK
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

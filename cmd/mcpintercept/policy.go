package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"mcpintercept/appliance"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// cmdPolicy is `mcpintercept policy test --config F --input RECORDS.jsonl [--rule-set NAME]
// [--only-differences] [--fail-on-unknown] [-o json]`: a dry run of the configuration's rule sets
// over recorded requests (flow log lines). Exit 0 when no replayed decision differs from the
// recorded one, 1 when one does (or, with --fail-on-unknown, when one depends on a field the
// record does not carry), 2 on a usage or input error. Unknowns are reported, not failed, by
// default: a rule set that reads arguments or headers always has some, and a test that can
// never pass tests nothing.
func cmdPolicy(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "test" {
		args = args[1:]
	} else if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: "+policyTestUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("policy test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML) whose rule sets are tried")
	input := fs.String("input", "", "flow log (JSON lines) of the requests to replay; - reads stdin")
	ruleSet := fs.String("rule-set", "", "evaluate every record with this rule set (default: the set of the route each record matches)")
	output := fs.String("o", "text", "output: text or json (one object per record, then a summary)")
	onlyDiff := fs.Bool("only-differences", false, "print only the records whose replayed decision differs from the recorded one (and, with --fail-on-unknown, the unknown ones), then the summary")
	failUnknown := fs.Bool("fail-on-unknown", false, "exit 1 also when a record's decision depends on a field the flow log does not carry (default: reported, exit 0)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpintercept policy test: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *cfgPath == "" || *input == "" {
		fmt.Fprintln(stderr, "mcpintercept policy test: --config FILE and --input FILE are required")
		return exitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "mcpintercept policy test: -o %q: want text or json\n", *output)
		return exitUsage
	}
	cfg, ok := loadConfig(&commonFlags{config: *cfgPath}, stderr)
	if !ok {
		return exitUsage
	}
	rp, err := appliance.NewReplayer(cfg, *ruleSet)
	if err != nil {
		reportConfigError(stderr, err)
		return exitUsage
	}
	var in io.Reader = os.Stdin
	if *input != "-" {
		f, err := os.Open(*input)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept policy test: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		in = f
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var sum appliance.ReplaySummary
	printed := 0
	err = telemetry.ReadFlowRecords(in, func(line int, rec *telemetry.FlowRecord) error {
		res := rp.Replay(line, rec)
		sum.Add(&res)
		if *onlyDiff && res.Verdict != appliance.VerdictDisagree && (!*failUnknown || res.Verdict != appliance.VerdictUnknown) {
			return nil
		}
		printed++
		if *output == "json" {
			b, _ := json.Marshal(res)
			out.Write(append(b, '\n'))
		} else {
			writeReplayText(out, &res)
		}
		return nil
	})
	if err != nil {
		out.Flush()
		fmt.Fprintf(stderr, "mcpintercept policy test: %s: %v\n", *input, err)
		return exitUsage
	}
	if *output == "json" {
		b, _ := json.Marshal(struct {
			Summary *appliance.ReplaySummary `json:"summary"`
		}{&sum})
		out.Write(append(b, '\n'))
	} else {
		if printed > 0 {
			fmt.Fprintln(out)
		}
		writeSummaryText(out, &sum)
	}
	if sum.Disagree > 0 || *failUnknown && sum.Unknown > 0 {
		return exitRuntime
	}
	return exitOK
}

const policyTestUsage = "mcpintercept policy test --config FILE --input RECORDS.jsonl [--rule-set NAME] [--only-differences] [--fail-on-unknown] [-o json]"

// writeReplayText prints one replayed record.
func writeReplayText(w io.Writer, r *appliance.ReplayResult) {
	// What the record holds came from the network: printed through safe, never raw.
	what := strings.TrimSpace(safe(r.Method) + " " + safe(r.Name))
	if what == "" {
		what = "(no MCP method)"
	}
	fmt.Fprintf(w, "line %d  %s  %s -> %s  level %d  %s\n", r.Line, r.Time, safe(r.Client), safe(r.OrigDst), r.Level, what)
	if r.Route != "" || r.RuleSet != "" {
		fmt.Fprintf(w, "  route %s, rule set %s\n", orDash(r.Route), orDash(r.RuleSet))
	}
	for _, o := range r.Rules {
		mode := ""
		if o.Mode == policy.ModeShadow {
			mode = " (shadow)"
		}
		detail := ""
		switch {
		case o.Outcome == policy.OutcomeUnknown:
			detail = "  reads " + strings.Join(o.Unknown, ", ") + ": not in the record"
			if o.Assumed != "" {
				detail += "; taken as " + o.Assumed
			}
		case o.Err != "":
			detail = "  " + o.Err
		case len(o.Absent) > 0:
			detail = "  absent: " + strings.Join(o.Absent, ", ")
		}
		mark := " "
		if o.Decided {
			mark = "*"
		}
		fmt.Fprintf(w, "  %s %-24s %-10s %-12s%s\n", mark, o.Rule, o.Action+mode, o.Outcome, detail)
	}
	fmt.Fprintf(w, "  recorded %s", decisionText(r.Recorded))
	if r.Replayed != nil {
		fmt.Fprintf(w, "; replayed %s", decisionText(*r.Replayed))
	}
	fmt.Fprintf(w, "  => %s", strings.ToUpper(r.Verdict))
	if r.Note != "" {
		fmt.Fprintf(w, " (%s)", r.Note)
	}
	fmt.Fprintln(w)
}

func decisionText(d appliance.ReplayDecision) string {
	s := orDash(safe(d.Decision))
	if d.Rule != "" {
		s += " by " + safe(d.Rule)
	}
	if len(d.Shadow) > 0 {
		s += " [" + safe(strings.Join(d.Shadow, " ")) + "]"
	}
	return s
}

// writeSummaryText prints the summary after the records.
func writeSummaryText(w io.Writer, s *appliance.ReplaySummary) {
	fmt.Fprintf(w, "%d records: %d agree, %d disagree, %d unknown (agree only if rules that read fields the flow log does not carry went as recorded), %d skipped (not rule decisions)\n",
		s.Records, s.Agree, s.Disagree, s.Unknown, s.Skipped)
	if len(s.Disagreements) > 0 {
		fmt.Fprintf(w, "disagreements at lines %s\n", joinInts(s.Disagreements))
	}
	if len(s.Unknowns) > 0 {
		fmt.Fprintf(w, "unknown at lines %s\n", joinInts(s.Unknowns))
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

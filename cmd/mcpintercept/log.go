package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"mcpintercept/telemetry"
)

const logUsageText = `usage: mcpintercept log [--client C] [--tool T] [--decision D] [--since DUR|RFC3339]
                       [--until DUR|RFC3339] [--all] [-o text|json] [--top] [--last N] FILE...

Reads flow log files (log.flows: JSON lines, a record each) with observe's filters and outputs:
a line per MCP message, the records as JSON lines, or --top's table. FILE may be a rotated file
(FILE.1 … FILE.N, as log.flows_max_size leaves them), a gzip archive (as logrotate's compress
leaves them: FILE-DATE.gz; recognised by its content) or - for stdin; files are read in the
order given, so name the oldest first. A line that is not a flow log record is counted and
reported on stderr, and the rest is read (exit 0); a file that cannot be read is an error (exit
2 if it cannot be opened, 1 if reading it fails midway).

` + recordFilterUsage + `  --until S        records before S: a duration back from now (10m) or an RFC 3339 time
  --last N         only the last N matching records (with --top: the table of those)
`

// logStdin is what log reads for the file name - (a test's reader).
var logStdin io.Reader = os.Stdin

// maxBadLinesShown is how many bad lines of a file log names before it only counts them.
const maxBadLinesShown = 3

// cmdLog reads flow log files (`mcpintercept log FILE...`).
func cmdLog(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, logUsageText) }
	var rf recordFlags
	rf.add(fs, true)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, logUsageText)
			return exitOK
		}
	}
	files, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "mcpintercept log: no FILE given (a flow log file, as log.flows writes it; - for stdin)")
		return exitUsage
	}
	_, f, err := rf.query(time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept log: %v\n", err)
		return exitUsage
	}
	// Open every file first: a wrong name is said before anything is printed.
	readers := make([]io.ReadCloser, len(files))
	for i, name := range files {
		if name == "-" {
			readers[i] = io.NopCloser(logStdin)
			continue
		}
		fh, err := os.Open(name)
		if err == nil {
			var st os.FileInfo
			if st, err = fh.Stat(); err == nil && st.IsDir() {
				err = errors.New("is a directory, not a flow log file")
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = errors.New("no such file")
			}
			fmt.Fprintf(stderr, "mcpintercept log: %s: %v\n", name, err)
			for _, r := range readers[:i] {
				if r != nil {
					r.Close()
				}
			}
			if fh != nil {
				fh.Close()
			}
			return exitUsage
		}
		readers[i] = fh
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()

	out := newRecordOutput(stdout, &rf)
	code := exitOK
	for i, name := range files {
		if name == "-" {
			name = "stdin"
		}
		bad, err := readFlowLog(readers[i], func(line []byte, rec *telemetry.FlowRecord) {
			if f.Match(rec, telemetry.KindOf(rec), nil) {
				out.add(line, rec)
			}
		}, func(err error) {
			fmt.Fprintf(stderr, "mcpintercept log: %s: %v\n", name, err)
		})
		if bad > 0 {
			fmt.Fprintf(stderr, "mcpintercept log: %s: %d line(s) skipped: not flow log records (the first %d named above)\n", name, bad, min(bad, maxBadLinesShown))
		}
		if err != nil {
			out.flush()
			fmt.Fprintf(stderr, "mcpintercept log: %s: %v\n", name, err)
			code = exitRuntime
		}
	}
	out.finish()
	return code
}

// readFlowLog calls fn with each record of a flow log file (gzip or plain) and badLine with the
// first maxBadLinesShown lines that are not records; bad is how many there were. err is a failure
// to read the file (a truncated gzip archive, an I/O error).
func readFlowLog(r io.Reader, fn func(line []byte, rec *telemetry.FlowRecord), badLine func(error)) (bad int, err error) {
	in, err := telemetry.OpenFlowLog(r)
	if err != nil {
		return 0, err
	}
	err = telemetry.ScanFlowRecords(in, func(_ int, raw []byte, rec *telemetry.FlowRecord, lerr error) error {
		if lerr != nil {
			bad++
			if bad <= maxBadLinesShown {
				badLine(lerr)
			}
			return nil
		}
		fn(raw, rec)
		return nil
	})
	return bad, err
}

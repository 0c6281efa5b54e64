package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"mcpintercept/config"
	"mcpintercept/pki"
)

// cmdCA is `ca init [--config FILE | --dir DIR] [--force]` and `ca export [--config FILE | --dir
// DIR] [--format pem|der|p12]`.
func cmdCA(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "init" && args[0] != "export") {
		fmt.Fprintln(stderr, "usage: mcpintercept ca init [--config FILE | --dir DIR] [--force]\n       mcpintercept ca export [--config FILE | --dir DIR] [--format pem|der|p12]")
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("ca "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "take the CA directory from this configuration (ca.dir)")
	dir := fs.String("dir", "", "CA directory (default: ca.dir of --config, else "+config.DefaultCADir+")")
	// Each subcommand lists and accepts only its own flags.
	force, format := new(bool), new(string)
	if sub == "init" {
		fs.BoolVar(force, "force", false, "replace an existing CA (clients trusting it must be re-provisioned)")
	} else {
		fs.StringVar(format, "format", "pem", "certificate encoding: "+strings.Join(pki.ExportFormats, ", ")+" (p12: PKCS#12 trust store, password "+pki.P12Password+")")
	}
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		return exitUsage
	}
	d := *dir
	if d == "" && *cfgPath != "" {
		cfg, ok := loadConfig(&commonFlags{config: *cfgPath}, stderr)
		if !ok {
			return exitUsage
		}
		d = cfg.CA.Dir
	}
	if d == "" {
		d = config.DefaultCADir
	}
	switch sub {
	case "init":
		ca, err := pki.Init(d, *force)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept ca init: %v\n", err)
			return exitRuntime
		}
		fmt.Fprintf(stdout, "created CA %q in %s (certificate ca.pem 0644, key ca-key.pem 0600)\n", ca.Cert.Subject.CommonName, d)
	case "export":
		ca, err := pki.Load(d)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(stderr, "mcpintercept ca export: no CA in %s (create one with `mcpintercept ca init`, or start `run`): %v\n", d, err)
			} else {
				fmt.Fprintf(stderr, "mcpintercept ca export: %v\n", err)
			}
			return exitRuntime
		}
		b, err := ca.Export(*format)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept ca export: %v\n", err)
			return exitUsage
		}
		stdout.Write(b)
	}
	return exitOK
}

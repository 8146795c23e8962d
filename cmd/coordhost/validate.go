package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/coordhost/coordhost/config"
)

// validateArgs is a parsed `validate` command line.
type validateArgs struct {
	file string
	load config.LoadOptions
}

// parseValidateArgs parses the arguments after `validate`: flags and one
// FILE, in any order; FILE may also be given as -config FILE.
func parseValidateArgs(args []string) (validateArgs, error) {
	var va validateArgs
	var vars listFlag
	var configFlag string
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.Var(&vars, "var", "NAME=VALUE")
	fs.StringVar(&configFlag, "config", "", "configuration file")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return va, err
	}
	switch {
	case len(positional) > 1:
		return va, fmt.Errorf("unexpected argument %q: validate checks one FILE", positional[1])
	case len(positional) == 1 && configFlag != "":
		return va, fmt.Errorf("FILE %q and -config %q: give the file once", positional[0], configFlag)
	case len(positional) == 1:
		va.file = positional[0]
	case configFlag != "":
		va.file = configFlag
	default:
		return va, errors.New("missing FILE")
	}
	if va.file == "" {
		return va, errors.New("FILE is empty")
	}
	if va.load.Vars, err = parseVars(vars); err != nil {
		return va, err
	}
	return va, nil
}

// parseInterspersed parses args with fs, allowing flags before and after
// positional arguments, which it returns; everything after a "--" is
// positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var after []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, after = args[:i], args[i+1:]
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(positional, after...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// runValidate implements `coordhost validate`: it loads FILE (which never
// dials anything or starts plugins), prints every diagnostic with its file,
// line and snippet to stderr, and exits 1 if any is an error. A clean file
// prints "FILE: OK" to stdout.
func runValidate(_ context.Context, args []string, e *env) int {
	va, err := parseValidateArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, usageText)
		return exitOK
	}
	if err != nil {
		return e.usageError("validate: %v", err)
	}
	cfg, diags := config.Load(va.file, va.load)
	e.writeDiags(cfg.Files(), diags)
	errs, warns := countDiags(diags)
	if errs > 0 {
		e.logf("validate: %s: %s", va.file, plural(errs, "error"))
		return exitFailure
	}
	if warns > 0 {
		fmt.Fprintf(e.stdout, "%s: OK (%s)\n", va.file, plural(warns, "warning"))
		return exitOK
	}
	fmt.Fprintf(e.stdout, "%s: OK\n", va.file)
	return exitOK
}

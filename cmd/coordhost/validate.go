package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
)

// validateArgs is a parsed `validate` command line.
type validateArgs struct {
	file string
	load config.LoadOptions
}

// validateFlags are the flags of `validate`.
type validateFlags struct {
	config string
	vars   listFlag
}

func newValidateFlags(f *validateFlags) *flag.FlagSet {
	fs := newFlagSet("validate")
	fs.Var(newStringValue(&f.config, ""), "config", "the configuration `FILE`, instead of the FILE argument")
	fs.Var(&f.vars, "var", varHelp)
	return fs
}

// parseValidateArgs parses the arguments after `validate`: flags and one
// FILE, in any order; FILE may also be given as -config FILE.
func parseValidateArgs(args []string) (validateArgs, error) {
	var va validateArgs
	var f validateFlags
	fs := newValidateFlags(&f)
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return va, err
	}
	if va.file, err = fileArg(positional, f.config, "validate"); err != nil {
		return va, err
	}
	if va.load.Vars, err = parseVars(f.vars); err != nil {
		return va, err
	}
	return va, nil
}

// fileArg picks the configuration file of validate or serve: the one
// positional argument, or else -config FILE; both is an error, as is
// neither.
func fileArg(positional []string, configFlag, cmd string) (string, error) {
	switch {
	case len(positional) > 1:
		return "", fmt.Errorf("unexpected argument %q: %s takes one FILE", positional[1], cmd)
	case len(positional) == 1 && configFlag != "":
		return "", fmt.Errorf("FILE %q and -config %q: give the file once", positional[0], configFlag)
	case len(positional) == 1 && positional[0] == "":
		return "", errors.New("FILE is empty")
	case len(positional) == 1:
		return positional[0], nil
	case configFlag != "":
		return configFlag, nil
	}
	return "", errors.New("missing FILE")
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
			return nil, flagError(fs, err)
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
func runValidate(ctx context.Context, args []string, e *env) int {
	va, err := parseValidateArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		return e.printHelp("validate")
	}
	if err != nil {
		return e.usageErrorFor("validate", "validate: %v", err)
	}
	cfg, diags := config.Load(va.file, va.load)
	if !diags.HasErrors() {
		// Compile every WASM module and check its ABI as serve's load
		// does, without running any of its code.
		diags = append(diags, host.CheckPolicies(ctx, cfg, host.CheckOptions{})...)
	}
	e.writeDiags(va.file, cfg.Files(), diags)
	errs, warns := countDiags(diags)
	if errs > 0 {
		e.logf("validate: %s: %s", va.file, plural(errs, "error"))
		return exitFailure
	}
	if warns > 0 {
		printLine(e.stdout, fmt.Sprintf("%s: OK (%s)", va.file, plural(warns, "warning")))
		return exitOK
	}
	printLine(e.stdout, va.file+": OK")
	return exitOK
}

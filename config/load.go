package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// DiagnosticWidth is the width WriteDiagnostics wraps detail text at.
const DiagnosticWidth = 78

// LoadOptions configures Load and Parse. The zero value declares no
// variable overrides and takes path.cwd from os.Getwd.
type LoadOptions struct {
	// Vars overrides the defaults of declared variables, by name (as
	// `-var NAME=VALUE` flags do; see ParseVarFlag). A string value is
	// converted to the variable's type; for a collection or object type it
	// is parsed as an HCL expression, e.g. `["a", "b"]`. A name that the
	// file does not declare is an error.
	Vars map[string]cty.Value
	// WorkDir is path.cwd; "" means the process's working directory.
	WorkDir string
	// Sandbox parses a source that somebody else sent (AdminService.Validate)
	// without touching the host: file() fails, and so does every argument
	// that reads or checks a file (module, path, TLS files, a token's
	// secret_file) or the environment (secret_env), each with an error
	// diagnostic that names the argument and quotes nothing read. path.cwd
	// is path.config instead of the working directory (WorkDir is
	// ignored). Vars still apply: pass none for a source you do not trust,
	// or its variables can echo their values in diagnostics.
	Sandbox bool
}

// Load reads and decodes the configuration file at path. Files ending in
// ".json" are read as HCL's JSON syntax, all others as native syntax.
// Diagnostic ranges name the file as path was given.
//
// Load always returns a non-nil Config. All mistakes come back at once as
// error diagnostics; when diags.HasErrors() the Config is incomplete and
// good only for Files. Load never dials anything; it reads path, files
// named by file(), and checks the files that the configuration names.
// Load and Parse keep no state between calls and are safe for concurrent
// use.
func Load(path string, opts LoadOptions) (*Config, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		cfg := &Config{files: map[string]*hcl.File{}}
		cfg.Path, _ = filepath.Abs(path)
		cfg.Dir = filepath.Dir(cfg.Path)
		return cfg, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read configuration file",
			Detail:   describeFileError(err),
		}}
	}
	return Parse(src, path, opts)
}

// Parse decodes src as the configuration file filename, like Load without
// reading the file. filename names the file in diagnostic ranges and
// chooses the syntax (".json": JSON); its absolute directory is
// path.config, against which relative paths in the file are resolved.
func Parse(src []byte, filename string, opts LoadOptions) (*Config, hcl.Diagnostics) {
	cfg := &Config{files: map[string]*hcl.File{}}
	if filename != "" {
		if abs, err := filepath.Abs(filename); err == nil {
			cfg.Path = abs
			cfg.Dir = filepath.Dir(abs)
		}
	}
	if cfg.Dir == "" {
		cfg.Dir, _ = filepath.Abs(".")
	}
	cwd := opts.WorkDir
	if opts.Sandbox {
		cwd = cfg.Dir
	}
	if cwd == "" {
		var err error
		if cwd, err = os.Getwd(); err != nil {
			return cfg, hcl.Diagnostics{{
				Severity: hcl.DiagError,
				Summary:  "Cannot determine the working directory",
				Detail:   err.Error(),
			}}
		}
	}

	p := hclparse.NewParser()
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(filename, ".json") {
		file, diags = p.ParseJSON(src, filename)
	} else {
		file, diags = p.ParseHCL(src, filename)
	}
	cfg.files = p.Files()
	if file == nil || file.Body == nil || diags.HasErrors() {
		// Syntax errors: the body cannot be trusted, so report only them.
		return cfg, sortDiags(diags)
	}

	d := &decoder{cfg: cfg, cwd: cwd, sandbox: opts.Sandbox}
	d.diags = diags
	d.decodeFile(file.Body, opts.Vars)
	return cfg, sortDiags(d.diags)
}

// WriteDiagnostics writes diags to w as text, each with its file, line and
// a snippet of the source from files (Config.Files), wrapped at
// DiagnosticWidth. color adds VT100 colors for terminals. It returns the
// first write error.
func WriteDiagnostics(w io.Writer, files map[string]*hcl.File, diags hcl.Diagnostics, color bool) error {
	return hcl.NewDiagnosticTextWriter(w, files, DiagnosticWidth, color).WriteDiagnostics(diags)
}

// ParseVarFlag splits a `-var` flag value "NAME=VALUE" into the name and a
// string value for LoadOptions.Vars (Load converts it to the variable's
// type). It returns an error when there is no "=" or NAME is not a valid
// identifier.
func ParseVarFlag(s string) (string, cty.Value, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", cty.NilVal, fmt.Errorf("config: -var %q: want NAME=VALUE", s)
	}
	name = strings.TrimSpace(name)
	if !hclsyntax.ValidIdentifier(name) {
		return "", cty.NilVal, fmt.Errorf("config: -var %q: %q is not a valid variable name", s, name)
	}
	return name, cty.StringVal(value), nil
}

// sortDiags orders diagnostics by position: those without a range first,
// then by file and byte offset; ties keep their order.
func sortDiags(diags hcl.Diagnostics) hcl.Diagnostics {
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		default:
			return a.Start.Byte < b.Start.Byte
		}
	})
	return diags
}

// describeFileError turns an os error into a sentence.
func describeFileError(err error) string {
	var pe *os.PathError
	switch {
	case errors.Is(err, os.ErrNotExist):
		if errors.As(err, &pe) {
			return fmt.Sprintf("There is no file at %s.", pe.Path)
		}
	case errors.Is(err, os.ErrPermission):
		if errors.As(err, &pe) {
			return fmt.Sprintf("Permission denied reading %s.", pe.Path)
		}
	}
	return err.Error() + "."
}

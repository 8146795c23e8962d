package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// maxFileFuncSize bounds what file() reads, so a mistaken path (a device, a
// huge log) fails instead of filling memory.
const maxFileFuncSize = 4 << 20

// functions returns the functions expressions may call: pure ones from
// cty's stdlib plus file(), which reads relative to dir (or, in a sandbox,
// always fails). None does other I/O.
func functions(dir string, sandbox bool) map[string]function.Function {
	file := fileFunc(dir)
	if sandbox {
		file = sandboxFileFunc
	}
	return map[string]function.Function{
		"coalesce":   stdlib.CoalesceFunc,
		"concat":     stdlib.ConcatFunc,
		"file":       file,
		"format":     boundedFormat,
		"join":       stdlib.JoinFunc,
		"jsonencode": stdlib.JSONEncodeFunc,
		"length":     stdlib.LengthFunc,
		"lower":      stdlib.LowerFunc,
		"max":        stdlib.MaxFunc,
		"merge":      stdlib.MergeFunc,
		"min":        stdlib.MinFunc,
		"split":      stdlib.SplitFunc,
		"tobool":     stdlib.MakeToFunc(cty.Bool),
		"tonumber":   stdlib.MakeToFunc(cty.Number),
		"tostring":   stdlib.MakeToFunc(cty.String),
		"trimspace":  stdlib.TrimSpaceFunc,
		"upper":      stdlib.UpperFunc,
	}
}

// maxFormatWidth bounds a width or precision in format(): cty pads a %s
// to any width itself, so format("%100000000s", "x") would allocate
// hundreds of MB, and AdminService.Validate evaluates a client's source.
const maxFormatWidth = 4096

// formatSpec finds the flags, index, width and precision of each verb, and
// formatNumber the numbers in them.
var (
	formatSpec   = regexp.MustCompile(`%[^a-zA-Z%]*`)
	formatNumber = regexp.MustCompile(`[0-9]+`)
)

// boundedFormat is cty's format() refusing widths and precisions above
// maxFormatWidth.
var boundedFormat = function.New(&function.Spec{
	Description: stdlib.FormatFunc.Description(),
	Params:      stdlib.FormatFunc.Params(),
	VarParam:    stdlib.FormatFunc.VarParam(),
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		for _, spec := range formatSpec.FindAllString(args[0].AsString(), -1) {
			for _, n := range formatNumber.FindAllString(spec, -1) {
				if v, err := strconv.Atoi(n); err != nil || v > maxFormatWidth {
					return cty.NilVal, function.NewArgErrorf(0, "%q: a width or precision above %d", spec, maxFormatWidth)
				}
			}
		}
		return stdlib.FormatFunc.Call(args)
	},
})

// fileFunc is file(path): the contents of a UTF-8 text file; a relative
// path is relative to dir (path.config).
func fileFunc(dir string) function.Function {
	return function.New(&function.Spec{
		Description: "Reads a UTF-8 text file; a relative path is relative to the configuration file's directory.",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			p := resolvePath(dir, args[0].AsString())
			f, err := os.Open(p)
			if err != nil {
				return cty.NilVal, fmt.Errorf("%s", describeFileError(err))
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return cty.NilVal, err
			}
			if !fi.Mode().IsRegular() {
				return cty.NilVal, fmt.Errorf("%s is not a regular file", p)
			}
			if fi.Size() > maxFileFuncSize {
				return cty.NilVal, fmt.Errorf("%s is larger than %d bytes", p, maxFileFuncSize)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return cty.NilVal, fmt.Errorf("%s", describeFileError(err))
			}
			if !utf8.Valid(b) {
				return cty.NilVal, fmt.Errorf("%s is not UTF-8 text", p)
			}
			return cty.StringVal(string(b)), nil
		},
	})
}

// sandboxFileFunc is file() in a sandboxed parse: it reads nothing, and
// its error does not depend on the path (not even on whether it exists).
var sandboxFileFunc = function.New(&function.Spec{
	Description: "Reads nothing: a configuration sent over the network may not read the daemon's files.",
	Params:      []function.Parameter{{Name: "path", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func([]cty.Value, cty.Type) (cty.Value, error) {
		return cty.NilVal, errors.New("file() is not available in a sandboxed check: a configuration sent over the network (AdminService.Validate) may not read the daemon's files; check it there with `coordhost validate`")
	},
})

// resolvePath makes p absolute against dir.
func resolvePath(dir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p)
}

// baseContext is the context for variable defaults: path.* and functions,
// no var.
func (d *decoder) baseContext() *hcl.EvalContext {
	return &hcl.EvalContext{
		Variables: map[string]cty.Value{
			"path": cty.ObjectVal(map[string]cty.Value{
				"config": cty.StringVal(d.cfg.Dir),
				"cwd":    cty.StringVal(d.cwd),
			}),
		},
		Functions: functions(d.cfg.Dir, d.sandbox),
	}
}

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "type"},
		{Name: "default"},
		{Name: "description"},
	},
}

// decodeVariables decodes the variable blocks, applies the overrides and
// returns the value of var. A variable whose value could not be determined
// is unknown in var, so references to it do not report the same mistake
// again.
func (d *decoder) decodeVariables(blocks hcl.Blocks, overrides map[string]cty.Value) cty.Value {
	d.vars = map[string]*Variable{}
	broken := map[*Variable]bool{} // default had a mistake, already reported
	for _, b := range blocks {
		name := b.Labels[0]
		if !hclsyntax.ValidIdentifier(name) {
			d.add(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid variable name",
				Detail:   fmt.Sprintf("%q is not a valid name: use letters, digits, underscores and dashes, starting with a letter.", name),
				Subject:  b.LabelRanges[0].Ptr(),
			})
			continue
		}
		if prev := d.vars[name]; prev != nil {
			d.duplicate(b.DefRange, "Duplicate variable", fmt.Sprintf("Variable %q was already declared at %s; names must be unique.", name, where(prev.Range)))
			continue
		}
		v := &Variable{Name: name, Type: cty.DynamicPseudoType, Range: b.DefRange}
		d.vars[name] = v
		d.cfg.Variables = append(d.cfg.Variables, v)

		content, diags := b.Body.Content(variableSchema)
		d.add(diags...)
		if a := content.Attributes["type"]; a != nil {
			ty, diags := typeexpr.TypeConstraint(a.Expr)
			d.add(diags...)
			if !diags.HasErrors() {
				v.Type = ty
			}
		}
		if a := content.Attributes["description"]; a != nil {
			v.Description, _ = d.str(a)
		}
		if a := content.Attributes["default"]; a != nil {
			if val, ok := d.eval(a, v.Type, false); ok {
				v.Default = val
			} else {
				broken[v] = true
			}
		}
	}

	vals := map[string]cty.Value{}
	for _, v := range d.cfg.Variables {
		vals[v.Name] = cty.DynamicVal
		if o, ok := overrides[v.Name]; ok {
			if val, ok := d.override(v, o); ok {
				v.Value = val
				vals[v.Name] = val
			}
			continue
		}
		if broken[v] {
			continue
		}
		if v.Default == cty.NilVal {
			d.add(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "No value for required variable",
				Detail:   fmt.Sprintf("Variable %q has no default, so it needs a value from the caller (-var %s=VALUE).", v.Name, v.Name),
				Subject:  v.Range.Ptr(),
			})
			continue
		}
		v.Value = v.Default
		vals[v.Name] = v.Default
	}

	names := make([]string, 0, len(overrides))
	for name := range overrides {
		names = append(names, name)
	}
	sort.Strings(names)
	declared := make([]string, 0, len(d.vars))
	for name := range d.vars {
		declared = append(declared, name)
	}
	for _, name := range names {
		if d.vars[name] == nil {
			d.add(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Value for undeclared variable",
				Detail: fmt.Sprintf("A value was given for variable %q, but the configuration declares no variable of that name.%s",
					name, didYouMean(name, declared, "")),
			})
		}
	}
	return cty.ObjectVal(vals)
}

// override converts a caller's value for v to v's type. A string for a
// variable of a collection or object type (declared, or that of its
// default) is parsed as an HCL expression first, as for `-var 'l=["a"]'`.
func (d *decoder) override(v *Variable, o cty.Value) (cty.Value, bool) {
	want := v.Type
	shape := want
	if shape == cty.DynamicPseudoType && v.Default != cty.NilVal {
		shape = v.Default.Type()
	}
	bad := func(detail string) (cty.Value, bool) {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid value for variable",
			Detail:   fmt.Sprintf("The value given for variable %q (declared at %s) is not valid: %s.", v.Name, where(v.Range), detail),
		})
		return cty.NilVal, false
	}
	if o == cty.NilVal || o.IsNull() || !o.IsWhollyKnown() {
		return bad("it is null or unknown")
	}
	if o.Type() == cty.String && shape != cty.DynamicPseudoType && !shape.IsPrimitiveType() {
		expr, diags := hclsyntax.ParseExpression([]byte(o.AsString()), "-var "+v.Name, hcl.InitialPos)
		if diags.HasErrors() {
			return bad("it is not a valid HCL expression (" + diags[0].Summary + ")")
		}
		val, diags := expr.Value(nil)
		if diags.HasErrors() {
			return bad("it is not a constant expression (" + diags[0].Summary + ")")
		}
		o = val
	}
	if shape != cty.DynamicPseudoType && shape.IsPrimitiveType() && want == cty.DynamicPseudoType {
		want = shape
	}
	if want != cty.DynamicPseudoType {
		val, err := convert.Convert(o, want)
		if err != nil {
			return bad(fmt.Sprintf("%s required (%v)", typeexpr.TypeString(want), err))
		}
		o = val
	}
	return o, true
}

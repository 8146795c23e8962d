package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// checkAddress validates "host:port", "[ipv6]:port" or (unless listen) an
// absolute unix socket path. For listen the host may be empty (all
// interfaces) and the port 0 (any free port). The error reads after the
// address: `"x" is not ...`.
func checkAddress(s string, listen bool) error {
	if !listen && strings.HasPrefix(s, "/") {
		return nil
	}
	form := `"host:port" or an absolute unix socket path`
	if listen {
		form = `"host:port"`
	}
	bad := func(why string) error { return fmt.Errorf("is not %s: %s", form, why) }
	var host, port string
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("missing ']'")
		}
		host = s[1:end]
		rest := s[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return bad("missing port after ']'")
		}
		port = rest[1:]
		if host == "" {
			return bad("empty IPv6 address")
		}
	} else {
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return bad("missing port")
		}
		host, port = s[:i], s[i+1:]
		if strings.Contains(host, ":") {
			return bad("put an IPv6 address in brackets, as in \"[::1]:6379\"")
		}
		if host == "" && !listen {
			return bad("missing host")
		}
	}
	if strings.ContainsAny(host, " \t\r\n/") {
		return bad("bad character in host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || n == 0 && !listen || port != strconv.Itoa(n) {
		return bad(fmt.Sprintf("bad port %q", port))
	}
	return nil
}

// checkTemplate validates a partition template as builtin.ParseTemplate
// does: it is not empty and every "${" closes with "}" around a name of
// letters, digits, '_', '-' or '.'.
func checkTemplate(src string) error {
	if src == "" {
		return errors.New("the template is empty")
	}
	for off := 0; ; {
		i := strings.Index(src[off:], "${")
		if i < 0 {
			return nil
		}
		start := off + i
		j := strings.IndexByte(src[start+2:], '}')
		if j < 0 {
			return fmt.Errorf("the \"${\" at offset %d is never closed with \"}\"", start)
		}
		name := src[start+2 : start+2+j]
		if name == "" {
			return fmt.Errorf("the \"${}\" at offset %d names no attribute", start)
		}
		for _, r := range name {
			if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return fmt.Errorf("%q in \"${%s}\" is not allowed: attribute names use letters, digits, '_', '-' and '.'", r, name)
			}
		}
		off = start + 2 + j + 1
	}
}

// validSHA256 reports whether s is 64 lowercase hex digits.
func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// wasmMagic starts every WebAssembly binary module.
const wasmMagic = "\x00asm"

// readableFile decodes a path attribute, resolves it against path.config
// and checks that it names a readable regular file.
func (d *decoder) readableFile(a *hcl.Attribute) (string, bool) {
	s, ok := d.str(a)
	if !ok {
		return "", false
	}
	p := resolvePath(d.cfg.Dir, s)
	f, ok := d.openRegular(a, p)
	if !ok {
		return "", false
	}
	f.Close()
	return p, true
}

// openRegular opens p, which must be a regular file, or reports why not.
// In a sandbox it reports that without looking at p.
func (d *decoder) openRegular(a *hcl.Attribute, p string) (*os.File, bool) {
	if d.sandbox {
		d.sandboxed(a, "a file")
		return nil, false
	}
	f, err := os.Open(p)
	if err != nil {
		summary := "Cannot read file"
		if errors.Is(err, os.ErrNotExist) {
			summary = "File not found"
		}
		d.errorAt(a, summary, "Argument %q: %s", a.Name, describeFileError(err))
		return nil, false
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", p)
	}
	if err != nil {
		f.Close()
		d.errorAt(a, "Cannot read file", "Argument %q: %v.", a.Name, err)
		return nil, false
	}
	return f, true
}

// wasmModule checks that module names a readable WebAssembly binary and
// returns its absolute path.
func (d *decoder) wasmModule(a *hcl.Attribute) (string, bool) {
	s, ok := d.str(a)
	if !ok {
		return "", false
	}
	p := resolvePath(d.cfg.Dir, s)
	f, ok := d.openRegular(a, p)
	if !ok {
		return "", false
	}
	defer f.Close()
	magic := make([]byte, len(wasmMagic))
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != wasmMagic {
		d.errorAt(a, "Not a WebAssembly module", "%s does not start with the WebAssembly magic \"\\0asm\"; the wasm driver loads binary .wasm modules (compile .wat sources first).", p)
		return "", false
	}
	return p, true
}

// pluginBinary checks that path names an executable regular file and, when
// pin is a valid checksum, that the file's sha256 matches it. It returns
// the absolute path.
func (d *decoder) pluginBinary(a *hcl.Attribute, pin string, pinAttr *hcl.Attribute) (string, bool) {
	s, ok := d.str(a)
	if !ok {
		return "", false
	}
	p := resolvePath(d.cfg.Dir, s)
	f, ok := d.openRegular(a, p)
	if !ok {
		return "", false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		d.errorAt(a, "Cannot read file", "Argument %q: %v.", a.Name, err)
		return "", false
	}
	if fi.Mode().Perm()&0o111 == 0 {
		d.errorAt(a, "Plugin is not executable", "%s has mode %v; the plugin driver runs it, so it needs an execute bit (chmod +x).", p, fi.Mode().Perm())
		return "", false
	}
	if pinAttr == nil || !validSHA256(pin) {
		return p, true
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		d.errorAt(a, "Cannot read file", "Reading %s: %v.", p, err)
		return "", false
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != pin {
		d.errorAt(pinAttr, "Plugin checksum mismatch",
			"The sha256 of %s is %s, but the configuration pins %s. Rebuilt the plugin? Update the pin to the output of `sha256sum %s`.", p, got, pin, p)
		return "", false
	}
	return p, true
}

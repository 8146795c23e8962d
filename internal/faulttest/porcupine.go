package faulttest

import (
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// checkOps is every model's Check: porcupine on pops (or the error that
// building them gave) within timeout. A result other than porcupine.Ok
// (Illegal, or Unknown on timeout) is a failed check.
func checkOps(model porcupine.Model, pops []porcupine.Operation, err error, timeout time.Duration) (porcupine.CheckResult, error) {
	if err != nil {
		return porcupine.Unknown, err
	}
	return porcupine.CheckOperationsTimeout(model, pops, timeout), nil
}

// visualizeOps is every model's Visualize: it checks again, computing the
// partial linearizations, and writes porcupine's HTML visualization to a
// new file coordhost-NAME-history-*.html in dir (os.TempDir when empty).
// It returns the file's path.
func visualizeOps(model porcupine.Model, pops []porcupine.Operation, err error, timeout time.Duration, dir, name string) (string, error) {
	if err != nil {
		return "", err
	}
	_, info := porcupine.CheckOperationsVerbose(model, pops, timeout)
	f, err := os.CreateTemp(dir, "coordhost-"+name+"-history-*.html")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := porcupine.Visualize(model, info, f); err != nil {
		return "", err
	}
	return f.Name(), nil
}

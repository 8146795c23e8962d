//go:build !linux

package proctree

import "errors"

// BecomeSubreaper is Linux-only; elsewhere it returns an error and
// descendants that detach themselves may outlive the plugin.
func BecomeSubreaper() error { return errors.New("proctree: child subreapers are Linux-only") }

// Supported reports whether this platform can track descendants.
func Supported() bool { return false }

// Refresh does nothing outside Linux.
func (t *Tree) Refresh() {}

// Kill does nothing outside Linux; it returns 0.
func (t *Tree) Kill() int { return 0 }

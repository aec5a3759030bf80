//go:build !linux

package memrelease

import "errors"

// pageOutBinary releases nothing outside Linux.
func pageOutBinary() error { return errors.New("not on Linux") }

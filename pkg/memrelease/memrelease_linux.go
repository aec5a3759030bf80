package memrelease

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pageOutBinary unmaps the pages of the binary's clean read-only mappings
// (madvise MADV_DONTNEED). For a private mapping of a file that was never
// written, the next read maps the file's page again, so nothing is lost.
// MADV_PAGEOUT would also drop the pages from the page cache, but skips
// every page another process maps, as a second agent on the same file
// does.
func pageOutBinary() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return err
	}
	ranges := cleanReadOnlyMappings(string(smaps), exe)
	if len(ranges) == 0 {
		return fmt.Errorf("no clean read-only mapping of %s in /proc/self/smaps", exe)
	}
	var errs []error
	for _, r := range ranges {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_DONTNEED); e != 0 {
			errs = append(errs, fmt.Errorf("madvise(%#x, %d, MADV_DONTNEED): %w", r.start, r.end-r.start, e))
		}
	}
	return errors.Join(errs...)
}

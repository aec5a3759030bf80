package memrelease

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pageOutBinary gives back the pages of the binary's clean read-only
// mappings, in three steps on each:
//   - MADV_RANDOM: a page read again later is read alone, without the
//     read-ahead that would map its neighbours too;
//   - MADV_PAGEOUT: the kernel reclaims the pages from the page cache
//     too, except those another process maps (a second process on the same
//     file; a node's one agent has none). A kernel before 5.4 does not
//     know it, and then only the next step is done;
//   - MADV_DONTNEED: whatever is still mapped leaves the page table.
//
// The mappings are private and never written, so the next read of a page
// maps it again from the page cache or the file: nothing is lost.
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
		if err := madvise(r, unix.MADV_RANDOM, "MADV_RANDOM"); err != nil {
			errs = append(errs, err)
		}
		if err := madvise(r, unix.MADV_PAGEOUT, "MADV_PAGEOUT"); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, err)
		}
		if err := madvise(r, unix.MADV_DONTNEED, "MADV_DONTNEED"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func madvise(r addrRange, advice uintptr, name string) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, advice); e != 0 {
		return fmt.Errorf("madvise(%#x, %d, %s): %w", r.start, r.end-r.start, name, e)
	}
	return nil
}

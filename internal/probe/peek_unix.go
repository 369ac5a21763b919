//go:build unix

package probe

import (
	"errors"
	"syscall"
)

const canPeek = true

// quiet reports whether socket fd is open with nothing to read: a peek
// that would block. Data, or the end of the stream (a read of 0 bytes),
// is not quiet.
func quiet(fd uintptr) bool {
	var buf [1]byte
	_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return errors.Is(err, syscall.EAGAIN)
}

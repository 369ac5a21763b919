//go:build linux

package probe

import (
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canReadWire: the kernel says what a connection received (TCP_INFO).
const canReadWire = true

// wireSlack bounds the kernel's rounding of when data last arrived
// (tcpi_last_data_recv counts jiffies: 1 to 10 ms).
const wireSlack = 10 * time.Millisecond

// wire reads one connection's TCP_INFO. It keeps its buffer and the
// function it hands the socket so that a read allocates nothing (a probe
// reads it twice).
type wire struct {
	rc   syscall.RawConn
	mu   sync.Mutex
	info unix.TCPInfo
	size uint32
	err  syscall.Errno
	read func(fd uintptr)
}

func newWire(rc syscall.RawConn) *wire {
	w := &wire{rc: rc}
	w.read = func(fd uintptr) {
		w.size = uint32(unsafe.Sizeof(w.info))
		_, _, w.err = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
			uintptr(unsafe.Pointer(&w.info)), uintptr(unsafe.Pointer(&w.size)), 0)
	}
	return w
}

// received reads, from the kernel, how many bytes the connection has
// received in all and how long ago data last arrived. ok is false where the
// kernel does not count received bytes (before Linux 4.1 the count is 0),
// or the socket is gone.
func (w *wire) received() (bytes uint64, ago time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.rc.Control(w.read); err != nil || w.err != 0 || w.info.Bytes_received == 0 {
		return 0, 0, false
	}
	return w.info.Bytes_received, time.Duration(w.info.Last_data_recv) * time.Millisecond, true
}

// unread reports whether bytes wait in the socket that nobody has read (a
// peek that does not wait; the end of the stream counts too).
func (w *wire) unread() bool {
	unread := false
	if err := w.rc.Control(func(fd uintptr) { unread = !quiet(fd) }); err != nil {
		return false
	}
	return unread
}

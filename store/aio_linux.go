package store

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Value files written and synced through Linux AIO.
//
// A goroutine blocked in a write or a sync holds its P (the Go scheduler's
// right to run code) until the runtime's monitor takes it back, which on a
// busy process it does only every few milliseconds. On a machine of two
// cores, two value files written at once (a provider's offer and result)
// left the node's other work, hashing the offer and the output for the
// proof, no core at all for a millisecond per MiB (time marks of a 1 MiB
// delegation). Submitted through AIO, a write returns at once, and its
// goroutine waits for the completion on an eventfd that the runtime's
// poller watches, holding nothing.
//
// A file is allocated to its full size first (fallocate): ext4 runs a
// direct write that extends a file synchronously, AIO or not. Where AIO,
// fallocate or a submission is refused (an older kernel, a file system
// without fallocate, a sandbox that forbids the calls, the context's
// requests all in flight), the write is made the blocking way.

const (
	aioEvents      = 128 // requests in flight at once, across every store of the process
	iocbCmdPwrite  = 1
	iocbCmdFsync   = 2
	iocbCmdFdsync  = 3
	iocbFlagResfd  = 1 << 0
	aioIdleEventfd = 16 // eventfds kept for the next requests
)

// iocb is the kernel's struct iocb (linux/aio_abi.h), little-endian
// layout, which every architecture Go runs Linux on with AIO shares.
type iocb struct {
	data   uint64
	_      uint32 // aio_key
	_      int32  // aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	data uint64
	_    uint64 // obj
	res  int64
	_    int64 // res2
}

// The kernel's sizes of the two: another size fails the build.
var (
	_ [64 - unsafe.Sizeof(iocb{})]struct{}
	_ [unsafe.Sizeof(iocb{}) - 64]struct{}
	_ [32 - unsafe.Sizeof(ioEvent{})]struct{}
	_ [unsafe.Sizeof(ioEvent{}) - 32]struct{}
)

// aioCtx is the process's AIO context, shared by its stores.
type aioCtx struct {
	id   uint64        // aio_context_t
	next atomic.Uint64 // the last request's number: requests tried so far
	mu   sync.Mutex
	done map[uint64]int64 // results reaped for requests not yet waited for
	idle chan *eventFD
}

// eventFD is an eventfd a request's completion is signalled on.
type eventFD struct {
	f  *os.File // non-blocking: reads wait in the runtime's poller
	fd int
}

var (
	aioOnce sync.Once
	aio     atomic.Pointer[aioCtx] // nil where AIO is not available
	// aioOff makes every write the blocking way (tests of that path).
	aioOff atomic.Bool
)

func processAIO() *aioCtx {
	aioOnce.Do(func() {
		var id uint64
		if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, aioEvents, uintptr(unsafe.Pointer(&id)), 0); e != 0 {
			return
		}
		aio.Store(&aioCtx{id: id, done: map[uint64]int64{}, idle: make(chan *eventFD, aioIdleEventfd)})
	})
	if aioOff.Load() {
		return nil
	}
	return aio.Load()
}

// preallocate sets f, a new empty file, to size bytes, allocated, and
// reports whether it did: its direct writes may then go through AIO.
func preallocate(f *os.File, size int64) bool {
	if processAIO() == nil || size <= 0 {
		return false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Fallocate(int(fd), 0, 0, size) }); err != nil || ferr != nil {
		return false
	}
	return true
}

// aioWrite writes b at off in f through AIO and waits for it, running
// meanwhile (if set) while the write is in flight; ok is false when it
// could not submit the write (nothing was written, nothing run, then).
func aioWrite(f *os.File, b []byte, off int64, meanwhile func()) (n int, err error, ok bool) {
	res, err, ok := processAIO().run(f, iocbCmdPwrite, b, off, meanwhile)
	return int(res), err, ok
}

// aioSync syncs f through AIO, its data and what reading it back needs
// (fdatasync) or, with all, its every attribute (fsync); ok as aioWrite's.
func aioSync(f *os.File, all bool) (err error, ok bool) {
	op := uint16(iocbCmdFdsync)
	if all {
		op = iocbCmdFsync
	}
	_, err, ok = processAIO().run(f, op, nil, 0, nil)
	return err, ok
}

// run submits one request, runs meanwhile (if set), and waits for the
// request's result.
func (a *aioCtx) run(f *os.File, op uint16, b []byte, off int64, meanwhile func()) (int64, error, bool) {
	if a == nil {
		return 0, nil, false
	}
	ev, err := a.eventFD()
	if err != nil {
		return 0, nil, false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		a.putEventFD(ev)
		return 0, nil, false
	}
	data := a.next.Add(1)
	cb := &iocb{data: data, opcode: op, offset: off, flags: iocbFlagResfd, resfd: uint32(ev.fd)}
	if len(b) > 0 {
		cb.buf, cb.nbytes = uint64(uintptr(unsafe.Pointer(&b[0]))), uint64(len(b))
	}
	var errno syscall.Errno
	cerr := rc.Control(func(fd uintptr) {
		cb.fildes = uint32(fd)
		cbs := [1]*iocb{cb}
		_, _, errno = unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(a.id), 1, uintptr(unsafe.Pointer(&cbs[0])))
	})
	if cerr != nil || errno != 0 {
		a.putEventFD(ev)
		return 0, nil, false
	}
	// Submitted: the kernel holds b until the request completes, so this
	// waits for it whatever happens.
	if meanwhile != nil {
		meanwhile()
	}
	var cnt [8]byte
	_, rerr := ev.f.Read(cnt[:])
	res := a.reap(data)
	if rerr == nil {
		a.putEventFD(ev)
	} else {
		_ = ev.f.Close()
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(cb)
	if res < 0 {
		return 0, syscall.Errno(-res), true
	}
	return res, nil, true
}

// reap returns the result of the request data, taking the completions the
// kernel has into done. Its completion has been signalled: it is in the
// ring or in done, and a reap that finds it in neither (its signal read
// failed) waits for the kernel.
func (a *aioCtx) reap(data uint64) int64 {
	var evs [16]ioEvent
	for wait := false; ; wait = true {
		a.mu.Lock()
		if res, ok := a.done[data]; ok {
			delete(a.done, data)
			a.mu.Unlock()
			return res
		}
		least, ts := 0, unix.Timespec{}
		if wait {
			least, ts.Nsec = 1, 1e6
		}
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(a.id), uintptr(least), uintptr(len(evs)),
			uintptr(unsafe.Pointer(&evs[0])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == 0 {
			for _, ev := range evs[:n] {
				a.done[ev.data] = ev.res
			}
		}
		a.mu.Unlock()
	}
}

func (a *aioCtx) eventFD() (*eventFD, error) {
	select {
	case ev := <-a.idle:
		return ev, nil
	default:
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "aio-eventfd")
	if f == nil {
		_ = unix.Close(fd)
		return nil, errors.New("store: eventfd")
	}
	return &eventFD{f: f, fd: fd}, nil
}

// putEventFD keeps ev, whose count was read back to zero, for the next
// request.
func (a *aioCtx) putEventFD(ev *eventFD) {
	select {
	case a.idle <- ev:
	default:
		_ = ev.f.Close()
	}
}

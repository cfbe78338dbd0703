//! The one small syscall module of longhaul.
//!
//! Every other crate in the workspace is `#![forbid(unsafe_code)]`. The few Linux
//! socket and device calls that no safe crate exposes live here, each in a short
//! function that takes a borrowed file descriptor, checks the return value and
//! turns `errno` into an [`std::io::Error`]:
//!
//! * [`send_queue_bytes`]: `SIOCOUTQ`, bytes in a TCP socket's send queue (unsent
//!   plus sent-but-unacknowledged), the kernel half of the least-outstanding-bytes
//!   policy (docs/ARCHITECTURE.md §2).
//! * [`unsent_bytes`]: `SIOCOUTQNSD`, the unsent part only.
//! * [`set_notsent_lowat`]: `TCP_NOTSENT_LOWAT`, keeps kernel-unsent data small so
//!   the scheduling decision is taken late, in user space.
//! * [`tcp_info`]: a [`TcpInfo`] snapshot (rtt, cwnd, retransmits, ...) from `TCP_INFO`.
//! * [`original_dst`]: the pre-NAT destination of a REDIRECTed connection
//!   (`SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`).
//! * [`open_tun`]: opens `/dev/net/tun` and attaches it to a named TUN interface
//!   without packet information (`IFF_TUN | IFF_NO_PI`).
//! * [`unshare_net`] and [`setns_net`]: move the calling *thread* into a new or an
//!   existing network namespace (the test bed's namespaces).
//! * [`wait_readable`]: `ppoll` on one descriptor with a nanosecond timeout (the
//!   link emulator's deadline sleep).
//! * [`set_thread_realtime`], [`set_thread_nice`] and [`set_timer_slack`]: scheduling of the calling thread
//!   (the emulator's threads ask for a higher share and tight timers).
//! * [`set_window_clamp`]: `TCP_WINDOW_CLAMP`, caps the receive window a socket advertises.
//! * [`force_recv_buffer`] and [`force_send_buffer`]: `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`,
//!   a socket buffer past `net.core.rmem_max` / `wmem_max` (needs `CAP_NET_ADMIN`; the plain
//!   `SO_RCVBUF` / `SO_SNDBUF` are `socket2`'s).
//! * [`block_signals`], [`wait_signal`] and [`send_signal`]: synchronous signal handling
//!   (`pthread_sigmask`, `sigwaitinfo`, `kill`) for command-line tools that must tear down
//!   on Ctrl-C.
//!
//! * [`raise_open_files_limit`]: raises the soft `RLIMIT_NOFILE` (at most to the hard
//!   limit), for tests and benchmarks that hold many connections.
//!
//! * [`release_free_heap`]: `malloc_trim(0)` (glibc), hands memory the allocator holds free
//!   back to the kernel (a proxy whose connections ended keeps no idle resident memory).
//!
//! It does not wrap anything that `socket2`, `std` or `tokio` already expose safely.
//! Linux only.

use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `SIOCOUTQNSD` from `linux/sockios.h` (not exported by every libc version).
const SIOCOUTQNSD: libc::c_ulong = 0x894B;
/// `SO_ORIGINAL_DST` from `linux/netfilter_ipv4.h`; the IPv6 value is the same number.
const SO_ORIGINAL_DST: libc::c_int = 80;
/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// Returns the memory the C allocator holds free (whole free pages in every arena, not only at
/// the top of the heap) to the kernel: `malloc_trim(0)` with glibc. Returns true if memory was
/// released. Freed buffers otherwise stay resident: glibc raises its mmap threshold as large
/// blocks are freed, so later large buffers come from arenas it rarely shrinks. Takes time in
/// proportion to the heap (it walks the arenas under their locks): call it now and then, off
/// the hot path. Without glibc it does nothing and returns false.
#[cfg(target_env = "gnu")]
pub fn release_free_heap() -> bool {
    // SAFETY: malloc_trim takes no pointers; it only walks and shrinks the allocator's own
    // state, under the allocator's locks, and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Without glibc there is no `malloc_trim`: nothing is released.
#[cfg(not(target_env = "gnu"))]
pub fn release_free_heap() -> bool {
    false
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn ioctl_int(fd: BorrowedFd<'_>, request: libc::c_ulong) -> io::Result<u64> {
    let mut value: libc::c_int = 0;
    // SAFETY: `fd` is a live descriptor for the borrow's lifetime; the request
    // writes exactly one `int` through the pointer, which points at `value`.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut value as *mut libc::c_int) })?;
    Ok(u64::try_from(value).unwrap_or(0))
}

/// Bytes in the socket's send queue: not yet sent plus sent but not acknowledged (`SIOCOUTQ`).
pub fn send_queue_bytes(fd: impl AsFd) -> io::Result<u64> {
    ioctl_int(fd.as_fd(), libc::TIOCOUTQ as libc::c_ulong)
}

/// Bytes in the socket's send queue that the kernel has not sent yet (`SIOCOUTQNSD`).
pub fn unsent_bytes(fd: impl AsFd) -> io::Result<u64> {
    ioctl_int(fd.as_fd(), SIOCOUTQNSD)
}

fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a plain `int` that lives across the call and
    // its exact size is passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &value as *const libc::c_int as *const c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Sets `TCP_NOTSENT_LOWAT`: the socket reports writable only while fewer than
/// `bytes` of written data remain unsent in the kernel.
pub fn set_notsent_lowat(fd: impl AsFd, bytes: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd.as_fd(), libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, v)
}

/// A snapshot of the kernel's view of one TCP connection (a subset of `struct tcp_info`).
///
/// Fields a kernel does not report (its `tcp_info` is shorter) are 0 / `false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// Round-trip time variance, microseconds.
    pub rttvar_us: u32,
    /// Minimum round-trip time seen, microseconds (`tcpi_min_rtt`, Linux 4.6+).
    pub min_rtt_us: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// Sender maximum segment size, bytes.
    pub snd_mss: u32,
    /// Segments currently retransmitted and not yet acknowledged (`tcpi_retrans`).
    pub retransmits_in_flight: u32,
    /// Total retransmitted segments over the connection's life.
    pub total_retrans: u32,
    /// Segments sent but not acknowledged.
    pub unacked: u32,
    /// Segments believed lost.
    pub lost: u32,
    /// Segments selectively acknowledged (`tcpi_sacked`): received beyond a hole.
    pub sacked: u32,
    /// Bytes acknowledged by the peer (`tcpi_bytes_acked`, Linux 4.1+).
    pub bytes_acked: u64,
    /// Delivery rate of the latest sample, bytes per second (`tcpi_delivery_rate`, Linux 4.9+).
    pub delivery_rate: u64,
    /// The latest delivery-rate sample was taken while the sender was application-limited
    /// (it had too little to send), so it underestimates the path
    /// (`tcpi_delivery_rate_app_limited`, Linux 4.9+).
    pub delivery_rate_app_limited: bool,
    /// Pacing rate, bytes per second (`tcpi_pacing_rate`, Linux 3.15+); `u64::MAX` when
    /// the socket is not paced.
    pub pacing_rate: u64,
    /// Bytes written and not yet sent (`tcpi_notsent_bytes`, Linux 4.6+).
    pub notsent_bytes: u32,
    /// The peer's advertised receive window, bytes (`tcpi_snd_wnd`, Linux 5.4+).
    pub snd_wnd: u32,
}

impl TcpInfo {
    /// Bytes in the network as the kernel counts them (`tcp_packets_in_flight`: sent, not
    /// acknowledged, selectively acknowledged or lost, plus retransmissions), unlike the
    /// send queue (`SIOCOUTQ`), which keeps a selectively acknowledged window behind a hole.
    pub fn in_flight_bytes(&self) -> u64 {
        let segments = (u64::from(self.unacked) + u64::from(self.retransmits_in_flight))
            .saturating_sub(u64::from(self.sacked) + u64::from(self.lost));
        segments * u64::from(self.snd_mss)
    }
}

/// Byte offset of `tcpi_delivery_rate_app_limited` in the kernel's `struct tcp_info`: the
/// bit field byte right after `tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4`, which the `libc`
/// crate's `tcp_info` leaves as padding before `tcpi_rto`. Bit 0 of that byte.
const APP_LIMITED_OFFSET: usize = std::mem::offset_of!(libc::tcp_info, tcpi_snd_rcv_wscale) + 1;

/// Reads `TCP_INFO` for a TCP socket.
pub fn tcp_info(fd: impl AsFd) -> io::Result<TcpInfo> {
    let mut raw = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the buffer is a zeroed `tcp_info` and `len` is its size; the kernel
    // writes at most `len` bytes and reports how many it wrote.
    check(unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            raw.as_mut_ptr() as *mut c_void,
            &mut len,
        )
    })?;
    // SAFETY: every byte of the buffer is initialized (zeroed, then partly overwritten by
    // the kernel), padding included, and `APP_LIMITED_OFFSET` is inside `tcp_info` (it
    // precedes `tcpi_rto`), so reading one byte there is in bounds.
    let flags = unsafe { raw.as_ptr().cast::<u8>().add(APP_LIMITED_OFFSET).read() };
    // SAFETY: zero is a valid bit pattern for every field of `tcp_info`, and the
    // kernel overwrote the prefix it knows.
    let t = unsafe { raw.assume_init() };
    // An older kernel fills a shorter prefix; later fields stay zero, and only fields it
    // wrote are taken.
    let filled = len as usize;
    let has = |end: usize| filled >= end;
    macro_rules! end_of {
        ($f:ident) => {
            std::mem::offset_of!(libc::tcp_info, $f) + std::mem::size_of_val(&t.$f)
        };
    }
    Ok(TcpInfo {
        rtt_us: t.tcpi_rtt,
        rttvar_us: t.tcpi_rttvar,
        min_rtt_us: if has(end_of!(tcpi_min_rtt)) {
            t.tcpi_min_rtt
        } else {
            0
        },
        snd_cwnd: t.tcpi_snd_cwnd,
        snd_ssthresh: t.tcpi_snd_ssthresh,
        snd_mss: t.tcpi_snd_mss,
        retransmits_in_flight: t.tcpi_retrans,
        total_retrans: t.tcpi_total_retrans,
        unacked: t.tcpi_unacked,
        lost: t.tcpi_lost,
        sacked: t.tcpi_sacked,
        bytes_acked: if has(end_of!(tcpi_bytes_acked)) {
            t.tcpi_bytes_acked
        } else {
            0
        },
        delivery_rate: if has(end_of!(tcpi_delivery_rate)) {
            t.tcpi_delivery_rate
        } else {
            0
        },
        delivery_rate_app_limited: has(end_of!(tcpi_delivery_rate)) && flags & 1 != 0,
        pacing_rate: if has(end_of!(tcpi_pacing_rate)) {
            t.tcpi_pacing_rate
        } else {
            0
        },
        notsent_bytes: if has(end_of!(tcpi_notsent_bytes)) {
            t.tcpi_notsent_bytes
        } else {
            0
        },
        snd_wnd: if has(end_of!(tcpi_snd_wnd)) {
            t.tcpi_snd_wnd
        } else {
            0
        },
    })
}

/// The original destination of a connection redirected by iptables `REDIRECT`
/// (or `DNAT`), read with `SO_ORIGINAL_DST`. `ipv6` selects the IPv6 variant.
pub fn original_dst(fd: impl AsFd, ipv6: bool) -> io::Result<SocketAddr> {
    let fd = fd.as_fd().as_raw_fd();
    if ipv6 {
        let mut sa = MaybeUninit::<libc::sockaddr_in6>::zeroed();
        let mut len = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        // SAFETY: the buffer is a zeroed `sockaddr_in6` of the length passed.
        check(unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_IPV6,
                SO_ORIGINAL_DST,
                sa.as_mut_ptr() as *mut c_void,
                &mut len,
            )
        })?;
        // SAFETY: zero is valid for `sockaddr_in6`; the kernel filled it in.
        let sa = unsafe { sa.assume_init() };
        Ok(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(sa.sin6_addr.s6_addr),
            u16::from_be(sa.sin6_port),
            sa.sin6_flowinfo,
            sa.sin6_scope_id,
        )))
    } else {
        let mut sa = MaybeUninit::<libc::sockaddr_in>::zeroed();
        let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: the buffer is a zeroed `sockaddr_in` of the length passed.
        check(unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_IP,
                SO_ORIGINAL_DST,
                sa.as_mut_ptr() as *mut c_void,
                &mut len,
            )
        })?;
        // SAFETY: zero is valid for `sockaddr_in`; the kernel filled it in.
        let sa = unsafe { sa.assume_init() };
        Ok(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
            u16::from_be(sa.sin_port),
        )))
    }
}

/// Opens `/dev/net/tun` and attaches it to the TUN interface `name` (created if
/// absent) in the caller's network namespace, with no packet-information header:
/// each `read` returns one IP packet and each `write` sends one.
pub fn open_tun(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name must be 1..15 bytes",
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = IFF_TUN | IFF_NO_PI;
    // SAFETY: the descriptor is open; TUNSETIFF reads and writes one `ifreq`,
    // which `req` is, for the duration of the call.
    check(unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            TUNSETIFF as _,
            &mut req as *mut libc::ifreq,
        )
    })?;
    Ok(file)
}

/// Duplicates a descriptor into an owned one (used to hand one TUN queue to two threads).
pub fn dup(fd: impl AsFd) -> io::Result<OwnedFd> {
    // SAFETY: `dup` on a live descriptor; on success the new descriptor is ours.
    let new = check(unsafe { libc::dup(fd.as_fd().as_raw_fd()) })?;
    // SAFETY: `new` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Raises the soft limit on open files (`RLIMIT_NOFILE`) of the process to at least `want`,
/// capped at the hard limit; never lowers it. Returns the soft limit now in force. Child
/// processes started afterwards inherit it.
pub fn raise_open_files_limit(want: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` into the live local `lim`.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    let target = want.min(lim.rlim_max);
    if target > lim.rlim_cur {
        lim.rlim_cur = target;
        // SAFETY: `setrlimit` reads one `rlimit` from the live local `lim`.
        check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    Ok(lim.rlim_cur)
}

/// Moves the calling thread into a new, empty network namespace (`unshare(CLONE_NEWNET)`).
///
/// Only the calling thread changes namespace; other threads of the process are not
/// affected. Needs `CAP_SYS_ADMIN` in the caller's user namespace.
pub fn unshare_net() -> io::Result<()> {
    // SAFETY: `unshare` takes a flag word and touches no memory of ours.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
    Ok(())
}

/// Moves the calling thread into the network namespace that `ns` (an open
/// `/proc/.../ns/net` file) refers to (`setns(fd, CLONE_NEWNET)`).
pub fn setns_net(ns: impl AsFd) -> io::Result<()> {
    // SAFETY: `setns` on a live descriptor; it touches no memory of ours.
    check(unsafe { libc::setns(ns.as_fd().as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// Waits until `fd` is readable or `timeout` passes (`ppoll`, nanosecond resolution).
/// Returns `true` if readable (or in an error/hang-up state a read will report).
/// A zero timeout only checks. `EINTR` is reported as "not readable".
pub fn wait_readable(fd: impl AsFd, timeout: std::time::Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one valid `pollfd` and one valid `timespec`, both live across the
    // call; a null signal mask leaves the mask unchanged.
    let ret = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(ret > 0 && pfd.revents != 0)
}

/// Moves the calling thread to `SCHED_FIFO` at `priority` (1..=99), so its timer
/// wake-ups preempt ordinary work. Needs `CAP_SYS_NICE` (or an RT rlimit).
pub fn set_thread_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `pthread_self` is always valid for the calling thread; `param` is a
    // valid `sched_param` that lives across the call.
    let ret =
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// Sets the nice value of the calling thread only (`setpriority(PRIO_PROCESS, tid)`).
/// Negative values need `CAP_SYS_NICE`.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: `gettid` has no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: `setpriority` takes integers and touches no memory of ours.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) })?;
    Ok(())
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`), in nanoseconds (≥ 1).
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(ns.max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument; the rest are ignored.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            ns,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })?;
    Ok(())
}

/// Sets `TCP_WINDOW_CLAMP`: the socket never advertises a receive window above `bytes`.
pub fn set_window_clamp(fd: impl AsFd, bytes: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd.as_fd(), libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, v)
}

/// Sets `SO_RCVBUFFORCE`: the socket's receive buffer to `bytes` (the kernel doubles it for
/// its bookkeeping, as for `SO_RCVBUF`) whatever `net.core.rmem_max` says. Fails with
/// `EPERM` without `CAP_NET_ADMIN`.
pub fn force_recv_buffer(fd: impl AsFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)
}

/// Sets `SO_SNDBUFFORCE`: the socket's send buffer to `bytes` (doubled, as `SO_SNDBUF`)
/// whatever `net.core.wmem_max` says. Fails with `EPERM` without `CAP_NET_ADMIN`.
pub fn force_send_buffer(fd: impl AsFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v)
}

/// Sets `SO_MAX_PACING_RATE` to `bytes_per_sec`: a cap on the socket's pacing rate. On
/// Linux any value but `u64::MAX` also turns on TCP's internal pacing for the socket
/// (`sk_pacing_status` becomes `SK_PACING_NEEDED`, Linux 4.13+), so a CUBIC or Reno
/// connection then spaces its segments at `cwnd × mss / srtt` scaled by
/// `net.ipv4.tcp_pacing_ss_ratio` (slow start) or `tcp_pacing_ca_ratio`, without the `fq`
/// qdisc. `u64::MAX` removes the cap (and does not turn pacing off once it was on).
pub fn set_max_pacing_rate(fd: impl AsFd, bytes_per_sec: u64) -> io::Result<()> {
    // The kernel reads an unsigned long when given 8 bytes (a 4-byte value caps at 4 GB/s).
    // SAFETY: the option value is a `u64` that lives across the call and its exact size is
    // passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &bytes_per_sec as *const u64 as *const c_void,
            size_of::<u64>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Reads `SO_MAX_PACING_RATE`, bytes per second (`u64::MAX`: no cap).
pub fn max_pacing_rate(fd: impl AsFd) -> io::Result<u64> {
    let mut v: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: the buffer is a `u64` and `len` its size; the kernel writes at most `len`
    // bytes and reports how many.
    check(unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &mut v as *mut u64 as *mut c_void,
            &mut len,
        )
    })?;
    if (len as usize) == size_of::<u32>() {
        // A 32-bit kernel answers with an unsigned int in the buffer's first 4 bytes.
        let b = v.to_ne_bytes();
        let w = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        return Ok(if w == u32::MAX {
            u64::MAX
        } else {
            u64::from(w)
        });
    }
    Ok(v)
}

fn sigset(signals: &[libc::c_int]) -> io::Result<libc::sigset_t> {
    let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: `sigemptyset` initialises the set it is given, which is ours.
    check(unsafe { libc::sigemptyset(set.as_mut_ptr()) })?;
    for &s in signals {
        // SAFETY: the set was initialised above; `sigaddset` validates `s`.
        check(unsafe { libc::sigaddset(set.as_mut_ptr(), s) })?;
    }
    // SAFETY: initialised by `sigemptyset` above.
    Ok(unsafe { set.assume_init() })
}

/// Blocks `signals` in the calling thread (`pthread_sigmask(SIG_BLOCK)`); threads
/// spawned afterwards inherit the mask. Pair with [`wait_signal`].
pub fn block_signals(signals: &[libc::c_int]) -> io::Result<()> {
    let set = sigset(signals)?;
    // SAFETY: a valid, initialised set; a null old-set pointer is allowed.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// Waits for one of `signals` (which must be blocked, see [`block_signals`]) and
/// returns its number (`sigwaitinfo`).
pub fn wait_signal(signals: &[libc::c_int]) -> io::Result<libc::c_int> {
    let set = sigset(signals)?;
    loop {
        // SAFETY: a valid set; a null info pointer is allowed.
        let ret = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        if ret >= 0 {
            return Ok(ret);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `signal` to process `pid` (`kill`). Refuses pids that would address a
/// process group or every process (`pid <= 0`).
pub fn send_signal(pid: i32, signal: libc::c_int) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pid must be positive",
        ));
    }
    // SAFETY: `kill` takes two integers and touches no memory of ours.
    check(unsafe { libc::kill(pid, signal) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn max_pacing_rate_round_trips() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert_eq!(max_pacing_rate(&c).unwrap(), u64::MAX, "no cap by default");
        // Above 4 GB/s: needs the 8-byte form.
        set_max_pacing_rate(&c, 5_000_000_000).unwrap();
        assert_eq!(max_pacing_rate(&c).unwrap(), 5_000_000_000);
        set_max_pacing_rate(&c, 1_250_000).unwrap();
        assert_eq!(max_pacing_rate(&c).unwrap(), 1_250_000);
        // Once capped, TCP_INFO reports a pacing rate no higher than the cap.
        let info = tcp_info(&c).unwrap();
        assert!(info.pacing_rate <= 1_250_000, "pacing {}", info.pacing_rate);
    }

    #[test]
    fn queue_and_info_on_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 1000]).unwrap();
        let mut buf = [0u8; 1000];
        s.read_exact(&mut buf).unwrap();
        // Everything was read and acknowledged eventually; the queue drains to zero.
        let mut q = send_queue_bytes(&c).unwrap();
        for _ in 0..100 {
            if q == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            q = send_queue_bytes(&c).unwrap();
        }
        assert_eq!(q, 0);
        assert_eq!(unsent_bytes(&c).unwrap(), 0);
        set_notsent_lowat(&c, 16384).unwrap();
        let info = tcp_info(&c).unwrap();
        assert!(info.snd_cwnd >= 1, "cwnd {}", info.snd_cwnd);
        assert!(info.snd_mss > 0);
        // The fields the scheduler reads (every kernel this runs on has them, 4.9+): the
        // 1000 bytes acknowledged (Linux counts the SYN too), nothing unsent, a round trip and a delivery-rate sample
        // measured; the sender had nothing more to send, so the sample is app-limited.
        assert!((1000..=1001).contains(&info.bytes_acked), "{info:?}");
        assert_eq!(info.notsent_bytes, 0);
        assert!(info.min_rtt_us > 0, "{info:?}");
        assert!(info.delivery_rate > 0, "{info:?}");
        assert!(info.pacing_rate > 0, "{info:?}");
        assert!(info.delivery_rate_app_limited, "{info:?}");
    }

    #[test]
    fn in_flight_leaves_out_what_was_selectively_acknowledged_or_lost() {
        let t = TcpInfo {
            snd_mss: 1000,
            unacked: 100,
            ..TcpInfo::default()
        };
        assert_eq!(t.in_flight_bytes(), 100_000);
        // A hole: 30 segments received past it, 2 lost, one of them sent again.
        let hole = TcpInfo {
            sacked: 30,
            lost: 2,
            retransmits_in_flight: 1,
            ..t
        };
        assert_eq!(hole.in_flight_bytes(), 69_000);
        // Counters read a moment apart never make it negative.
        let odd = TcpInfo { sacked: 200, ..t };
        assert_eq!(odd.in_flight_bytes(), 0);
    }

    #[test]
    fn original_dst_of_plain_socket_is_an_error_not_a_crash() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        // Without a NAT entry the kernel answers ENOENT; with conntrack absent, ENOPROTOOPT.
        match original_dst(&s, false) {
            Ok(addr) => assert_eq!(addr, l.local_addr().unwrap()),
            Err(e) => assert!(e.raw_os_error().is_some()),
        }
    }

    #[test]
    fn wait_readable_times_out_and_sees_data() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let t = std::time::Instant::now();
        assert!(!wait_readable(&s, std::time::Duration::from_millis(20)).unwrap());
        assert!(t.elapsed() >= std::time::Duration::from_millis(19));
        c.write_all(b"x").unwrap();
        assert!(wait_readable(&s, std::time::Duration::from_secs(5)).unwrap());
        set_window_clamp(&s, 32767).unwrap();
    }

    #[test]
    fn signal_to_invalid_pid_is_refused() {
        assert!(send_signal(0, libc::SIGTERM).is_err());
        assert!(send_signal(-1, libc::SIGTERM).is_err());
    }

    #[test]
    fn tun_name_is_validated() {
        assert!(open_tun("").is_err());
        assert!(open_tun("a-name-that-is-too-long").is_err());
    }
}

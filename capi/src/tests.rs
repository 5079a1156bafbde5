//! The C ABI called from Rust, in a job of one (the process imports its own buffers).
//!
//! The endpoint is process-global and `vmmc_Finalize` ends it, so everything that needs it
//! runs in one test, in order.

use super::*;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::time::{Duration, Instant};

static SEEN: AtomicU32 = AtomicU32::new(0);
static LAST_VALUE: AtomicU32 = AtomicU32::new(0);
static LAST_ADDR: AtomicUsize = AtomicUsize::new(0);

extern "C" fn record(addr: *mut c_void, value: u32) {
    LAST_ADDR.store(addr as usize, Ordering::SeqCst);
    LAST_VALUE.store(value, Ordering::SeqCst);
    SEEN.fetch_add(1, Ordering::SeqCst);
}

/// Results of the calls `reenter` makes from inside a handler, +100 so 0 means "not yet".
static REENTERED: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];

/// A handler that calls back into the library.
extern "C" fn reenter(_addr: *mut c_void, _value: u32) {
    let r = [
        vmmc_BlockNotifications(),
        vmmc_UnblockNotifications(),
        vmmc_UnblockNotifications(),
        vmmc_Finalize(),
    ];
    for (slot, v) in REENTERED.iter().zip(r) {
        slot.store((v + 100) as u32, Ordering::SeqCst);
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn read_u32(base: *mut c_void, off: usize) -> u32 {
    // SAFETY: the tests read words inside buffers they allocated, written by the transport
    // before the handler or the completed call that precedes the read.
    unsafe { std::ptr::read_volatile(base.cast::<u8>().add(off).cast::<u32>()) }
}

fn host_name() -> String {
    // SAFETY: a size query: NULL buffer with length 0.
    let n = unsafe { vmmc_MyHostName(std::ptr::null_mut(), 0) };
    assert!(n > 0, "host name length {n}");
    let mut buf = vec![0 as c_char; n as usize + 1];
    // SAFETY: `buf` holds `n + 1` bytes.
    assert_eq!(unsafe { vmmc_MyHostName(buf.as_mut_ptr(), n + 1) }, n);
    // SAFETY: vmmc_MyHostName NUL-terminated it.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    let mut small = [0 as c_char; 2];
    // SAFETY: `small` holds 2 bytes.
    let rc = unsafe { vmmc_MyHostName(small.as_mut_ptr(), 2) };
    if n >= 2 {
        assert_eq!(
            rc,
            Error::OutOfBounds {
                offset: 0,
                len: 0,
                size: 0
            }
            .code()
        );
        assert_eq!(small[1], 0, "truncated output is NUL-terminated");
    }
    s.to_str().unwrap().to_owned()
}

#[test]
fn job_of_one_end_to_end() {
    // ----- identity -----
    assert_eq!(vmmc_MyRank(), 0);
    assert_eq!(vmmc_JobSize(), 1);
    let (node, squid) = (vmmc_MyNode(), vmmc_GetSquid());
    assert!(node >= 0 && squid >= 0);
    let (mut n, mut s) = (7, 7);
    // SAFETY: valid int pointers.
    assert_eq!(unsafe { vmmc_RankToProc(0, &mut n, &mut s) }, 0);
    assert_eq!((n, s), (node, squid));
    // SAFETY: valid int pointers.
    assert_eq!(unsafe { vmmc_RankToProc(1, &mut n, &mut s) }, -1);
    // SAFETY: valid int pointers.
    assert_eq!(unsafe { vmmc_Parent(&mut n, &mut s) }, 0);
    assert_eq!((n, s), (-1, -1));
    let host = host_name();
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` holds 256 bytes.
    let len = unsafe { vmmc_NodeToName(node, buf.as_mut_ptr(), 256) };
    assert_eq!(len as usize, host.len());
    // SAFETY: `buf` holds 256 bytes.
    assert!(unsafe { vmmc_AllHosts(buf.as_mut_ptr(), 256) } >= len);
    // SAFETY: NodeToName NUL-terminated `buf`... and AllHosts rewrote it, also terminated.
    let all = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
    assert!(all.split('\n').any(|h| h == host));
    let c_host = CString::new(host).unwrap();
    // SAFETY: NUL-terminated strings or NULL.
    unsafe {
        assert_eq!(vmmc_NameToNode(c_host.as_ptr()), node);
        assert_eq!(vmmc_NameToNode(c"no-such-host.invalid".as_ptr()), -1);
        assert_eq!(vmmc_NameToNode(std::ptr::null()), -1);
        assert_eq!(vmmc_NodeToName(-1, buf.as_mut_ptr(), 256), -1);
    }

    // ----- export, import, notify -----
    let rb = vmmc_AllocRecvBuf(4096);
    assert!(!rb.is_null());
    // SAFETY: `rb` is 4096 bytes from vmmc_AllocRecvBuf; the handler is a plain function.
    unsafe {
        assert_eq!(
            vmmc_ExportRecvBuf(1, rb, 4096, Some(record), std::ptr::null(), 0, 1),
            0
        );
        assert_eq!(
            vmmc_ExportRecvBuf(1, rb, 4096, None, std::ptr::null(), 0, 0),
            -3,
            "buffer id in use"
        );
        assert_eq!(
            vmmc_ExportRecvBuf(
                9,
                rb.cast::<u8>().add(64).cast(),
                64,
                None,
                std::ptr::null(),
                0,
                0
            ),
            -4,
            "overlap"
        );
        assert_eq!(
            vmmc_ExportRecvBuf(
                9,
                rb.cast::<u8>().add(4000).cast(),
                200,
                None,
                std::ptr::null(),
                0,
                0
            ),
            -7,
            "runs past the allocation"
        );
    }
    let mut dest: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: valid out-pointers.
    let rc = unsafe { vmmc_ImportRecvBuf(node, squid, 1, &mut dest, &mut size) };
    assert_eq!(rc, 0);
    assert_eq!(size, 4096);
    let mut msg: Vec<u32> = (1..=16).collect();
    msg[15] = 0xC0FFEE;
    let data = words(&msg);
    let seen = SEEN.load(Ordering::SeqCst);
    // SAFETY: `data` holds 16 words.
    let rc = unsafe { vmmc_SendDataNotify(dest, data.as_ptr().cast(), 16) };
    assert_eq!(rc, 0);
    wait_until("notification", || SEEN.load(Ordering::SeqCst) > seen);
    assert_eq!(LAST_VALUE.load(Ordering::SeqCst), 0xC0FFEE);
    assert_eq!(LAST_ADDR.load(Ordering::SeqCst), rb as usize + 60);
    for (i, w) in msg.iter().enumerate() {
        assert_eq!(read_u32(rb, 4 * i), *w);
    }

    // ----- addressing and errors of sends -----
    let one = words(&[0xABCD]);
    // SAFETY: DestSpace arithmetic only; `one` holds a word.
    unsafe {
        let d = dest.cast::<u8>();
        assert_eq!(vmmc_SendData(d.add(16).cast(), one.as_ptr().cast(), 1), 0);
        assert_eq!(read_u32(rb, 16), 0xABCD);
        assert_eq!(
            vmmc_SendData(d.add(4092).cast(), data.as_ptr().cast(), 2),
            -7
        );
        assert_eq!(vmmc_SendData(d.add(2).cast(), one.as_ptr().cast(), 1), -2);
        assert_eq!(vmmc_SendData(dest, std::ptr::null(), 1), -1);
        assert_eq!(vmmc_SendData(dest, one.as_ptr().cast(), 0), -1);
        assert_eq!(
            vmmc_SendData(0x1000 as *mut c_void, one.as_ptr().cast(), 1),
            -9
        );
        assert_eq!(vmmc_SendData(dest, one.as_ptr().cast(), usize::MAX), -1);
    }

    // ----- remote read, asynchronous calls -----
    let mut back = [0u32; 16];
    // SAFETY: `back` holds 16 words.
    let rc = unsafe { vmmc_GetData(back.as_mut_ptr().cast(), dest, 16) };
    assert_eq!(rc, 0);
    assert_eq!(back[15], 0xC0FFEE);
    assert_eq!(back[4], 0xABCD);
    let mut back2 = [0u32; 4];
    let mut h = 0;
    // SAFETY: `back2` holds 4 words and outlives the request; `h` is an int.
    unsafe {
        let src = dest.cast::<u8>().add(48).cast();
        assert_eq!(
            vmmc_GetDataAsync(back2.as_mut_ptr().cast(), src, 4, &mut h),
            0
        );
    }
    let mut st = 0;
    wait_until("async get", || {
        st = vmmc_AsyncStatus(h);
        st != 0
    });
    assert_eq!(st, 1);
    assert_eq!(back2, [13, 14, 15, 0xC0FFEE]);
    assert_eq!(vmmc_AsyncStatus(h), -1, "handle freed once done");
    let payload = words(&[5, 6, 7, 8]);
    // SAFETY: `payload` holds 4 words; `h` is an int.
    unsafe {
        let d = dest.cast::<u8>().add(256).cast();
        assert_eq!(vmmc_SendDataAsync(d, payload.as_ptr().cast(), 4, &mut h), 0);
    }
    wait_until("async send", || {
        st = vmmc_AsyncStatus(h);
        st != 0
    });
    assert_eq!(st, 1);
    assert_eq!(read_u32(rb, 268), 8);
    let seen = SEEN.load(Ordering::SeqCst);
    // SAFETY: as above.
    unsafe {
        let d = dest.cast::<u8>().add(256).cast();
        assert_eq!(
            vmmc_SendDataAsyncNotify(d, payload.as_ptr().cast(), 4, &mut h),
            0
        );
        let big = vec![0u32; 4096];
        assert_eq!(vmmc_SendDataAsync(d, big.as_ptr().cast(), 4096, &mut h), -7);
    }
    wait_until("async notify", || SEEN.load(Ordering::SeqCst) > seen);
    assert_eq!(LAST_ADDR.load(Ordering::SeqCst), rb as usize + 268);

    // ----- blocking notifications -----
    assert_eq!(vmmc_BlockNotifications(), 0);
    let seen = SEEN.load(Ordering::SeqCst);
    // SAFETY: `data` holds 16 words.
    let rc = unsafe { vmmc_SendDataNotify(dest, data.as_ptr().cast(), 16) };
    assert_eq!(rc, 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(SEEN.load(Ordering::SeqCst), seen, "delivered while blocked");
    assert_eq!(vmmc_BlockNotifications(), 0);
    assert_eq!(vmmc_UnblockNotifications(), 0, "still nested");
    assert_eq!(vmmc_UnblockNotifications(), 1);
    wait_until("queued notification", || SEEN.load(Ordering::SeqCst) > seen);
    assert!(vmmc_UnblockNotifications() > 0, "unblocked: no effect");

    // ----- redirection -----
    let side = vmmc_AllocRecvBuf(4096);
    assert!(!side.is_null());
    // SAFETY: `side` is 4096 bytes of ours; redirect its bytes 64.. from buffer offsets 128...
    unsafe {
        let d = side.cast::<u8>().add(64).cast();
        assert_eq!(vmmc_PostRedir(1, d, 256, 128, 64), 0);
        assert_eq!(vmmc_PostRedir(1, d, 256, 128, 64), -15, "already posted");
        assert_eq!(vmmc_PostRedir(2, d, 256, 128, 64), -5, "no such buffer");
    }
    let block: Vec<u32> = (100..132).collect();
    // SAFETY: 32 words to buffer offset 128.
    unsafe {
        let d = dest.cast::<u8>().add(128).cast();
        assert_eq!(vmmc_SendData(d, words(&block).as_ptr().cast(), 32), 0);
    }
    let (mut off, mut rlen) = (1usize, 1usize);
    // SAFETY: valid out-pointers.
    assert_eq!(unsafe { vmmc_EndRedir(1, &mut off, &mut rlen) }, 0);
    assert_eq!((off, rlen), (128, 64));
    assert_eq!(read_u32(side, 64), 100);
    assert_eq!(read_u32(side, 124), 115);
    assert_eq!(read_u32(rb, 192), 116, "the rest lands in the buffer");
    let mut end = 0usize;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { vmmc_DataEnd(1, &mut end) }, 1);
    assert_eq!(end, 128 + 124);
    assert_eq!(vmmc_ClearDataEnd(1), 0);
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { vmmc_DataEnd(1, &mut end) }, 0);

    // ----- private memory, permissions, asynchronous import -----
    let mut private = vec![0u32; 64];
    let mut other = vec![0u32; 64];
    let me = [node, squid];
    let not_me = [node, squid + 1000];
    // SAFETY: the vectors outlive their exports (unexported below, before they drop).
    unsafe {
        assert_eq!(
            vmmc_ExportRecvBuf(2, private.as_mut_ptr().cast(), 256, None, me.as_ptr(), 1, 0),
            0
        );
        assert_eq!(
            vmmc_ExportRecvBuf(
                3,
                other.as_mut_ptr().cast(),
                256,
                None,
                not_me.as_ptr(),
                1,
                0
            ),
            0
        );
    }
    let mut req = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(vmmc_ImportRecvBuf(node, squid, 2, &mut dest, &mut size), 0);
        assert_eq!(size, 256);
        let d = dest.cast::<u8>().add(8).cast();
        assert_eq!(vmmc_SendData(d, payload.as_ptr().cast(), 4), 0);
        assert_eq!(std::ptr::read_volatile(&private[5]), 8);
        assert_eq!(vmmc_ImportRecvBufAsync(node, squid, 3, &mut req), 0);
    }
    let (mut d3, mut r) = (std::ptr::null_mut(), 0);
    wait_until("refused import", || {
        // SAFETY: valid out-pointers.
        r = unsafe { vmmc_ImportRecvBufStatus(req, &mut d3, std::ptr::null_mut()) };
        r != 0
    });
    assert_eq!(r, -6, "permission denied");
    // SAFETY: valid out-pointer.
    let rc = unsafe { vmmc_ImportRecvBufAsync(node, squid, 4, &mut req) };
    assert_eq!(rc, 0);
    // SAFETY: valid out-pointers.
    let rc = unsafe { vmmc_ImportRecvBufStatus(req, &mut d3, &mut size) };
    assert_eq!(rc, 0);
    let mut fourth = vec![0u32; 16];
    // SAFETY: `fourth` outlives its export.
    unsafe {
        assert_eq!(
            vmmc_ExportRecvBuf(
                4,
                fourth.as_mut_ptr().cast(),
                64,
                None,
                std::ptr::null(),
                0,
                0
            ),
            0
        );
    }
    wait_until("async import", || {
        // SAFETY: valid out-pointers.
        r = unsafe { vmmc_ImportRecvBufStatus(req, &mut d3, &mut size) };
        r != 0
    });
    assert_eq!((r, size), (1, 64));
    // SAFETY: `one` holds a word.
    assert_eq!(unsafe { vmmc_SendData(d3, one.as_ptr().cast(), 1) }, 0);
    // SAFETY: reading our own vector, written by the completed send.
    assert_eq!(unsafe { std::ptr::read_volatile(&fourth[0]) }, 0xABCD);

    // ----- a handler that calls in -----
    let mut fifth = vec![0u32; 16];
    // SAFETY: `fifth` outlives its export; `reenter` is a plain function.
    let rc = unsafe {
        vmmc_ExportRecvBuf(
            5,
            fifth.as_mut_ptr().cast(),
            64,
            Some(reenter),
            std::ptr::null(),
            0,
            0,
        )
    };
    assert_eq!(rc, 0);
    let mut d5 = std::ptr::null_mut();
    // SAFETY: valid out-pointers; `one` holds a word.
    unsafe {
        assert_eq!(
            vmmc_ImportRecvBuf(node, squid, 5, &mut d5, std::ptr::null_mut()),
            0
        );
        assert_eq!(vmmc_SendDataNotify(d5, one.as_ptr().cast(), 1), 0);
    }
    wait_until("re-entering handler", || {
        REENTERED[3].load(Ordering::SeqCst) != 0
    });
    let got: Vec<i64> = REENTERED
        .iter()
        .map(|a| i64::from(a.load(Ordering::SeqCst)) - 100)
        .collect();
    assert_eq!(
        got,
        [0, 0, -12, -1],
        "block, paired unblock, extra unblock, finalize"
    );
    assert_eq!(vmmc_MyRank(), 0, "vmmc_Finalize in a handler did nothing");
    assert_eq!(vmmc_UnimportRecvBuf(d5), 0);
    assert_eq!(vmmc_UnexportRecvBuf(5), 0);
    drop(fifth);

    // ----- tearing down -----
    assert_eq!(vmmc_UnimportRecvBuf(d3), 0);
    assert_eq!(vmmc_UnimportRecvBuf(d3), -9);
    // SAFETY: `one` holds a word.
    assert_eq!(unsafe { vmmc_SendData(d3, one.as_ptr().cast(), 1) }, -9);
    assert_eq!(vmmc_UnexportRecvBuf(4), 0);
    assert_eq!(vmmc_UnexportRecvBuf(4), -5);
    assert_eq!(vmmc_UnexportRecvBuf(3), 0);
    assert_eq!(vmmc_UnexportRecvBuf(2), 0);
    // SAFETY: `one` holds a word.
    assert!(unsafe { vmmc_SendData(dest, one.as_ptr().cast(), 1) } < 0);
    drop((private, other, fourth));
    assert_eq!(vmmc_FreeRecvBuf(side), 0);
    assert_eq!(vmmc_FreeRecvBuf(side), -1);
    // Buffer 1 stays exported and imported: vmmc_Finalize tears it down.
    assert_eq!(vmmc_Finalize(), 0);
    assert_eq!(vmmc_MyRank(), -17);
    assert!(vmmc_AllocRecvBuf(64).is_null());
    assert_eq!(vmmc_Finalize(), 0);
    // The memory of an allocation stays valid after vmmc_Finalize.
    assert_eq!(read_u32(rb, 60), 0xC0FFEE);
    assert_eq!(vmmc_FreeRecvBuf(rb), 0);
}

#[test]
fn calls_without_the_endpoint() {
    assert_eq!(FINALIZED.0, Error::Bootstrap(String::new()).code());
    assert_eq!(PANICKED, Error::InvalidArgument("").code());
    assert_eq!(call(|| panic!("a panic inside a call")), PANICKED);
    assert_eq!(vmmc_WordSize(), 4);
    assert_eq!(vmmc_PageSize() as usize, vmmc::page_size());
    assert_eq!(vmmc_EqualNode(3, 3), 1);
    assert_eq!(vmmc_EqualNode(3, 4), 0);
    // SAFETY: static NUL-terminated strings.
    unsafe {
        let v = CStr::from_ptr(vmmc_Version());
        assert_eq!(v.to_str().unwrap(), vmmc::VERSION);
        for code in vmmc::error::all_codes()
            .iter()
            .map(|(c, _)| *c)
            .chain([0, 5, -1000])
        {
            let s = CStr::from_ptr(vmmc_ErrorStr(code));
            assert_eq!(s.to_str().unwrap(), vmmc::error_str(code));
        }
        vmmc_Error(-7, c"calls_without_the_endpoint".as_ptr());
        vmmc_Error(-7, std::ptr::null());
    }
}

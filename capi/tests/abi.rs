//! The header against the library: it compiles as C99, its error codes are the Rust codes,
//! and `libvmmc.so` exports every call it declares, with the Rust error texts.

mod common;

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use vmmc::Error;

fn header() -> String {
    let path = common::include_dir().join("vmmc.h");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `#define VMMC_ERR_NAME (-n)` lines of the header.
fn header_codes() -> BTreeMap<String, i32> {
    let mut codes = BTreeMap::new();
    for line in header().lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") {
            continue;
        }
        let Some(name) = words.next().and_then(|n| n.strip_prefix("VMMC_ERR_")) else {
            continue;
        };
        let value = words.next().unwrap_or("");
        let v: i32 = value
            .trim_start_matches('(')
            .trim_end_matches(')')
            .parse()
            .unwrap_or_else(|_| panic!("VMMC_ERR_{name}: value {value:?} is not (-n)"));
        assert!(
            codes.insert(name.to_owned(), v).is_none(),
            "VMMC_ERR_{name} defined twice"
        );
    }
    codes
}

/// Names of the functions the header declares.
fn header_functions() -> Vec<String> {
    let mut names = vec![];
    for line in header().lines() {
        let t = line.trim_start();
        if t.starts_with('#')
            || t.starts_with("/*")
            || t.starts_with('*')
            || t.starts_with("typedef")
        {
            continue;
        }
        if let Some(i) = t.find("vmmc_") {
            let rest = &t[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if rest[end..].starts_with('(') {
                names.push(rest[..end].to_owned());
            }
        }
    }
    names
}

#[test]
fn header_compiles_as_c99() {
    let dir = common::scratch("header");
    let mut src = String::from(
        "#include <vmmc.h>\n\nint use_everything(void);\nint use_everything(void)\n{\n",
    );
    for f in header_functions() {
        src += &format!("    (void)&{f};\n");
    }
    // The SBL names and the types the header promises.
    src += r#"
    int (*exp)(uint32_t, void *, size_t, vmmc_handler_t, const int *, int, int) = SBL_ExportRecvBuf;
    int (*imp)(int, int, uint32_t, void **, size_t *) = SBL_ImportRecvBuf;
    int (*req)(int, int, uint32_t, int *) = SBL_ImportRecvBufReq;
    int (*unexp)(uint32_t) = SBL_UnexportRecvBuf;
    int (*unimp)(void *) = SBL_UnimportRecvBuf;
    int (*send1)(void *, const void *, size_t) = SBL_SendMsg;
    int (*send2)(void *, const void *, size_t) = SBL_SendMesg;
    int (*send3)(void *, const void *, size_t) = SBL_SendMsgWithNotify;
    int (*blk)(void) = SBL_BlockNotifications;
    int (*unblk)(void) = SBL_UnblockNotifications;
    int (*page)(void) = SBL_PageSize;
    int (*word)(void) = SBL_WordSize;
    void (*err)(int, const char *) = SBL_Error;
    int (*hosts)(char *, int) = SBL_Hosts;
    const char *(*str)(int) = vmmc_ErrorStr;
    void *(*alloc)(size_t) = vmmc_AllocRecvBuf;
    int codes[] = {
"#;
    for name in header_codes().keys() {
        src += &format!("        VMMC_ERR_{name},\n");
    }
    src += r#"    };
    (void)exp; (void)imp; (void)req; (void)unexp; (void)unimp; (void)send1; (void)send2;
    (void)send3; (void)blk; (void)unblk; (void)page; (void)word; (void)err; (void)hosts;
    (void)str; (void)alloc;
    return codes[0];
}
"#;
    let file = dir.join("uses_header.c");
    std::fs::write(&file, src).unwrap();
    let mut cmd = common::cc();
    cmd.args([
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-pedantic",
        "-Werror",
        "-fsyntax-only",
    ])
    .arg("-I")
    .arg(common::include_dir())
    .arg(&file);
    common::run_ok(&mut cmd, "cc -fsyntax-only on a file including vmmc.h");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn error_codes_are_the_rust_codes() {
    let expected = [
        ("INVALID_ARGUMENT", Error::InvalidArgument("x")),
        ("UNALIGNED", Error::Unaligned { offset: 1, len: 4 }),
        ("BUFID_IN_USE", Error::BufIdInUse(1)),
        ("OVERLAP", Error::Overlap(1)),
        ("NO_SUCH_BUFFER", Error::NoSuchBuffer(1)),
        ("PERMISSION", Error::PermissionDenied(1)),
        (
            "OUT_OF_BOUNDS",
            Error::OutOfBounds {
                offset: 0,
                len: 8,
                size: 4,
            },
        ),
        ("UNEXPORTED", Error::Unexported),
        ("NOT_IMPORTED", Error::NotImported),
        ("PEER_LOST", Error::PeerLost("x".into())),
        ("NOTIFY_OVERFLOW", Error::NotifyOverflow(1)),
        ("UNBLOCK_IN_HANDLER", Error::UnblockInHandler),
        ("WOULD_BLOCK", Error::WouldBlock),
        ("NOT_REDIRECTABLE", Error::NotRedirectable(1)),
        ("REDIR_POSTED", Error::RedirPosted(1)),
        ("UNSUPPORTED", Error::Unsupported("x")),
        ("BOOTSTRAP", Error::Bootstrap("x".into())),
        ("PROTOCOL", Error::Protocol("x".into())),
        (
            "SYSTEM",
            Error::io("x", std::io::Error::from_raw_os_error(1)),
        ),
        ("SPAWN", Error::SpawnFailed("x".into())),
    ];
    let header = header_codes();
    for (name, e) in &expected {
        assert_eq!(
            header.get(*name),
            Some(&e.code()),
            "VMMC_ERR_{name} in vmmc.h vs {e:?}.code()"
        );
    }
    let rust: Vec<i32> = vmmc::error::all_codes().iter().map(|(c, _)| *c).collect();
    let mut ours: Vec<i32> = header.values().copied().collect();
    ours.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(
        ours, rust,
        "one VMMC_ERR_* per entry of vmmc::error::all_codes()"
    );
    assert_eq!(header.len(), expected.len());
}

/// `dlopen`/`dlsym` on the built `libvmmc.so`.
struct Lib(*mut c_void);

impl Lib {
    fn open() -> Lib {
        let path = CString::new(common::libvmmc().to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; loading the library runs no code of ours that needs
        // the job (the endpoint is created lazily).
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {path:?} failed");
        Lib(h)
    }

    fn sym(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).unwrap();
        // SAFETY: a valid handle and a NUL-terminated name.
        unsafe { libc::dlsym(self.0, c.as_ptr()) }
    }
}

#[test]
fn the_library_exports_every_call_with_the_rust_error_texts() {
    let lib = Lib::open();
    let functions = header_functions();
    let mut declared = functions.clone();
    declared.sort();
    let mut wanted = vec![
        "vmmc_MyNode",
        "vmmc_GetSquid",
        "vmmc_MyRank",
        "vmmc_JobSize",
        "vmmc_Parent",
        "vmmc_RankToProc",
        "vmmc_PageSize",
        "vmmc_WordSize",
        "vmmc_Version",
        "vmmc_MyHostName",
        "vmmc_AllHosts",
        "vmmc_NodeToName",
        "vmmc_NameToNode",
        "vmmc_EqualNode",
        "vmmc_SessionHosts",
        "vmmc_Spawn",
        "vmmc_AllocRecvBuf",
        "vmmc_FreeRecvBuf",
        "vmmc_ExportRecvBuf",
        "vmmc_UnexportRecvBuf",
        "vmmc_ImportRecvBuf",
        "vmmc_ImportRecvBufAsync",
        "vmmc_ImportRecvBufStatus",
        "vmmc_UnimportRecvBuf",
        "vmmc_SendData",
        "vmmc_SendDataNotify",
        "vmmc_SendDataAsync",
        "vmmc_SendDataAsyncNotify",
        "vmmc_AsyncStatus",
        "vmmc_GetData",
        "vmmc_GetDataAsync",
        "vmmc_BlockNotifications",
        "vmmc_UnblockNotifications",
        "vmmc_PostRedir",
        "vmmc_EndRedir",
        "vmmc_DataEnd",
        "vmmc_ClearDataEnd",
        "vmmc_ErrorStr",
        "vmmc_Error",
        "vmmc_Finalize",
    ];
    wanted.sort_unstable();
    assert_eq!(declared, wanted, "the calls vmmc.h declares");
    let missing: Vec<_> = functions.iter().filter(|f| lib.sym(f).is_null()).collect();
    assert!(missing.is_empty(), "libvmmc.so does not export {missing:?}");

    let p = lib.sym("vmmc_ErrorStr");
    // SAFETY: vmmc_ErrorStr has this signature in the library (src/lib.rs).
    let error_str: extern "C" fn(c_int) -> *const c_char = unsafe { std::mem::transmute(p) };
    let codes = header_codes();
    let samples = codes.values().copied().chain([0, 3, -1000, i32::MIN]);
    for code in samples {
        let s = error_str(code);
        assert!(!s.is_null());
        // SAFETY: vmmc_ErrorStr returns static NUL-terminated strings.
        let s = unsafe { CStr::from_ptr(s) }.to_str().unwrap();
        assert_eq!(s, vmmc::error_str(code), "vmmc_ErrorStr({code})");
        assert_eq!(error_str(code), error_str(code), "static strings");
    }
}

//! A SQLite VFS for the writer's connection that hands the kernel each commit's WAL frames
//! in one write.
//!
//! SQLite writes a WAL frame as two `pwrite`s (its 24-byte header, then the page), so a
//! commit of five pages is ten system calls, each dirtying parts of the same file pages
//! again, before the `fdatasync`. Measured on this project's 2-core machine, ten writes and
//! a sync took 74-81 us of CPU and 132-140 us in all; the same bytes in one write and a
//! sync, 46-47 us and 101-103 us. This VFS wraps the default one (`unix`) and, for WAL
//! files only, keeps contiguous writes in a buffer that goes to the file in one write when
//! SQLite syncs, reads, asks the size, truncates, closes or writes somewhere else.
//!
//! Durability is unchanged: with `synchronous = FULL` (which the writer's connection
//! checks it has), SQLite syncs the WAL at every commit before it makes the commit visible
//! to readers (the WAL index), and the sync writes the buffer first, so nothing a reader
//! or an answer depends on is ever only in the buffer. (With `NORMAL`, commits are not
//! synced and readers could be shown frames still gathered here: never use this VFS so.)
//! The writer's own reads of the WAL (pages spilled by a large batch, checkpoints) write
//! the buffer first. A failed write surfaces from the call that
//! flushed it (the sync, at the latest), which fails the commit as a failed write would.
//! The database file, its journal and the shared-memory index go straight to `unix`.
//!
//! The commit's sync is that one write, made through a second handle on the WAL opened
//! with `O_DSYNC`: the kernel writes the frames and flushes the device before it returns,
//! as a write and an `fdatasync` would, in one system call instead of two (measured here,
//! 8-40 KiB: 5-10 us less per commit). When anything reached the file another way since
//! the last sync (a piece larger than the buffer, a truncation, a failed write, or the
//! first sync of a new file, which also syncs its directory), the sync is `unix`'s own.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub const NAME: &CStr = c"baton-gathered-wal";

/// The most one write carries: the `unix` VFS writes at most 128 KiB - 1 per call (and
/// reports a longer one as a full disk), so a large commit goes out in pieces of this.
const MAX_GATHERED: usize = 120 << 10;

/// A WAL file: SQLite's file handle (whose methods are ours), then the `unix` one, in the
/// same allocation of `szOsFile` bytes.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    gathered: Vec<u8>,
    /// The file offset of `gathered[0]`.
    at: i64,
    /// The same file opened with `O_DSYNC`: a commit whose frames are all still gathered
    /// goes out through it, so one write both writes and syncs them.
    dsync: Option<std::fs::File>,
    /// Bytes went to the file through `real` (or a synced write failed) since its last
    /// sync: the next sync must be `real`'s own.
    unsynced: bool,
}

/// Bytes of the allocation before the `unix` handle, kept 16-byte aligned.
const HEAD: usize = std::mem::size_of::<WalFile>().next_multiple_of(16);

struct Registered {
    /// The wrapped VFS (`unix-excl`), which lives as long as the process.
    real: *mut ffi::sqlite3_vfs,
}

// SAFETY: the pointers are to SQLite's static VFS table entries, never freed or mutated
// after registration.
unsafe impl Send for Registered {}
unsafe impl Sync for Registered {}

static REGISTERED: OnceLock<Result<Registered, c_int>> = OnceLock::new();

/// Registers the VFS (once per process); the error is SQLite's result code.
pub fn register() -> Result<(), c_int> {
    REGISTERED
        .get_or_init(|| unsafe {
            let rc = ffi::sqlite3_initialize();
            if rc != ffi::SQLITE_OK {
                return Err(rc);
            }
            // The exclusive `unix` (see `connection::EXCLUSIVE_VFS`), as the readers use.
            let mut real = ffi::sqlite3_vfs_find(super::connection::EXCLUSIVE_VFS.as_ptr());
            if real.is_null() {
                real = ffi::sqlite3_vfs_find(std::ptr::null());
            }
            if real.is_null() {
                return Err(ffi::SQLITE_ERROR);
            }
            let mut vfs: ffi::sqlite3_vfs = *real;
            vfs.szOsFile = (HEAD + (*real).szOsFile as usize) as c_int;
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = NAME.as_ptr();
            vfs.pAppData = real.cast();
            vfs.xOpen = Some(open);
            let vfs = Box::leak(Box::new(vfs));
            match ffi::sqlite3_vfs_register(vfs, 0) {
                ffi::SQLITE_OK => Ok(Registered { real }),
                rc => Err(rc),
            }
        })
        .as_ref()
        .map(|_| ())
        .map_err(|rc| *rc)
}

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    match REGISTERED.get() {
        Some(Ok(r)) => r.real,
        _ => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let real_vfs = real_vfs();
    let Some(real_open) = real_vfs.as_ref().and_then(|v| v.xOpen) else {
        return ffi::SQLITE_ERROR;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Everything but the WAL is the `unix` file itself, at the start of the allocation.
        return real_open(real_vfs, name, file, flags, out_flags);
    }
    let real = file.cast::<u8>().add(HEAD).cast::<ffi::sqlite3_file>();
    let rc = real_open(real_vfs, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        // SQLite does not close a file whose methods are unset.
        (*file).pMethods = std::ptr::null();
        return rc;
    }
    let wal = file.cast::<WalFile>();
    std::ptr::write(
        wal,
        WalFile {
            base: ffi::sqlite3_file {
                pMethods: &WAL_METHODS,
            },
            real,
            gathered: Vec::new(),
            at: 0,
            dsync: open_dsync(name),
            // The first sync is `real`'s, which also syncs the directory of a new file.
            unsynced: true,
        },
    );
    ffi::SQLITE_OK
}

/// The WAL opened again for synchronous writes, or None (then every sync is `real`'s).
unsafe fn open_dsync(name: ffi::sqlite3_filename) -> Option<std::fs::File> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    if name.is_null() {
        return None;
    }
    let path = std::ffi::OsStr::from_bytes(CStr::from_ptr(name).to_bytes());
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DSYNC)
        .open(path)
        .ok()
}

/// The `unix` handle and its methods.
unsafe fn real(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    let real = (*file.cast::<WalFile>()).real;
    (real, &*(*real).pMethods)
}

thread_local! {
    /// Writes of gathered frames so far by connections used on this thread (tests check
    /// the VFS is in use; other tests' connections on other threads do not count).
    static FLUSHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Of those, the ones that went through the `O_DSYNC` handle as a commit's sync.
    static SYNCED_WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count(counter: &'static std::thread::LocalKey<std::cell::Cell<u64>>) {
    counter.with(|c| c.set(c.get() + 1));
}

/// Writes what is gathered.
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    let wal = &mut *file.cast::<WalFile>();
    if wal.gathered.is_empty() {
        return ffi::SQLITE_OK;
    }
    count(&FLUSHES);
    let (real, methods) = real(file);
    let Some(write) = methods.xWrite else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let rc = write(
        real,
        wal.gathered.as_ptr().cast(),
        wal.gathered.len() as c_int,
        wal.at,
    );
    // Written or not, the bytes are SQLite's to write again: a failed commit is rolled
    // back and its frames rewritten by the next one.
    wal.gathered.clear();
    wal.unsynced = true;
    rc
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    let flushed = flush(file);
    let (real, methods) = real(file);
    let closed = methods.xClose.map_or(ffi::SQLITE_OK, |f| f(real));
    std::ptr::drop_in_place(file.cast::<WalFile>());
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

/// Calls the `unix` method `$method` of `$file` with `$arg`s (`$missing` when `unix` has
/// none); with `flush` first, after writing what is gathered.
macro_rules! forward {
    (flush $file:expr, $method:ident, $missing:expr $(, $arg:expr)*) => {{
        let rc = flush($file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        forward!($file, $method, $missing $(, $arg)*)
    }};
    ($file:expr, $method:ident, $missing:expr $(, $arg:expr)*) => {{
        let (real, methods) = real($file);
        methods.$method.map_or($missing, |f| f(real $(, $arg)*))
    }};
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    forward!(flush file, xRead, ffi::SQLITE_IOERR_READ, buf, amount, offset)
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    if amount as usize > MAX_GATHERED {
        // Larger than any piece (no page size is): as it comes, after what is gathered.
        (*file.cast::<WalFile>()).unsynced = true;
        return forward!(flush file, xWrite, ffi::SQLITE_IOERR_WRITE, data, amount, offset);
    }
    let wal = &mut *file.cast::<WalFile>();
    let follows = wal.at + wal.gathered.len() as i64 == offset;
    let fits = wal.gathered.len() + amount as usize <= MAX_GATHERED;
    let joins = wal.gathered.is_empty() || (follows && fits);
    if !joins {
        let rc = flush(file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    let wal = &mut *file.cast::<WalFile>();
    if wal.gathered.is_empty() {
        wal.at = offset;
    }
    wal.gathered.extend_from_slice(std::slice::from_raw_parts(
        data.cast::<u8>(),
        amount as usize,
    ));
    ffi::SQLITE_OK
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    (*file.cast::<WalFile>()).unsynced = true;
    forward!(flush file, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, size)
}

/// A commit whose frames are all gathered (the usual case) is one `O_DSYNC` write: the
/// same device work as a write and an `fdatasync`, in one system call. Anything else
/// written since the last sync is synced by `real`.
unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    use std::os::unix::fs::FileExt;
    let wal = &mut *file.cast::<WalFile>();
    if let (false, Some(dsync)) = (wal.unsynced, &wal.dsync) {
        if wal.gathered.is_empty() {
            // Everything written so far went out synced.
            return ffi::SQLITE_OK;
        }
        count(&FLUSHES);
        count(&SYNCED_WRITES);
        let written = dsync.write_all_at(&wal.gathered, wal.at as u64);
        wal.gathered.clear();
        return match written {
            Ok(()) => ffi::SQLITE_OK,
            Err(err) => {
                wal.unsynced = true;
                // As `unix` reports a failed write: a full disk is SQLITE_FULL, which
                // batond answers as "storage is full".
                match err.raw_os_error() {
                    Some(libc::ENOSPC) | Some(libc::EDQUOT) => ffi::SQLITE_FULL,
                    _ => ffi::SQLITE_IOERR_WRITE,
                }
            }
        };
    }
    let rc = forward!(flush file, xSync, ffi::SQLITE_IOERR_FSYNC, flags);
    if rc == ffi::SQLITE_OK {
        (*file.cast::<WalFile>()).unsynced = false;
    }
    rc
}

unsafe extern "C" fn file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    forward!(flush file, xFileSize, ffi::SQLITE_IOERR_FSTAT, size)
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(file, xLock, ffi::SQLITE_OK, level)
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(file, xUnlock, ffi::SQLITE_OK, level)
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    forward!(file, xCheckReservedLock, ffi::SQLITE_OK, out)
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    forward!(flush file, xFileControl, ffi::SQLITE_NOTFOUND, op, arg)
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    forward!(file, xSectorSize, 4096)
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    forward!(file, xDeviceCharacteristics, 0)
}

unsafe extern "C" fn shm_map(
    file: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    forward!(
        file,
        xShmMap,
        ffi::SQLITE_IOERR_SHMMAP,
        page,
        size,
        extend,
        out
    )
}

unsafe extern "C" fn shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    forward!(file, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags)
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    forward!(file, xShmBarrier, ())
}

unsafe extern "C" fn shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    forward!(file, xShmUnmap, ffi::SQLITE_OK, delete)
}

unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // Without xFetch, SQLite reads instead when told there is nothing mapped.
    *out = std::ptr::null_mut();
    forward!(flush file, xFetch, ffi::SQLITE_OK, offset, amount, out)
}

unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    forward!(file, xUnfetch, ffi::SQLITE_OK, offset, p)
}

static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// The name as SQLite's open functions take it.
pub fn name() -> &'static str {
    // A C string literal of ASCII: valid UTF-8.
    NAME.to_str().unwrap_or("unix")
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, OpenFlags};

    use super::*;

    /// What the writer commits through this VFS, in small commits and in one larger than
    /// a single write carries, is what a read connection (opened as the store opens them)
    /// sees, before and after the WAL is checkpointed and the file reopened.
    #[test]
    fn commits_read_back_through_a_read_connection() {
        register().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.db");
        let writer =
            Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), name()).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
                 CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
            )
            .unwrap();
        let before = FLUSHES.get();
        let synced_before = SYNCED_WRITES.get();
        for i in 0..50 {
            writer
                .execute(
                    "INSERT INTO t (id, v) VALUES (?1, ?2)",
                    (i, format!("small {i}")),
                )
                .unwrap();
        }
        assert!(FLUSHES.get() >= before + 50, "the WAL went around the VFS");
        // After the first (which syncs the new file's directory too), each small commit is
        // one synchronous write.
        assert!(
            SYNCED_WRITES.get() >= synced_before + 49,
            "small commits did not go out as one synchronous write each"
        );
        // About 2 MB in one commit: many pieces of MAX_GATHERED.
        writer.execute_batch("BEGIN").unwrap();
        for i in 50..2_050 {
            writer
                .execute(
                    "INSERT INTO t (id, v) VALUES (?1, ?2)",
                    (i, "x".repeat(1_000)),
                )
                .unwrap();
        }
        writer.execute_batch("COMMIT").unwrap();
        let count = |c: &Connection| -> (i64, i64) {
            c.query_row("SELECT count(*), sum(length(v)) FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap()
        };
        let expected = count(&writer);
        assert_eq!(expected.0, 2_050);
        let reader = Connection::open_with_flags(
            crate::store::sqlite::connection::read_connection_target(&path),
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI,
        )
        .unwrap();
        assert_eq!(count(&reader), expected);
        // Rewritten pages of an open transaction are read back by the writer itself.
        writer
            .execute_batch("BEGIN; UPDATE t SET v = v || '!'; ")
            .unwrap();
        let changed: i64 = writer
            .query_row("SELECT count(*) FROM t WHERE v LIKE '%!'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(changed, 2_050);
        writer
            .execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        drop(reader);
        drop(writer);
        let reopened = Connection::open(&path).unwrap();
        assert_eq!(count(&reopened), (expected.0, expected.1 + 2_050));
        let check: String = reopened
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
}

//! Starting batond for a group, and what the machine gives it: the open-file limit and
//! the cost of one durable commit on its disk.

use super::*;

pub fn raise_open_file_limit() {
    // SAFETY: plain getrlimit/setrlimit calls on a local struct.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

pub fn start_daemon(dir: &Path) -> Child {
    start_daemon_with(dir, &[]).0
}

/// Starts batond with `args`; returns it and the log lines up to "listening on".
pub fn start_daemon_with(dir: &Path, args: &[String]) -> (Child, Vec<String>) {
    start_daemon_under(&[], dir, args)
}

/// Starts batond with `args` under `wrapper` (a program and its arguments, such as
/// valgrind's; none runs batond itself); returns it and the log lines up to "listening on".
pub fn start_daemon_under(wrapper: &[String], dir: &Path, args: &[String]) -> (Child, Vec<String>) {
    let batond = env!("CARGO_BIN_EXE_batond");
    let mut command = match wrapper.split_first() {
        Some((program, wrapper_args)) => {
            let mut command = Command::new(program);
            command.args(wrapper_args).arg(batond);
            command
        }
        None => Command::new(batond),
    };
    let mut child = command
        .arg("--home")
        .arg(dir.join("home"))
        .args(args)
        .env("RUST_LOG", "info")
        .env("BATON_ENV_FILE", dir.join("none.env"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start batond");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("listening on") => break,
            Some(Ok(line)) => seen.push(line),
            Some(_) => continue,
            None => panic!("batond exited before listening: {seen:?}"),
        }
    }
    // Errors the daemon logs while measured are shown: a figure beside them means little.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("ERROR") {
                eprintln!("batond: {line}");
            }
        }
    });
    (child, seen)
}

/// What one durable commit costs this machine's disk, for reading the Redis ratios: the
/// median wall time and CPU time of writing 32 KiB (about one batch's WAL frames) over
/// allocated blocks of a file in `dir` and syncing it with `fdatasync`, as batond's writer
/// does at every commit. Redis with appendfsync always waits for the disk at every turn of
/// its loop; batond spends CPU on what Redis does not (SQLite, its threads).
pub fn disk_sync_us(dir: &Path) -> (f64, f64) {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 32 * 1024;
    const SYNCS: usize = 200;
    let path = dir.join("sync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![7u8; CHUNK];
    for _ in 0..SYNCS {
        file.write_all(&chunk).unwrap();
    }
    file.sync_all().unwrap();
    let thread_cpu_us = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime fills the local struct.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
    };
    let mut wall = Vec::with_capacity(SYNCS);
    let mut cpu = Vec::with_capacity(SYNCS);
    for i in 0..SYNCS {
        let (started, cpu_started) = (Instant::now(), thread_cpu_us());
        file.write_all_at(&chunk, (i * CHUNK) as u64).unwrap();
        file.sync_data().unwrap();
        wall.push(started.elapsed().as_secs_f64() * 1e6);
        cpu.push(thread_cpu_us() - cpu_started);
    }
    let _ = std::fs::remove_file(&path);
    (
        median(wall).unwrap_or(f64::NAN),
        median(cpu).unwrap_or(f64::NAN),
    )
}

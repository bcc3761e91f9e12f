//! Facts about the host this rank runs on: its name, its cores and their last-level cache,
//! the memory it can still give, whether a folder takes new files, the space left on a file
//! system; and what the environment asks of logging.

use std::path::Path;

/// Whether `folder` (which exists) accepts a new file: an empty probe file named after
/// `name` and this process is created and removed again.
pub fn probe_writable(folder: &Path, name: &str) -> std::io::Result<()> {
    let probe = folder.join(format!(".{name}.probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// This host's name (Linux: from the kernel; works with or without MPI).
pub fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// Logical cores of this host (1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bytes of memory this machine can still give (Linux MemAvailable), if known.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes of last-level cache the cores this process may run on share among them (Linux:
/// the highest cache level of each allowed CPU in sysfs, every cache counted once: one L3
/// per socket or per core complex), if known.
pub fn last_level_cache() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
    };
    // (level, the CPUs sharing it) → bytes: each cache once, however many CPUs it serves.
    let mut caches = std::collections::BTreeMap::new();
    for cpu in parse_cpu_list(allowed)? {
        let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}/cache")).ok()?;
        let highest = dir
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
            .filter_map(|e| {
                let path = e.path();
                if read(&path.join("type"))? == "Instruction" {
                    return None;
                }
                let level: u32 = read(&path.join("level"))?.parse().ok()?;
                let size = parse_cache_size(&read(&path.join("size"))?)?;
                Some((level, read(&path.join("shared_cpu_list"))?, size))
            })
            .max_by_key(|&(level, ..)| level)?;
        caches.insert((highest.0, highest.1), highest.2);
    }
    let top = caches.keys().map(|&(level, _)| level).max()?;
    Some(
        caches
            .iter()
            .filter(|((level, _), _)| *level == top)
            .map(|(_, &size)| size)
            .sum(),
    )
}

/// The CPUs of a Linux CPU list ("0-3,8,10-11").
fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// Bytes of a sysfs cache size ("32768K", "1M", "512").
fn parse_cache_size(size: &str) -> Option<u64> {
    let (digits, unit) = match size.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => size.split_at(i),
        None => (size, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    Some(digits.parse::<u64>().ok()? * scale)
}

/// Peak resident memory of this process in bytes (Linux VmHWM), if known.
pub fn peak_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// " (12.5 MiB free on the file system of /scratch/run)": what a message about a full file
/// system adds, where statvfs tells.
pub fn space_left(path: &Path) -> String {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(c_path) = std::ffi::CString::new(folder.as_os_str().as_encoded_bytes()) else {
        return String::new();
    };
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs writes the struct it is given on success (checked) and reads only the
    // NUL-terminated path.
    if unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return String::new();
    }
    // SAFETY: initialised by the successful call above.
    let stat = unsafe { stat.assume_init() };
    let free = stat.f_bavail as f64 * stat.f_frsize as f64;
    format!(
        " ({:.1} MiB free on the file system of {})",
        free / 1048576.0,
        folder.display()
    )
}

/// An I/O error in words, with what to do for the common system causes (a full file system
/// with the space left on it).
pub fn explain_io(error: &std::io::Error, path: &Path) -> String {
    match error.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => format!(
            "{error}: the file system is full{} (or your quota is used up); free space there or write elsewhere",
            space_left(path)
        ),
        Some(libc::EROFS) => format!("{error}: the file system is read-only; write elsewhere"),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("{error}: permission denied; choose a location you can write")
        }
        _ => error.to_string(),
    }
}

/// The log filter RUST_LOG asks for, or "info" with a warning where it names neither a
/// level nor a module of tensorfem (env_logger would take a stray word as a module name and
/// silence everything else).
pub fn log_filter(given: Option<&str>) -> (String, Option<String>) {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let Some(given) = given.map(str::trim).filter(|g| !g.is_empty()) else {
        return ("info".into(), None);
    };
    let valid = |directive: &str| {
        let (target, level) = match directive.split_once('=') {
            Some((t, l)) => (Some(t), Some(l)),
            None if LEVELS.contains(&directive.to_ascii_lowercase().as_str()) => (None, None),
            None => (Some(directive), None),
        };
        target.is_none_or(|t| t.starts_with("tensorfem"))
            && level.is_none_or(|l| LEVELS.contains(&l.to_ascii_lowercase().as_str()))
    };
    match given.split(',').map(str::trim).find(|d| !valid(d)) {
        None => (given.to_string(), None),
        Some(bad) => (
            "info".into(),
            Some(format!(
                "RUST_LOG = {given:?}: {bad:?} is neither a level ({}) nor tensorfem[::module]=level; logging at info",
                LEVELS.join(", ")
            )),
        ),
    }
}

/// mimalloc's `mi_option_purge_delay`: the option's index in mimalloc.h's `mi_option_e`
/// (the same in its v2 and v3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Never returns freed memory to the system (mimalloc's purge delay −1): by default mimalloc
/// purges what has lain free for a second, and a solve that comes later (after a time
/// step's other work, or another method's solve in `bench solve`) then faults in every page
/// of its blocks afresh, each zeroed by the kernel. Measured on a 2-core VM (the flow around
/// a square at L = 7, three methods, 64 columns): the f64 PSC solve 0.54–0.57 s instead of
/// 1.07–1.39 s when a multigrid solve runs in between, the peak resident memory 2 % higher;
/// a process's first solve took longer (1.1–2.3 s against 0.6 s). The process's memory is
/// what it was at its peak until it ends. `MIMALLOC_PURGE_DELAY` in the environment
/// (milliseconds) takes precedence.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options, which it reads whenever it purges.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Levels and tensorfem's modules pass; a stray word falls back to info with a warning.
    #[test]
    fn log_filters_are_checked() {
        assert_eq!(log_filter(None), ("info".into(), None));
        assert_eq!(log_filter(Some("debug")), ("debug".into(), None));
        assert_eq!(
            log_filter(Some("warn,tensorfem::campaign=debug")),
            ("warn,tensorfem::campaign=debug".into(), None)
        );
        let (filter, warning) = log_filter(Some("verbose"));
        assert_eq!(filter, "info");
        assert!(warning.unwrap().contains("\"verbose\" is neither a level"));
        assert!(log_filter(Some("tensorfem=loud")).1.is_some());
    }

    /// CPU lists and cache sizes as sysfs and /proc write them.
    #[test]
    fn cpu_lists_and_cache_sizes_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("\t5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("0-x"), None);
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("2T"), None);
        // This host's cache, where sysfs has one, is at least a kilobyte.
        if let Some(bytes) = last_level_cache() {
            assert!(bytes >= 1024, "{bytes}");
        }
    }
}

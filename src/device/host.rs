//! Arrays in host memory that are either owned or a read-only view of a file mapped into
//! memory. Large precomputed operators (the PSC cache's inverses) are mapped rather than
//! read: no copy, no fresh pages to fault in (a 207 MB inverse reads in 0.15–0.45 s on a
//! VM whose page faults are slow, and maps in a few ms), and every rank of a node that maps
//! the same file shares one copy in the page cache.

use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytemuck::Pod;
use memmap2::{Mmap, MmapOptions};

/// `len` values of `T`, owned or mapped. Reads see a slice either way; the first write to
/// a mapped array copies it into memory of its own (the file is never written).
#[derive(Debug)]
pub struct HostArray<T>(Repr<T>);

#[derive(Debug)]
enum Repr<T> {
    Owned(Vec<T>),
    /// The mapping holds exactly the array's bytes.
    Mapped(Arc<Mmap>),
}

impl<T: Pod> HostArray<T> {
    /// The `len` values of `T` at byte `offset` of `file`, mapped read-only with the pages
    /// populated now; None when the range does not fit the file or is not aligned for `T`
    /// (the caller reads it instead).
    ///
    /// The file must not change while it is mapped: files written to a temporary name and
    /// renamed over the old one (as every file this program writes) keep the mapped
    /// content, and so does removing the file; truncating or rewriting it in place
    /// elsewhere would not.
    pub fn map(file: &File, offset: u64, len: usize) -> std::io::Result<Option<Self>> {
        let bytes = len * std::mem::size_of::<T>();
        let file_len = file.metadata()?.len();
        let end = offset.checked_add(bytes as u64);
        if end.is_none_or(|end| end > file_len)
            || !offset.is_multiple_of(std::mem::align_of::<T>() as u64)
        {
            return Ok(None);
        }
        if bytes == 0 {
            return Ok(Some(Vec::new().into()));
        }
        // SAFETY: the mapping is read-only and its content is not changed while mapped (see
        // above); every bit pattern is a valid `T` (Pod).
        let map = unsafe { MmapOptions::new().offset(offset).len(bytes).map(file)? };
        populate(&map);
        // The mapping starts at `offset`'s place in a page: aligned for T when offset is.
        if bytemuck::try_cast_slice::<u8, T>(&map).is_err() {
            return Ok(None);
        }
        Ok(Some(HostArray(Repr::Mapped(Arc::new(map)))))
    }

    /// The values as a vector of their own (a mapped array is copied first): for scratch
    /// that grows.
    pub fn vec_mut(&mut self) -> &mut Vec<T> {
        if let Repr::Mapped(map) = &self.0 {
            // Operators are never written; a copy here is a bug worth seeing in the logs.
            log::debug!("a mapped array of {} bytes copied on write", map.len());
            self.0 = Repr::Owned(bytemuck::cast_slice(map).to_vec());
        }
        match &mut self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped(_) => unreachable!("copied above"),
        }
    }

    /// Whether the values are a view of a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped(_))
    }
}

/// Maps the pages of `map` now, in huge pages where the kernel can: with `MADV_HUGEPAGE`
/// the file's page cache is gathered into 2 MiB folios (once: about 40 ms for 200 MB on a
/// 2-core VM), after which a mapping of it is populated in under a millisecond, where
/// 4 KiB pages took 18 ms, and the operator's products miss the TLB less. Both are hints:
/// a kernel without them leaves the pages to fault in on first use.
fn populate(map: &Mmap) {
    #[cfg(target_os = "linux")]
    {
        use memmap2::Advice;
        let _ = map.advise(Advice::HugePage);
        if map.advise(Advice::PopulateRead).is_err() {
            // Before Linux 5.14: touch a byte per page.
            let sum = map
                .iter()
                .step_by(4096)
                .fold(0u8, |s, &b| s.wrapping_add(b));
            std::hint::black_box(sum);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

/// Arrays from this size on are asked to live in 2 MiB pages.
const HUGE_PAGE_FROM: usize = 4 << 20;
/// Entries one task of [`zeroed_vec`] writes.
const ZERO_CHUNK: usize = 1 << 14;

/// An empty vector with room for `len` values, whose memory is asked (`MADV_HUGEPAGE`) to
/// be mapped in 2 MiB pages when it is at least [`HUGE_PAGE_FROM`] bytes. Where the
/// kernel's transparent huge pages are `madvise`-only (the default of many distributions),
/// large arrays are otherwise mapped in 4 KiB pages, and a stream through them misses the
/// TLB at every page: a 207 MB read ran at 45 GB/s in 4 KiB pages and 64–69 GB/s in
/// 2 MiB pages on a 2-core VM, where each miss walks the guest's and the host's page tables
/// (CHANGELOG.md). A hint: memory already mapped, or a kernel without it, keeps
/// its pages.
pub fn vec_for_huge_pages<T>(len: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    let bytes = len * std::mem::size_of::<T>();
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGE_FROM {
        const PAGE: usize = 2 << 20;
        let first = v.as_mut_ptr() as usize;
        let (start, end) = (first.next_multiple_of(PAGE), (first + bytes) / PAGE * PAGE);
        if start < end {
            // SAFETY: the range lies inside this vector's allocation; MADV_HUGEPAGE
            // changes how its pages are mapped, never their contents.
            let _ = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE)
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
    v
}

/// `len` default values in memory from [`vec_for_huge_pages`], written in parallel so that
/// the pages are mapped now, by the threads that use them.
pub fn zeroed_vec<T: Default + Copy + Send>(len: usize) -> Vec<T> {
    use rayon::prelude::*;
    let mut v = vec_for_huge_pages(len);
    v.spare_capacity_mut()
        .par_chunks_mut(ZERO_CHUNK)
        .for_each(|c| {
            c.iter_mut().for_each(|x| {
                x.write(T::default());
            })
        });
    // SAFETY: every one of the `len` elements was initialised above.
    unsafe { v.set_len(len) };
    v
}

impl<T> From<Vec<T>> for HostArray<T> {
    fn from(v: Vec<T>) -> Self {
        HostArray(Repr::Owned(v))
    }
}

impl<T: Pod> Deref for HostArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped(map) => bytemuck::cast_slice(map),
        }
    }
}

impl<T: Pod> DerefMut for HostArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.vec_mut()
    }
}

impl<T: Clone> Clone for HostArray<T> {
    /// An owned array is copied; a mapped one shares its mapping.
    fn clone(&self) -> Self {
        HostArray(match &self.0 {
            Repr::Owned(v) => Repr::Owned(v.clone()),
            Repr::Mapped(map) => Repr::Mapped(Arc::clone(map)),
        })
    }
}

impl<T: Pod + PartialEq> PartialEq for HostArray<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f.flush().unwrap();
        let file = File::open(f.path()).unwrap();
        (f, file)
    }

    #[test]
    fn a_mapped_range_reads_the_file_and_copies_on_write() {
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let mut bytes = vec![0u8; 12];
        bytes.extend_from_slice(bytemuck::cast_slice(&values));
        let (_keep, file) = file_with(&bytes);
        let mut mapped = HostArray::<f32>::map(&file, 12, 1000).unwrap().unwrap();
        assert!(mapped.is_mapped());
        assert_eq!(&*mapped, &values[..]);
        let shared = mapped.clone();
        assert!(shared.is_mapped());
        mapped[3] = -1.0;
        assert!(!mapped.is_mapped());
        assert_eq!(mapped[3], -1.0);
        assert_eq!(shared[3], 1.5, "the file and other views are unchanged");
        assert_eq!(&mapped[4..], &values[4..]);
    }

    #[test]
    fn ranges_past_the_end_or_misaligned_are_not_mapped() {
        let (_keep, file) = file_with(&[0u8; 64]);
        assert!(
            HostArray::<f64>::map(&file, 8, 8).unwrap().is_none(),
            "past the end"
        );
        assert!(
            HostArray::<f64>::map(&file, 4, 2).unwrap().is_none(),
            "misaligned"
        );
        assert!(HostArray::<f64>::map(&file, u64::MAX - 4, 2)
            .unwrap()
            .is_none());
        let whole = HostArray::<f64>::map(&file, 0, 8).unwrap().unwrap();
        assert_eq!(&*whole, &[0.0; 8]);
        assert!(HostArray::<f32>::map(&file, 4, 0)
            .unwrap()
            .unwrap()
            .is_empty());
    }
}

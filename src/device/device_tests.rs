//! The macro that runs every generic kernel and solver test on every backend.

/// Stamps out one `#[test]` per backend for each generic test function
/// `fn name<D: StokesDevice>(dev: &D)`: `name::cpu` runs it on the CPU device. A new
/// backend adds its arm here, so that every kernel and solver test runs on it too.
///
/// `device_tests!(cuda: …)` stamps out `name::cuda` as well (the CUDA device implements every
/// kernel family): it runs on the first GPU, and where there is none it says it is skipped
/// (and fails when TENSORFEM_REQUIRE_CUDA=1).
#[macro_export]
macro_rules! device_tests {
    (cuda: $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    super::$name(&$crate::device::Cpu::new());
                }
                #[test]
                fn cuda() {
                    if let Some(dev) = $crate::device::cuda::test_device() {
                        super::$name(&dev);
                    }
                }
            }
        )*
    };
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    super::$name(&$crate::device::Cpu::new());
                }
            }
        )*
    };
}

//! The `mechlab` binary: the command line with the built-in papers.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process. mimalloc hands freed spans back
/// to the OS after 10 ms and asks for huge pages on fresh ones, so every buffer a
/// run allocates again (a probe's hooked forward, a causal patch) faults in and
/// zeroes 2 MiB at a time. Off, whole `mechlab reproduce` processes took 2.5 %
/// less wall time and 2.8 % less CPU (sys 4 s against 9 s) and less peak memory,
/// with the same results (README, Speed). This is what `MIMALLOC_ALLOW_THP=0` does, but mimalloc reads
/// its environment before `main` could set it.
#[cfg(target_os = "linux")]
fn no_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes no pointers; it only sets a flag on this
    // process's memory map, which later page faults read. A kernel without the
    // flag returns an error and keeps huge pages: slower, never wrong.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn main() {
    #[cfg(target_os = "linux")]
    no_transparent_huge_pages();
    mechlab::cli::main(mechlab::papers::registry())
}

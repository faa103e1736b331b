//! glibc malloc, tuned for a small long-running DaemonSet rather than a throughput server.
//!
//! glibc gives each thread that allocates its own arena (up to 8 per core), and each arena keeps
//! what it freed for reuse. The agent's blocking pool (one statfs per volume, each in its own
//! `spawn_blocking` call so a hung mount holds only its own thread) touches many threads, and
//! each scan's burst (every volume's work at once) leaves free memory spread over all of them:
//! resident, never reused by the others. One arena holds it all (the agent allocates little
//! outside scans, and each thread's tcache serves its small allocations without the lock), and
//! returning what a scan freed keeps the resident size near what is live.
//! `MALLOC_ARENA_MAX` in the environment still wins (glibc reads it before `main`).

/// Arenas when `MALLOC_ARENA_MAX` is not set.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS: libc::c_int = 1;

/// Caps the number of malloc arenas; call before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}

/// Gives the pages of freed memory back to the kernel (after a scan's burst of allocations).
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's locks itself; it only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

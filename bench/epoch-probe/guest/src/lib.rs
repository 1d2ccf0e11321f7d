//! The parse-all plugin's decision (`bench_logic::evaluate`) as a core
//! module with two exports and no component around it, so the probe can
//! time the guest's parse alone and rewrite the module's code.

/// Room for the Pod's text: the probe writes it there.
#[unsafe(no_mangle)]
pub extern "C" fn alloc(len: usize) -> *mut u8 {
    let mut buffer = Vec::<u8>::with_capacity(len);
    let ptr = buffer.as_mut_ptr();
    std::mem::forget(buffer);
    ptr
}

/// Runs the decision `repeat` times on the UTF-8 text at `ptr`; returns the
/// total length of the patches, so that the work is observable.
///
/// # Safety
/// `ptr..ptr+len` is the UTF-8 text the probe wrote after [`alloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn run(ptr: *const u8, len: usize, repeat: u32) -> u32 {
    // SAFETY: the caller's contract above.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    let Ok(text) = std::str::from_utf8(bytes) else {
        return 0;
    };
    let mut total = 0u32;
    for _ in 0..repeat {
        if let Ok(Some(patch)) = bench_logic::evaluate(std::hint::black_box(text)) {
            total = total.wrapping_add(patch.len() as u32);
        }
    }
    total
}

#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::h2_frames(data));
